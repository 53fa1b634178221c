"""ExLlamaV2 (and TabbyAPI on top of it): a static KV cache of ``max_seq_len × batch`` per layer, in one of five
cache classes, plus one layer's worth of FP16 K/V temporaries per device for the 8-bit and Q caches.

Rules: docs/engines/exllamav2.md#exllamav2-cache (exllamav2/cache.py): per token per layer, ``d = kv_heads × head_dim``:
FP16 2d + 2d; FP8 d + d; Q8 d + d + scales; Q6 d + d/2 + scales; Q4 d/2 + d/2 + scales, scales = one fp16 per 32
elements of K and of V (d/16 bytes each). Constants in ``hfvram/engines/exllamav2/rules.toml``.

Settings (TabbyAPI / ExLlamaV2 names): ``cache_mode`` (FP16 | FP8 | Q8 | Q6 | Q4), ``max_seq_len``,
``max_batch_size``, ``gpu_split`` (GB per GPU, comma separated) — layers go to the GPUs in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hfvram.engines.contract import Constants, Narration, StagedProfile, Terms
from hfvram.errors import UsageError
from hfvram.estimate.common import (
    MiB,
    Rules,
    active_weight_bytes,
    decode_tokens_per_second,
    layer_kv_row_elems,
    require_weights,
    setting,
    setting_int,
)
from hfvram.estimate.types import Capacity, EngineChoice, Hardware, PerGpu, Workload
from hfvram.spec import LayerKind, ModelSpec

ENGINE = "exllamav2"


@dataclass(frozen=True)
class ExLlamaV2Constants(Constants):
    """The ``[defaults]`` of ``rules.toml`` (each value's source is beside it there), checked when they load; the
    per-mode cache facts are the ``[cache_modes]`` table, read as it stands."""

    cache_mode: str
    max_batch_size: int
    q_cache_blocksize: int
    q_scale_group: int
    cuda_context_mib: int


#: --kv-dtype spellings -> cache mode
KV_DTYPE_TO_MODE = {
    "fp16": "FP16",
    "f16": "FP16",
    "bf16": "FP16",
    "auto": "FP16",
    "fp8": "FP8",
    "8bit": "FP8",
    "q8": "Q8",
    "q8_0": "Q8",
    "int8": "Q8",
    "q6": "Q6",
    "q4": "Q4",
    "q4_0": "Q4",
    "int4": "Q4",
}


def cache_mode(name: str, modes: Rules) -> str:
    key = name.strip()
    upper = key.upper()
    if upper in modes:
        return upper
    mapped = KV_DTYPE_TO_MODE.get(key.lower())
    if mapped is None:
        raise UsageError(f"ExLlamaV2 cache mode {name!r}: use one of {', '.join(modes)}")
    return mapped


def kv_dim(spec: ModelSpec) -> int:
    """``num_key_value_heads × head_dim`` — ExLlamaV2 uses one shape for every layer (config-level values)."""
    layer = next(
        (item for item in spec.layers if item.kind in (LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED)), None
    )
    if layer is None:
        raise UsageError("ExLlamaV2 needs a standard attention model (no MLA / recurrent-only layers)")
    return layer_kv_row_elems(layer)[0]


def q_block(dim: int, blocksize: int) -> int:
    """Tokens per quantization block so that ``dim × q_block`` is a multiple of the Q-cache block (cache.py)."""
    block = 1
    while (dim * block) % blocksize:
        block += 1
    return block


def cache_bytes_per_layer(dim: int, seq_len: int, batch: int, mode: Rules, scale_group: int) -> int:
    """K + V state tensors (and scales) of one layer: ``batch × seq_len × d × (k + v)`` (+ 2 × d/32 fp16 scales)."""
    per_token = dim * (float(mode["k"]) + float(mode["v"]))
    if mode["scales"]:
        per_token += 2 * 2 * dim / scale_group
    return int(batch * seq_len * per_token)


def temp_bytes_per_device(dim: int, seq_len: int, batch: int, mode: Rules) -> int:
    """FP16 K and V of one layer kept per device by the 8-bit and Q caches (``touch_device``)."""
    return 2 * 2 * batch * seq_len * dim if mode["temp"] else 0


def split_layers(n_layers: int, shares: Sequence[float]) -> list[int]:
    """Layers per GPU in order, proportional to ``shares`` (gpu_split), every layer placed."""
    total = sum(shares) or 1.0
    counts = [int(n_layers * share / total) for share in shares]
    for index in range(n_layers - sum(counts)):
        counts[index % len(counts)] += 1
    return counts


#: layer kinds that get a K/V state tensor (attention-free / no-op layers get none)
CACHED_KINDS = (LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED)


def cached_layers_per_gpu(spec: ModelSpec, layers_per_gpu: Sequence[int]) -> list[int]:
    """Layers holding a K/V cache on each GPU, in load order. Layers without attention (Nemotron-NAS no-op
    blocks) get no cache: measured in turboderp-org/exllamav3#50 (Nemotron-Super-49B, FP16 cache, 218 KiB per
    token of context on a 4090 = 49 attention layers, not 80)."""
    if len(spec.layers) != sum(layers_per_gpu):
        return list(layers_per_gpu)
    counts, start = [], 0
    for layers in layers_per_gpu:
        counts.append(sum(1 for layer in spec.layers[start : start + layers] if layer.kind in CACHED_KINDS))
        start += layers
    return counts


@dataclass(frozen=True)
class Settings:
    """ExLlamaV2 / TabbyAPI settings as the estimate used them."""

    cache_mode: str
    mode: Rules
    max_seq_len: int
    max_batch_size: int
    #: K (= V) elements per token per layer, and the tokens per Q-cache block (1 for FP16 / FP8)
    kv_dim: int
    q_block: int
    q_cache_blocksize: int
    q_scale_group: int
    gpu_split: tuple[float, ...]


def resolve_settings(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    constants: ExLlamaV2Constants,
    modes: Rules,
) -> Settings:
    wanted = setting(choice, "cache_mode", "cache-mode") or (
        workload.kv_dtype if workload.kv_dtype not in ("auto", "") else str(constants.cache_mode)
    )
    mode_name = cache_mode(wanted, modes)
    mode = modes[mode_name]
    seq_len = (
        setting_int(choice, "max_seq_len", "max-seq-len", "cache_size")
        or workload.context
        or spec.max_position_embeddings
    )
    if seq_len is None:
        raise UsageError("the model states no max length; pass --context or --set max_seq_len=N")
    batch = setting_int(choice, "max_batch_size", "max-batch-size") or max(
        int(constants.max_batch_size), workload.concurrency
    )
    dim = kv_dim(spec)
    blocksize = int(constants.q_cache_blocksize)
    count = hardware.count if hardware else 1
    split_text = setting(choice, "gpu_split", "gpu-split")
    shares = tuple(float(part) for part in split_text.split(",")) if split_text else (1.0,) * count
    if len(shares) != count:
        raise UsageError(f"gpu_split lists {len(shares)} GPUs, {count} given")
    return Settings(
        cache_mode=mode_name,
        mode=mode,
        max_seq_len=seq_len,
        max_batch_size=batch,
        kv_dim=dim,
        q_block=q_block(dim, blocksize) if mode["scales"] else 1,
        q_cache_blocksize=blocksize,
        q_scale_group=int(constants.q_scale_group),
        gpu_split=shares,
    )


@dataclass(frozen=True)
class Breakdown:
    settings: Settings
    layers_per_gpu: tuple[int, ...]
    #: of those, the layers with a K/V cache
    cached_per_gpu: tuple[int, ...]
    layer_cache: int
    temp: int
    #: (total, weights, KV) per GPU, and the index of the fullest
    per_device: tuple[tuple[float, int, int], ...]
    worst: int
    cuda_context_mib: float
    capacity: Capacity
    decode: float | None

    @property
    def overhead(self) -> int:
        return int(self.cuda_context_mib * MiB)


def compute(spec: ModelSpec, hardware: Hardware | None, settings: Settings, constants: ExLlamaV2Constants) -> Breakdown:
    """Layers per GPU in order, their weights and static caches, the FP16 temporaries, capacity and decode."""
    count = len(settings.gpu_split)
    n_layers = spec.num_layers
    layers_per_gpu = split_layers(n_layers, settings.gpu_split)
    cached_per_gpu = cached_layers_per_gpu(spec, layers_per_gpu)
    seq_len, batch = settings.max_seq_len, settings.max_batch_size
    layer_cache = cache_bytes_per_layer(settings.kv_dim, seq_len, batch, settings.mode, settings.q_scale_group)
    temp = temp_bytes_per_device(settings.kv_dim, seq_len, batch, settings.mode)
    weights = require_weights(spec)
    embd = weights.bytes_by_component.get("embeddings", 0)
    head = weights.bytes_by_component.get("lm_head", 0)
    per_layer_weights = (weights.total_bytes - embd - head) / max(1, n_layers)
    per_device = []
    for dev, layers in enumerate(layers_per_gpu):
        device_weights = per_layer_weights * layers + (embd if dev == 0 else 0) + (head if dev == count - 1 else 0)
        cached = cached_per_gpu[dev]
        kv = layer_cache * cached + (temp if cached else 0)
        per_device.append((device_weights + kv, int(device_weights), kv))
    worst = max(range(count), key=lambda index: per_device[index][0])
    overhead_mib = float(constants.cuda_context_mib)
    per_seq_token = layer_cache / max(1, batch * seq_len)
    capacity = Capacity(kv_tokens=seq_len * batch)
    if hardware is not None:
        free = hardware.gpu.gpu_memory_bytes - per_device[worst][1] - int(overhead_mib * MiB)
        capacity = capacity_of(spec, settings, free, per_seq_token * cached_per_gpu[worst], temp)
    decode = decode_tokens_per_second(
        (active_weight_bytes(spec) or 0) / count + per_seq_token * sum(cached_per_gpu) * seq_len,
        hardware.gpu.memory_bandwidth_gbs if hardware else None,
    )
    return Breakdown(
        settings,
        tuple(layers_per_gpu),
        tuple(cached_per_gpu),
        layer_cache,
        temp,
        tuple(per_device),
        worst,
        overhead_mib,
        capacity,
        decode,
    )


def capacity_of(spec: ModelSpec, settings: Settings, free: float, per_token_dev: float, temp: int) -> Capacity:
    """Sequences of max_seq_len and the longest context the memory after weights holds (the static cache and
    its temporaries grow with batch × tokens)."""
    seq_len, batch = settings.max_seq_len, settings.max_batch_size
    if per_token_dev <= 0:
        return Capacity(kv_tokens=seq_len * batch)
    temp_per_token = temp / max(1, batch * seq_len)
    max_conc = max(0.0, free / (seq_len * (per_token_dev + temp_per_token / batch)))
    max_ctx = int(max(0.0, free / (batch * (per_token_dev + temp_per_token))))
    return Capacity(
        kv_tokens=seq_len * batch,
        max_concurrency=max_conc,
        max_context=min(max_ctx, spec.max_position_embeddings or max_ctx),
    )


def narrate(parts: Breakdown, spec: ModelSpec) -> tuple[list[str], dict[str, str]]:
    """(warnings, explain lines), every figure read from the settings and breakdown."""
    settings, mode = parts.settings, parts.settings.mode
    warnings = []
    if settings.q_block > 1 and settings.max_seq_len % settings.q_block:
        reported = -(-settings.max_seq_len // settings.q_block) * settings.q_block
        warnings.append(
            f"Q cache: max_seq_len reported as {reported} (kv dim {settings.kv_dim} × {settings.q_block} tokens per "
            f"{settings.q_cache_blocksize}-element block)"
        )
    if any(layer.kind in (LayerKind.SLIDING, LayerKind.CHUNKED) for layer in spec.layers):
        warnings.append("ExLlamaV2 allocates every layer at max_seq_len, sliding-window layers included")
    if spec.quantization is not None and spec.quantization.method == "gguf":
        warnings.append("ExLlamaV2 loads EXL2 / GPTQ safetensors, not GGUF: weights counted at the GGUF's size")
    warnings.append("ExLlamaV2's scratch buffers for max_input_len (prefill chunk) are not modelled")
    layers = parts.layers_per_gpu[parts.worst]
    scales = f" + fp16 scale per {settings.q_scale_group}" if mode["scales"] else ""
    explain = {
        "weights": f"checkpoint tensors (EXL2 / GPTQ as stored), {layers} of {spec.num_layers} layers on this GPU",
        "kv_cache": (
            f"{mode['class']}: {settings.max_batch_size} × {settings.max_seq_len} tokens × kv dim {settings.kv_dim} × "
            f"({mode['k']} + {mode['v']} B{scales}) per layer, {parts.cached_per_gpu[parts.worst]} layers with "
            "attention on this GPU"
        ),
        "activations": (
            f"one layer of FP16 K/V temporaries per device: {parts.temp / MiB:.1f} MiB"
            if parts.temp
            else "FP16 cache: no temporaries"
        ),
        "overhead": (f"PyTorch CUDA context {parts.cuda_context_mib:g} MiB (exllamav2.toml cuda_context_mib)"),
        "usable": "all of the GPU's memory (ExLlamaV2 has no memory fraction)",
    }
    return warnings, explain


class ExLlamaV2Profile(StagedProfile[ExLlamaV2Constants, Settings, Breakdown]):
    name = ENGINE
    constants_type = ExLlamaV2Constants
    # the breakdown asks for the weights itself, after the settings, so that a bad setting is the error reported
    requires_weights = False

    def resolve(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: ExLlamaV2Constants,
        version: str,
    ) -> Settings:
        return resolve_settings(spec, hardware, choice, workload, constants, self.data["cache_modes"])

    def breakdown(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: ExLlamaV2Constants,
        settings: Settings,
    ) -> Breakdown:
        return compute(spec, hardware, settings, constants)

    def terms(self, parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, workload: Workload) -> Terms:
        memory = hardware.gpu.gpu_memory_bytes if hardware else 0
        cached = parts.cached_per_gpu[parts.worst]
        per_gpu = PerGpu(
            weights=parts.per_device[parts.worst][1],
            kv_cache=parts.layer_cache * cached,
            activations=parts.temp if cached else 0,
            overhead=parts.overhead,
            usable=memory,
            memory=memory,
        )
        settings = parts.settings
        return Terms(
            per_gpu=per_gpu,
            capacity=parts.capacity,
            decode=parts.decode,
            context=settings.max_seq_len,
            kv_dtype=settings.cache_mode.lower(),
            tp=1,
            pp=len(settings.gpu_split),
        )

    def narrate(
        self, parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Narration:
        warnings, explain = narrate(parts, spec)
        return Narration(tuple(warnings), explain)

    def report(self, parts: Breakdown, choice: EngineChoice, version: str) -> dict[str, object]:
        settings = parts.settings
        return {
            "name": ENGINE,
            "version": choice.version,
            "rules": version,
            "cache_mode": settings.cache_mode,
            "max_seq_len": settings.max_seq_len,
            "max_batch_size": settings.max_batch_size,
            "gpu_split": list(settings.gpu_split),
            "q_block": settings.q_block,
        }


PROFILE = ExLlamaV2Profile()
