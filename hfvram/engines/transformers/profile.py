"""Plain transformers + PyTorch: weights, a DynamicCache for context × batch, the peak of one prefill forward.

There is no engine budget: the process may use the whole device (usable = memory). Per GPU:

    weights      the checkpoint (``device_map="auto"`` splits layers over GPUs: the worst GPU's share)
    kv_cache     DynamicCache in the model dtype: every token for full attention; sliding / chunked layers keep
                 their window less one token (DynamicSlidingWindowLayer); linear-attention / Mamba layers one
                 state per sequence. MLA models cache the
                 decompressed K (heads × qk_head_dim) and V (heads × v_head_dim), not the latent
    activations  one prefill forward over the whole prompt: residual stream + the largest of attention
                 intermediates (sdpa: q, k, v expanded to all heads, output; eager: + scores and fp32 softmax),
                 MLP intermediates, and logits (batch × kept positions × vocab × 4 B, fp32 upcast)
    overhead     CUDA context (common.md#cuda-context)

Constants in ``hfvram/engines/transformers/rules.toml``; terms not read in engine source (docs/engines/transformers.md) are approximations
built on transformers' documented defaults and say so in --explain.
"""

from __future__ import annotations

from dataclasses import dataclass

from hfvram.engines.contract import Constants, Narration, StagedProfile, Terms
from hfvram.errors import UsageError
from hfvram.estimate import common
from hfvram.estimate.common import GiB
from hfvram.estimate.types import Capacity, EngineChoice, Hardware, PerGpu, Workload
from hfvram.spec import RECURRENT_KINDS, WINDOWED_KINDS, Layer, LayerKind, ModelSpec

ENGINE = "transformers"


@dataclass(frozen=True)
class TransformersConstants(Constants):
    """The ``[defaults]`` of ``rules.toml`` (each value's source is beside it there), checked when they load."""

    cuda_context_gib: float
    logits_to_keep: int
    logits_bytes: int
    attn_implementation: str
    softmax_bytes: int
    attention_tensors: int
    mlp_tensors: int
    hidden_tensors: int
    dynamic_window_drop: int
    #: the KV cache dtypes transformers' caches take
    kv_dtypes: list[str]


@dataclass(frozen=True)
class Settings:
    tp: int
    pp: int
    attn_implementation: str
    logits_to_keep: int
    kv_cache_dtype: str
    kv_bytes: float
    max_length: int | None


def cache_elems_per_token(layer: Layer, tp: int) -> int:
    """K+V elements per token this layer's DynamicCache entry stores on one rank."""
    if layer.kind is LayerKind.MLA and layer.num_kv_heads and layer.head_dim_k:
        heads = common.kv_heads_per_rank(layer.num_kv_heads, tp)
        return heads * (layer.head_dim_k + layer.head_dim_v)
    return common.layer_kv_elems_per_token_rank(layer, tp)


def kv_bytes(
    layers: tuple[Layer, ...],
    tp: int,
    kv_bytes_per_elem: float,
    context: int,
    state_bytes: float,
    window_drop: int = 0,
) -> tuple[float, float]:
    """(bytes per token that grow with context, bytes per sequence that do not) on one rank.

    Sliding / chunked layers keep ``window - window_drop`` tokens (docs/engines/transformers.md#transformers-kv-cache:
    DynamicSlidingWindowLayer caches the last ``sliding_window - 1``)."""
    growing = fixed = 0.0
    for layer in layers:
        if layer.kind in (LayerKind.FULL, LayerKind.MLA):
            growing += cache_elems_per_token(layer, tp) * kv_bytes_per_elem
        elif layer.kind in WINDOWED_KINDS:
            kept = max(1, layer.window - window_drop) if layer.window else context
            fixed += cache_elems_per_token(layer, tp) * kv_bytes_per_elem * min(kept, context)
        elif layer.kind in RECURRENT_KINDS:
            fixed += common.layer_state_bytes_rank(layer, tp, state_bytes)
    return growing, fixed


def _widths(spec: ModelSpec, tp: int) -> tuple[float, float, float]:
    """(attention width, MLP width, hidden) per token on one rank, in elements."""
    hidden = float(spec.hidden_size or 0)
    heads = spec.num_attention_heads or 0
    head_dim = spec.head_dim or (hidden / heads if heads else 0)
    attention = heads * head_dim / tp
    if spec.num_experts and spec.moe_intermediate_size and spec.experts_per_token:
        mlp = spec.moe_intermediate_size * spec.experts_per_token / tp
    else:
        mlp = (spec.intermediate_size or 4 * hidden) / tp
    return attention, mlp, hidden


