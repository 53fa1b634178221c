"""TensorRT-LLM (PyTorch backend): ``free_gpu_memory_fraction`` of what the profiling peak leaves.

Rules follow ``docs/engines/trtllm.md``; constants live in ``hfvram/engines/trtllm/rules.toml``. Per GPU:

    peak      = weights + activation peak of a dummy run filling max_num_tokens + non-torch (context, comm)
    kv_pool   = (memory − peak) × free_gpu_memory_fraction         (``KvCacheCreator.configure_kv_cache_capacity``)
    max_tokens = kv_pool // kv_bytes_per_token, capped by ``max_tokens``; blocks of ``tokens_per_block``

The other ``1 − fraction`` of the post-peak memory is what TRT-LLM holds back: hfvram's reserve (usable =
memory − reserve). The activation peak is measured by TRT-LLM; hfvram approximates it (see the TOML).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hfvram.engines.contract import Constants, Narration, StagedProfile, Terms
from hfvram.errors import UsageError
from hfvram.estimate import common
from hfvram.estimate.common import GiB
from hfvram.estimate.types import Capacity, EngineChoice, Hardware, PerGpu, Workload
from hfvram.spec import RECURRENT_KINDS, WINDOWED_KINDS, ModelSpec

ENGINE = "tensorrt-llm"


@dataclass(frozen=True)
class TrtllmConstants(Constants):
    """The ``[defaults]`` of ``rules.toml`` (each value's source is beside it there), checked when they load."""

    free_gpu_memory_fraction: float
    tokens_per_block: int
    max_num_tokens: int
    max_batch_size: int
    cuda_context_gib: float
    tp_comm_gib: float
    forward_bytes_per_ffn: float
    forward_bytes_per_hidden: float
    moe_activation_factor: float
    logits_bytes: int
    vocab_padding: int


@dataclass(frozen=True)
class Settings:
    rules: str
    tp: int
    pp: int
    free_gpu_memory_fraction: float
    tokens_per_block: int
    max_num_tokens: int
    max_batch_size: int
    max_seq_len: int
    max_tokens: int | None
    kv_cache_dtype: str
    kv_bytes: float


def resolve_settings(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    constants: TrtllmConstants,
    version: str,
) -> Settings:
    tp, pp = common.resolve_parallel(choice, hardware, ("tp-size", "tp", "tensor-parallel-size"), ("pp-size", "pp"))
    fraction = (
        choice.gpu_util
        if choice.gpu_util is not None
        else common.setting_float(choice, "kv-cache-free-gpu-memory-fraction", "free-gpu-memory-fraction")
    )
    fraction = fraction if fraction is not None else float(constants.free_gpu_memory_fraction)
    if not 0 < fraction <= 1:
        raise UsageError(f"free_gpu_memory_fraction must be in (0, 1], got {fraction}")
    max_seq_len = common.setting_int(choice, "max-seq-len") or workload.context or spec.max_position_embeddings
    if max_seq_len is None:
        raise UsageError("the model does not state its maximum length; give --context")
    kv_name = workload.kv_dtype if workload.kv_dtype != "auto" else (common.setting(choice, "kv-cache-dtype") or "auto")
    return Settings(
        rules=version,
        tp=tp,
        pp=pp,
        free_gpu_memory_fraction=float(fraction),
        tokens_per_block=int(common.setting_int(choice, "tokens-per-block", default=constants.tokens_per_block)),
        max_num_tokens=int(common.setting_int(choice, "max-num-tokens", default=constants.max_num_tokens)),
        max_batch_size=int(common.setting_int(choice, "max-batch-size", default=constants.max_batch_size)),
        max_seq_len=int(max_seq_len),
        max_tokens=common.setting_int(choice, "max-tokens", "max-tokens-in-paged-kvcache"),
        kv_cache_dtype=common.canonical_kv_dtype(kv_name, spec.dtype),
        kv_bytes=common.kv_dtype_bytes(kv_name, spec.dtype_bytes()),
    )


def ffn_per_rank(spec: ModelSpec, tp: int) -> float:
    """The widest FFN activation per token on one rank: the dense intermediate, or for MoE the routed
    experts' intermediate times experts per token."""
    if spec.num_experts and spec.moe_intermediate_size and spec.experts_per_token:
        return spec.moe_intermediate_size * spec.experts_per_token / tp
    return (spec.intermediate_size or 4 * (spec.hidden_size or 0)) / tp


def activation_peak(spec: ModelSpec, settings: Settings, constants: TrtllmConstants) -> tuple[int, str]:
    """Approximation of the profiling run's torch peak above the weights (see the TOML for the source)."""
    hidden = spec.hidden_size or 0
    ffn = ffn_per_rank(spec, settings.tp)
    forward = settings.max_num_tokens * (
        constants.forward_bytes_per_ffn * ffn + constants.forward_bytes_per_hidden * hidden
    )
    moe = bool(spec.num_experts)
    if moe:
        forward *= constants.moe_activation_factor
    requests = math.ceil(settings.max_num_tokens / max(1, min(settings.max_num_tokens, settings.max_seq_len)))
    logits = requests * (spec.vocab_size or 0) * constants.logits_bytes
    text = (
        f"[approximation] dummy context run of max_num_tokens {settings.max_num_tokens}: {settings.max_num_tokens} × "
        f"({constants.forward_bytes_per_ffn:g} × ffn/rank {ffn:.0f} + {constants.forward_bytes_per_hidden:g} × hidden {hidden}) B"
        + (f" × {constants.moe_activation_factor} (MoE)" if moe else "")
        + f" + logits of {requests} request(s); TRT-LLM measures this peak, hfvram borrows vLLM's fitted forward term"
    )
    return int(forward + logits), text


@dataclass(frozen=True)
class PoolTerm:
    """The KV pool on one GPU: ``(memory − peak) × free_gpu_memory_fraction`` (capped by ``max_tokens``)."""

    memory: int
    pool: float
    tokens: int


@dataclass(frozen=True)
class Breakdown:
    settings: Settings
    context: int
    weights: common.WeightsSplit
    activations: int
    activations_text: str
    cuda_context_gib: float
    tp_comm_gib: float | None
    per_token: float
    fixed: float
    pool: PoolTerm | None
    blocks: int
    capacity: Capacity
    decode_modelled: bool
    decode: float | None

    @property
    def overhead(self) -> int:
        return overhead_bytes(self.cuda_context_gib, self.tp_comm_gib)

    @property
    def peak(self) -> int:
        return self.weights.bytes + self.activations + self.overhead

    @property
    def per_sequence(self) -> float:
        return self.blocks * self.settings.tokens_per_block * self.per_token + self.fixed

    @property
    def refused(self) -> bool:
        return self.pool is not None and (self.pool.memory <= self.peak or self.pool.tokens <= 0)


def overhead_bytes(cuda_context_gib: float, tp_comm_gib: float | None) -> int:
    """CUDA context plus communication buffers (None: one GPU): non-torch memory inside the measured peak."""
    return int(cuda_context_gib * GiB + (tp_comm_gib * GiB if tp_comm_gib is not None else 0))


def compute(
    spec: ModelSpec, hardware: Hardware | None, settings: Settings, workload: Workload, constants: TrtllmConstants
) -> Breakdown:
    """Every term for ``settings``: weights, the profiling peak, KV per token and per sequence, the pool."""
    context = workload.context or settings.max_seq_len
    split = common.weights_per_rank(spec, settings.tp, settings.pp, vocab_padding=constants.vocab_padding)
    activations, activations_text = activation_peak(spec, settings, constants)
    tp_comm = constants.tp_comm_gib if settings.tp * settings.pp > 1 else None
    layers = common.worst_stage_layers(spec, settings.pp)
    per_token = common.kv_bytes_per_token_rank(layers, settings.tp, settings.kv_bytes)
    fixed = common.kv_fixed_bytes_rank(layers, settings.tp, settings.kv_bytes, context, spec.dtype_bytes())
    if per_token <= 0 and fixed <= 0:
        raise UsageError("the model has no KV cache layers hfvram can size for TensorRT-LLM")
    peak = split.bytes + activations + overhead_bytes(constants.cuda_context_gib, tp_comm)
    pool = pool_term(hardware.gpu.gpu_memory_bytes, peak, per_token, fixed, settings) if hardware is not None else None
    blocks = math.ceil(context / settings.tokens_per_block)
    per_sequence = blocks * settings.tokens_per_block * per_token + fixed
    active = common.active_weight_bytes(spec)
    decode = None
    if hardware is not None and active is not None:
        bytes_read = active / settings.tp + per_token * context + fixed
        decode = common.decode_tokens_per_second(bytes_read, hardware.gpu.memory_bandwidth_gbs)
    return Breakdown(
        settings=settings,
        context=context,
        weights=split,
        activations=activations,
        activations_text=activations_text,
        cuda_context_gib=constants.cuda_context_gib,
        tp_comm_gib=tp_comm,
        per_token=per_token,
        fixed=fixed,
        pool=pool,
        blocks=blocks,
        capacity=capacity_of(pool, per_sequence, per_token, fixed, workload.concurrency, settings),
        decode_modelled=hardware is not None and active is not None,
        decode=decode,
    )


def pool_term(memory: int, peak: int, per_token: float, fixed: float, settings: Settings) -> PoolTerm:
    pool = max(0.0, (memory - peak) * settings.free_gpu_memory_fraction)
    if settings.max_tokens is not None and per_token > 0:
        pool = min(pool, settings.max_tokens * per_token)
    unit = per_token if per_token > 0 else fixed
    tokens = int(pool // unit) // settings.tokens_per_block * settings.tokens_per_block
    return PoolTerm(memory, pool, tokens)


def capacity_of(
    pool: PoolTerm | None, per_sequence: float, per_token: float, fixed: float, concurrency: int, settings: Settings
) -> Capacity:
    """Pool tokens, full-length requests (≤ max_batch_size) and the longest context at ``concurrency``."""
    if pool is None:
        return Capacity()
    sequences = min(pool.pool / per_sequence if per_sequence else 0.0, float(settings.max_batch_size))
    max_context = common.max_context_linear(pool.pool, concurrency, per_token, fixed, settings.max_seq_len)
    return Capacity(
        kv_tokens=pool.tokens,
        max_concurrency=sequences,
        max_context=max_context // settings.tokens_per_block * settings.tokens_per_block,
    )


def narrate(
    parts: Breakdown, spec: ModelSpec, choice: EngineChoice, workload: Workload
) -> tuple[list[str], dict[str, str]]:
    """(warnings, explain lines), every figure read from the breakdown."""
    settings, pool = parts.settings, parts.pool
    warnings = []
    if choice.version:
        warnings.append(f"TensorRT-LLM rules are not versioned in hfvram; {choice.version} uses the current rules")
    if parts.context > settings.max_seq_len:
        warnings.append(f"context {parts.context} is longer than max_seq_len {settings.max_seq_len}")
    if any(layer.kind in WINDOWED_KINDS for layer in spec.layers):
        warnings.append("sliding-window layers counted at their window (TRT-LLM variable-window KV cache) [unverified]")
    if any(layer.kind in RECURRENT_KINDS for layer in spec.layers):
        warnings.append("recurrent state counted per request; TRT-LLM's Mamba cache sizing was not read [unverified]")
    if parts.refused:
        warnings.append("TensorRT-LLM's profiling peak leaves no memory for the KV cache")
    explain = {
        "weights": parts.weights.explain,
        "activations": parts.activations_text,
        "overhead": (
            f"CUDA context {parts.cuda_context_gib} GiB"
            + (
                f" + communication buffers {parts.tp_comm_gib} GiB [unverified]"
                if parts.tp_comm_gib is not None
                else ""
            )
            + ": non-torch memory inside TRT-LLM's measured peak"
        ),
    }
    if pool is not None:
        fraction = settings.free_gpu_memory_fraction
        explain["budget"] = (
            f"(memory {pool.memory / GiB:.2f} GiB − peak {parts.peak / GiB:.2f} GiB) × free_gpu_memory_fraction "
            f"{fraction} = {pool.pool / GiB:.2f} GiB of KV → {pool.tokens} tokens "
            f"(blocks of {settings.tokens_per_block}); the other {1 - fraction:.2f} stays free"
        )
    explain["kv_cache"] = (
        f"{workload.concurrency} × ({parts.blocks} blocks × {settings.tokens_per_block} tokens × {parts.per_token:.0f} B"
        + (f" + {parts.fixed:.0f} B windowed/state" if parts.fixed else "")
        + f") at {settings.kv_cache_dtype} on the worst rank"
    )
    if parts.decode_modelled:
        explain["decode"] = "upper bound: bandwidth / (active weights per GPU + KV at the context), one sequence"
    return warnings, explain


class TrtllmProfile(StagedProfile[TrtllmConstants, Settings, Breakdown]):
    name = ENGINE
    fallback_versions = ("1.0",)
    constants_type = TrtllmConstants
    # the rules are not versioned: the newest always applies (narrate() says so when a release is asked)
    unversioned = True

    def resolve(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: TrtllmConstants,
        version: str,
    ) -> Settings:
        return resolve_settings(spec, hardware, choice, workload, constants, version)

    def breakdown(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: TrtllmConstants,
        settings: Settings,
    ) -> Breakdown:
        return compute(spec, hardware, settings, workload, constants)

    def terms(self, parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, workload: Workload) -> Terms:
        pool = parts.pool
        per_gpu = PerGpu(
            weights=parts.weights.bytes,
            kv_cache=int(workload.concurrency * parts.per_sequence),
            activations=parts.activations,
            overhead=parts.overhead,
            usable=int(parts.peak + pool.pool) if pool is not None else 0,
            memory=pool.memory if pool is not None else 0,
        )
        return Terms(
            per_gpu=per_gpu,
            capacity=parts.capacity,
            decode=parts.decode,
            context=parts.context,
            kv_dtype=parts.settings.kv_cache_dtype,
            tp=parts.settings.tp,
            pp=parts.settings.pp,
            refused=parts.refused,
        )

    def narrate(
        self, parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Narration:
        warnings, explain = narrate(parts, spec, choice, workload)
        return Narration(tuple(warnings), explain)

    def report(self, parts: Breakdown, choice: EngineChoice, version: str) -> dict[str, object]:
        return engine_report(parts, choice)


def engine_report(parts: Breakdown, choice: EngineChoice) -> dict[str, object]:
    """The settings the estimate assumed, under TensorRT-LLM's names (``Estimate.engine``)."""
    settings, pool = parts.settings, parts.pool
    return {
        "name": ENGINE,
        "version": settings.rules,
        "requested_version": choice.version,
        "backend": "pytorch",
        "gpu_util": settings.free_gpu_memory_fraction,
        "free_gpu_memory_fraction": settings.free_gpu_memory_fraction,
        "tokens_per_block": settings.tokens_per_block,
        "max_num_tokens": settings.max_num_tokens,
        "max_batch_size": settings.max_batch_size,
        "max_seq_len": settings.max_seq_len,
        "max_tokens": settings.max_tokens,
        "kv_cache_dtype": settings.kv_cache_dtype,
        "kv_bytes_per_token": parts.per_token,
        "peak_bytes": parts.peak,
        "kv_pool_bytes": int(pool.pool) if pool is not None else None,
        "tp_size": settings.tp,
        "pp_size": settings.pp,
    }


PROFILE = TrtllmProfile()
