"""SGLang: ``mem_fraction_static``, the RadixAttention token pool and what is left for the rest.

Rules follow ``design/engines.md`` §3 (read in SGLang's source); constants live in
``hfvram/data/engines/sglang.toml``. Per GPU (the worst rank):

    pre_load_free  = memory − CUDA context − NCCL init                         (§3.1 baseline, §1.3)
    rest           = (pre_load_free − weights) − pre_load_free × (1 − mem_fraction_static)
    rest          −= mamba state pool (hybrid linear attention, §3.3)
    tokens         = rest // cell_size // page_size × page_size                (§3.1, §3.2)

So weights and the KV pool share ``pre_load_free × mem_fraction_static``; the other ``1 − mfs`` is left for
activations, CUDA graphs and the ``req_to_token`` table. hfvram reports that slack as the activations term,
the context and NCCL as overhead, and the whole device as usable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from hfvram.errors import UsageError
from hfvram.estimate import common
from hfvram.estimate.common import GiB, MiB
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, PerGpu, Workload
from hfvram.spec import GROWING_KINDS, RECURRENT_KINDS, WINDOWED_KINDS, LayerKind, ModelSpec

ENGINE = "sglang"


@dataclass(frozen=True)
class CellSize:
    """Bytes per token of the pool on one rank (§3.2), split by what they serve."""

    full_bytes: float  # full-attention / MLA layers
    swa_bytes: float  # sliding / chunked layers (stored at swa_full_tokens_ratio of the tokens)
    swa_ratio: float
    #: recurrent state per request on one rank (hybrid linear attention / Mamba, §3.3)
    state_bytes_per_request: float

    @property
    def cell(self) -> float:
        """SGLang's ``cell_size``: full layers plus the SWA layers scaled by their share of the tokens."""
        return self.full_bytes + self.swa_ratio * self.swa_bytes

    @property
    def hybrid_swa(self) -> bool:
        return self.swa_bytes > 0 and self.full_bytes > 0


@dataclass(frozen=True)
class Settings:
    rules: str
    tp: int
    pp: int
    mem_fraction_static: float
    fraction_source: str
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    context_length: int
    kv_cache_dtype: str
    kv_bytes: float
    page_size: int
    swa_full_tokens_ratio: float
    mamba_full_memory_ratio: float
    max_running_requests: int | None
    max_total_tokens: int | None
    disable_cuda_graph: bool


# ---- mem_fraction_static ---------------------------------------------------------------------------------


def gpu_tier(rules: Mapping[str, Any], gpu_mem_mib: float) -> Mapping[str, Any]:
    """The chunked_prefill_size / cuda_graph_max_bs defaults of a GPU size (§3.1)."""
    for tier in rules["gpu_tiers"]:
        if gpu_mem_mib < tier["below_gib"] * 1024:
            return tier
    return rules["gpu_tiers"][-1]


def prefill_graph_count(rules: Mapping[str, Any], max_tokens: int) -> int:
    """Number of piecewise prefill CUDA graphs SGLang captures up to ``max_tokens``."""
    count = 0
    for start, stop, step in rules["prefill_graph_segments"]["segments"]:
        count += len(range(start, min(stop, max_tokens) + 1, step)) if start <= max_tokens else 0
    return count