def prefill_activations(
    spec: ModelSpec,
    settings: Settings,
    constants: TransformersConstants,
    batch: int,
    context: int,
    last_stage: bool = True,
) -> tuple[float, str]:
    """Peak transient bytes of one prefill forward of ``batch`` × ``context`` tokens on one GPU."""
    dtype = spec.dtype_bytes()
    tokens = batch * context
    attention_width, mlp_width, hidden = _widths(spec, settings.tp)
    residual = tokens * hidden * constants.hidden_tensors * dtype
    attention = tokens * attention_width * constants.attention_tensors * dtype
    if settings.attn_implementation == "eager":
        heads = (spec.num_attention_heads or 0) / settings.tp
        attention += batch * heads * float(context) * context * (dtype + constants.softmax_bytes)
    mlp = tokens * mlp_width * constants.mlp_tensors * dtype
    kept = context if settings.logits_to_keep <= 0 else min(settings.logits_to_keep, context)
    logits = batch * kept * (spec.vocab_size or 0) * constants.logits_bytes if last_stage else 0.0
    largest = max(("attention", attention), ("mlp", mlp), ("logits", logits), key=lambda item: item[1])
    text = (
        f"[approximation] prefill of {batch} × {context} tokens: residual {residual / GiB:.2f} GiB + the largest of "
        f"attention ({settings.attn_implementation}) {attention / GiB:.2f}, MLP {mlp / GiB:.2f}, logits "
        f"({batch} × {kept} positions × vocab × {constants.logits_bytes} B) {logits / GiB:.2f} GiB → {largest[0]}"
    )
    return residual + largest[1], text


def resolve_settings(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    constants: TransformersConstants,
) -> Settings:
    count = hardware.count if hardware else 1
    tp = choice.tp or common.setting_int(choice, "tp", "tp-size") or 1
    pp = choice.pp or max(1, count // tp)  # device_map="auto": layers spread over the GPUs
    if hardware is not None and tp * pp > count:
        raise UsageError(f"tp {tp} × layer split {pp} needs {tp * pp} GPUs, only {count} given")
    if choice.gpu_util is not None:
        raise UsageError("transformers has no memory fraction (--gpu-util does not apply)")
    attn = (common.setting(choice, "attn-implementation") or constants.attn_implementation).lower()
    if attn not in ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention"):
        raise UsageError(f"unknown attn-implementation {attn!r}")
    kv_name = workload.kv_dtype if workload.kv_dtype != "auto" else (common.setting(choice, "cache-dtype") or "auto")
    if (
        common.canonical_kv_dtype(kv_name, None) not in constants.kv_dtypes
        and kv_name.lower() not in constants.kv_dtypes
    ):
        raise UsageError(f"transformers' caches hold the model dtype or a quantized cache (int8/int4), not {kv_name!r}")
    return Settings(
        tp=tp,
        pp=pp,
        attn_implementation=attn,
        logits_to_keep=int(common.setting_int(choice, "logits-to-keep", default=constants.logits_to_keep)),
        kv_cache_dtype=common.canonical_kv_dtype(kv_name, spec.dtype),
        kv_bytes=common.kv_dtype_bytes(kv_name, spec.dtype_bytes()),
        max_length=spec.max_position_embeddings,
    )


def terms(
    spec: ModelSpec, settings: Settings, constants: TransformersConstants, batch: int, context: int
) -> tuple[float, float, str]:
    """(KV bytes, prefill activation bytes, its explanation) for ``batch`` sequences of ``context`` tokens."""
    layers = common.worst_stage_layers(spec, settings.pp)
    drop = int(constants.dynamic_window_drop)
    growing, fixed = kv_bytes(layers, settings.tp, settings.kv_bytes, context, spec.dtype_bytes(), drop)
    activations, text = prefill_activations(spec, settings, constants, batch, context)
    return batch * (growing * context + fixed), activations, text


def longest_context(
    spec: ModelSpec, settings: Settings, constants: TransformersConstants, batch: int, free: float
) -> int:
    """Longest context whose KV + prefill activations fit in ``free`` (binary search; eager attention grows
    quadratically), capped at the model's maximum length."""
    cap = settings.max_length or 1 << 24
    low, high = 0, cap
    while low < high:
        middle = (low + high + 1) // 2
        kv, activations, _ = terms(spec, settings, constants, batch, middle)
        if kv + activations <= free:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True)
class Breakdown:
    settings: Settings
    context: int
    weights: common.WeightsSplit
    cuda_context_gib: float
    kv: float
    #: KV bytes per token that grow with context and per sequence that do not, on one rank
    growing: float
    fixed: float
    activations: float
    activations_text: str
    capacity: Capacity
    decode_modelled: bool
    decode: float | None

    @property
    def overhead(self) -> int:
        return int(self.cuda_context_gib * GiB)


