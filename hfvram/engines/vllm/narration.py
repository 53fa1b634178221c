"""Step 3 of the profile: the warnings and ``--explain`` lines, every figure read from the breakdown, so a figure
and its explanation cannot disagree."""

from __future__ import annotations

from hfvram.engines.vllm import features
from hfvram.engines.vllm.terms import ActivationTerm, Breakdown, BudgetMode, OutsideTrouble, WeightsTerm
from hfvram.estimate.common import GiB
from hfvram.estimate.types import Workload
from hfvram.spec import ModelSpec

HYBRID_MOE_GRAPHS_NOTE = (
    "hybrid linear-attention MoE: vLLM's CUDA-graph and buffer memory for this class is fitted on one "
    "dense hybrid (article 003) and came out 34 % below the one MoE hybrid measured (Qwen3.6-35B-A3B: "
    "13.3 GB overhead on 2 × RTX 4090); the KV pool may be several GiB smaller than shown"
)
NO_CACHE_NOTE = "the model keeps no per-sequence KV cache: concurrency is not bounded by a KV pool"
VERDICT_NOTE = (
    "total = what the workload needs (weights + KV for context × concurrency + activations + overhead "
    "inside the budget) against usable = vLLM's budget; the KV pool vLLM allocates is the whole rest"
)
PREFIX_CACHING_NOTE = (
    "prefix caching (on by default in V1) reuses the KV pool's own blocks for shared prefixes: it changes no memory "
    "figure (docs/engines/vllm.md#vllm-features)"
)
DECODE_NOTE = (
    "upper bound: memory bandwidth / (active weights per GPU + KV at the context), one sequence; "
    "compute, communication and scheduling ignored"
)


def narrate(
    parts: Breakdown, spec: ModelSpec, workload: Workload, graphs_in_budget_since: str | None
) -> tuple[list[str], dict[str, str]]:
    """(warnings, explain lines) for a breakdown; ``graphs_in_budget_since``: the release from which CUDA
    graphs are deducted from the budget (read from the same TOML that switches the rule)."""
    since = f"v{graphs_in_budget_since}" if graphs_in_budget_since else "a later release"
    explain = {
        "weights": explain_weights(parts.weights),
        "activations": explain_activations(parts.activations, spec),
        "overhead": explain_overhead(parts, since),
    }
    if parts.budget.mode is not BudgetMode.NONE:
        explain["budget"] = explain_budget(parts)
    explain["kv_cache"] = explain_kv_cache(parts, workload.concurrency)
    if parts.weights.lora is not None:
        explain["lora"] = features.explain_lora(parts.weights.lora)
    speculative = features.explain_speculative(parts.settings.speculative, parts.draft)
    if speculative:
        explain["speculative"] = speculative
    if parts.settings.data_parallel_size > 1:
        settings = parts.settings
        per_replica = settings.tensor_parallel_size * settings.pipeline_parallel_size
        explain["parallel"] = (
            f"data parallel {settings.data_parallel_size}: {settings.data_parallel_size} replicas of "
            f"TP {settings.tensor_parallel_size} × PP {settings.pipeline_parallel_size} = "
            f"{per_replica * settings.data_parallel_size} GPUs; every figure is per GPU of one replica, each with "
            "its own budget and KV pool (docs/engines/vllm.md#vllm-parallelism)"
        )
    limit = parts.state_seq_limit
    if limit is not None:
        explain["max_num_seqs"] = (
            f"the largest max_num_seqs that starts: {limit} = the KV pool's {parts.num_blocks} blocks (with full "
            "CUDA graphs every decode sequence needs one block of the recurrent state pool; "
            f"max_num_seqs {parts.settings.max_num_seqs} "
            f"{'starts' if parts.settings.max_num_seqs <= limit else 'is refused'}; "
            "docs/engines/vllm.md#vllm-state-seq-limit)"
        )
    explain["verdict"] = VERDICT_NOTE
    if parts.decode_modelled:
        explain["decode"] = DECODE_NOTE
    return startup_warnings(parts), explain


def explain_weights(weights: WeightsTerm) -> str:
    return weights.split_explain + ("; " + "; ".join(weights.notes) if weights.notes else "")


def explain_activations(term: ActivationTerm, spec: ModelSpec) -> str:
    return (
        f"max(sampler {term.sampler_bytes_per_logit:g} B × {term.sampler_rows} seqs × vocab {term.vocab} = "
        f"{term.sampler / GiB:.2f} GiB, forward {term.forward_tokens} tokens = {term.forward / GiB:.2f} GiB)"
        + (f" + fused-MoE workspace {term.workspace / GiB:.2f} GiB" if term.workspace else "")
        + (
            f" + dummy encoder outputs {term.encoder_cache / GiB:.2f} GiB held through both"
            if term.encoder_cache
            else ""
        )
        + (f" + LoRA shrink buffer {term.lora / GiB:.3f} GiB in the forward" if term.lora else "")
    )


