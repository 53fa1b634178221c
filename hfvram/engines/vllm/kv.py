"""vLLM's paged KV cache on one rank: the cache spec of each layer type, the groups of ``get_kv_cache_groups``
and what a pool of blocks holds (docs/engines/vllm.md#vllm-kv-specs to docs/engines/vllm.md#vllm-block-size,
docs/engines/vllm.md#vllm-kv-groups)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hfvram.engines.vllm.settings import Settings
from hfvram.estimate import common
from hfvram.estimate.types import Capacity
from hfvram.memo import IdentityCache
from hfvram.spec import RECURRENT_KINDS, Layer, LayerKind, ModelSpec

# ---------------------------------------------------------------------------------------------------------
# Cache kinds (vLLM ``vllm/v1/kv_cache_interface.py``: one KVCacheSpec per layer type)
# ---------------------------------------------------------------------------------------------------------


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class KVCacheSpec:
    """One layer type's paged cache on one rank: tokens per block and bytes per page (one block, one layer)."""

    block_size: int
    page_size_bytes: int

    def blocks_needed(self, context: int, max_num_batched_tokens: int) -> int:
        """Blocks one request of ``context`` tokens holds (vLLM ``max_memory_usage_bytes`` / page, docs/engines/vllm.md#vllm-kv-specs)."""
        return _cdiv(context, self.block_size)

    def max_memory_usage_bytes(self, context: int, max_num_batched_tokens: int) -> int:
        return self.blocks_needed(context, max_num_batched_tokens) * self.page_size_bytes


@dataclass(frozen=True)
class FullAttentionSpec(KVCacheSpec):
    """Every token of the request: ``cdiv(context, block_size)`` blocks."""


@dataclass(frozen=True)
class MLAAttentionSpec(FullAttentionSpec):
    """One compressed latent per token, the same on every TP rank; paged like full attention."""


@dataclass(frozen=True)
class SlidingWindowSpec(KVCacheSpec):
    """The last ``sliding_window − 1`` tokens plus one prefill chunk, and one block for the boundary."""

    sliding_window: int = 0

    def blocks_needed(self, context: int, max_num_batched_tokens: int) -> int:
        tokens = min(self.sliding_window - 1 + max_num_batched_tokens, context)
        return _cdiv(tokens, self.block_size) + 1


@dataclass(frozen=True)
class ChunkedLocalAttentionSpec(KVCacheSpec):
    """The current chunk of ``attention_chunk_size`` tokens plus one prefill chunk (Llama-4 local layers)."""

    attention_chunk_size: int = 0

    def blocks_needed(self, context: int, max_num_batched_tokens: int) -> int:
        return _cdiv(min(self.attention_chunk_size + max_num_batched_tokens, context), self.block_size)


@dataclass(frozen=True)
class MambaSpec(KVCacheSpec):
    """A recurrent state: one page per request, whatever its length (mamba_cache_mode "none")."""

    def blocks_needed(self, context: int, max_num_batched_tokens: int) -> int:
        return 1


def cache_spec(kind: LayerKind, block_size: int, page_size_bytes: int, window: int | None = None) -> KVCacheSpec:
    """The cache spec vLLM gives a layer of ``kind`` (``window``: its sliding window or attention chunk)."""
    if kind is LayerKind.SLIDING:
        return SlidingWindowSpec(block_size, page_size_bytes, sliding_window=window or 0)
    if kind is LayerKind.CHUNKED:
        return ChunkedLocalAttentionSpec(block_size, page_size_bytes, attention_chunk_size=window or 0)
    if kind is LayerKind.MLA:
        return MLAAttentionSpec(block_size, page_size_bytes)
    if kind is LayerKind.FULL:
        return FullAttentionSpec(block_size, page_size_bytes)
    return MambaSpec(block_size, page_size_bytes)


def _blocks_for(kind: str, block: int, context: int, window: int | None, batched: int) -> int:
    """Blocks of one layer group for one request, for a layer kind given by name (``LayerKind`` values;
    any other name is a recurrent state)."""
    layer_kind = next((member for member in LayerKind if member.value == kind), LayerKind.MAMBA)
    return cache_spec(layer_kind, block, 0, window).blocks_needed(context, batched)