def compute(
    spec: ModelSpec, hardware: Hardware | None, settings: Settings, workload: Workload, constants: TransformersConstants
) -> Breakdown:
    """Weights, DynamicCache, one prefill's peak, and what the rest of the device holds."""
    context = workload.context or settings.max_length
    if context is None:
        raise UsageError("the model does not state its maximum length; give --context")
    split = common.weights_per_rank(spec, settings.tp, settings.pp, vocab_padding=1)
    overhead = int(constants.cuda_context_gib * GiB)
    kv, activations, text = terms(spec, settings, constants, workload.concurrency, context)
    growing, fixed = kv_bytes(
        common.worst_stage_layers(spec, settings.pp),
        settings.tp,
        settings.kv_bytes,
        context,
        spec.dtype_bytes(),
        int(constants.dynamic_window_drop),
    )
    capacity = Capacity()
    if hardware is not None:
        free = hardware.gpu.gpu_memory_bytes - split.bytes - overhead
        kv_one, act_one, _ = terms(spec, settings, constants, 1, context)
        per_sequence = kv_one + act_one
        max_concurrency = max(0.0, free / per_sequence) if per_sequence > 0 else 0.0
        max_context = longest_context(spec, settings, constants, workload.concurrency, free)
        capacity = Capacity(kv_tokens=None, max_concurrency=max_concurrency, max_context=max_context)
    active = common.active_weight_bytes(spec)
    decode = None
    if hardware is not None and active is not None:
        bytes_read = active / (settings.tp * settings.pp) + growing * context + fixed
        decode = common.decode_tokens_per_second(bytes_read, hardware.gpu.memory_bandwidth_gbs)
        if settings.pp > 1 and decode is not None:
            decode /= settings.pp
    return Breakdown(
        settings=settings,
        context=context,
        weights=split,
        cuda_context_gib=constants.cuda_context_gib,
        kv=kv,
        growing=growing,
        fixed=fixed,
        activations=activations,
        activations_text=text,
        capacity=capacity,
        decode_modelled=hardware is not None and active is not None,
        decode=decode,
    )


def narrate(
    parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, workload: Workload
) -> tuple[list[str], dict[str, str]]:
    """(warnings, explain lines), every figure read from the breakdown."""
    settings = parts.settings
    warnings = []
    if settings.kv_cache_dtype in ("int8", "int4"):
        warnings.append(
            "quantized KV cache (cache_implementation='quantized') keeps a residual window in the "
            "model dtype; counted at the quantized size only [approximation]"
        )
    mla = any(layer.kind is LayerKind.MLA for layer in spec.layers)
    mla_note = " (MLA cached decompressed: heads × (qk_head_dim + v_head_dim))" if mla else ""
    explain = {
        "weights": parts.weights.explain
        + (f"; device_map='auto' spreads the layers over {settings.pp} GPUs" if settings.pp > 1 else ""),
        "overhead": f"CUDA context {parts.cuda_context_gib} GiB per GPU",
        "activations": parts.activations_text,
        "kv_cache": (
            f"DynamicCache at {settings.kv_cache_dtype}: {workload.concurrency} × ({parts.context} tokens × "
            f"{parts.growing:.0f} B + {parts.fixed:.0f} B windowed/state){mla_note}; no paging, no pool"
        ),
        "budget": "no memory fraction: the process may use the whole device (usable = memory)",
    }
    if hardware is not None:
        explain["capacity"] = (
            "max_concurrency = memory left after weights and context / (KV + prefill activations "
            "of one sequence); max_context by search; no KV pool, so kv_tokens is null"
        )
    if parts.decode_modelled:
        explain["decode"] = (
            "upper bound: bandwidth / (active weights on one GPU + KV at the context); with "
            "device_map='auto' GPUs run one after another, so the whole model is read per token"
        )
    return warnings, explain


class TransformersProfile(StagedProfile[TransformersConstants, Settings, Breakdown]):
    name = ENGINE
    fallback_versions = ("5.0",)
    constants_type = TransformersConstants
    # one rule set: the newest applies to every release asked for
    unversioned = True

    def resolve(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: TransformersConstants,
        version: str,
    ) -> Settings:
        return resolve_settings(spec, hardware, choice, workload, constants)

    def breakdown(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: TransformersConstants,
        settings: Settings,
    ) -> Breakdown:
        return compute(spec, hardware, settings, workload, constants)

    def terms(self, parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, workload: Workload) -> Terms:
        memory = hardware.gpu.gpu_memory_bytes if hardware else 0
        per_gpu = PerGpu(
            weights=parts.weights.bytes,
            kv_cache=int(parts.kv),
            activations=int(parts.activations),
            overhead=parts.overhead,
            usable=memory,
            memory=memory,
        )
        settings = parts.settings
        return Terms(
            per_gpu=per_gpu,
            capacity=parts.capacity,
            decode=parts.decode,
            context=parts.context,
            kv_dtype=settings.kv_cache_dtype,
            tp=settings.tp,
            pp=settings.pp,
        )

    def narrate(
        self, parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Narration:
        warnings, explain = narrate(parts, spec, hardware, workload)
        return Narration(tuple(warnings), explain)

    def report(self, parts: Breakdown, choice: EngineChoice, version: str) -> dict[str, object]:
        settings = parts.settings
        return {
            "name": ENGINE,
            "version": version,
            "requested_version": choice.version,
            "gpu_util": None,
            "attn_implementation": settings.attn_implementation,
            "logits_to_keep": settings.logits_to_keep,
            "kv_cache_dtype": settings.kv_cache_dtype,
            "cache": "DynamicCache",
            "device_map": "auto" if settings.pp > 1 else None,
            "tp": settings.tp,
            "layer_split": settings.pp,
        }


PROFILE = TransformersProfile()