def explain_overhead(parts: Breakdown, since: str) -> str:
    overhead, tp = parts.overhead, parts.settings.tensor_parallel_size
    graphs = overhead.cudagraphs / GiB
    return (
        f"non-torch memory {overhead.non_torch / GiB:.2f} GiB (TP={tp}"
        + (f"; {overhead.non_torch_source}" if overhead.non_torch_source else "")
        + ")"
        + (
            f" + CUDA graphs {graphs:.2f} GiB (deducted from the budget since {since})"
            if overhead.cudagraph_in_budget
            else ""
        )
        + f"; outside the budget: CUDA context + NCCL {overhead.cuda_context / GiB:.2f} GiB"
        + ("" if overhead.cudagraph_in_budget else f" + CUDA graphs {graphs:.2f} GiB ({_outside_why(parts, since)})")
        + _graph_sizes_note(parts)
    )


def _outside_why(parts: Breakdown, since: str) -> str:
    if parts.overhead.mrv2_dense:
        return (
            "Model Runner V2, the default for dense models from v0.25.1, deducts nothing for them: "
            "docs/engines/vllm.md#vllm-mrv2"
        )
    return f"before {since}"


def _graph_sizes_note(parts: Breakdown) -> str:
    settings = parts.settings
    if not parts.overhead.cudagraphs or not parts.overhead.capture_sizes:
        return ""
    return (
        f"; graphs for {parts.overhead.capture_sizes} batch sizes up to "
        f"min(2 x max_num_seqs {settings.max_num_seqs}, 512) (docs/engines/vllm.md#vllm-cuda-graphs)"
    )


def explain_budget(parts: Breakdown) -> str:
    budget, util = parts.budget, parts.settings.gpu_memory_utilization
    if budget.mode is BudgetMode.KV_CACHE_MEMORY_BYTES:
        return "kv-cache-memory-bytes set: the KV pool is that size, utilization ignored (docs/engines/vllm.md#vllm-budget)"
    if budget.mode is BudgetMode.NUM_GPU_BLOCKS_OVERRIDE:
        profiled = budget.profiled_pool
        return (
            f"num-gpu-blocks-override {parts.settings.num_gpu_blocks_override}: the KV pool is that many blocks = "
            f"{budget.pool / GiB:.2f} GiB"
            + (
                f", in place of the {max(0, parts.layout.num_blocks(profiled))} blocks ({profiled / GiB:.2f} GiB) "
                "the profile left"
                if profiled is not None
                else ""
            )
            + " (docs/engines/vllm.md#vllm-budget)"
        )
    pool = budget.pool
    rounded = "" if parts.settings.engine_generation == "v0" else "ceil"
    return (
        f"{rounded}({budget.memory / GiB:.2f} GiB × gpu_memory_utilization {util}) = "
        f"{budget.budget / GiB:.2f} GiB per GPU; KV pool = budget − weights − activations − overhead"
        + (
            f" = {pool / GiB:.2f} GiB"
            if pool >= 0
            else f": none, short by {-pool / GiB:.2f} GiB (the three exceed the budget)"
        )
    )


def explain_kv_cache(parts: Breakdown, concurrency: int) -> str:
    layout = parts.layout
    return (
        f"{concurrency} × {parts.blocks_per_request} blocks of {layout.page_bytes} B × {layout.group_size} "
        f"layers (block_size {layout.min_block_size}, {parts.settings.kv_cache_dtype}, {layout.num_groups} groups) "
        f"for {parts.context} tokens per request on the worst rank; prefix caching "
        f"({'on' if parts.settings.enable_prefix_caching else 'off'}"
        f"{'' if parts.settings.prefix_caching_set else ', the release default'}) "
        + (
            "reuses blocks of this pool: no memory change"
            if parts.settings.enable_prefix_caching
            else "changes no memory"
        )
    )


