"""MLX / mlx-lm on Apple Silicon: unified memory, of which the GPU may wire ``max_recommended_working_set_size``.

Rules: docs/engines/mlx.md#mlx-wired-limit — mlx-lm wires the recommended working set (``mx.set_wired_limit``) and warns when the
model is above 0.9 × that figure; the GPU-addressable share of RAM is set by macOS (the catalogue's
``addressable_bytes``; raise it with ``sudo sysctl iogpu.wired_limit_mb=N``). KV cache in the model's dtype,
grown in steps of 256 tokens; ``--kv-bits 4|8`` quantizes it (a scale and a bias per group of 64).
Constants in ``hfvram/engines/mlx/rules.toml``.

Settings (mlx-lm names): ``kv_bits``, ``kv_group_size``, ``max_kv_size`` (rotating cache cap), ``prefill_step_size``,
``wired_limit_mb`` (the sysctl, in MB = MiB as macOS reads it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hfvram.engines.contract import Constants, Narration, StagedProfile, Terms
from hfvram.errors import UsageError
from hfvram.estimate.common import (
    GiB,
    MiB,
    active_weight_bytes,
    canonical_kv_dtype,
    decode_tokens_per_second,
    kv_dtype_bytes,
    layer_kv_elems_per_token_rank,
    require_weights,
    setting_int,
)
from hfvram.estimate.types import Capacity, EngineChoice, Hardware, PerGpu, Workload
from hfvram.spec import RECURRENT_KINDS, WINDOWED_KINDS, LayerKind, ModelSpec

ENGINE = "mlx"


@dataclass(frozen=True)
class MlxConstants(Constants):
    """The ``[defaults]`` of ``rules.toml`` (each value's source is beside it there), checked when they load."""

    wired_warning_fraction: float
    kv_step: int
    linear_ssm_state_bytes: int
    kv_group_size: int
    prefill_step_size: int
    metal_overhead_mib: int
    fused_prefill_head_dims: list[int]
    mla_prefill_model_types: list[str]
    act_hidden_factor: float
    act_ff_factor: float


def kv_element_bytes(model_dtype_bytes: float, kv_bits: int | None, group_size: int) -> float:
    """Bytes per KV element: the model dtype, or ``bits/8`` plus a scale and a bias (model dtype) per group."""
    if kv_bits is None:
        return model_dtype_bytes
    if kv_bits not in (2, 3, 4, 6, 8):
        raise UsageError(f"kv_bits={kv_bits}: mlx quantizes to 2, 3, 4, 6 or 8 bits")
    return kv_bits / 8 + 2 * model_dtype_bytes / group_size


def cache_tokens(context: int, step: int, cap: int | None) -> int:
    """Tokens a KVCache buffer holds for ``context``: grown in ``step``-token chunks, capped by a rotating size."""
    tokens = math.ceil(context / step) * step
    return min(tokens, cap) if cap else tokens


def kv_bytes_per_sequence(
    spec: ModelSpec,
    context: int,
    element_bytes: float,
    step: int,
    max_kv_size: int | None,
    linear_ssm_state_bytes: float | None = None,
) -> float:
    """KV of one sequence: full / MLA layers at the (stepped) context, sliding layers in a rotating cache of their
    window, recurrent layers their state (layer dtype, else the model dtype).

    Rule docs/engines/mlx.md#mlx-linear-state: a linear-attention (Gated DeltaNet) layer's recurrent state is created
    by mlx-lm's ``gated_delta_update`` in float32 (``linear_ssm_state_bytes``) whatever the config's
    ``mamba_ssm_dtype``; its conv state is in the model dtype."""
    total = 0.0
    for layer in spec.layers:
        if layer.kind in WINDOWED_KINDS and layer.window:
            tokens = min(cache_tokens(context, step, max_kv_size), layer.window)
            total += layer_kv_elems_per_token_rank(layer, 1) * element_bytes * tokens
        elif layer.kind in (LayerKind.FULL, LayerKind.MLA):
            total += layer_kv_elems_per_token_rank(layer, 1) * element_bytes * cache_tokens(context, step, max_kv_size)
        elif layer.kind is LayerKind.LINEAR and linear_ssm_state_bytes:
            total += layer.conv_state_elems * spec.dtype_bytes() + layer.ssm_state_elems * linear_ssm_state_bytes
        elif layer.kind in RECURRENT_KINDS:
            total += layer.state_elems * (layer.state_dtype_bytes or spec.dtype_bytes())
    return total


def unfused_scores_bytes(spec: ModelSpec, chunk: int, context: int, step: int, fused_head_dims: tuple[int, ...]) -> int:
    """Bytes of one layer's materialised attention scores during a prefill chunk, 0 when the fused kernel runs.

    Rule docs/engines/mlx.md#mlx-unfused-attention: for a query longer than 8 tokens MLX's Metal SDPA runs the
    fused full-attention kernel only for some head dims; otherwise its fallback computes
    ``scores = q @ kᵀ`` of shape [batch, query heads, chunk, keys] in the model dtype, then softmax and ``@ v``,
    one layer at a time, so the peak holds one layer's scores (the largest).
    """
    heads = spec.num_attention_heads or 0
    keys = cache_tokens(context, step, None)
    largest = 0
    for layer in spec.layers:
        if layer.kind not in (LayerKind.FULL, *WINDOWED_KINDS) or not heads:
            continue
        if layer.head_dim_k in fused_head_dims and layer.head_dim_k == layer.head_dim_v:
            continue
        span = min(keys, layer.window) if layer.kind in WINDOWED_KINDS and layer.window else keys
        largest = max(largest, int(chunk * heads * span * spec.dtype_bytes()))
    return largest


def mla_prefill_bytes(spec: ModelSpec, chunk: int, context: int, step: int, model_types: tuple[str, ...]) -> int:
    """Bytes one MLA layer holds during a prefill chunk, 0 for a model whose mlx-lm attention is not this one.

    Rule docs/engines/mlx.md#mlx-mla-prefill: mlx-lm's DeepSeek-V3-style MLA attention (``model_types``) computes
    the rope part of the scores, ``pe_scores = q_pe @ k_peᵀ`` of shape [batch, query heads, chunk, keys] in the model
    dtype, masks it with ``mx.where`` (a second array of that shape while the first is read), and expands the cached
    latent to per-head K (``embed_q``, qk_nope_head_dim) and V (``unembed_out``, v_head_dim) for every key before the
    fused SDPA takes ``pe_scores`` as its mask; one layer at a time, so the peak holds the largest layer's arrays.
    """
    if spec.model_type not in model_types:
        return 0
    heads = spec.num_attention_heads or 0
    keys = cache_tokens(context, step, None)
    largest = 0
    for layer in spec.layers:
        if layer.kind is not LayerKind.MLA or not heads:
            continue
        rope_scores = 2 * chunk * heads * keys
        expanded = heads * keys * (layer.head_dim_k - layer.qk_rope_head_dim + layer.head_dim_v)
        largest = max(largest, int((rope_scores + expanded) * spec.dtype_bytes()))
    return largest


def wired_limit(hardware: Hardware, choice: EngineChoice) -> tuple[int, str]:
    limit_mb = setting_int(choice, "wired_limit_mb", "iogpu.wired_limit_mb")
    if limit_mb:
        return limit_mb * MiB, f"iogpu.wired_limit_mb = {limit_mb}"
    gpu = hardware.gpu
    if gpu.addressable_bytes is not None:
        return gpu.addressable_bytes, "the GPU-addressable share of RAM macOS sets by default (catalogue)"
    return gpu.memory_bytes, "the device's memory (no addressable share known for it)"


@dataclass(frozen=True)
class Settings:
    """mlx-lm's settings as the estimate used them."""

    context: int
    kv_bits: int | None
    kv_group_size: int
    #: bytes per KV element (the model dtype, a requested dtype, or bits/8 plus scale and bias per group)
    element_bytes: float
    kv_step: int
    max_kv_size: int | None
    prefill_step_size: int


def resolve_settings(spec: ModelSpec, choice: EngineChoice, workload: Workload, constants: MlxConstants) -> Settings:
    """mlx-lm's settings over the TOML defaults; a --kv-dtype of q8 / q4 means --kv-bits 8 / 4."""
    context = workload.context or spec.max_position_embeddings
    if context is None:
        raise UsageError("the model states no max length; pass --context")
    model_bytes = spec.dtype_bytes()
    kv_bits = setting_int(choice, "kv_bits", "kv-bits")
    if kv_bits is None and workload.kv_dtype not in ("auto", ""):
        wanted = workload.kv_dtype.lower()
        if wanted in ("q8", "q8_0", "int8", "8bit"):
            kv_bits = 8
        elif wanted in ("q4", "q4_0", "int4", "4bit"):
            kv_bits = 4
        else:
            model_bytes = kv_dtype_bytes(wanted, model_bytes)
    default_group = int(constants.kv_group_size)
    group = setting_int(choice, "kv_group_size", "kv-group-size", default=default_group) or default_group
    default_prefill = int(constants.prefill_step_size)
    prefill = setting_int(choice, "prefill_step_size", "prefill-step-size", default=default_prefill) or default_prefill
    return Settings(
        context=context,
        kv_bits=kv_bits,
        kv_group_size=group,
        element_bytes=kv_element_bytes(spec.dtype_bytes() if kv_bits else model_bytes, kv_bits, group),
        kv_step=int(constants.kv_step),
        max_kv_size=setting_int(choice, "max_kv_size", "max-kv-size"),
        prefill_step_size=min(context, prefill),
    )


@dataclass(frozen=True)
class Breakdown:
    settings: Settings
    weights: int
    per_sequence: float
    kv: int
    activations: int
    #: one layer's materialised attention scores (unfused SDPA head dims), part of ``activations``
    scores: int
    #: one MLA layer's rope scores (twice) and per-head K and V during a prefill chunk, part of ``activations``
    mla: int
    act_hidden_factor: float
    act_ff_factor: float
    metal_overhead_mib: float
    #: the wired limit (what the GPU may use) and where it came from; 0 / "" without hardware
    usable: int
    usable_note: str
    memory: int
    wired_warning_fraction: float
    capacity: Capacity
    decode: float | None

    @property
    def overhead(self) -> int:
        return int(self.metal_overhead_mib * MiB)


def prefill_chunk_bytes(spec: ModelSpec, settings: Settings, hidden_factor: float, ff_factor: float) -> int:
    """One prefill chunk's activations: step × (a·hidden + b·FFN width) × dtype (an approximation, mlx.toml)."""
    ffn = spec.moe_intermediate_size or spec.intermediate_size or 0
    per_token = hidden_factor * (spec.hidden_size or 0) + ff_factor * ffn
    return int(settings.prefill_step_size * per_token * spec.dtype_bytes())


def prefill_attention_bytes(spec: ModelSpec, settings: Settings, constants: MlxConstants) -> tuple[int, int]:
    """(one layer's unfused attention scores, one MLA layer's prefill arrays) during a prefill chunk."""
    fused = tuple(int(d) for d in constants.fused_prefill_head_dims)
    scores = unfused_scores_bytes(spec, settings.prefill_step_size, settings.context, settings.kv_step, fused)
    mla_types = tuple(str(name) for name in constants.mla_prefill_model_types)
    mla = mla_prefill_bytes(spec, settings.prefill_step_size, settings.context, settings.kv_step, mla_types)
    return scores, mla


def compute(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    settings: Settings,
    workload: Workload,
    constants: MlxConstants,
) -> Breakdown:
    """Weights as stored, the stepped KV buffers, one prefill chunk's activations, the wired limit."""
    per_seq = kv_bytes_per_sequence(
        spec,
        settings.context,
        settings.element_bytes,
        settings.kv_step,
        settings.max_kv_size,
        float(constants.linear_ssm_state_bytes),
    )
    weights = require_weights(spec).total_bytes
    hidden_factor, ff_factor = float(constants.act_hidden_factor), float(constants.act_ff_factor)
    scores, mla = prefill_attention_bytes(spec, settings, constants)
    activations = prefill_chunk_bytes(spec, settings, hidden_factor, ff_factor) + scores + mla
    overhead_mib = float(constants.metal_overhead_mib)
    usable, usable_note, memory = 0, "", 0
    if hardware is not None:
        usable, usable_note = wired_limit(hardware, choice)
        memory = hardware.gpu.memory_bytes
    tokens = cache_tokens(settings.context, settings.kv_step, settings.max_kv_size)
    capacity = Capacity(kv_tokens=tokens * workload.concurrency)
    if hardware is not None and per_seq > 0:
        budget = usable - weights - activations - int(overhead_mib * MiB)
        longest = max(0, int(budget / workload.concurrency / (per_seq / tokens)) // settings.kv_step * settings.kv_step)
        capacity = Capacity(
            kv_tokens=capacity.kv_tokens,
            max_concurrency=max(0.0, budget / per_seq),
            max_context=min(longest, spec.max_position_embeddings or 1 << 40),
        )
    decode = decode_tokens_per_second(
        (active_weight_bytes(spec) or 0) + per_seq, hardware.gpu.memory_bandwidth_gbs if hardware else None
    )
    return Breakdown(
        settings=settings,
        weights=weights,
        per_sequence=per_seq,
        kv=int(per_seq * workload.concurrency),
        activations=activations,
        scores=scores,
        mla=mla,
        act_hidden_factor=hidden_factor,
        act_ff_factor=ff_factor,
        metal_overhead_mib=overhead_mib,
        usable=usable,
        usable_note=usable_note,
        memory=memory,
        wired_warning_fraction=float(constants.wired_warning_fraction),
        capacity=capacity,
        decode=decode,
    )


def narrate(
    parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, workload: Workload
) -> tuple[list[str], dict[str, str]]:
    """(warnings, explain lines), every figure read from the breakdown."""
    settings = parts.settings
    warnings = []
    if hardware is not None:
        if not (hardware.gpu.unified_memory or hardware.gpu.vendor == "apple"):
            warnings.append(
                f"{hardware.gpu.name} is not Apple Silicon: MLX's CUDA backend is not what these rules describe"
            )
        fraction = parts.wired_warning_fraction
        if parts.weights > fraction * parts.usable:
            warnings.append(
                f"mlx-lm warns: the model ({parts.weights / GiB:.1f} GiB) is above {fraction:.0%} of the wired limit "
                f"({parts.usable / GiB:.1f} GiB); raise it with `sudo sysctl iogpu.wired_limit_mb=N`"
            )
    warnings.append("MLX activations are an approximation (prefill chunk × hidden/FFN width), not a measured rule")
    explain = {
        "weights": "checkpoint tensors as stored (MLX loads safetensors / mlx-community quantized weights as is)",
        "kv_cache": (
            f"{kv_label(settings, workload, spec)} KV, {settings.element_bytes:.4f} B/element, buffers grown in steps of "
            f"{settings.kv_step} tokens; sliding layers rotate at their window"
        ),
        "activations": (
            f"prefill step {settings.prefill_step_size} tokens × ({parts.act_hidden_factor}·hidden + "
            f"{parts.act_ff_factor}·FFN) × dtype (approximation)"
            + (
                f" + {parts.scores / GiB:.2f} GiB of one layer's attention scores (head dim without a fused "
                f"prefill kernel: chunk × query heads × context × dtype)"
                if parts.scores
                else ""
            )
            + (
                f" + {parts.mla / GiB:.2f} GiB of one MLA layer's prefill arrays (rope scores and their masked copy: "
                "2 × chunk × query heads × context, and K and V expanded per head for every key)"
                if parts.mla
                else ""
            )
        ),
        "overhead": f"Metal context {parts.metal_overhead_mib:g} MiB (mlx.toml metal_overhead_mib)",
        "usable": f"wired limit: {parts.usable_note}" if hardware else "",
    }
    return warnings, explain


def kv_label(settings: Settings, workload: Workload, spec: ModelSpec) -> str:
    if settings.kv_bits:
        return f"{settings.kv_bits}-bit (group {settings.kv_group_size})"
    return canonical_kv_dtype(workload.kv_dtype, spec.dtype)


class MlxProfile(StagedProfile[MlxConstants, Settings, Breakdown]):
    name = ENGINE
    constants_type = MlxConstants
    # the breakdown sizes the weights itself (after the settings, so that a bad setting is the error reported)
    requires_weights = False

    def resolve(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: MlxConstants,
        version: str,
    ) -> Settings:
        return resolve_settings(spec, choice, workload, constants)

    def breakdown(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: MlxConstants,
        settings: Settings,
    ) -> Breakdown:
        return compute(spec, hardware, choice, settings, workload, constants)

    def terms(self, parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, workload: Workload) -> Terms:
        per_gpu = PerGpu(
            weights=parts.weights,
            kv_cache=parts.kv,
            activations=parts.activations,
            overhead=parts.overhead,
            usable=parts.usable,
            memory=parts.memory,
        )
        settings = parts.settings
        kv_dtype = f"q{settings.kv_bits}" if settings.kv_bits else canonical_kv_dtype(workload.kv_dtype, spec.dtype)
        return Terms(
            per_gpu=per_gpu,
            capacity=parts.capacity,
            decode=parts.decode,
            context=settings.context,
            kv_dtype=kv_dtype,
            tp=1,
            pp=1,
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
            "version": choice.version,
            "rules": version,
            "kv_bits": settings.kv_bits,
            "kv_group_size": settings.kv_group_size,
            "max_kv_size": settings.max_kv_size,
            "prefill_step_size": settings.prefill_step_size,
        }


PROFILE = MlxProfile()
