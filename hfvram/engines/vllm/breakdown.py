"""Step 2 of the profile, arithmetic only: :func:`compute` works out every term on the worst GPU for the settings
(weights, activations, overhead, the budget and the KV pool it leaves, what the workload takes of it, start-up
checks and the decode bound) as a typed :class:`~hfvram.engines.vllm.terms.Breakdown`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from hfvram.engines.vllm import features
from hfvram.engines.vllm.constants import VllmConstants
from hfvram.engines.vllm.kv import KVGroupLayout, _longest_context, kv_capacity, kv_layout, layer_token_bytes
from hfvram.engines.vllm.memory import (
    activation_peak,
    capture_sizes,
    cudagraph_bytes,
    non_torch_bytes,
    weights_per_gpu,
)
from hfvram.engines.vllm.narration import explain_weights
from hfvram.engines.vllm.settings import Settings, is_mrv2_dense
from hfvram.engines.vllm.terms import Breakdown, BudgetMode, BudgetTerm, OutsideTrouble, OverheadTerm
from hfvram.estimate import common, multimodal
from hfvram.estimate.common import GiB, Rules
from hfvram.estimate.types import Hardware, Workload
from hfvram.spec import RECURRENT_KINDS, ModelSpec


def compute(
    spec: ModelSpec,
    hardware: Hardware | None,
    settings: Settings,
    workload: Workload,
    constants: VllmConstants,
    non_torch_rows: Sequence[Rules],
) -> Breakdown:
    """Every term on the worst GPU for ``settings``: weights, activations, overhead, budget, KV pool and what
    the workload takes of it, start-up checks and the decode bound (``non_torch_rows``: the ``[[non_torch]]``
    table of rules.toml)."""
    context = workload.context or settings.max_model_len
    weights = weights_per_gpu(spec, settings, constants)
    activations = activation_peak(spec, settings, constants, weights.lora)
    overhead = overhead_term(spec, hardware, settings, constants, non_torch_rows)
    draft = draft_term(settings, constants)
    if draft is not None:
        notes = (*weights.notes, f"+{draft.weights / GiB:.3f} GiB draft {draft.name} (speculative decoding)")
        weights = replace(weights, bytes=weights.bytes + draft.weights, notes=notes)
    layout = kv_layout(
        features.spec_with_draft_layers(spec, settings.speculative, settings.tensor_parallel_size), settings
    )
    budget = budget_term(hardware, settings, weights.bytes + activations.bytes + overhead.in_budget, layout)
    blocks_per_request = layout.blocks_per_request(context)
    sized = hardware is not None or budget.fixed_pool
    num_blocks = layout.num_blocks(budget.pool)
    blocks_at_max = layout.blocks_per_request(settings.max_model_len)
    short = sized and budget.pool > 0 and layout.page_bytes > 0 and blocks_at_max > num_blocks
    return Breakdown(
        settings=settings,
        context=context,
        weights=weights,
        activations=activations,
        overhead=overhead,
        budget=budget,
        layout=layout,
        blocks_per_request=blocks_per_request,
        kv_needed=int(layout.bytes_for(blocks_per_request * workload.concurrency)),
        capacity=kv_capacity(layout, budget.pool, settings, context, workload.concurrency, sized),
        blocks_at_max=blocks_at_max,
        num_blocks=num_blocks,
        longest_single=_longest_context(layout, num_blocks, 1, settings.max_model_len) if short else 0,
        sized=sized,
        kv_bytes_too_large=(
            hardware is not None and budget.fixed_pool and budget.budget + overhead.outside_budget > budget.memory
        ),
        outside_trouble=outside_budget_trouble(budget, overhead, activations.bytes, hardware, settings),
        hybrid_moe_graphs=bool(
            overhead.cudagraphs and spec.num_experts and any(layer.kind in RECURRENT_KINDS for layer in spec.layers)
        ),
        decode_modelled=hardware is not None and common.active_weight_bytes(spec) is not None,
        decode=decode_bound(spec, hardware, layout, blocks_per_request, settings.tensor_parallel_size),
        draft=draft,
    )


def overhead_term(
    spec: ModelSpec,
    hardware: Hardware | None,
    settings: Settings,
    constants: VllmConstants,
    non_torch_rows: Sequence[Rules],
) -> OverheadTerm:
    """Non-torch memory (and the table row it came from), CUDA graphs and the CUDA context on one GPU."""
    non_torch, non_torch_row = non_torch_bytes(settings, hardware, non_torch_rows)
    return OverheadTerm(
        non_torch=non_torch,
        cudagraphs=cudagraph_bytes(spec, settings, constants),
        cuda_context=int(constants.cuda_context_gib * GiB),
        cudagraph_in_budget=settings.cudagraph_in_budget,
        capture_sizes=0
        if settings.cudagraph_flat_gib is not None
        else len(capture_sizes(settings, constants, spec.architecture)),
        mrv2_dense=is_mrv2_dense(spec, constants),
        non_torch_source=f"{non_torch_row.get('source', '')} [{non_torch_row.get('group', '')}]"
        if non_torch_row
        else "",
    )


def draft_term(settings: Settings, constants: VllmConstants) -> features.DraftTerm | None:
    """The draft checkpoint's weights on one rank, loaded as vLLM's ``get_model`` loads the target's (the target's
    dtype, the draft's TP, whole on the last pipeline stage, no --quantization, no LoRA, no CPU offload) inside
    "Model loading took", and its attention layers' K+V bytes per token in the shared pool
    (docs/engines/vllm.md#vllm-features)."""
    speculative = settings.speculative
    draft = speculative.draft_spec if speculative is not None else None
    if speculative is None or draft is None or draft.weights is None:
        return None
    if speculative.method not in constants.speculative_draft_methods:
        return None
    own = replace(
        settings,
        tensor_parallel_size=speculative.draft_tp,
        pipeline_parallel_size=1,
        online_quantization=None,
        cpu_offload_gb=0.0,
        lora=None,
        speculative=None,
        multimodal=multimodal.MultimodalSettings(),
    )
    weights = weights_per_gpu(draft, own, constants)
    layers = features.draft_kv_layers(speculative, settings.tensor_parallel_size)
    tp = settings.tensor_parallel_size
    return features.DraftTerm(
        name=speculative.model or "",
        method=speculative.method,
        tp=speculative.draft_tp,
        weights=weights.bytes,
        shared=speculative.shared,
        kv_layers=sum(1 for layer in layers if layer.kv_elems_per_token),
        kv_bytes_per_token=sum(layer_token_bytes(layer, tp, settings) for layer in layers),
        kv_bytes_per_token_whole=sum(
            layer_token_bytes(layer, 1, settings) for layer in features.draft_kv_layers(speculative, 1)
        ),
        source=(speculative.draft.source if speculative.draft else None) or "",
        weights_explain=explain_weights(weights),
    )


def budget_term(hardware: Hardware | None, settings: Settings, deducted: int, layout: KVGroupLayout) -> BudgetTerm:
    """The budget and the KV pool: kv-cache-memory-bytes sets the pool (the budget is then what it adds up
    to); else ``ceil(memory × gpu_memory_utilization)`` less weights, activations and in-budget overhead.
    num-gpu-blocks-override then replaces the blocks that pool holds by its own count (vLLM
    ``may_override_num_blocks``, vllm.md#vllm-budget): the pool is that many blocks."""
    # total_memory as vLLM's MemorySnapshot reads it (torch.cuda.mem_get_info): the CUDA total where measured
    memory = hardware.gpu.engine_visible_bytes if hardware else 0
    override = settings.num_gpu_blocks_override
    if override is not None and layout.page_bytes > 0:
        profiled = budget_term(hardware, replace(settings, num_gpu_blocks_override=None), deducted, layout)
        pool = layout.bytes_for(override)
        left = profiled.pool if profiled.mode is not BudgetMode.NONE else None
        return BudgetTerm(BudgetMode.NUM_GPU_BLOCKS_OVERRIDE, memory, deducted + pool, pool, profiled_pool=left)
    if settings.kv_cache_memory_bytes is not None:
        pool = settings.kv_cache_memory_bytes
        return BudgetTerm(BudgetMode.KV_CACHE_MEMORY_BYTES, memory, deducted + pool, float(pool))
    if hardware is not None:
        # V1 requests ceil(total × util); V0's determine_num_available_blocks takes total × util as it is
        product = memory * settings.gpu_memory_utilization
        budget = product if settings.engine_generation == "v0" else math.ceil(product)
        return BudgetTerm(BudgetMode.UTILIZATION, memory, budget, budget - deducted)
    return BudgetTerm(BudgetMode.NONE, memory, 0, 0.0)


def outside_budget_trouble(
    budget: BudgetTerm, overhead: OverheadTerm, activations: int, hardware: Hardware | None, settings: Settings
) -> OutsideTrouble | None:
    """What does not fit in the memory gpu_memory_utilization leaves outside the budget: the CUDA context,
    the CUDA graphs captured there (before v0.21), or the sampler warm-up after start-up (gt-0085/0086)."""
    if hardware is None or budget.mode is not BudgetMode.UTILIZATION:
        return None
    left = budget.memory - budget.budget
    if overhead.cuda_context > left:
        return OutsideTrouble.CUDA_CONTEXT
    if overhead.outside_budget > left:
        return OutsideTrouble.CUDA_GRAPHS
    if overhead.outside_budget + activations > left:
        return OutsideTrouble.SAMPLER_WARM_UP
    return None


def decode_bound(
    spec: ModelSpec, hardware: Hardware | None, layout: KVGroupLayout, blocks_per_request: int, tp: int
) -> float | None:
    """Bandwidth / (active weights per GPU + one request's KV blocks); None without hardware or weights."""
    active = common.active_weight_bytes(spec)
    if hardware is None or active is None:
        return None
    kv_read = layout.bytes_for(blocks_per_request)
    return common.decode_tokens_per_second(active / tp + kv_read, hardware.gpu.memory_bandwidth_gbs)
