"""Ollama's legacy estimator (before ``ollama@0.13``): ``llm/memory.go::estimateGPULayers`` +
``fs/ggml/ggml.go::GraphSize`` (docs/engines/ollama.md#ollama-legacy-estimator) — KV with the approximate
q8_0 = 1.0 / q4_0 = 0.5 bytes, the per-architecture graph formulas, one spare layer per GPU, the layer count it
would offload (``layers.offload``) and ``memory.required.*``. Checked against published ``offload`` log lines by
``benchmarks/accuracy_ollama.py``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from hfvram.engines.llamacpp.placement import layer_weight_bytes
from hfvram.engines.ollama.settings import OllamaConstants, Settings, engine_report, minimum_memory
from hfvram.estimate.common import (
    GiB,
    MiB,
    active_weight_bytes,
    decode_tokens_per_second,
    layer_kv_elems_per_token_rank,
    setting_int,
)
from hfvram.estimate.types import EngineChoice, Hardware, PerGpu
from hfvram.spec import RECURRENT_KINDS, LayerKind, ModelSpec


def legacy_kv_per_layer(
    spec: ModelSpec, arch: str, context: int, parallel: int, batch: int, kv: str, constants: OllamaConstants
) -> list[int]:
    """KV bytes per layer as GraphSize estimates them (docs/engines/ollama.md#ollama-legacy-estimator): ``ctx × parallel × (k + v) × kv_heads ×
    bytes`` with q8_0 = 1.0 and q4_0 = 0.5; recurrent layers F32 conv + SSM state; Gemma 3 local layers
    ``parallel × window + batch`` cells; gpt-oss even layers ``parallel × 4096 + batch``."""
    per_elem = float(constants.legacy_kv_bytes[kv])
    cells = context * parallel
    out = []
    for il, layer in enumerate(spec.layers):
        if layer.kind in RECURRENT_KINDS:
            out.append(int(4 * layer.state_elems))
            continue
        if layer.kind is LayerKind.NONE:
            out.append(0)
            continue
        if layer.kind is LayerKind.MLA:
            # GraphSize counts context × (key_length + value_length) × head_count_kv of the GGUF: Ollama's DeepSeek
            # GGUFs of this era store full per-head K (nope + rope) and V, not the latent (ollama #8447: 9.5 GiB)
            width = layer.num_kv_heads * (layer.head_dim_k + layer.head_dim_v)
        else:
            width = layer_kv_elems_per_token_rank(layer, 1)
        layer_cells = cells
        if arch == "gemma3" and (il + 1) % 6 != 0 and layer.window:
            layer_cells = parallel * layer.window + batch
        elif arch in ("gpt-oss", "gptoss") and il % 2 == 0:
            layer_cells = parallel * constants.gptoss_swa_cells + batch
        out.append(int(layer_cells * width * per_elem))
    return out


def legacy_graph(
    spec: ModelSpec,
    arch: str,
    context: int,
    parallel: int,
    batch: int,
    kv_total: int,
    flash: bool,
    *,
    kv_total_full: int | None = None,
    gptoss_graph: str = "0.11.5",
) -> tuple[int, int, str]:
    """(partialOffload, fullOffload, rule) of fs/ggml/ggml.go::GraphSize; unknown architectures fall back to
    memory.go's ``gqa × kvTotal / 6`` for both.

    Longer than 60 lines and with one-letter names on purpose: it transcribes GraphSize's per-architecture
    formulas with GraphSize's own variable names (c = context, b = batch, e = embedding, h = heads, v = vocab),
    so that each branch can be compared with the Go source line by line."""
    c = context * parallel
    b = batch
    e = spec.hidden_size or 0
    h = spec.num_attention_heads or 0
    kv_layers = [layer for layer in spec.layers if layer.num_kv_heads]
    h_kv = max((layer.num_kv_heads for layer in kv_layers), default=0)
    e_h = max((layer.head_dim_k for layer in kv_layers), default=0)
    v = spec.vocab_size or 0
    full = partial = 0
    rule = arch
    if arch in ("llama", "llama4"):
        full = max(4 * b * (1 + 4 * e + c * (1 + h)), 4 * b * (e + v))
        partial = 4 * b * e + max(
            4 * b * (1 + e + max(c, e)) + e * e * 9 // 16 + 4 * c * (b * h + e_h * h_kv),
            4 * b * (e + v) + e * v * 105 // 128,
        )
    elif arch in ("gemma", "gemma2", "gemma3", "gemma3n"):
        full = max(4 * b * (e + v), 4 * b * (2 + c + c * h + 2 * e + 2 * e_h * h))
        partial = max(
            4 * e * b + e * v * 105 // 128 + 4 * v * b,
            4 * b * (2 * e + 1 + 2 * e_h * h + c + c * h) + 4 * e_h * c * 8 + e * e_h * h * 9 // 16,
        )
        if arch == "gemma3n":
            full, partial = full * 4, partial * 4
    elif arch == "command-r":
        full = max(4 * b * (e + v), 4 * b * (2 + 4 * e + c * (1 + h)))
        partial = max(
            4 * b * (e + v) + e * v * 105 // 128, 4 * b * (1 + 2 * e + c * (1 + h)) + 4 * e * c + e * e * 9 // 16
        )
    elif arch == "qwen2":
        full = max(4 * b * (e + v), 4 * b * (1 + 2 * e + c + c * h))
        partial = max(4 * b * (e + v) + e * v * 105 // 128, 4 * (b * (1 + 2 * e + c * (1 + h)) + e * (1 + c)))
    elif arch == "phi2":
        full = max(4 * b * (e + v), 4 * b * (1 + 4 * e + c + c * h))
        partial = max(4 * b * (2 * e + v) + e * v * 105 // 128, 4 * b * (2 + 3 * e + c + c * h))
    elif arch == "stablelm":
        full = 4 * b * (c * (1 + h) + 3 * e + 2)
        partial = max(4 * b * (v + 2 * e), full)
    elif arch == "deepseek2":
        full = max(4 * b * (3 * e + v), 4 * b * (3 * e + 2 + c * (1 + h_kv) + 2 * e_h * h_kv))
        partial = max(
            4 * b * (3 * e + v) + e * v * 105 // 128,
            4 * b * (2 * e + 1 + 2 * e_h * h_kv + c + c * h_kv) + 4 * e_h * c * h_kv + e * e_h * h_kv * 9 // 16,
        )
    elif arch in ("gptoss", "gpt-oss"):
        # kvTotal is summed before the gpt-oss case re-sizes the windowed layers: every layer at the full context
        h_kv_min = min((layer.num_kv_heads for layer in kv_layers), default=1) or 1
        kv_full = kv_total_full if kv_total_full is not None else kv_total
        if gptoss_graph == "0.11.0":
            full = 4 * h // h_kv_min * kv_full // 6
            partial = 2 * full
            rule = "gpt-oss (0.11.0-0.11.4): full 4·h/h_kv·kvTotal/6, partial 2 × full"
        else:
            partial = 2 * h // h_kv_min * kv_full // 6
            rule = "gpt-oss: 2·h/h_kv·kvTotal/6"
            if flash:
                partial = (4 * parallel + (c >> 10) + 110) * MiB
                rule = "gpt-oss with flash attention: (4·parallel + ctx/1024 + 110) MiB"
    if partial == 0:
        h_kv_min = min((layer.num_kv_heads for layer in kv_layers), default=0)
        gqa = h // h_kv_min if h_kv_min else 1
        partial = gqa * kv_total // 6
        rule = f"{arch}: no graph formula, memory.go default gqa ({gqa}) × KV total / 6"
    if full == 0:
        full = partial
    return partial, full, rule


@dataclass(frozen=True)
class LegacyBreakdown:
    """Ollama ≤ 0.12's own pre-load estimate: the figures of its ``offload to cuda`` log line (memory.required.*,
    memory.graph.*, memory.weights.*, layers.offload / layers.split), from llm/memory.go::estimateGPULayers."""

    arch: str
    num_parallel: int
    kv_layers: tuple[int, ...]
    graph_partial: int  # as logged (several GPUs: the partial figure for both)
    graph_full: int
    graph_rule: str
    gpus: int
    weights_repeating: int
    output: int
    embd: int
    minimum: int
    layers_offload: int
    layers_model: int
    layer_split: tuple[int, ...]
    allocations: tuple[int, ...]
    required_partial: int
    required_full: int
    spare: int

    @property
    def kv_total(self) -> int:
        return sum(self.kv_layers)

    @property
    def fully_loaded(self) -> bool:
        return self.layers_offload >= self.layers_model

    @property
    def graph(self) -> int:
        return self.graph_full if self.fully_loaded else self.graph_partial


def legacy_placement(
    spec: ModelSpec,
    free: Sequence[int],
    constants: OllamaConstants,
    settings: Settings,
    arch: str,
    *,
    num_gpu: int = -1,
    gpu_overhead: int = 0,
    metal: bool = False,
    projector_weights: int = 0,
    engine_projector: tuple[int, int] = (0, 0),
) -> LegacyBreakdown:
    """llm/memory.go::estimateGPULayers for ``settings.num_parallel`` slots on GPUs with ``free`` bytes each
    (docs/engines/ollama.md#ollama-legacy-estimator): every GPU that can hold the minimum, the graph and two layers
    keeps the minimum and one spare layer (blk.0 + its KV); layers are placed from the last one backwards, round
    robin over the GPUs with room; the output layer (plus an Ollama-engine projector and its graph) last; the
    graph is added to every GPU holding layers, the full figure only when everything is offloaded.
    ``projector_weights`` is a llama-engine projector (on the first GPU), ``engine_projector`` the Ollama engine's
    (weights, graph) from VisionGraphSize.

    Longer than 60 lines on purpose: it transcribes estimateGPULayers loop by loop (the GPU filter, the layer loop,
    the output layer, the graph) so that each step can be compared with the Go source."""
    num_ctx, parallel, kv = settings.num_ctx, max(1, settings.num_parallel), settings.kv_cache_type
    batch = min(num_ctx * parallel, settings.num_batch)
    kv_layers = legacy_kv_per_layer(spec, arch, num_ctx, parallel, batch, kv, constants)
    per_elem = float(constants.legacy_kv_bytes[kv])
    kv_full = sum(
        int(num_ctx * parallel * layer.num_kv_heads * (layer.head_dim_k + layer.head_dim_v) * per_elem)
        for layer in spec.layers
        if layer.num_kv_heads
    )
    partial, full, graph_rule = legacy_graph(
        spec,
        arch,
        num_ctx,
        parallel,
        batch,
        sum(kv_layers),
        settings.flash_attention,
        kv_total_full=kv_full,
        gptoss_graph=constants.gptoss_graph,
    )
    if metal:
        partial = full
    elif len(free) > 1:
        full = partial  # several GPUs always use the partial graph size
    graph = max(partial, full)
    dense, experts, embd, output = layer_weight_bytes(spec)
    blocks = [layer_dense + layer_experts for layer_dense, layer_experts in zip(dense, experts)]
    n_layer = len(blocks)
    minimum = minimum_memory(None, constants) if not metal else constants.minimum_memory_metal_mib * MiB
    spare = (blocks[0] if blocks else 0) + (kv_layers[0] if kv_layers else 0)
    count = len(free)
    # before v0.7.0 / v0.7.1: layers placed from blk.0 forward (0478d440f) and an Ollama-engine projector with its
    # graph held on the first GPU like a llama-engine one (d75557747), never counted as overflow
    legacy_era = constants.legacy_forward_layers
    if legacy_era:
        projector_weights += sum(engine_projector)
        engine_projector = (0, 0)
    allocations, counts = [0] * count, [0] * count
    with_space: list[int] = []
    for index in range(count):
        zero_overhead = projector_weights if not with_space else 0
        if free[index] < gpu_overhead + zero_overhead + graph + minimum + 2 * spare:
            continue
        with_space.append(index)
        allocations[index] += minimum + spare
    overflow = 0
    if with_space:
        allocations[with_space[0]] += projector_weights
    elif not legacy_era:
        overflow += projector_weights
    placed = 0
    order = range(n_layer) if legacy_era else range(n_layer - 1, -1, -1)
    for il in order:
        size = blocks[il] + (kv_layers[il] if il < len(kv_layers) else 0)
        if 0 <= num_gpu <= placed:
            overflow += size
            continue
        slots = len(with_space)
        while slots > 0:
            dev = with_space[il % slots]
            if free[dev] > gpu_overhead + allocations[dev] + graph + size:
                allocations[dev] += size
                counts[dev] += 1
                placed += 1
                break
            with_space.pop(il % slots)
            slots -= 1
        if not with_space:
            overflow += size
    fully = placed >= n_layer
    last = output + sum(engine_projector)
    if last > 0:
        if num_gpu < 0 or placed < num_gpu:
            slots = len(with_space)
            while slots > 0:
                dev = with_space[placed % slots]
                if free[dev] > gpu_overhead + allocations[dev] + graph + last:
                    allocations[dev] += last
                    counts[dev] += 1
                    placed += 1
                    break
                slots -= 1
        if placed < n_layer + 1:
            fully = False
            overflow += last
    for dev in range(count):
        if counts[dev] > 0:
            allocations[dev] += full if fully else partial
    required_partial = sum(allocations)
    return LegacyBreakdown(
        arch=arch,
        num_parallel=parallel,
        kv_layers=tuple(kv_layers),
        graph_partial=partial,
        graph_full=full,
        graph_rule=graph_rule,
        gpus=count,
        # before v0.6.1 memory.weights.repeating summed each layer's blk + KV (memoryWeights += layerSize)
        weights_repeating=sum(blocks) + (sum(kv_layers) if constants.legacy_weights_include_kv else 0),
        output=output,
        embd=embd,
        minimum=minimum,
        layers_offload=placed,
        layers_model=n_layer + 1,
        layer_split=tuple(counts),
        allocations=tuple(allocations),
        required_partial=required_partial if placed else 0,
        required_full=required_partial + overflow,
        spare=spare,
    )


def legacy_auto_parallel(
    spec: ModelSpec, free: Sequence[int], constants: OllamaConstants, settings: Settings, arch: str, **kwargs: object
) -> LegacyBreakdown:
    """OLLAMA_NUM_PARALLEL unset before 0.10 (server/sched.go pickBestFullFitByLibrary): ``auto_parallel`` slots
    when the whole model then fits the GPUs, else one; a set num_parallel is used as given."""
    if settings.num_parallel > 0:
        return legacy_placement(spec, free, constants, settings, arch, **kwargs)  # type: ignore[arg-type]
    tried = constants.auto_parallel
    if tried > 1:
        parts = legacy_placement(spec, free, constants, replace(settings, num_parallel=tried), arch, **kwargs)  # type: ignore[arg-type]
        if parts.fully_loaded:
            return parts
    return legacy_placement(spec, free, constants, replace(settings, num_parallel=1), arch, **kwargs)  # type: ignore[arg-type]


def legacy_narration(
    spec: ModelSpec,
    hardware: Hardware | None,
    version: str,
    constants: OllamaConstants,
    settings: Settings,
    parts: LegacyBreakdown,
    count: int,
) -> tuple[list[str], dict[str, str]]:
    """The legacy estimate's warnings and one explanation line per term."""
    kv = settings.kv_cache_type
    warnings = [
        *settings.notes,
        f"ollama@{version}: Ollama's own pre-load estimate (memory.required.*), not what llama.cpp allocates",
    ]
    if hardware is not None and not parts.fully_loaded:
        warnings.append(
            f"Ollama's scheduler would offload {parts.layers_offload} of {parts.layers_model} layers to the GPU(s) "
            f"(layers.offload; memory.required.full {parts.required_full / GiB:.1f} GiB); the rest runs on the CPU"
        )
    explain = {
        "weights": f"all {spec.num_layers} repeating layers + output layer ({parts.output / MiB:.0f} MiB); token_embd on the CPU",
        "kv_cache": f"legacy GraphSize KV: {settings.num_ctx} × {settings.num_parallel} cells × (k+v) × kv_heads × {constants.legacy_kv_bytes[kv]} B ({kv})",
        "activations": f"graph {'full' if count == 1 else 'partial'} offload: {parts.graph_rule}",
        "overhead": f"MinimumMemory {parts.minimum / MiB:.0f} MiB + OLLAMA_GPU_OVERHEAD + one spare layer {parts.spare / MiB:.0f} MiB",
        "usable": "all of the GPU's memory (the legacy estimator compares against free memory)",
    }
    return warnings, explain


def legacy_engine_report(
    settings: Settings, choice: EngineChoice, version: str, parts: LegacyBreakdown, placed: bool
) -> dict[str, object]:
    """The engine block of a legacy estimate: settings, GraphSize's figures and the scheduler's layer count
    (``placed`` False without hardware: no layer count)."""
    return {
        **engine_report(settings, choice, version),
        "arch": parts.arch,
        "graph_partial": parts.graph_partial,
        "graph_full": parts.graph_full,
        "kv_total": parts.kv_total,
        "layers_offload": parts.layers_offload if placed else None,
        "layers_model": parts.layers_model,
        "layers_split": list(parts.layer_split) if placed and parts.gpus > 1 else None,
        "memory_required_full": parts.required_full,
        "memory_required_partial": parts.required_partial if placed else None,
    }


@dataclass(frozen=True)
class LegacySized:
    """The legacy estimate's breakdown step: the scheduler's figures, the settings with the slots it kept, and the
    worst GPU's terms (those of the whole model spread over the GPUs, what ``memory.required.allocations`` holds
    when it all fits)."""

    settings: Settings
    constants: OllamaConstants
    parts: LegacyBreakdown
    per_gpu: PerGpu
    decode: float | None
    count: int
    #: hardware was given (the scheduler's layer count is then reported)
    placed: bool


def legacy_size(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    constants: OllamaConstants,
    settings: Settings,
    arch: str,
) -> LegacySized:
    """The legacy scheduler's view: estimateGPULayers on GPUs with all their memory free."""
    count = hardware.count if hardware else 1
    memory = hardware.gpu.gpu_memory_bytes if hardware else 0
    metal = hardware is not None and (hardware.gpu.unified_memory or hardware.gpu.vendor == "apple")
    gpu_overhead = setting_int(choice, "gpu_overhead", "OLLAMA_GPU_OVERHEAD", default=constants.gpu_overhead_bytes)
    num_gpu = setting_int(choice, "num_gpu", default=-1)
    free = [memory or (1 << 60)] * count
    parts = legacy_auto_parallel(
        spec,
        free,
        constants,
        settings,
        arch,
        num_gpu=-1 if num_gpu is None else num_gpu,
        gpu_overhead=gpu_overhead or 0,
        metal=metal,
    )
    settings = replace(settings, num_parallel=parts.num_parallel)
    per_gpu_layers = -(-spec.num_layers // count)
    dense, experts, _, _ = layer_weight_bytes(spec)
    blocks = [layer_dense + layer_experts for layer_dense, layer_experts in zip(dense, experts)]
    graph = parts.graph_full if count == 1 else parts.graph_partial
    per_gpu = PerGpu(
        weights=sum(blocks[:per_gpu_layers]) + parts.output,
        kv_cache=sum(parts.kv_layers[:per_gpu_layers]),
        activations=graph,
        overhead=parts.minimum + (gpu_overhead or 0) + parts.spare,
        usable=memory,
        memory=memory,
    )
    decode = decode_tokens_per_second(
        (active_weight_bytes(spec) or 0) + parts.kv_total / max(1, count),
        hardware.gpu.memory_bandwidth_gbs if hardware else None,
    )
    return LegacySized(settings, constants, parts, per_gpu, decode, count, hardware is not None)