def startup_warnings(parts: Breakdown) -> list[str]:
    """What vLLM says (or would run into) at start-up, in the order it would meet them."""
    settings, budget, overhead = parts.settings, parts.budget, parts.overhead
    warnings = [HYBRID_MOE_GRAPHS_NOTE] if parts.hybrid_moe_graphs else []
    if parts.weights.lora is not None:
        warnings.extend(parts.weights.lora.warnings)
    if parts.settings.prefix_caching_set:
        warnings.append(PREFIX_CACHING_NOTE)
    if parts.kv_bytes_too_large:
        room = budget.memory - overhead.outside_budget - budget.budget + budget.pool
        asked = (
            "kv-cache-memory-bytes"
            if budget.mode is BudgetMode.KV_CACHE_MEMORY_BYTES
            else f"num-gpu-blocks-override {settings.num_gpu_blocks_override}"
        )
        warnings.append(
            f"{asked} asks for {budget.pool / GiB:.2f} GiB of KV cache but weights, activations and "
            f"overhead leave only {room / GiB:.2f} GiB on this GPU: the KV cache allocation runs out of memory"
        )
    if parts.layout.page_bytes <= 0:
        warnings.append(NO_CACHE_NOTE)
    # vLLM's own advice (raise gpu_memory_utilization) only where the reserve it would free can close the gap
    reserve = budget.memory - budget.budget
    if parts.pool_empty:
        warnings.append(
            f"No available memory for the cache blocks: weights, activations and overhead exceed the budget by "
            f"{-budget.pool / GiB:.2f} GiB. "
            + (
                "Try increasing `gpu_memory_utilization` when initializing the engine."
                if -budget.pool <= reserve
                else "No gpu_memory_utilization closes that: more GPUs (--tp), a smaller checkpoint or a bigger GPU do."
            )
        )
    elif parts.seqs_over_state_pool and not parts.one_request_short:
        limit = parts.state_seq_limit
        warnings.append(
            f"max_num_seqs ({settings.max_num_seqs}) exceeds available Mamba cache blocks ({limit}). Each decode "
            f"sequence requires one Mamba cache block, so CUDA graph capture cannot proceed: vLLM refuses to start "
            f"when its own count is below max_num_seqs. Lower max_num_seqs to at most {limit} (--set "
            f"max-num-seqs={limit}, or --concurrency max) or increase gpu_memory_utilization. (A warning, not the "
            "verdict: hfvram's pool for hybrid models can be below vLLM's)"
        )
    if parts.one_request_short:
        needed = parts.layout.bytes_for(parts.blocks_at_max)
        warnings.append(
            f"To serve at least one request with the model's max seq len ({settings.max_model_len}), "
            f"({needed / GiB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({budget.pool / GiB:.2f} GiB). Based on the available memory, the estimated maximum model length is "
            f"{parts.longest_single}. "
            + (
                "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
                if needed - budget.pool <= reserve
                else f"Decrease `max_model_len` (--context) to at most {parts.longest_single}, or use more GPUs."
            )
        )
    trouble = outside_budget_note(parts)
    return [*warnings, trouble] if trouble else warnings


def outside_budget_note(parts: Breakdown) -> str | None:
    """The warning for :attr:`Breakdown.outside_trouble` (None when there is none)."""
    settings, overhead = parts.settings, parts.overhead
    left = (parts.budget.memory - parts.budget.budget) / GiB
    context, graphs = overhead.cuda_context / GiB, overhead.cudagraphs / GiB
    util = settings.gpu_memory_utilization
    if parts.outside_trouble is OutsideTrouble.CUDA_CONTEXT:
        return (
            f"vLLM needs ~{context:.2f} GiB per GPU outside its budget (CUDA context, NCCL) but "
            f"gpu_memory_utilization={util} leaves {left:.2f} GiB: start-up fails "
            "with 'Free memory on device … is less than desired GPU memory utilization'"
        )
    if parts.outside_trouble is OutsideTrouble.CUDA_GRAPHS:
        return (
            f"CUDA graphs ({graphs:.2f} GiB) are captured after the KV cache fills the budget, in the "
            f"{left:.2f} GiB gpu_memory_utilization leaves (minus {context:.2f} GiB CUDA "
            "context): start-up runs out of memory while capturing them; lower gpu-memory-utilization or "
            "set enforce-eager"
        )
    if parts.outside_trouble is OutsideTrouble.UNCHECKED_OUTSIDE:
        return (
            f"the CUDA context (~{context:.2f} GiB) and CUDA graphs ({graphs:.2f} GiB) are outside vLLM V0's budget, "
            f"in the {left:.2f} GiB gpu_memory_utilization={util} leaves: V0 does not check free memory at start-up, "
            "so it may run out of memory allocating the KV cache or capturing graphs (or, if the real context is "
            "smaller, start); a lower gpu-memory-utilization or enforce-eager is safer"
        )
    if parts.outside_trouble is OutsideTrouble.SAMPLER_WARM_UP:
        # gt-0085/0086: the sampler is warmed up again after the KV cache is allocated
        return (
            f"after start-up vLLM warms up the sampler with {settings.max_num_seqs} dummy requests outside its "
            f"budget (~{parts.activations.bytes / GiB:.2f} GiB on top of {overhead.outside_budget / GiB:.2f} GiB, "
            f"{left:.2f} GiB left): this can run out of memory; a lower gpu-memory-utilization or "
            "max-num-seqs is safer"
        )
    return None
