"""The warnings and ``--explain`` lines of an SGLang estimate, every figure read from the breakdown."""

from __future__ import annotations

from hfvram.engines.sglang.breakdown import Breakdown
from hfvram.estimate.common import GiB
from hfvram.estimate.types import Workload
from hfvram.spec import ModelSpec


def narrate(parts: Breakdown, spec: ModelSpec, workload: Workload) -> tuple[list[str], dict[str, str]]:
    """(warnings, explain lines), every figure read from the breakdown."""
    settings, cell, pool = parts.settings, parts.cell, parts.pool
    explain = {"weights": parts.weights.explain, "overhead": explain_overhead(parts), "cell_size": explain_cell(parts)}
    if pool is not None and pool.mamba_budget is not None:
        ratio = settings.mamba_full_memory_ratio
        explain["mamba"] = (
            f"mamba budget = rest × {ratio}/(1+{ratio}) = {pool.mamba_budget / GiB:.2f} GiB → {pool.mamba_size} "
            f"request states; running ≤ {pool.mamba_cap}"
        )
    explain["budget"] = explain_budget(parts)
    explain["activations"] = explain_activations(parts)
    explain["kv_cache"] = explain_kv_cache(parts, workload.concurrency)
    if parts.decode_modelled:
        explain["decode"] = "upper bound: bandwidth / (active weights per GPU + KV at the context), one sequence"

    warnings = []
    if parts.context > settings.context_length:
        warnings.append(f"context {parts.context} is longer than SGLang's context_length {settings.context_length}")
    if spec.max_position_embeddings and settings.context_length > spec.max_position_embeddings:
        warnings.append(
            f"context_length {settings.context_length} exceeds the model's {spec.max_position_embeddings}: SGLang "
            "refuses it unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
        )
    if pool is not None and cell.state_bytes_per_request > 0:
        warnings.append(
            "recurrent state counted at the layer's dtype (else the model's); SGLang's "
            "mamba_ssm_dtype and per-model state shapes were not cross-checked [unverified]"
        )
    if parts.refused:
        warnings.append(
            f"the weights leave no memory for the KV cache under mem_fraction_static={settings.mem_fraction_static}: "
            "SGLang stops at start-up ('Not enough memory' / 'leave no GPU memory for the KV cache')"
            if not pool or pool.tokens <= 0
            else f"the KV pool holds only {pool.tokens} tokens: SGLang stops at start-up ('Memory pool size is too "
            "small')"
        )
    if parts.swa_cap_note:
        warnings.append(parts.swa_cap_note)
    short = pool_short_note(parts, workload.concurrency)
    if short and not parts.refused:
        warnings.append(short)
    if pool is not None and parts.table > parts.slack:
        warnings.append(
            f"req_to_token table {parts.table / GiB:.2f} GiB exceeds the {parts.slack / GiB:.2f} GiB outside "
            "mem_fraction_static: lower --max-running-requests or context-length"
        )
    return warnings, explain


def pool_short_note(parts: Breakdown, concurrency: int) -> str | None:
    """The warning when SGLang starts but the requests asked about (or one full-length request) do not fit its
    pool (sglang.md#sglang-start); None otherwise."""
    pool, settings = parts.pool, parts.settings
    if pool is None or parts.max_req_len is None or not (parts.clamped or parts.requests_short):
        return None
    asked = (
        f"one request of SGLang's full context_length ({settings.context_length:,} tokens)"
        if parts.clamped and concurrency == 1
        else f"{concurrency} × {parts.context:,} tokens"
    )
    return (
        f"{asked} would not fit the KV pool of {pool.tokens:,} tokens: SGLang starts and accepts requests of at most "
        f"{parts.max_req_len:,} tokens (max_req_len = min(context_length − 1, max_total_num_tokens − 1))"
        + (
            "; the figures are for the pool SGLang allocates — give --context to check a length"
            if parts.clamped
            else ""
        )
    )


