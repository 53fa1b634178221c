"""Ollama: llama.cpp underneath, with Ollama's own defaults — and, for ``ollama@0.12``, its legacy estimator.

Rules: design/engines.md §5 (eras, defaults), §1.2 (legacy KV bytes), §1.3 (457 MiB per GPU); constants in
``hfvram/data/engines/ollama.toml``.

- Current (``0.13`` and later): Ollama starts llama-server with ``--fit``, so memory is llama.cpp's (this module
  reuses ``llamacpp``'s functions) with Ollama's defaults: ``num_ctx`` tiered by total VRAM (≥ 47 GiB → 262 144,
  ≥ 23 GiB → 32 768, else 4096; never above the model's n_ctx_train), ``num_parallel`` 1, ``num_batch`` 512, KV
  f16, flash attention on for the architectures of Ollama's list, and 457 MiB (CUDA/ROCm) / 512 MiB (Metal) per
  GPU for context structures.
- Legacy (``0.12``): ``llm/memory.go::estimateGPULayers`` + ``fs/ggml/ggml.go::GraphSize`` — KV with the
  approximate q8_0 = 1.0 / q4_0 = 0.5 bytes, the per-architecture graph formulas, one extra layer kept free.

Settings (Ollama's names): ``num_ctx`` (``OLLAMA_CONTEXT_LENGTH``), ``num_parallel`` (``OLLAMA_NUM_PARALLEL``),
``num_batch``, ``num_gpu`` (layers on the GPU), ``flash_attention`` (``OLLAMA_FLASH_ATTENTION``),
``kv_cache_type`` (``OLLAMA_KV_CACHE_TYPE``), ``gpu_overhead`` (``OLLAMA_GPU_OVERHEAD``, bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from hfvram.errors import UsageError
from hfvram.estimate.common import (
    GiB,
    MiB,
    Rules,
    active_weight_bytes,
    decode_tokens_per_second,
    engine_rules,
    finish_estimate,
    load_engine_data,
    setting,
    setting_bool,
    setting_int,
)
from hfvram.estimate.engines import llamacpp
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, PerGpu, Workload
from hfvram.spec import RECURRENT_KINDS, LayerKind, ModelSpec

ENGINE = "ollama"


def gguf_arch(spec: ModelSpec, rules: Rules) -> str:
    """The GGUF architecture name Ollama switches on: the GGUF's own, else mapped from config.json's model_type."""
    arch = spec.extra.get("gguf_arch") if spec.extra else None
    if isinstance(arch, str) and arch:
        return arch
    mapping = rules.get("model_type_to_arch", {})
    return (
        str(mapping.get(spec.model_type or "", spec.model_type or ""))
        if isinstance(mapping, Mapping)
        else (spec.model_type or "")
    )


def default_num_ctx(hardware: Hardware | None, rules: Rules) -> int:
    """server/routes.go: num_ctx from the total VRAM of all GPUs (tiers in ollama.toml)."""
    if hardware is None:
        return int(rules["num_ctx_no_gpu"])
    total_gib = hardware.gpu.gpu_memory_bytes * hardware.count / GiB
    for threshold, num_ctx in rules["num_ctx_tiers"]:
        if total_gib >= threshold:
            return int(num_ctx)
    return int(rules["num_ctx_no_gpu"])


def flash_attention_default(spec: ModelSpec, rules: Rules) -> bool:
    return gguf_arch(spec, rules) in tuple(rules["flash_attention_archs"])


def minimum_memory(hardware: Hardware | None, rules: Rules) -> int:
    """Ollama's fixed reserve per GPU (ml/device.go::MinimumMemory) plus OLLAMA_GPU_OVERHEAD."""
    metal = hardware is not None and (hardware.gpu.unified_memory or hardware.gpu.vendor == "apple")
    mib = int(rules["minimum_memory_metal_mib" if metal else "minimum_memory_cuda_mib"])
    return mib * MiB


def resolve(
    spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload, rules: Rules
) -> tuple[int, int, int, str, bool, list[str]]:
    """(num_ctx per sequence, num_parallel, num_batch, kv type, flash attention, notes) with Ollama's defaults."""
    notes: list[str] = []
    num_ctx = setting_int(choice, "num_ctx", "OLLAMA_CONTEXT_LENGTH") or workload.context
    if num_ctx is None:
        num_ctx = default_num_ctx(hardware, rules)
        notes.append(f"num_ctx default {num_ctx} (Ollama tiers it by total VRAM)")
    train = spec.max_position_embeddings
    if train and num_ctx > train:
        notes.append(f"num_ctx {num_ctx} is above the model's n_ctx_train {train}: Ollama lowers it to {train}")
        num_ctx = train
    parallel = setting_int(choice, "num_parallel", "OLLAMA_NUM_PARALLEL")
    if parallel is None:
        parallel = workload.concurrency if workload.concurrency > 1 else int(rules["num_parallel"])
    num_batch = setting_int(choice, "num_batch", default=int(rules["num_batch"])) or int(rules["num_batch"])
    fa_default = flash_attention_default(spec, rules)
    flash = setting_bool(choice, "flash_attention", "OLLAMA_FLASH_ATTENTION", default=fa_default)
    kv = (
        setting(choice, "kv_cache_type", "OLLAMA_KV_CACHE_TYPE")
        or (workload.kv_dtype if workload.kv_dtype not in ("auto", "") else None)
        or str(rules["kv_cache_type"])
    )
    kv = llamacpp.KV_ALIASES.get(kv.lower(), kv.lower())
    if kv not in tuple(rules["kv_cache_types"]):
        raise UsageError(f"Ollama KV cache type {kv!r} is not one of {', '.join(rules['kv_cache_types'])}")
    if kv != "f16" and not flash:
        notes.append(f"OLLAMA_KV_CACHE_TYPE={kv} needs flash attention: Ollama falls back to f16")
        kv = "f16"
    return num_ctx, parallel, num_batch, kv, flash, notes


