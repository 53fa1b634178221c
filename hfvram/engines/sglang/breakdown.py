"""The breakdown, arithmetic only: every term on the worst GPU for the settings (weights, overhead, cell size,
token pool, the slack outside the static fraction and the req_to_token table in it, what the workload needs and the
decode bound) as a typed :class:`Breakdown`, before any text is written."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hfvram.engines.sglang.constants import SglangConstants
from hfvram.engines.sglang.pool import (
    CellSize,
    _capacity,
    _window,
    cell_size,
    mamba_split,
    max_running_requests,
    pool_bytes_needed,
    req_to_token_bytes,
    swa_chunk_cap,
    token_pool,
)
from hfvram.engines.sglang.settings import Settings, _is_mla, reserved_mib
from hfvram.engines.vllm import features
from hfvram.estimate import common, multimodal
from hfvram.estimate.common import GiB, MiB
from hfvram.estimate.types import Capacity, Hardware, Workload
from hfvram.spec import ModelSpec


@dataclass(frozen=True)
class PoolTerm:
    """The token pool on the worst rank when a GPU is given (docs/engines/sglang.md#sglang-mem-fraction, docs/engines/sglang.md#sglang-mamba-state)."""

    pre_load_free: float
    rest: float
    tokens: int
    #: hybrid linear attention: the mamba budget (bytes), the request states it holds, the running cap
    mamba_budget: float | None = None
    mamba_size: int | None = None
    mamba_cap: int | None = None


@dataclass(frozen=True)
class Breakdown:
    """Every term on the worst GPU, before any text is written."""

    settings: Settings
    context: int
    weights: common.WeightsSplit
    #: CUDA context and (with TP×PP > 1) NCCL init, in GiB as the TOML states them
    cuda_context_gib: float
    nccl_init_gib: float | None
    cell: CellSize
    pool: PoolTerm | None
    #: without a GPU: SGLang's own reserve estimate, written out
    reserve_text: str | None
    slack: float
    running: int | None
    table: int
    req_to_token_extra_tokens: int
    req_to_token_bytes: int
    window: int | None
    kv_needed: int
    capacity: Capacity
    decode_modelled: bool
    decode: float | None
    #: what the workload's requests need of the pool (``kv_needed`` before the clamp below)
    needed: int = 0
    #: SGLang's longest request, min(context_len − 1, max_total_num_tokens − 1) (None without a GPU)
    max_req_len: int | None = None
    #: the start condition (sglang.md#sglang-start): a positive pool whose max_req_input_len is positive
    starts: bool = True
    #: with SGLang's own context (no --context), one full-length request does not fit the pool: SGLang starts and
    #: clamps requests to max_req_len, so the pool itself is what the server holds (kv_needed = the pool)
    clamped: bool = False
    #: the SWA pool cap applies but is not modelled (speculative decoding; sglang.md#sglang-swa-chunk-cap)
    swa_cap_note: str | None = None

    @property
    def overhead(self) -> int:
        return overhead_bytes(self.cuda_context_gib, self.nccl_init_gib)

    @property
    def no_cache(self) -> bool:
        """A model that keeps nothing per sequence (encoder-only, attention-free) needs no token pool to start."""
        return self.cell.cell <= 0 and self.cell.state_bytes_per_request <= 0

    @property
    def tokens(self) -> int | None:
        return self.pool.tokens if self.pool is not None else None

    @property
    def refused(self) -> bool:
        return self.pool is not None and not self.starts and not self.no_cache

    @property
    def pool_bytes(self) -> float:
        return allocated_pool_bytes(self.pool, self.cell)

    @property
    def requests_short(self) -> bool:
        """The requests asked about (``--context`` × concurrency) do not fit the pool SGLang allocates: it starts,
        but refuses them (the verdict for that workload is does_not_fit)."""
        return (
            self.pool is not None
            and self.starts
            and not self.no_cache
            and not self.clamped
            and self.needed > self.pool_bytes
        )


def allocated_pool_bytes(pool: PoolTerm | None, cell: CellSize) -> float:
    """The pool SGLang allocates, as ``pool_bytes_needed`` counts it: max_total_num_tokens cells (after
    ``--max-total-tokens``) plus the mamba share of hybrid linear attention."""
    if pool is None:
        return 0.0
    return pool.tokens * cell.cell + cell.swa_fixed_bytes + (pool.mamba_budget or 0.0)


def overhead_bytes(cuda_context_gib: float, nccl_init_gib: float | None) -> int:
    """CUDA context plus NCCL init (None: a single GPU), taken before SGLang's baseline."""
    return int(cuda_context_gib * GiB + (nccl_init_gib * GiB if nccl_init_gib is not None else 0))


def weights_split(spec: ModelSpec, settings: Settings, constants: SglangConstants) -> common.WeightsSplit:
    """Weights on the worst rank: the TP / PP split with vocab padding, MLA's ``fused_qkv_a_proj_with_mqa``
    (``ReplicatedLinear``) whole on every rank (sglang.md#sglang-parallelism), and an encoder tower SGLang builds
    from transformers modules (sglang.md#sglang-multimodal)."""
    replicated = common.mla_replicated_bytes(spec, settings.tp)
    kept = {"attention": float(replicated)} if replicated else {}
    tower = multimodal.tower_placement(spec, "sglang", settings.tp, multimodal.MultimodalSettings())
    if tower.replicated_bytes:
        kept["vision"] = tower.replicated_bytes
    return common.weights_per_rank(
        spec,
        settings.tp,
        settings.pp,
        vocab_padding=constants.vocab_padding,
        replicated=kept or None,
    )


def feature_weights(spec: ModelSpec, settings: Settings, split: common.WeightsSplit) -> common.WeightsSplit:
    """The split less ``--cpu-offload-gb`` (OffloaderV1 moves whole decoder-layer parameters, as vLLM's
    UVAOffloader) plus the LoRA pool, which ``init_lora_manager`` allocates before the KV pool is sized
    (docs/engines/sglang.md#sglang-features)."""
    weights, notes = split.bytes, []
    if settings.cpu_offload_gb:
        moved, _ = features.offloaded_bytes(split.by_component, settings.pp, settings.cpu_offload_gb)
        weights -= moved
        notes.append(f"cpu-offload-gb {settings.cpu_offload_gb}: {moved / GiB:.2f} GiB of decoder layers on the host")
    if settings.lora is not None:
        layers = common.worst_stage_layers(spec, settings.pp)
        lora = features.lora_term(spec, settings.lora, settings.tp, layers, 0, None, engine="sglang")
        weights += lora.bytes
        notes.append(
            f"+{lora.bytes / GiB:.3f} GiB LoRA pool ({settings.lora.max_loras} slots of rank "
            f"{settings.lora.max_lora_rank}: "
            + ", ".join(f"{name} {size / GiB:.3f} GiB" for name, size in lora.parts)
            + ")"
        )
        notes.extend(lora.warnings)
    if not notes:
        return split
    return replace(split, bytes=weights, explain=split.explain + "; " + "; ".join(notes))


def pool_cell(
    spec: ModelSpec, settings: Settings, constants: SglangConstants
) -> tuple[CellSize, int | None, str | None]:
    """The cell size on the worst rank, the sliding window, and the SWA cap's note: the SWA pool capped with the
    chunk cache where the rule set and the settings say so (sglang.md#sglang-swa-chunk-cap)."""
    cell = cell_size(
        spec, settings.tp, settings.pp, settings.kv_bytes, settings.swa_full_tokens_ratio, settings.hybrid_swa_memory
    )
    window = _window(spec)
    cell, note = swa_chunk_cap(cell, window, settings, constants)
    return cell, window, note


def compute(
    spec: ModelSpec, hardware: Hardware | None, settings: Settings, workload: Workload, constants: SglangConstants
) -> Breakdown:
    """Every term for ``settings``: weights, overhead, cell size, token pool, the slack outside the static
    fraction and the req_to_token table in it, what the workload needs and the decode bound."""
    context = workload.context or settings.context_length
    split = feature_weights(spec, settings, weights_split(spec, settings, constants))
    cuda_context_gib = constants.cuda_context_gib
    nccl_init_gib = constants.nccl_init_gib if settings.tp * settings.pp > 1 else None
    overhead = overhead_bytes(cuda_context_gib, nccl_init_gib)
    cell, window, swa_cap_note = pool_cell(spec, settings, constants)
    pool, slack, reserve_text = pool_and_slack(spec, hardware, overhead, split.bytes, cell, settings, constants)
    running = running_requests(settings.max_running_requests, pool, constants, settings.context_length)
    needed = pool_bytes_needed(
        cell, window, context, workload.concurrency, settings.page_size, settings.mamba_full_memory_ratio
    )
    start = start_condition(pool, settings, int(constants.max_req_input_margin))
    no_cache = cell.cell <= 0 and cell.state_bytes_per_request <= 0
    whole_pool = allocated_pool_bytes(pool, cell)
    clamped = bool(
        pool is not None and start[1] and not no_cache and settings.context_is_default and needed > whole_pool
    )
    active = common.active_weight_bytes(spec)
    decode = _decode_bound(active, hardware, settings.tp, cell.cell * context)
    return Breakdown(
        settings=settings,
        context=context,
        weights=split,
        cuda_context_gib=cuda_context_gib,
        nccl_init_gib=nccl_init_gib,
        cell=cell,
        pool=pool,
        reserve_text=reserve_text,
        slack=slack,
        running=running,
        table=req_to_token_bytes(constants, running or 0, settings.context_length),
        req_to_token_extra_tokens=int(constants.req_to_token_extra_tokens),
        req_to_token_bytes=int(constants.req_to_token_bytes),
        window=window,
        kv_needed=int(whole_pool if clamped else needed),
        needed=int(needed),
        max_req_len=start[0],
        starts=start[1],
        clamped=clamped,
        capacity=_capacity(
            pool.tokens if pool else None,
            cell,
            window,
            running,
            pool.mamba_size if pool else None,
            workload,
            settings,
            context,
        ),
        decode_modelled=hardware is not None and active is not None,
        decode=decode,
        swa_cap_note=swa_cap_note,
    )


def _decode_bound(active: int | None, hardware: Hardware | None, tp: int, kv_read: float) -> float | None:
    if hardware is None or active is None:
        return None
    return common.decode_tokens_per_second(active / tp + kv_read, hardware.gpu.memory_bandwidth_gbs)


def start_condition(pool: PoolTerm | None, settings: Settings, margin: int) -> tuple[int | None, bool]:
    """(max_req_len, starts): SGLang raises "Not enough memory" for a pool of no tokens and "Memory pool size is
    too small" unless ``max_req_len − margin > 0`` with ``max_req_len = min(context_len − 1, tokens − 1)``
    (sglang.md#sglang-start); any other pool starts, however short of one full-length request."""
    if pool is None:
        return None, True
    if pool.tokens <= 0:
        return 0, False
    max_req_len = min(settings.context_length - 1, pool.tokens - 1)
    return max_req_len, max_req_len - margin > 0


def pool_and_slack(
    spec: ModelSpec,
    hardware: Hardware | None,
    overhead: int,
    weights: int,
    cell: CellSize,
    settings: Settings,
    constants: SglangConstants,
) -> tuple[PoolTerm | None, float, str | None]:
    """(token pool, the slack outside mem_fraction_static, the reserve text without a GPU): with a GPU the slack
    is ``(1 − mfs)`` of the free memory before loading; without one, SGLang's own reserve estimate."""
    if hardware is not None:
        pool = pool_term(hardware.gpu.gpu_memory_bytes - overhead, weights, cell, settings, constants)
        slack = pool.pre_load_free * (1 - settings.mem_fraction_static)
        if settings.fraction_source == "given":
            # a fraction below SGLang's default leaves more outside the static pool than it uses: the server
            # starts with its pool sized from free memory, and only its own reserve is booked as activations
            # (sglang.md#sglang-mem-fraction); a fraction above the default leaves less, booked as it is
            reserved, _ = reserved_mib(
                constants,
                hardware.gpu.gpu_memory_bytes / MiB,
                settings.tp,
                settings.pp,
                settings.chunked_prefill_size,
                settings.cuda_graph_max_bs,
                _is_mla(spec),
            )
            slack = min(slack, reserved * MiB)
        return pool, slack, None
    reserved, reserve_text = reserved_mib(
        constants, 0, settings.tp, settings.pp, settings.chunked_prefill_size, settings.cuda_graph_max_bs, _is_mla(spec)
    )
    return None, reserved * MiB, reserve_text


def pool_term(pre: float, weights: int, cell: CellSize, settings: Settings, constants: SglangConstants) -> PoolTerm:
    """The pool from free memory before loading (``pre``) and the weights; with recurrent layers the mamba
    budget comes off the rest first (docs/engines/sglang.md#sglang-mamba-state); ``max-total-tokens`` caps the tokens."""
    post = pre - weights
    # a capped SWA pool is sized first and the full pool gets the rest (sglang.md#sglang-swa-chunk-cap)
    fixed = cell.swa_fixed_bytes
    tokens, rest = token_pool(pre, post, settings.mem_fraction_static, cell.cell, settings.page_size, fixed)
    mamba_budget = mamba_size = mamba_cap = None
    if cell.state_bytes_per_request > 0 and rest > 0:
        mamba_budget, mamba_size, mamba_cap = mamba_split(
            rest,
            settings.mamba_full_memory_ratio,
            cell.state_bytes_per_request,
            constants.mamba_cache_per_running_request,
        )
        tokens, rest = token_pool(
            pre, post, settings.mem_fraction_static, cell.cell, settings.page_size, mamba_budget + fixed
        )
    if settings.max_total_tokens is not None:
        tokens = min(tokens, settings.max_total_tokens)
    return PoolTerm(pre, rest, tokens, mamba_budget, mamba_size, mamba_cap)


def running_requests(
    given: int | None, pool: PoolTerm | None, constants: SglangConstants, context_length: int
) -> int | None:
    """max_running_requests: the user's, capped by the mamba pool and by ``resolve_max_num_reqs``."""
    running = given
    if pool is not None and pool.mamba_cap is not None:
        running = min(running, pool.mamba_cap) if running else pool.mamba_cap
    tokens = pool.tokens if pool is not None else None
    auto_running = max_running_requests(constants, tokens, context_length) if tokens else None
    return min(running, auto_running) if running and auto_running else (running or auto_running)