@dataclass(frozen=True)
class KVGroupLayout:
    """The paged KV layout on one rank: page bytes, layers per group and blocks one request needs."""

    page_bytes: int  # one block of one layer (the unified page)
    group_size: int  # layers sharing one block table
    num_groups: int
    min_block_size: int
    #: (cache spec, number of groups of it)
    groups: tuple[tuple[KVCacheSpec, int], ...]
    max_num_batched_tokens: int

    def blocks_per_request(self, context: int) -> int:
        """Σ over groups of ``cdiv(max_memory_usage_bytes, page)`` for a request of ``context`` tokens."""
        return sum(count * spec.blocks_needed(context, self.max_num_batched_tokens) for spec, count in self.groups)

    def saturation(self) -> tuple[int, int] | None:
        """(the context from which only the full-attention groups still grow, the number of those groups): a
        sliding window holds at most ``sliding_window − 1 + max_num_batched_tokens`` tokens, a chunk
        ``attention_chunk_size + max_num_batched_tokens``, a recurrent state one page. None when a group's block
        size is not the layout's or its spec is of another type."""
        context, growing = 1, 0
        for spec, count in self.groups:
            if spec.block_size != self.min_block_size:
                return None
            if type(spec) in (FullAttentionSpec, MLAAttentionSpec):
                growing += count
            elif type(spec) is SlidingWindowSpec:
                context = max(context, spec.sliding_window - 1 + self.max_num_batched_tokens)
            elif type(spec) is ChunkedLocalAttentionSpec:
                context = max(context, spec.attention_chunk_size + self.max_num_batched_tokens)
            elif type(spec) is not MambaSpec:
                return None
        return context, growing

    def num_blocks(self, pool_bytes: float) -> int:
        if self.page_bytes <= 0 or self.group_size <= 0:
            return 0
        return max(0, int(pool_bytes // self.page_bytes // self.group_size))

    def bytes_for(self, blocks: float) -> float:
        """Pool bytes that ``blocks`` blocks take (each block spans ``group_size`` layers)."""
        return blocks * self.page_bytes * self.group_size


# ---- KV layout and capacity ----------------------------------------------------------------------------


def _cache_key(layer: Layer) -> tuple[type[KVCacheSpec], int | None]:
    """Layers share a KV cache group when their spec type (and window) agree."""
    spec_type = type(cache_spec(layer.kind, 1, 0, layer.window))
    windowed = layer.kind in (LayerKind.SLIDING, LayerKind.CHUNKED)
    return spec_type, (layer.window if windowed else None)


def layer_token_bytes(layer: Layer, tp: int, settings: Settings) -> float:
    """K+V bytes one token takes in ``layer`` on one rank; with ``settings.mla_entry_align_bytes`` (V0's
    ``align_to_256bytes`` of an MLA cache entry, docs/engines/vllm.md#vllm-v0) an MLA entry is rounded up to it."""
    raw = common.layer_kv_elems_per_token_rank(layer, tp) * settings.kv_bytes
    align = settings.mla_entry_align_bytes
    return float(_cdiv(math.ceil(raw), align) * align) if align and layer.kind is LayerKind.MLA else raw


def _page_layout(attention: Sequence[Layer], recurrent: Sequence[Layer], settings: Settings) -> tuple[int, int]:
    """(page bytes, block size in tokens) of the unified page (docs/engines/vllm.md#vllm-block-size): with recurrent layers the attention
    block grows until one attention page holds one mamba state, and the mamba page is padded to it. ``attention`` /
    ``recurrent``: the distinct layers of each sort (only their largest entry counts)."""
    tp, block = settings.tensor_parallel_size, settings.block_size
    per_token = [layer_token_bytes(layer, tp, settings) for layer in attention]
    states = [common.layer_state_bytes_rank(layer, tp, settings.dtype_bytes) for layer in recurrent]
    if states and per_token:
        attn_token = max(per_token)
        attn_block = block * _cdiv(math.ceil(max(states)), int(block * attn_token))
        return int(attn_block * attn_token), attn_block
    if states:
        return math.ceil(max(states)), block
    return int(block * max(per_token)), block


#: layouts already worked out: a spec's layers -> {settings the layout reads: layout}. One estimate (its
#: longest-context and concurrency searches) and a scan's repeated models ask for the same layout many times.
_LAYOUTS: IdentityCache[tuple[Layer, ...], dict[tuple[object, ...], KVGroupLayout]] = IdentityCache(
    "vllm.kv_layout", 256
)


def kv_layout(spec: ModelSpec, settings: Settings) -> KVGroupLayout:
    """Per-rank page sizes and groups (docs/engines/vllm.md#vllm-kv-specs to docs/engines/vllm.md#vllm-block-size) for the worst pipeline stage, as ``get_kv_cache_groups``.
    A pure function of the layers and the settings it reads, remembered for the same layers."""
    key = (
        settings.tensor_parallel_size,
        settings.pipeline_parallel_size,
        settings.max_num_batched_tokens,
        settings.block_size,
        settings.kv_bytes,
        settings.dtype_bytes,
    )
    layouts = _LAYOUTS.get_or_compute(spec.layers, dict)
    layout = layouts.get(key)
    if layout is None:
        layout = layouts[key] = _kv_layout(spec, settings)
    return layout


def _kv_layout(spec: ModelSpec, settings: Settings) -> KVGroupLayout:
    tp = settings.tensor_parallel_size
    # each distinct layer once, with its count: the sums below are per layer
    stage = common.worst_stage_layers(spec, settings.pipeline_parallel_size)
    layers = common.layer_summary(stage).counts if stage is spec.layers else common.layer_counts(stage)
    attention = [(layer, count) for layer, count in layers if layer.kv_elems_per_token]
    recurrent = [(layer, count) for layer, count in layers if layer.kind in RECURRENT_KINDS]
    batched = settings.max_num_batched_tokens
    if not attention and not recurrent:
        return KVGroupLayout(0, 0, 0, settings.block_size, (), batched)
    page, block = _page_layout([layer for layer, _ in attention], [layer for layer, _ in recurrent], settings)

    kinds: dict[tuple[type[KVCacheSpec], int | None], int] = {}
    for layer, count in attention:
        key = _cache_key(layer)
        kinds[key] = kinds.get(key, 0) + count
    if recurrent:
        kinds[(MambaSpec, None)] = sum(count for _, count in recurrent)

    if len(kinds) == 1:
        # one type: one group spanning every layer (UniformTypeKVCacheSpecs when page sizes differ), expressed
        # as one page × group_size so that bytes_for() is exact
        (spec_type, window), count = next(iter(kinds.items()))
        if attention:
            page_sum = sum(int(block * layer_token_bytes(layer, tp, settings)) * n for layer, n in attention)
        else:
            page_sum = page * count
        page_bytes = int(page_sum // count) if count else 0
        only = _spec_of_type(spec_type, block, page_bytes, window)
        return KVGroupLayout(page_bytes, count, 1, block, ((only, 1),), batched)

    counts = list(kinds.values())
    smallest, largest = min(counts), max(counts)
    group_size = largest if largest < 1.5 * smallest else smallest
    token_bytes: dict[tuple[type[KVCacheSpec], int | None], float] = {}
    for layer, _ in attention:
        key = _cache_key(layer)
        token_bytes[key] = max(token_bytes.get(key, 0.0), layer_token_bytes(layer, tp, settings))
    groups = tuple(
        (
            _spec_of_type(spec_type, _unified_block(token_bytes.get((spec_type, window)), page, block), page, window),
            _cdiv(count, group_size),
        )
        for (spec_type, window), count in kinds.items()
    )
    num_groups = sum(count for _, count in groups)
    return KVGroupLayout(page, group_size, num_groups, block, groups, batched)


def _unified_block(token_bytes: float | None, page: int, block: int) -> int:
    """Tokens per block of a layer kind once pages are unified (docs/engines/vllm.md#vllm-kv-groups): vLLM's
    ``unify_kv_cache_spec_page_size`` gives a kind whose page divides the largest page ``block × ratio`` tokens, so
    it keeps its own bytes per token (Gemma-4's full layers, half the sliding layers' bytes: 32-token blocks); a
    recurrent state (``token_bytes`` None) or a page that does not divide keeps the block, padded to the page."""
    kind_page = int(block * token_bytes) if token_bytes else 0
    if kind_page <= 0 or kind_page >= page or page % kind_page:
        return block
    return block * (page // kind_page)


def _spec_of_type(spec_type: type[KVCacheSpec], block: int, page: int, window: int | None) -> KVCacheSpec:
    if spec_type is SlidingWindowSpec:
        return SlidingWindowSpec(block, page, sliding_window=window or 0)
    if spec_type is ChunkedLocalAttentionSpec:
        return ChunkedLocalAttentionSpec(block, page, attention_chunk_size=window or 0)
    return spec_type(block, page)


def kv_capacity(
    layout: KVGroupLayout, pool: float, settings: Settings, context: int, concurrency: int, sized: bool
) -> Capacity:
    """Start-up figures (vllm.md#vllm-kv-groups): GPU KV cache size in tokens, maximum concurrency at ``context``, longest
    context at ``concurrency`` (empty when the pool was not sized)."""
    if not sized:
        return Capacity()
    if pool <= 0:
        return Capacity(kv_tokens=0, max_concurrency=0.0, max_context=0)
    if layout.page_bytes <= 0:
        # no per-sequence cache (encoder-only / attention-free): the KV pool does not bound requests
        return Capacity(kv_tokens=None, max_concurrency=None, max_context=settings.context_cap or None)
    num_blocks = layout.num_blocks(pool)
    per_request_at_max = layout.blocks_per_request(settings.max_model_len)
    concurrency_at_max = num_blocks / per_request_at_max if per_request_at_max else math.inf
    if settings.kv_tokens_formula == "concurrency":
        kv_tokens = int(concurrency_at_max * settings.max_model_len)
    else:
        kv_tokens = num_blocks // max(1, layout.num_groups) * layout.min_block_size
    per_request = layout.blocks_per_request(context)
    max_concurrency = num_blocks / per_request if per_request else math.inf
    cap = max(settings.context_cap, context)
    max_context = _longest_context(layout, num_blocks, max(1, concurrency), cap)
    return Capacity(kv_tokens=kv_tokens, max_concurrency=round(max_concurrency, 2), max_context=max_context)


def _longest_context(layout: KVGroupLayout, num_blocks: int, concurrency: int, cap: int) -> int:
    """Largest context ≤ cap with ``concurrency × blocks_per_request(context) ≤ num_blocks`` (monotone). From the
    layout's saturation on, only its full-attention groups grow, one block per ``block_size`` tokens each: there
    the answer is whole blocks, in closed form; below it (and for a layout of other specs) a binary search."""
    if concurrency * layout.blocks_per_request(1) > num_blocks:
        return 0
    shape = layout.saturation()
    if shape is None or shape[0] >= cap:
        return _longest_context_search(layout, num_blocks, concurrency, cap)
    saturated, growing = shape
    held = layout.blocks_per_request(saturated)
    if concurrency * held > num_blocks:
        return _longest_context_search(layout, num_blocks, concurrency, saturated - 1)
    if not growing:
        return cap  # nothing grows past the saturation
    block = layout.min_block_size
    fixed = held - growing * _cdiv(saturated, block)  # the saturated groups' blocks
    return min(cap, (num_blocks // concurrency - fixed) // growing * block)


def _longest_context_search(layout: KVGroupLayout, num_blocks: int, concurrency: int, cap: int) -> int:
    """:func:`_longest_context` by binary search over 1 … cap, for a layout where one token fits."""
    low, high = 1, cap
    while low < high:
        mid = (low + high + 1) // 2
        if concurrency * layout.blocks_per_request(mid) <= num_blocks:
            low = mid
        else:
            high = mid - 1
    return low