# ---------------------------------------------------------------------------------------------------------
# Legacy estimator (ollama ≤ 0.12)
# ---------------------------------------------------------------------------------------------------------


def legacy_kv_per_layer(
    spec: ModelSpec, arch: str, context: int, parallel: int, batch: int, kv: str, rules: Rules
) -> list[int]:
    """KV bytes per layer as GraphSize estimates them (engines.md §5): ``ctx × parallel × (k + v) × kv_heads ×
    bytes`` with q8_0 = 1.0 and q4_0 = 0.5; recurrent layers F32 conv + SSM state; Gemma 3 local layers
    ``parallel × window + batch`` cells; gpt-oss even layers ``parallel × 4096 + batch``."""
    per_elem = float(rules["legacy_kv_bytes"][kv])
    cells = context * parallel
    out = []
    for il, layer in enumerate(spec.layers):
        if layer.kind in RECURRENT_KINDS:
            out.append(int(4 * layer.state_elems))
            continue
        if layer.kind is LayerKind.NONE:
            out.append(0)
            continue
        width = (
            layer.kv_elems_per_token if layer.kind is not LayerKind.MLA else layer.kv_lora_rank + layer.qk_rope_head_dim
        )
        n = cells
        if arch == "gemma3" and (il + 1) % 6 != 0 and layer.window:
            n = parallel * layer.window + batch
        elif arch in ("gpt-oss", "gptoss") and il % 2 == 0:
            n = parallel * int(rules["gptoss_swa_cells"]) + batch
        out.append(int(n * width * per_elem))
    return out


def legacy_graph(
    spec: ModelSpec, arch: str, context: int, parallel: int, batch: int, kv_total: int, flash: bool
) -> tuple[int, int, str]:
    """(partialOffload, fullOffload, rule) of fs/ggml/ggml.go::GraphSize; unknown architectures fall back to
    memory.go's ``gqa × kvTotal / 6`` for both."""
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
        h_kv_min = min((layer.num_kv_heads for layer in kv_layers), default=1) or 1
        partial = 2 * h // h_kv_min * kv_total // 6
        if flash:
            partial = (4 * parallel + (c >> 10) + 110) * MiB
            rule = "gpt-oss with flash attention: (4·parallel + ctx/1024 + 110) MiB"
    if partial == 0:
        gqa = h // h_kv if h_kv else 1
        partial = gqa * kv_total // 6
        rule = f"{arch}: no graph formula, memory.go default gqa ({gqa}) × KV total / 6"
    if full == 0:
        full = partial
    return partial, full, rule