def explain_overhead(parts: Breakdown) -> str:
    return (
        f"CUDA context {parts.cuda_context_gib} GiB"
        + (f" + NCCL init {parts.nccl_init_gib} GiB [unverified]" if parts.nccl_init_gib is not None else "")
        + ", taken before SGLang's baseline and so charged implicitly"
    )


def explain_cell(parts: Breakdown) -> str:
    cell, settings = parts.cell, parts.settings
    return (
        f"{cell.cell:.0f} B per token on the worst rank ({settings.kv_cache_dtype}): full/MLA layers {cell.full_bytes:.0f} B"
        + (
            f" + {settings.swa_full_tokens_ratio} × SWA layers {cell.swa_bytes:.0f} B"
            if cell.hybrid_swa and not cell.swa_cap_tokens
            else ""
        )
        + (
            f"; SWA layers {cell.swa_bytes:.0f} B in a pool capped at {cell.swa_cap_tokens} tokens "
            f"({cell.swa_fixed_bytes / GiB:.2f} GiB: max_running_requests × (window + eviction interval + 2 pages) "
            "+ prefill chunks in flight + a page, SWAChunkCapPoolConfigurator)"
            if cell.swa_cap_tokens
            else ""
        )
        + (
            f"; recurrent state {cell.state_bytes_per_request:.0f} B per request"
            if cell.state_bytes_per_request
            else ""
        )
        + ""
    )


def explain_budget(parts: Breakdown) -> str:
    settings, pool = parts.settings, parts.pool
    if pool is None:
        return f"no GPU: activations taken as SGLang's own reserve estimate {parts.reserve_text} [approximation]"
    pre = pool.pre_load_free
    return (
        f"mem_fraction_static {settings.mem_fraction_static} ({settings.fraction_source}); free before loading "
        f"{pre / GiB:.2f} GiB; weights + KV pool ≤ {pre * settings.mem_fraction_static / GiB:.2f} GiB; pool = "
        f"{max(pool.rest, 0) / GiB:.2f} GiB → {pool.tokens} tokens (page {settings.page_size})"
    )


def explain_activations(parts: Breakdown) -> str:
    settings = parts.settings
    table = (
        f"req_to_token ({parts.running} + 1) × ({settings.context_length} + {parts.req_to_token_extra_tokens}) × "
        f"{parts.req_to_token_bytes} B = {parts.table / GiB:.2f} GiB"
    )
    outside = parts.pool.pre_load_free * (1 - settings.mem_fraction_static) if parts.pool else None
    share = f"the {1 - settings.mem_fraction_static:.3f} of free memory outside mem_fraction_static"
    if outside is not None and parts.slack < outside:
        share = (
            f"SGLang's own reserve ({parts.slack / GiB:.2f} GiB) of the {outside / GiB:.2f} GiB outside the given "
            f"mem_fraction_static {settings.mem_fraction_static} (the rest stays free)"
        )
    return (
        f"{share}, left for activations, "
        f"CUDA graphs (chunked_prefill_size {settings.chunked_prefill_size}, cuda_graph_max_bs {settings.cuda_graph_max_bs}) and "
        + (table if parts.running is not None else "the req_to_token table (none: no token pool to size it)")
    )


def explain_kv_cache(parts: Breakdown, concurrency: int) -> str:
    cell, settings = parts.cell, parts.settings
    return (
        f"pool bytes for {concurrency} × {parts.context} tokens at {cell.cell:.0f} B"
        + (
            f"; SWA pool ({settings.swa_full_tokens_ratio} of the tokens) holds min(window {parts.window}, context) per request"
            if cell.hybrid_swa and not cell.swa_cap_tokens
            else f"; SWA pool of {cell.swa_cap_tokens} tokens (capped with the chunk cache)"
            if cell.swa_cap_tokens
            else ""
        )
        + (
            f"; mamba share 1 : {settings.mamba_full_memory_ratio} with {cell.state_bytes_per_request:.0f} B state per request"
            if cell.state_bytes_per_request
            else ""
        )
    )