def reserved_mib(
    rules: Mapping[str, Any],
    gpu_mem_mib: float,
    tp: int,
    pp: int,
    chunked_prefill_size: int,
    cuda_graph_max_bs: int,
    mla: bool,
) -> tuple[float, str]:
    """The memory SGLang keeps outside the static fraction, in MiB, by the current formula (§3.1)."""
    chunk = max(chunked_prefill_size, rules["reserve_chunk_floor"])
    graphs = prefill_graph_count(rules, chunked_prefill_size)
    prefill = rules["reserve_prefill_graph_mla_mib"] if mla else rules["reserve_prefill_graph_mib"] * graphs
    reserved = (
        rules["reserve_base_mib"]
        + rules["reserve_chunk_factor"] * chunk
        + tp * pp / rules["reserve_tp_pp_divisor"] * 1024
        + rules["reserve_decode_graph_factor"] * cuda_graph_max_bs
        + prefill
    )
    text = (
        f"{rules['reserve_base_mib']} + {rules['reserve_chunk_factor']}×{chunk} + {tp * pp}/"
        f"{rules['reserve_tp_pp_divisor']}×1024 + {rules['reserve_decode_graph_factor']}×{cuda_graph_max_bs} + "
        + (
            f"{prefill} (MLA prefill graphs)"
            if mla
            else f"{rules['reserve_prefill_graph_mib']}×{graphs} prefill graphs"
        )
    )
    if gpu_mem_mib > rules["reserve_large_gpu_threshold_gib"] * 1024 and reserved < rules["reserve_large_gpu_min_mib"]:
        reserved = rules["reserve_large_gpu_min_mib"]
        text += f", raised to {reserved} MiB (GPU > {rules['reserve_large_gpu_threshold_gib']} GiB)"
    return float(reserved), text + f" = {reserved:.0f} MiB"


def default_mem_fraction(
    rules: Mapping[str, Any],
    gpu_mem_mib: float | None,
    tp: int,
    pp: int,
    chunked_prefill_size: int,
    cuda_graph_max_bs: int,
    mla: bool,
    warnings: list[str],
) -> tuple[float, str]:
    """SGLang's default ``mem_fraction_static`` under the rule of the chosen release (§3.1 + history)."""
    if gpu_mem_mib is None:
        return float(rules["fraction_unknown_gpu"]), "GPU memory unknown: SGLang's fallback 0.88"
    rule = rules["fraction_rule"]
    if rule == "table":
        fraction = 0.88
        for threshold, value in rules["fraction_table"]:
            if tp * pp >= threshold:
                fraction = value
        if gpu_mem_mib > 80 * 1024:
            warnings.append("SGLang's pre-2025-06 fraction table was written for GPUs up to 80 GiB")
        return float(fraction), f"fixed table by tp×pp={tp * pp} (before 2025-06-10)"
    if rule == "gpu_class":
        reserve_gib = rules["gpu_class_reserve_gib"] + rules["gpu_class_reserve_per_tp_pp_gib"] * tp * pp
        warnings.append(
            "SGLang 2025-06..09 reserved memory by GPU class; only the H100 class rule is known, "
            "used here for every GPU [unverified]"
        )
        fraction = round((gpu_mem_mib - reserve_gib * 1024) / gpu_mem_mib, 3)
        return fraction, f"GPU-class reserve ({reserve_gib:g} GiB, H100 rule, #7054)"
    reserved, text = reserved_mib(rules, gpu_mem_mib, tp, pp, chunked_prefill_size, cuda_graph_max_bs, mla)
    return round(
        (gpu_mem_mib - reserved) / gpu_mem_mib, 3
    ), f"round(({gpu_mem_mib:.0f} − reserved) / {gpu_mem_mib:.0f}, 3), reserved = {text}"


# ---- token pool --------------------------------------------------------------------------------------------


def cell_size(spec: ModelSpec, tp: int, pp: int, kv_bytes: float, swa_ratio: float, hybrid_swa: bool) -> CellSize:
    """Bytes per token on the worst rank (§3.2): MHA/GQA heads per rank × (k + v), MLA latent whole on every
    rank, SWA layers at ``swa_full_tokens_ratio``; recurrent layers hold a per-request state instead."""
    layers = common.worst_stage_layers(spec, pp)
    full = sum(common.layer_kv_elems_per_token_rank(l, tp) for l in layers if l.kind in GROWING_KINDS) * kv_bytes
    swa = sum(common.layer_kv_elems_per_token_rank(l, tp) for l in layers if l.kind in WINDOWED_KINDS) * kv_bytes
    state = sum(common.layer_state_bytes_rank(l, tp, spec.dtype_bytes()) for l in layers if l.kind in RECURRENT_KINDS)
    if not hybrid_swa or full == 0:  # hybrid SWA memory off (or a pure-SWA model): SWA layers keep every token
        return CellSize(full_bytes=full + swa, swa_bytes=0.0, swa_ratio=swa_ratio, state_bytes_per_request=state)
    return CellSize(full_bytes=full, swa_bytes=swa, swa_ratio=swa_ratio, state_bytes_per_request=state)