class OllamaProfile:
    name = ENGINE
    rule_versions: tuple[str, ...] = tuple(load_engine_data(ENGINE)["rule_versions"])

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        data = load_engine_data(ENGINE)
        version, rules = engine_rules(ENGINE, choice.version)
        rules["model_type_to_arch"] = data.get("model_type_to_arch", {})
        num_ctx, parallel, num_batch, kv, flash, notes = resolve(spec, hardware, choice, workload, rules)
        if rules["legacy"]:
            return self._legacy(
                spec, hardware, choice, workload, version, rules, num_ctx, parallel, num_batch, kv, flash, notes
            )
        return self._current(
            spec, hardware, choice, workload, version, rules, num_ctx, parallel, num_batch, kv, flash, notes
        )

    def _current(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        version: str,
        rules: Rules,
        num_ctx: int,
        parallel: int,
        num_batch: int,
        kv: str,
        flash: bool,
        notes: list[str],
    ) -> Estimate:
        """llama-server with Ollama's arguments: -c num_ctx×num_parallel -np num_parallel -b/-ub num_batch, -fa, -ctk/-ctv."""
        settings = {
            "binary": "llama-server",
            "ctx-size": str(num_ctx * parallel),
            "parallel": str(parallel),
            "kv-unified": "false",
            "batch-size": str(num_batch),
            "ubatch-size": str(num_batch),
            "flash-attn": "on" if flash else "off",
            "cache-type-k": kv,
            "cache-type-v": kv,
        }
        num_gpu = setting_int(choice, "num_gpu")
        if num_gpu is not None:
            settings["n-gpu-layers"] = str(num_gpu)
        lc_choice = EngineChoice(name="llama.cpp", settings=settings)
        lc_version, lc_rules, compute = llamacpp.rules_for(lc_choice)
        lc_rules = dict(lc_rules)
        overhead = minimum_memory(hardware, rules) + (
            setting_int(choice, "gpu_overhead", "OLLAMA_GPU_OVERHEAD", default=int(rules["gpu_overhead_bytes"])) or 0
        )
        lc_rules["cuda_overhead_mib"] = lc_rules["metal_overhead_mib"] = overhead / MiB
        s = llamacpp.resolve_settings(spec, lc_choice, Workload(kv_dtype=kv), lc_rules)
        estimate = llamacpp.PROFILE.finish(
            spec,
            hardware,
            lc_choice,
            workload,
            lc_version,
            s,
            lc_rules,
            compute,
            extra_warnings=notes,
            extra_explain={
                "overhead": f"Ollama's per-GPU minimum {overhead / MiB:.0f} MiB (ml/device.go MinimumMemory + OLLAMA_GPU_OVERHEAD)"
            },
        )
        engine = dict(estimate.engine)
        engine.update(
            {
                "name": ENGINE,
                "version": choice.version,
                "rules": version,
                "num_ctx": num_ctx,
                "num_parallel": parallel,
                "num_batch": num_batch,
                "kv_cache_type": kv,
                "flash_attention": flash,
                "runs": f"llama-server (llama.cpp rules {lc_version})",
            }
        )
        return replace(estimate, engine=engine)

    def _legacy(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        version: str,
        rules: Rules,
        num_ctx: int,
        parallel: int,
        num_batch: int,
        kv: str,
        flash: bool,
        notes: list[str],
    ) -> Estimate:
        arch = gguf_arch(spec, rules)
        batch = min(num_ctx, num_batch)
        kv_layers = legacy_kv_per_layer(spec, arch, num_ctx, parallel, batch, kv, rules)
        kv_total = sum(kv_layers)
        partial, full, graph_rule = legacy_graph(spec, arch, num_ctx, parallel, batch, kv_total, flash)
        count = hardware.count if hardware else 1
        dense, experts, embd, output = llamacpp._layer_weight_bytes(spec)
        layer_bytes = [d + x for d, x in zip(dense, experts)]
        graph = full if count == 1 else partial
        # layers are spread over the GPUs; every GPU keeps the minimum, the graph and one spare layer (blk.0 + kv[0])
        per_gpu_layers = -(-spec.num_layers // count)
        weights = sum(layer_bytes[:per_gpu_layers]) + output  # output layer on the last GPU: worst case
        kv_gpu = sum(kv_layers[:per_gpu_layers])
        spare = (layer_bytes[0] if layer_bytes else 0) + (kv_layers[0] if kv_layers else 0)
        overhead = minimum_memory(hardware, rules) + int(rules["gpu_overhead_bytes"]) + spare
        memory = hardware.gpu.gpu_memory_bytes if hardware else 0
        per_gpu = PerGpu(
            weights=weights, kv_cache=kv_gpu, activations=graph, overhead=overhead, usable=memory, memory=memory
        )
        warnings = [
            *list(notes),
            "ollama@0.12: Ollama's own pre-load estimate (memory.required.*), not what llama.cpp allocates",
        ]
        explain = {
            "weights": f"all {spec.num_layers} repeating layers + output layer ({output / MiB:.0f} MiB); token_embd on the CPU",
            "kv_cache": f"legacy GraphSize KV: {num_ctx} × {parallel} cells × (k+v) × kv_heads × {rules['legacy_kv_bytes'][kv]} B ({kv})",
            "activations": f"graph {'full' if count == 1 else 'partial'} offload: {graph_rule}",
            "overhead": f"MinimumMemory {minimum_memory(hardware, rules) / MiB:.0f} MiB + OLLAMA_GPU_OVERHEAD + one spare layer {spare / MiB:.0f} MiB",
            "usable": "all of the GPU's memory (the legacy estimator compares against free memory)",
        }
        context_total = num_ctx
        decode = decode_tokens_per_second(
            (active_weight_bytes(spec) or 0) - embd + kv_total / max(1, count),
            hardware.gpu.memory_bandwidth_gbs if hardware else None,
        )
        engine = {
            "name": ENGINE,
            "version": choice.version,
            "rules": version,
            "num_ctx": num_ctx,
            "num_parallel": parallel,
            "num_batch": num_batch,
            "kv_cache_type": kv,
            "flash_attention": flash,
            "arch": arch,
            "graph_partial": partial,
            "graph_full": full,
            "kv_total": kv_total,
        }
        resolved = replace(workload, context=context_total, kv_dtype=kv)
        return finish_estimate(
            spec=spec,
            hardware=hardware,
            engine=engine,
            workload=resolved,
            per_gpu=per_gpu,
            capacity=Capacity(kv_tokens=num_ctx * parallel),
            decode=decode,
            warnings=warnings,
            explain=explain,
            tp=1,
            pp=count,
        )


PROFILE = OllamaProfile()
