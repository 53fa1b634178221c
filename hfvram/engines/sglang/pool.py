"""SGLang's token pool on one rank: bytes per token (``cell_size``), the tokens free memory holds, the mamba share
of hybrid linear attention, the request caps, what a workload needs of the pool and what the pool holds
(docs/engines/sglang.md#sglang-token-pool, docs/engines/sglang.md#sglang-mamba-state)."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

from hfvram.engines.sglang.constants import SglangConstants
from hfvram.engines.sglang.settings import Settings
from hfvram.estimate import common
from hfvram.estimate.types import Capacity, Workload
from hfvram.spec import GROWING_KINDS, RECURRENT_KINDS, WINDOWED_KINDS, Layer, LayerKind, ModelSpec


@dataclass(frozen=True)
class CellSize:
    """Bytes per token of the pool on one rank (sglang.md#sglang-token-pool), split by what they serve."""

    full_bytes: float  # full-attention / MLA layers
    swa_bytes: float  # sliding / chunked layers (stored at swa_full_tokens_ratio of the tokens)
    swa_ratio: float
    #: recurrent state per request on one rank (hybrid linear attention / Mamba, sglang.md#sglang-mamba-state)
    state_bytes_per_request: float
    #: the SWA pool's fixed size in tokens when it is capped with the chunk cache (0: sized by the ratio;
    #: sglang.md#sglang-swa-chunk-cap)
    swa_cap_tokens: int = 0

    @property
    def cell(self) -> float:
        """SGLang's ``cell_size``: full layers plus the SWA layers scaled by their share of the tokens; with the
        SWA pool capped, the full layers only (the SWA pool is the fixed ``swa_fixed_bytes``)."""
        if self.swa_cap_tokens:
            return self.full_bytes
        return self.full_bytes + self.swa_ratio * self.swa_bytes

    @property
    def swa_fixed_bytes(self) -> float:
        """Bytes of a capped SWA pool, taken off the budget before the full pool is sized."""
        return self.swa_cap_tokens * self.swa_bytes

    @property
    def hybrid_swa(self) -> bool:
        return self.swa_bytes > 0 and self.full_bytes > 0


def kv_elems_of(layers: Iterable[Layer], tp: int, kinds: Collection[LayerKind]) -> int:
    """K+V elements per token on one rank over the layers of ``kinds``."""
    return sum(common.layer_kv_elems_per_token_rank(layer, tp) for layer in layers if layer.kind in kinds)


def cell_size(spec: ModelSpec, tp: int, pp: int, kv_bytes: float, swa_ratio: float, hybrid_swa: bool) -> CellSize:
    """Bytes per token on the worst rank (sglang.md#sglang-token-pool): MHA/GQA heads per rank × (k + v), MLA latent whole on every
    rank, SWA layers at ``swa_full_tokens_ratio``; recurrent layers hold a per-request state instead."""
    layers = common.worst_stage_layers(spec, pp)
    full = kv_elems_of(layers, tp, GROWING_KINDS) * kv_bytes
    swa = kv_elems_of(layers, tp, WINDOWED_KINDS) * kv_bytes
    state = sum(
        common.layer_state_bytes_rank(layer, tp, spec.dtype_bytes())
        for layer in layers
        if layer.kind in RECURRENT_KINDS
    )
    if not hybrid_swa or full == 0:  # hybrid SWA memory off (or a pure-SWA model): SWA layers keep every token
        return CellSize(full_bytes=full + swa, swa_bytes=0.0, swa_ratio=swa_ratio, state_bytes_per_request=state)
    return CellSize(full_bytes=full, swa_bytes=swa, swa_ratio=swa_ratio, state_bytes_per_request=state)


def swa_chunk_cap(
    cell: CellSize, window: int | None, settings: Settings, constants: SglangConstants
) -> tuple[CellSize, str | None]:
    """The cell with the SWA pool capped, as ``SWAChunkCapPoolConfigurator`` sizes it (sglang.md#sglang-swa-chunk-cap),
    and a warning when the cap applies but is not modelled (speculative decoding); the cell unchanged otherwise.

    It applies from the rule set that turns ``swa_chunk_cap`` on, to a hybrid-SWA model with full-attention layers,
    ``--max-running-requests`` given, ``--disable-radix-cache`` and a chunked prefill. Per request the window, the
    eviction interval and two pages; plus the prefill chunks in flight (two with the overlap scheduler, one
    without) and a page: ``swa_cap = reqs × (window + interval + page + page) + chunks × chunked_prefill_size + page``,
    rounded up to the page."""
    running = settings.max_running_requests
    if not (constants.swa_chunk_cap and cell.hybrid_swa and window and running and settings.disable_radix_cache):
        return cell, None
    if settings.chunked_prefill_size <= 0:
        return cell, None
    if settings.speculative:
        return cell, (
            "speculative decoding with --disable-radix-cache: SGLang caps the SWA pool by the draft tokens per "
            "request (SWAChunkCapPoolConfigurator), which hfvram does not model; the SWA pool is sized by the ratio"
        )
    page = settings.page_size
    per_request = window + max(1, constants.swa_eviction_interval) + page + page
    chunks = 1 if settings.disable_overlap_schedule else 2
    # max_running_requests // attn_dp_size: hfvram's --dp-size replicas are whole servers (attention DP is not modelled)
    cap = per_request * running + chunks * settings.chunked_prefill_size + page
    return replace(cell, swa_cap_tokens=math.ceil(cap / page) * page), None


def token_pool(
    pre_load_free: float,
    post_load_free: float,
    mem_fraction_static: float,
    cell: float,
    page_size: int,
    extra_reserved: float = 0.0,
) -> tuple[int, float]:
    """(max_total_num_tokens, rest bytes) from free memory before and after loading weights (sglang.md#sglang-budget):
    ``rest = post − pre × (1 − mfs) − extra``; tokens = rest // cell rounded down to the page size."""
    rest = post_load_free - pre_load_free * (1 - mem_fraction_static) - extra_reserved
    if rest <= 0 or cell <= 0:
        return 0, rest
    tokens = int(rest // cell)
    return tokens // page_size * page_size, rest


def mamba_split(rest: float, ratio: float, state_per_request: float, per_running: int) -> tuple[float, int, int]:
    """(mamba budget bytes, max_mamba_cache_size, running-request cap) for hybrid linear attention (sglang.md#sglang-mamba-state)."""
    budget = rest * ratio / (1 + ratio)
    size = int(budget // state_per_request) if state_per_request > 0 else 0
    return budget, size, size // per_running


def max_running_requests(constants: SglangConstants, tokens: int, context_length: int) -> int:
    """``resolve_max_num_reqs`` default (sglang.md#sglang-token-pool)."""
    scaled = int(tokens / max(1, context_length) * constants.max_running_requests_per_context)
    clamped = max(constants.max_running_requests_min, min(scaled, constants.max_running_requests_max))
    return max(0, min(clamped, tokens // 2))


def req_to_token_bytes(constants: SglangConstants, running: int, context_length: int) -> int:
    """The int32 request-to-token table, allocated outside the static fraction (sglang.md#sglang-token-pool)."""
    return (running + 1) * (context_length + constants.req_to_token_extra_tokens) * constants.req_to_token_bytes


def _window(spec: ModelSpec) -> int | None:
    windows = [layer.window for layer in spec.layers if layer.kind in WINDOWED_KINDS and layer.window]
    return max(windows) if windows else None


def pool_bytes_needed(
    cell: CellSize, window: int | None, context: int, concurrency: int, page_size: int, mamba_ratio: float
) -> float:
    """Bytes of SGLang's pool (the ``rest`` it splits) that ``concurrency`` requests of ``context`` tokens need.

    The full pool must hold every token; the SWA pool (``ratio`` × the full pool's tokens) holds
    ``min(window, context)`` per request; with recurrent layers the pool is split full : mamba = 1 : r, and
    the mamba part must hold one state per request (sglang.md#sglang-token-pool, sglang.md#sglang-mamba-state)."""
    tokens: float = math.ceil(context / page_size) * page_size * concurrency
    if cell.hybrid_swa and window and not cell.swa_cap_tokens:
        tokens = max(tokens, min(window, context) * concurrency / cell.swa_ratio)
    full_part = tokens * cell.cell + cell.swa_fixed_bytes
    if cell.state_bytes_per_request <= 0:
        return full_part
    return max(
        full_part * (1 + mamba_ratio), concurrency * cell.state_bytes_per_request * (1 + mamba_ratio) / mamba_ratio
    )


def _capacity(
    tokens: int | None,
    cell: CellSize,
    window: int | None,
    running: int | None,
    mamba_size: int | None,
    workload: Workload,
    settings: Settings,
    context: int,
) -> Capacity:
    """Pool tokens, full-length requests that fit (also bounded by max_running_requests and the mamba pool)
    and the longest context at the workload's concurrency (bounded by context_length)."""
    if tokens is None:
        return Capacity()
    per_request = math.ceil(context / settings.page_size) * settings.page_size
    limits = [tokens / per_request]
    if cell.hybrid_swa and window:
        swa_tokens = cell.swa_cap_tokens or tokens * cell.swa_ratio
        limits.append(swa_tokens / min(window, context))
    if running:
        limits.append(float(running))
    if mamba_size is not None:
        limits.append(float(mamba_size))
    concurrency = max(0.0, min(limits))
    max_context = min(
        tokens // max(1, workload.concurrency) // settings.page_size * settings.page_size, settings.context_length
    )
    if (running is not None and workload.concurrency > running) or (
        mamba_size is not None and workload.concurrency > mamba_size
    ):
        max_context = 0
    return Capacity(kv_tokens=tokens, max_concurrency=concurrency, max_context=max_context)