def token_pool(
    pre_load_free: float,
    post_load_free: float,
    mem_fraction_static: float,
    cell: float,
    page_size: int,
    extra_reserved: float = 0.0,
) -> tuple[int, float]:
    """(max_total_num_tokens, rest bytes) from free memory before and after loading weights (§3.1):
    ``rest = post − pre × (1 − mfs) − extra``; tokens = rest // cell rounded down to the page size."""
    rest = post_load_free - pre_load_free * (1 - mem_fraction_static) - extra_reserved
    if rest <= 0 or cell <= 0:
        return 0, rest
    tokens = int(rest // cell)
    return tokens // page_size * page_size, rest


def mamba_split(rest: float, ratio: float, state_per_request: float, per_running: int) -> tuple[float, int, int]:
    """(mamba budget bytes, max_mamba_cache_size, running-request cap) for hybrid linear attention (§3.3)."""
    budget = rest * ratio / (1 + ratio)
    size = int(budget // state_per_request) if state_per_request > 0 else 0
    return budget, size, size // per_running


def max_running_requests(rules: Mapping[str, Any], tokens: int, context_length: int) -> int:
    """``resolve_max_num_reqs`` default (§3.2)."""
    scaled = int(tokens / max(1, context_length) * rules["max_running_requests_per_context"])
    clamped = max(rules["max_running_requests_min"], min(scaled, rules["max_running_requests_max"]))
    return max(0, min(clamped, tokens // 2))


def req_to_token_bytes(rules: Mapping[str, Any], running: int, context_length: int) -> int:
    """The int32 request-to-token table, allocated outside the static fraction (§3.2)."""
    return (running + 1) * (context_length + rules["req_to_token_extra_tokens"]) * rules["req_to_token_bytes"]


# ---- settings ----------------------------------------------------------------------------------------------


def _is_mla(spec: ModelSpec) -> bool:
    return any(layer.kind is LayerKind.MLA for layer in spec.layers)


def resolve_settings(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    rules: Mapping[str, Any],
    rules_version: str,
    warnings: list[str],
) -> Settings:
    tp, pp = common.resolve_parallel(choice, hardware, ("tp-size", "tp", "tensor-parallel-size"), ("pp-size", "pp"))
    gpu_mem_mib = hardware.gpu.gpu_memory_bytes / MiB if hardware else None
    tier = gpu_tier(rules, gpu_mem_mib if gpu_mem_mib is not None else 0.0)
    chunk = common.setting_int(choice, "chunked-prefill-size", default=tier["chunked_prefill_size"])
    graph_bs_default = tier["cuda_graph_max_bs_tp4"] if tp >= 4 else tier["cuda_graph_max_bs"]
    disable_graphs = common.setting_bool(choice, "disable-cuda-graph")
    graph_bs = 0 if disable_graphs else common.setting_int(choice, "cuda-graph-max-bs", default=graph_bs_default)
    fraction = choice.gpu_util if choice.gpu_util is not None else common.setting_float(choice, "mem-fraction-static")
    if fraction is None:
        fraction, source = default_mem_fraction(rules, gpu_mem_mib, tp, pp, chunk, graph_bs, _is_mla(spec), warnings)
        source = f"default: {source}"
    else:
        source = "given"
    if not 0 < fraction < 1:
        raise UsageError(f"mem-fraction-static must be in (0, 1), got {fraction}")
    if spec.multimodal:
        warnings.append(
            "SGLang lowers mem_fraction_static further for vision-language models "
            "(adjust_mem_fraction_for_vlm); not modelled [unverified]"
        )

    context = common.setting_int(choice, "context-length") or workload.context or spec.max_position_embeddings
    if context is None:
        raise UsageError("the model does not state its maximum length; give --context")
    kv_name = workload.kv_dtype if workload.kv_dtype != "auto" else (common.setting(choice, "kv-cache-dtype") or "auto")
    kv_bytes = common.kv_dtype_bytes(kv_name, spec.dtype_bytes())
    backend = (common.setting(choice, "attention-backend") or "").lower()
    page_default = 64 if backend in ("flashmla", "trtllm_mla") else rules["page_size"]
    return Settings(
        rules=rules_version,
        tp=tp,
        pp=pp,
        mem_fraction_static=float(fraction),
        fraction_source=source,
        chunked_prefill_size=int(chunk),
        cuda_graph_max_bs=int(graph_bs),
        context_length=int(context),
        kv_cache_dtype=common.canonical_kv_dtype(kv_name, spec.dtype),
        kv_bytes=kv_bytes,
        page_size=int(common.setting_int(choice, "page-size", default=page_default)),
        swa_full_tokens_ratio=common.setting_float(
            choice, "swa-full-tokens-ratio", default=rules["swa_full_tokens_ratio"]
        ),
        mamba_full_memory_ratio=common.setting_float(
            choice, "mamba-full-memory-ratio", default=rules["mamba_full_memory_ratio"]
        ),
        max_running_requests=common.setting_int(choice, "max-running-requests"),
        max_total_tokens=common.setting_int(choice, "max-total-tokens"),
        disable_cuda_graph=disable_graphs,
    )


# ---- profile -----------------------------------------------------------------------------------------------


class SglangProfile:
    name = ENGINE

    def __init__(self) -> None:
        self.data: Mapping[str, Any] = common.load_engine_data(ENGINE)
        self.rule_versions: tuple[str, ...] = tuple(sorted(self.data.get("versions", {}), key=common.version_key))

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        rules_version, rules = common.engine_rules(ENGINE, choice.version)
        warnings: list[str] = []
        explain: dict[str, str] = {}
        common.require_weights(spec)
        s = resolve_settings(spec, hardware, choice, workload, rules, rules_version, warnings)
        context = workload.context or s.context_length
        if context > s.context_length:
            warnings.append(f"context {context} is longer than SGLang's context_length {s.context_length}")
        if spec.max_position_embeddings and s.context_length > spec.max_position_embeddings:
            warnings.append(
                f"context_length {s.context_length} exceeds the model's {spec.max_position_embeddings}: SGLang "
                "refuses it unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
            )

        split = common.weights_per_rank(spec, s.tp, s.pp, vocab_padding=rules["vocab_padding"])
        weights = split.bytes
        explain["weights"] = split.explain

        overhead = int(rules["cuda_context_gib"] * GiB + (rules["nccl_init_gib"] * GiB if s.tp * s.pp > 1 else 0))
        explain["overhead"] = (
            f"CUDA context {rules['cuda_context_gib']} GiB"
            + (f" + NCCL init {rules['nccl_init_gib']} GiB [unverified]" if s.tp * s.pp > 1 else "")
            + ", taken before SGLang's baseline and so charged implicitly (§1.3, §3.1)"
        )
        hybrid_swa = not common.setting_bool(choice, "disable-hybrid-swa-memory")
        cell = cell_size(spec, s.tp, s.pp, s.kv_bytes, s.swa_full_tokens_ratio, hybrid_swa)
        explain["cell_size"] = (
            f"{cell.cell:.0f} B per token on the worst rank ({s.kv_cache_dtype}): full/MLA layers {cell.full_bytes:.0f} B"
            + (f" + {s.swa_full_tokens_ratio} × SWA layers {cell.swa_bytes:.0f} B" if cell.hybrid_swa else "")
            + (
                f"; recurrent state {cell.state_bytes_per_request:.0f} B per request"
                if cell.state_bytes_per_request
                else ""
            )
            + " (§3.2)"
        )

        memory = hardware.gpu.gpu_memory_bytes if hardware else 0
        #: a model that keeps nothing per sequence (encoder-only, attention-free) needs no token pool to start
        no_cache = cell.cell <= 0 and cell.state_bytes_per_request <= 0
        tokens, running, mamba_size, slack = None, s.max_running_requests, None, 0.0
        if hardware is not None:
            pre = memory - overhead
            post = pre - weights
            tokens, rest = token_pool(pre, post, s.mem_fraction_static, cell.cell, s.page_size)
            if cell.state_bytes_per_request > 0:
                warnings.append(
                    "recurrent state counted at the layer's dtype (else the model's); SGLang's "
                    "mamba_ssm_dtype and per-model state shapes were not cross-checked [unverified]"
                )
            if cell.state_bytes_per_request > 0 and rest > 0:
                budget, mamba_size, cap = mamba_split(
                    rest,
                    s.mamba_full_memory_ratio,
                    cell.state_bytes_per_request,
                    rules["mamba_cache_per_running_request"],
                )
                tokens, rest = token_pool(pre, post, s.mem_fraction_static, cell.cell, s.page_size, budget)
                running = min(running, cap) if running else cap
                explain["mamba"] = (
                    f"mamba budget = rest × {s.mamba_full_memory_ratio}/(1+{s.mamba_full_memory_ratio})"
                    f" = {budget / GiB:.2f} GiB → {mamba_size} request states; running ≤ {cap} (§3.3)"
                )
            if s.max_total_tokens is not None:
                tokens = min(tokens, s.max_total_tokens)
            slack = pre * (1 - s.mem_fraction_static)
            explain["budget"] = (
                f"mem_fraction_static {s.mem_fraction_static} ({s.fraction_source}); free before loading "
                f"{pre / GiB:.2f} GiB; weights + KV pool ≤ {pre * s.mem_fraction_static / GiB:.2f} GiB; pool = "
                f"{max(rest, 0) / GiB:.2f} GiB → {tokens} tokens (page {s.page_size})"
            )
            if tokens <= 0 and not no_cache:
                warnings.append(
                    f"the weights leave no memory for the KV cache under mem_fraction_static={s.mem_fraction_static}: "
                    "SGLang stops at start-up ('Not enough memory' / 'leave no GPU memory for the KV cache')"
                )
        else:
            reserved, text = reserved_mib(
                rules, 0, s.tp, s.pp, s.chunked_prefill_size, s.cuda_graph_max_bs, _is_mla(spec)
            )
            slack = reserved * MiB
            explain["budget"] = f"no GPU: activations taken as SGLang's own reserve estimate {text} [approximation]"

        auto_running = max_running_requests(rules, tokens, s.context_length) if tokens else None
        running = min(running, auto_running) if running and auto_running else (running or auto_running)
        table = req_to_token_bytes(rules, running or 0, s.context_length)
        activations = int(slack)
        explain["activations"] = (
            f"the {1 - s.mem_fraction_static:.3f} of free memory outside mem_fraction_static, left for activations, "
            f"CUDA graphs (chunked_prefill_size {s.chunked_prefill_size}, cuda_graph_max_bs {s.cuda_graph_max_bs}) and "
            + (
                f"req_to_token ({running} + 1) × ({s.context_length} + 4) × 4 B = {table / GiB:.2f} GiB (§3.1, §3.2)"
                if running is not None
                else "the req_to_token table (none: no token pool to size it)"
            )
        )
        if hardware is not None and table > slack:
            warnings.append(
                f"req_to_token table {table / GiB:.2f} GiB exceeds the {slack / GiB:.2f} GiB outside "
                "mem_fraction_static: lower --max-running-requests or context-length"
            )

        window = _window(spec)
        kv_needed = int(
            pool_bytes_needed(cell, window, context, workload.concurrency, s.page_size, s.mamba_full_memory_ratio)
        )
        explain["kv_cache"] = (
            f"pool bytes for {workload.concurrency} × {context} tokens at {cell.cell:.0f} B"
            + (
                f"; SWA pool ({s.swa_full_tokens_ratio} of the tokens) holds min(window {window}, context) per request"
                if cell.hybrid_swa
                else ""
            )
            + (
                f"; mamba share 1 : {s.mamba_full_memory_ratio} with {cell.state_bytes_per_request:.0f} B state per request"
                if cell.state_bytes_per_request
                else ""
            )
        )
        capacity = _capacity(tokens, cell, window, running, mamba_size, workload, s, context)

        per_gpu = PerGpu(
            weights=weights,
            kv_cache=kv_needed,
            activations=activations,
            overhead=overhead,
            usable=memory,
            memory=memory,
        )
        decode = None
        active = common.active_weight_bytes(spec)
        if hardware is not None and active is not None:
            decode = common.decode_tokens_per_second(
                active / s.tp + cell.cell * context, hardware.gpu.memory_bandwidth_gbs
            )
            explain["decode"] = "upper bound: bandwidth / (active weights per GPU + KV at the context), one sequence"
        engine = {
            "name": ENGINE,
            "version": rules_version,
            "requested_version": choice.version,
            "gpu_util": s.mem_fraction_static,
            "mem_fraction_static": s.mem_fraction_static,
            "mem_fraction_static_source": s.fraction_source,
            "chunked_prefill_size": s.chunked_prefill_size,
            "cuda_graph_max_bs": s.cuda_graph_max_bs,
            "context_length": s.context_length,
            "kv_cache_dtype": s.kv_cache_dtype,
            "page_size": s.page_size,
            "cell_size": cell.cell,
            "swa_full_tokens_ratio": s.swa_full_tokens_ratio if cell.hybrid_swa else None,
            "max_total_num_tokens": tokens,
            "max_running_requests": running,
            "max_mamba_cache_size": mamba_size,
            "req_to_token_bytes": table,
            "tp_size": s.tp,
            "pp_size": s.pp,
        }
        return common.finish_estimate(
            spec=spec,
            hardware=hardware,
            engine=engine,
            workload=replace(workload, context=context, kv_dtype=s.kv_cache_dtype),
            per_gpu=per_gpu,
            capacity=capacity,
            decode=decode,
            warnings=warnings,
            explain=explain,
            tp=s.tp,
            pp=s.pp,
            force_does_not_fit=hardware is not None and not tokens and not no_cache,
        )


def _window(spec: ModelSpec) -> int | None:
    windows = [layer.window for layer in spec.layers if layer.kind in WINDOWED_KINDS and layer.window]
    return max(windows) if windows else None


def pool_bytes_needed(
    cell: CellSize, window: int | None, context: int, concurrency: int, page_size: int, mamba_ratio: float
) -> float:
    """Bytes of SGLang's pool (the ``rest`` it splits) that ``concurrency`` requests of ``context`` tokens need.

    The full pool must hold every token; the SWA pool (``ratio`` × the full pool's tokens) holds
    ``min(window, context)`` per request; with recurrent layers the pool is split full : mamba = 1 : r, and
    the mamba part must hold one state per request (§3.2, §3.3)."""
    tokens: float = math.ceil(context / page_size) * page_size * concurrency
    if cell.hybrid_swa and window:
        tokens = max(tokens, min(window, context) * concurrency / cell.swa_ratio)
    full_part = tokens * cell.cell
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
    s: Settings,
    context: int,
) -> Capacity:
    """Pool tokens, full-length requests that fit (also bounded by max_running_requests and the mamba pool)
    and the longest context at the workload's concurrency (bounded by context_length)."""
    if tokens is None:
        return Capacity()
    per_request = math.ceil(context / s.page_size) * s.page_size
    limits = [tokens / per_request]
    if cell.hybrid_swa and window:
        limits.append(tokens * cell.swa_ratio / min(window, context))
    if running:
        limits.append(float(running))
    if mamba_size is not None:
        limits.append(float(mamba_size))
    concurrency = max(0.0, min(limits))
    max_context = min(tokens // max(1, workload.concurrency) // s.page_size * s.page_size, s.context_length)
    if (running is not None and workload.concurrency > running) or (
        mamba_size is not None and workload.concurrency > mamba_size
    ):
        max_context = 0
    return Capacity(kv_tokens=tokens, max_concurrency=concurrency, max_context=max_context)


PROFILE = SglangProfile()
