"""LMDeploy (PyTorch engine and TurboMind): ``cache_max_entry_count`` of the free memory after weights.

Rules follow ``docs/engines/lmdeploy.md``; constants live in ``hfvram/engines/lmdeploy/rules.toml``. Per GPU:

    free     = memory − CUDA context (− NCCL) − weights                    (min over ranks)
    PyTorch: free −= state cache ((max_batches + 2) × recurrent state, hybrid models)
             runtime = (max_prefill_token_num + 2 × max_batches) × vocab × 2   (halved until ≥ 16 blocks fit)
             blocks  = floor((free − runtime) × cache_max_entry_count / block_bytes)
    TurboMind: cache = free × cache_max_entry_count

hfvram reports the memory LMDeploy leaves outside the KV cache (runtime + the other ``1 − ratio``) as the
activations term, the context as overhead and the whole device as usable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from hfvram.engines.contract import Constants, Narration, StagedProfile, Terms
from hfvram.errors import UsageError
from hfvram.estimate import common
from hfvram.estimate.common import GiB
from hfvram.estimate.types import Capacity, EngineChoice, Hardware, PerGpu, Workload
from hfvram.spec import GROWING_KINDS, RECURRENT_KINDS, WINDOWED_KINDS, Layer, LayerKind, ModelSpec

ENGINE = "lmdeploy"


@dataclass(frozen=True)
class LmdeployConstants(Constants):
    """The ``[defaults]`` and ``[versions]`` keys of ``rules.toml`` (each value's source is beside it there),
    checked when they load."""

    cache_max_entry_count: float
    block_size: int
    block_size_large_head: int
    large_head_dim: int
    max_prefill_token_num: int
    runtime_bytes_per_logit: int
    min_gpu_blocks: int
    state_cache_extra_slots: int
    quant_scale_zero_elems: int
    max_batch_size_default: int
    cache_of_total: bool
    cuda_context_gib: float
    nccl_init_gib: float
    #: quant_policy -> the KV dtype it stores
    quant_policy_kv: dict[str, str]
    #: a GPU-name fragment -> the default max batch size on it
    max_batch_size_by_gpu_name: dict[str, int]
    #: TurboMind's facts (the architectures it serves)
    turbomind: dict[str, Any]


@dataclass(frozen=True)
class Settings:
    rules: str
    backend: str
    tp: int
    cache_max_entry_count: float
    block_size: int
    session_len: int
    max_batch_size: int
    max_prefill_token_num: int
    quant_policy: int
    kv_cache_dtype: str


def kv_bytes_per_token_rank(
    layers: tuple[Layer, ...],
    tp: int,
    data_bytes: float,
    quantized: bool,
    model_dtype_bytes: float,
    scale_zero_elems: int,
) -> float:
    """K+V bytes per token on one rank over every attention layer (LMDeploy's PyTorch cache keeps every layer
    at full length; lmdeploy.md#lmdeploy-kv-quant and common.md#kv-dtype-sizes): data at the KV dtype plus, for INT4/INT8, scale+zero per token-head for K and V."""
    total = 0.0
    for layer in layers:
        if layer.kind not in GROWING_KINDS and layer.kind not in WINDOWED_KINDS:
            continue
        total += common.layer_kv_elems_per_token_rank(layer, tp) * data_bytes
        if quantized:
            heads = 1 if layer.kind is LayerKind.MLA else common.kv_heads_per_rank(layer.num_kv_heads, tp)
            total += 2 * heads * scale_zero_elems * model_dtype_bytes
    return total


def runtime_bytes(
    constants: LmdeployConstants, free: float, block_bytes: float, max_batches: int, vocab: int, ratio: float
) -> tuple[int, int]:
    """(runtime bytes, max_prefill_token_num after halving) — ``_get_runtime_size`` (lmdeploy.md#lmdeploy-pytorch)."""
    prefill = constants.max_prefill_token_num
    runtime = 0
    while prefill > 0:
        runtime = int((prefill + 2 * max_batches) * vocab * constants.runtime_bytes_per_logit)
        if block_bytes > 0 and int((free - runtime) * ratio) // block_bytes >= constants.min_gpu_blocks:
            break
        prefill //= 2
    return runtime, prefill


def default_max_batch_size(constants: LmdeployConstants, hardware: Hardware | None) -> int:
    """``get_max_batch_size('cuda')``: by a substring of the device name, else 128."""
    if hardware is not None:
        names = f"{hardware.gpu.id} {hardware.gpu.name}".lower()
        for key, size in constants.max_batch_size_by_gpu_name.items():
            if key in names:
                return int(size)
    return int(constants.max_batch_size_default)


def resolve_settings(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    constants: LmdeployConstants,
    version: str,
) -> Settings:
    tp, _ = common.resolve_parallel(choice, hardware, ("tp",), ())
    ratio = choice.gpu_util if choice.gpu_util is not None else common.setting_float(choice, "cache-max-entry-count")
    ratio = ratio if ratio is not None else float(constants.cache_max_entry_count)
    if not 0 < ratio < 1:
        raise UsageError(f"cache-max-entry-count must be in (0, 1) (a block count is no longer accepted), got {ratio}")
    backend = (common.setting(choice, "backend") or "auto").lower()
    if backend == "auto":
        backend = "turbomind" if spec.architecture in constants.turbomind["architectures"] else "pytorch"
    if backend not in ("turbomind", "pytorch"):
        raise UsageError(f"LMDeploy backend must be turbomind, pytorch or auto, got {backend!r}")
    policy = common.setting_int(choice, "quant-policy", default=0)
    if workload.kv_dtype != "auto":
        kv_name = workload.kv_dtype
    elif str(policy) in constants.quant_policy_kv:
        kv_name = constants.quant_policy_kv[str(policy)]
    else:
        modelled = ", ".join(constants.quant_policy_kv)
        raise UsageError(f"quant-policy {policy} is not modelled ({modelled})")
    head_dim = spec.head_dim or 0
    block = common.setting_int(choice, "cache-block-seq-len", "block-size", default=constants.block_size)
    if backend == "pytorch" and head_dim >= constants.large_head_dim:
        block = min(block, constants.block_size_large_head)
    session = common.setting_int(choice, "session-len") or workload.context or spec.max_position_embeddings
    if session is None:
        raise UsageError("the model does not state its maximum length; give --context")
    return Settings(
        rules=version,
        backend=backend,
        tp=tp,
        cache_max_entry_count=float(ratio),
        block_size=int(block),
        session_len=int(session),
        max_batch_size=int(
            common.setting_int(choice, "max-batch-size", default=default_max_batch_size(constants, hardware))
        ),
        max_prefill_token_num=int(
            common.setting_int(choice, "max-prefill-token-num", default=constants.max_prefill_token_num)
        ),
        quant_policy=int(policy),
        kv_cache_dtype=common.canonical_kv_dtype(kv_name, spec.dtype),
    )


# ---- the breakdown ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheTerm:
    """One rank's cache geometry: bytes per token and per block, and the recurrent state cache (PyTorch)."""

    per_token: float
    block_bytes: float
    quantized: bool
    state_cache: int


@dataclass(frozen=True)
class PoolTerm:
    """The KV cache LMDeploy allocates on one GPU (hardware given), and what it leaves outside it."""

    free: float
    pool: float
    slack: float
    blocks: int
    #: PyTorch engine: runtime buffers and the prefill tokens they were sized for (0 / None otherwise)
    runtime: int = 0
    prefill: int | None = None


@dataclass(frozen=True)
class Breakdown:
    settings: Settings
    context: int
    weights: common.WeightsSplit
    cuda_context_gib: float
    nccl_init_gib: float | None
    cache: CacheTerm
    pool: PoolTerm | None
    runtime_bytes_per_logit: float
    blocks_per_seq: int
    kv_needed: int
    capacity: Capacity
    #: KV head counts that do not divide by tp (LMDeploy asserts they do)
    kv_heads: tuple[int, ...]
    heads_refused: bool
    decode_modelled: bool
    decode: float | None

    @property
    def overhead(self) -> int:
        return overhead_bytes(self.cuda_context_gib, self.nccl_init_gib)

    @property
    def no_memory(self) -> bool:
        """No memory is left for the cache (a model that keeps nothing per sequence needs no blocks)."""
        pool, cache = self.pool, self.cache
        return pool is not None and (
            pool.free <= 0 or (pool.blocks <= 0 and (cache.block_bytes > 0 or cache.state_cache > 0))
        )

    @property
    def refused(self) -> bool:
        return self.pool is not None and (self.heads_refused or self.no_memory)


def overhead_bytes(cuda_context_gib: float, nccl_init_gib: float | None) -> int:
    """CUDA context plus NCCL (None: one GPU), in use before LMDeploy measures free memory."""
    return int(cuda_context_gib * GiB + (nccl_init_gib * GiB if nccl_init_gib is not None else 0))


def cache_term(spec: ModelSpec, settings: Settings, constants: LmdeployConstants) -> CacheTerm:
    """Bytes per token and per block on one rank (docs/engines/lmdeploy.md, docs/engines/common.md#kv-dtype-sizes), with the PyTorch engine's state cache of
    ``(max_batch_size + state_cache_extra_slots)`` recurrent states."""
    quantized = settings.quant_policy in (4, 8) or settings.kv_cache_dtype in ("int4", "int8")
    kv_bytes = common.kv_dtype_bytes(settings.kv_cache_dtype, spec.dtype_bytes())
    per_token = kv_bytes_per_token_rank(
        spec.layers, settings.tp, kv_bytes, quantized, spec.dtype_bytes(), constants.quant_scale_zero_elems
    )
    state = sum(
        common.layer_state_bytes_rank(layer, settings.tp, spec.dtype_bytes())
        for layer in spec.layers
        if layer.kind in RECURRENT_KINDS
    )
    state_cache = (
        int(state * (settings.max_batch_size + constants.state_cache_extra_slots))
        if settings.backend == "pytorch"
        else 0
    )
    return CacheTerm(per_token, per_token * settings.block_size, quantized, state_cache)


def pool_term(
    memory: int,
    overhead: int,
    weights: int,
    cache: CacheTerm,
    settings: Settings,
    vocab: int,
    constants: LmdeployConstants,
) -> PoolTerm:
    """The KV cache from the free memory after weights: a share of the whole device (v0.2.0), of the free
    memory less the PyTorch engine's runtime buffers, or of the free memory (TurboMind)."""
    free = memory - overhead - weights - cache.state_cache
    ratio = settings.cache_max_entry_count
    runtime, prefill = 0, None
    if constants.cache_of_total:
        pool = memory * ratio
        slack = max(0.0, free - pool)
    elif settings.backend == "pytorch":
        runtime, prefill = runtime_bytes(constants, free, cache.block_bytes, settings.max_batch_size, vocab, ratio)
        pool = max(0.0, (free - runtime) * ratio)
        slack = runtime + max(0.0, (free - runtime) * (1 - ratio))
    else:
        pool = max(0.0, free * ratio)
        slack = max(0.0, free * (1 - ratio))
    blocks = int(pool // cache.block_bytes) if cache.block_bytes > 0 else 0
    return PoolTerm(free, pool, slack, blocks, runtime, prefill)


def compute(
    spec: ModelSpec, hardware: Hardware | None, settings: Settings, workload: Workload, constants: LmdeployConstants
) -> Breakdown:
    """Every term for ``settings``: weights, overhead, cache geometry, the pool, what the workload needs."""
    context = workload.context or settings.session_len
    kv_heads = {layer.num_kv_heads for layer in spec.layers if layer.kind in (LayerKind.FULL, LayerKind.SLIDING)}
    split = common.weights_per_rank(spec, settings.tp, 1, vocab_padding=1)
    nccl = constants.nccl_init_gib if settings.tp > 1 else None
    overhead = overhead_bytes(constants.cuda_context_gib, nccl)
    cache = cache_term(spec, settings, constants)
    pool = None
    if hardware is not None:
        pool = pool_term(
            hardware.gpu.gpu_memory_bytes, overhead, split.bytes, cache, settings, spec.vocab_size or 0, constants
        )
    blocks_per_seq = math.ceil(context / settings.block_size)
    active = common.active_weight_bytes(spec)
    decode = None
    if hardware is not None and active is not None:
        bytes_read = active / settings.tp + cache.per_token * context
        decode = common.decode_tokens_per_second(bytes_read, hardware.gpu.memory_bandwidth_gbs)
    return Breakdown(
        settings=settings,
        context=context,
        weights=split,
        cuda_context_gib=constants.cuda_context_gib,
        nccl_init_gib=nccl,
        cache=cache,
        pool=pool,
        runtime_bytes_per_logit=constants.runtime_bytes_per_logit,
        blocks_per_seq=blocks_per_seq,
        kv_needed=int(workload.concurrency * blocks_per_seq * cache.block_bytes + cache.state_cache),
        capacity=capacity_of(pool, blocks_per_seq, workload.concurrency, settings),
        kv_heads=tuple(sorted(kv_heads)),
        heads_refused=any(heads % settings.tp for heads in kv_heads if heads),
        decode_modelled=hardware is not None and active is not None,
        decode=decode,
    )


def capacity_of(pool: PoolTerm | None, blocks_per_seq: int, concurrency: int, settings: Settings) -> Capacity:
    """Cache tokens, full-length sequences (≤ max_batch_size) and the longest context at ``concurrency``."""
    if pool is None:
        return Capacity()
    blocks = pool.blocks
    sequences = min(blocks / blocks_per_seq, float(settings.max_batch_size)) if blocks_per_seq else 0.0
    max_context = min(blocks // max(1, concurrency) * settings.block_size, settings.session_len)
    return Capacity(
        kv_tokens=blocks * settings.block_size,
        max_concurrency=sequences,
        max_context=0 if concurrency > settings.max_batch_size else max_context,
    )


# ---- narration --------------------------------------------------------------------------------------------


def narrate(parts: Breakdown, spec: ModelSpec, workload: Workload) -> tuple[list[str], dict[str, str]]:
    """(warnings, explain lines), every figure read from the breakdown."""
    settings, cache, pool = parts.settings, parts.cache, parts.pool
    warnings = []
    if parts.context > settings.session_len:
        warnings.append(f"context {parts.context} is longer than session_len {settings.session_len}")
    if parts.heads_refused:
        warnings.append(f"LMDeploy asserts that the KV heads ({list(parts.kv_heads)}) divide by tp={settings.tp}")
    if any(layer.kind in WINDOWED_KINDS for layer in spec.layers):
        warnings.append("LMDeploy's paged cache keeps sliding-window layers at full length here [unverified]")
    if parts.no_memory:
        warnings.append("no memory is left for LMDeploy's KV cache after the weights")

    explain = {
        "weights": parts.weights.explain,
        "overhead": (
            f"CUDA context {parts.cuda_context_gib} GiB"
            + (f" + NCCL {parts.nccl_init_gib} GiB [unverified]" if parts.nccl_init_gib is not None else "")
            + ", in use before LMDeploy measures free memory"
        ),
        "cache_block": (
            f"{cache.block_bytes:.0f} B per block of {settings.block_size} tokens ({settings.kv_cache_dtype}"
            + (", + scale/zero per token-head" if cache.quantized else "")
            + ")"
        ),
    }
    if pool is not None and pool.prefill is not None:
        explain["runtime"] = (
            f"({pool.prefill} prefill tokens + 2 × {settings.max_batch_size} batches) × vocab "
            f"{spec.vocab_size} × {parts.runtime_bytes_per_logit:g} B = {pool.runtime / GiB:.2f} GiB "
            "(LMDeploy's _get_runtime_size)"
        )
    explain["budget"] = explain_budget(parts)
    explain["activations"] = (
        "what LMDeploy leaves outside the KV cache: "
        + ("runtime buffers + " if settings.backend == "pytorch" else "")
        + f"the other {1 - settings.cache_max_entry_count:.2f} of the free memory (activations)"
    )
    explain["kv_cache"] = f"{workload.concurrency} × {parts.blocks_per_seq} blocks × {cache.block_bytes:.0f} B" + (
        f" + state cache {cache.state_cache} B" if cache.state_cache else ""
    )
    if parts.decode_modelled:
        explain["decode"] = "upper bound: bandwidth / (active weights per GPU + KV at the context), one sequence"
    return warnings, explain


def explain_budget(parts: Breakdown) -> str:
    settings, pool, state_cache = parts.settings, parts.pool, parts.cache.state_cache
    if pool is None:
        return "no GPU: the KV share and the slack are fractions of an unknown free memory"
    free, also = pool.free, " and state cache" if state_cache else ""
    return (
        f"{settings.backend}: "
        + (
            f"free after weights{also} {free / GiB:.2f} GiB"
            if free >= 0
            else f"weights{also} exceed the free memory by {-free / GiB:.2f} GiB (no cache possible)"
        )
        + (f" (state cache {state_cache / GiB:.2f} GiB)" if state_cache else "")
        + (f" − runtime {pool.runtime / GiB:.2f} GiB" if pool.runtime else "")
        + (
            f", × cache_max_entry_count {settings.cache_max_entry_count} = {pool.pool / GiB:.2f} GiB → {pool.blocks} blocks"
            if free >= 0
            else ""
        )
    )


# ---- profile -----------------------------------------------------------------------------------------------


class LmdeployProfile(StagedProfile[LmdeployConstants, Settings, Breakdown]):
    name = ENGINE
    constants_type = LmdeployConstants

    def resolve(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: LmdeployConstants,
        version: str,
    ) -> Settings:
        return resolve_settings(spec, hardware, choice, workload, constants, version)

    def breakdown(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: LmdeployConstants,
        settings: Settings,
    ) -> Breakdown:
        # the runtime buffers are sized by the prefill length in force (a --set value replaces the default)
        constants = replace(constants, max_prefill_token_num=settings.max_prefill_token_num)
        return compute(spec, hardware, settings, workload, constants)

    def terms(self, parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, workload: Workload) -> Terms:
        memory = hardware.gpu.gpu_memory_bytes if hardware else 0
        pool = parts.pool
        per_gpu = PerGpu(
            weights=parts.weights.bytes,
            kv_cache=parts.kv_needed,
            activations=int(pool.slack if pool else 0.0),
            overhead=parts.overhead,
            usable=memory,
            memory=memory,
        )
        return Terms(
            per_gpu=per_gpu,
            capacity=parts.capacity,
            decode=parts.decode,
            context=parts.context,
            kv_dtype=parts.settings.kv_cache_dtype,
            tp=parts.settings.tp,
            pp=1,
            refused=parts.refused,
        )

    def narrate(
        self, parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Narration:
        warnings, explain = narrate(parts, spec, workload)
        return Narration(tuple(warnings), explain)

    def report(self, parts: Breakdown, choice: EngineChoice, version: str) -> dict[str, object]:
        return engine_report(parts, choice)


def engine_report(parts: Breakdown, choice: EngineChoice) -> dict[str, object]:
    """The settings the estimate assumed, under LMDeploy's names (``Estimate.engine``)."""
    settings, pool = parts.settings, parts.pool
    return {
        "name": ENGINE,
        "version": settings.rules,
        "requested_version": choice.version,
        "backend": settings.backend,
        "gpu_util": settings.cache_max_entry_count,
        "cache_max_entry_count": settings.cache_max_entry_count,
        "block_size": settings.block_size,
        "session_len": settings.session_len,
        "max_batch_size": settings.max_batch_size,
        "max_prefill_token_num": settings.max_prefill_token_num,
        "quant_policy": settings.quant_policy,
        "kv_cache_dtype": settings.kv_cache_dtype,
        "num_gpu_blocks": pool.blocks if pool else None,
        "runtime_bytes": pool.runtime if pool else 0,
        "state_cache_bytes": parts.cache.state_cache,
        "tp": settings.tp,
    }


PROFILE = LmdeployProfile()
