"""SGLang: ``mem_fraction_static``, the RadixAttention token pool and what is left for the rest.

Rules follow ``docs/engines/sglang.md`` (read in SGLang's source; section anchors in parentheses below); constants live in
``hfvram/engines/sglang/rules.toml``. Per GPU (the worst rank):

    pre_load_free  = memory − CUDA context − NCCL init                         (sglang.md#sglang-budget baseline, common.md#cuda-context)
    rest           = (pre_load_free − weights) − pre_load_free × (1 − mem_fraction_static)
    rest          −= mamba state pool (hybrid linear attention, sglang.md#sglang-mamba-state)
    tokens         = rest // cell_size // page_size × page_size                (sglang.md#sglang-mem-fraction, sglang.md#sglang-token-pool)

So weights and the KV pool share ``pre_load_free × mem_fraction_static``; the other ``1 − mfs`` is left for
activations, CUDA graphs and the ``req_to_token`` table. hfvram reports that slack as the activations term,
the context and NCCL as overhead, and the whole device as usable.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from hfvram.engines.base import ProfileBase
from hfvram.engines.vllm import features
from hfvram.errors import UsageError
from hfvram.estimate import common, multimodal
from hfvram.estimate.common import GiB, MiB, Rules
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, PerGpu, Workload
from hfvram.spec import GROWING_KINDS, RECURRENT_KINDS, WINDOWED_KINDS, Layer, LayerKind, ModelSpec

ENGINE = "sglang"


@dataclass(frozen=True)
class CellSize:
    """Bytes per token of the pool on one rank (sglang.md#sglang-token-pool), split by what they serve."""

    full_bytes: float  # full-attention / MLA layers
    swa_bytes: float  # sliding / chunked layers (stored at swa_full_tokens_ratio of the tokens)
    swa_ratio: float
    #: recurrent state per request on one rank (hybrid linear attention / Mamba, sglang.md#sglang-mamba-state)
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
    #: SWA layers keep a smaller pool of their own (off with --disable-hybrid-swa-memory)
    hybrid_swa_memory: bool = True
    #: --dp-size: replicas of tp × pp GPUs each (without --enable-dp-attention); figures are per GPU of one
    dp_size: int = 1
    #: the context is SGLang's own (context_length), not a --context the user asked about
    context_is_default: bool = False
    #: --cpu-offload-gb: decoder-layer parameters moved to host memory (OffloaderV1, sglang.md#sglang-features)
    cpu_offload_gb: float = 0.0
    #: the LoRA memory pool when its rank and target modules are given (None otherwise; sglang.md#sglang-features)
    lora: features.LoraSettings | None = None


# ---- mem_fraction_static ---------------------------------------------------------------------------------


def gpu_tier(rules: Mapping[str, Any], gpu_mem_mib: float) -> Mapping[str, Any]:
    """The chunked_prefill_size / cuda_graph_max_bs defaults of a GPU size (sglang.md#sglang-mem-fraction)."""
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
    """The memory SGLang keeps outside the static fraction, in MiB, by the current formula (sglang.md#sglang-mem-fraction)."""
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
    """SGLang's default ``mem_fraction_static`` under the rule of the chosen release (sglang.md#sglang-mem-fraction + history)."""
    if gpu_mem_mib is None:
        fallback = float(rules["fraction_unknown_gpu"])
        return fallback, f"GPU memory unknown: SGLang's fallback {fallback:g}"
    rule = rules["fraction_rule"]
    if rule == "table":
        table = rules["fraction_table"]
        fraction = table[0][1]
        for threshold, value in table:
            if tp * pp >= threshold:
                fraction = value
        written_for = rules["fraction_table_max_gpu_gib"]
        if gpu_mem_mib > written_for * 1024:
            warnings.append(f"SGLang's pre-2025-06 fraction table was written for GPUs up to {written_for:g} GiB")
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


def kv_elems_of(layers: Iterable[Layer], tp: int, kinds: Collection[LayerKind]) -> int:
    """K+V elements per token on one rank over the layers of ``kinds``."""
    return sum(common.layer_kv_elems_per_token_rank(layer, tp) for layer in layers if layer.kind in kinds)


def hybrid_swa_pool(spec: ModelSpec, choice: EngineChoice, rules: Mapping[str, Any], warnings: list[str]) -> bool:
    """Whether SGLang gives the sliding-window layers a pool of their own (docs/engines/sglang.md#sglang-swa-list):
    ``ModelConfig._derive_hybrid_model`` sets ``is_hybrid_swa`` only for the architectures of ``is_hybrid_swa_model``'s
    hard-coded set (and not with --disable-hybrid-swa-memory); any other model caches its sliding-window layers at
    full length in the one pool, which hfvram says when the model has such layers."""
    if common.setting_bool(choice, "disable-hybrid-swa-memory"):
        return False
    listed = spec.architecture in set(rules.get("hybrid_swa_architectures", ()))
    windowed = any(layer.kind in WINDOWED_KINDS for layer in spec.layers)
    full = any(layer.kind not in WINDOWED_KINDS and layer.kv_elems_per_token for layer in spec.layers)
    if windowed and full and not listed:
        warnings.append(
            f"SGLang keeps no separate sliding-window pool for {spec.architecture or 'this architecture'} (not in "
            "is_hybrid_swa_model's list): its sliding-window layers are cached at full length in the one KV pool "
            "(docs/engines/sglang.md#sglang-swa-list)"
        )
    return listed


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


def max_running_requests(rules: Mapping[str, Any], tokens: int, context_length: int) -> int:
    """``resolve_max_num_reqs`` default (sglang.md#sglang-token-pool)."""
    scaled = int(tokens / max(1, context_length) * rules["max_running_requests_per_context"])
    clamped = max(rules["max_running_requests_min"], min(scaled, rules["max_running_requests_max"]))
    return max(0, min(clamped, tokens // 2))


def req_to_token_bytes(rules: Mapping[str, Any], running: int, context_length: int) -> int:
    """The int32 request-to-token table, allocated outside the static fraction (sglang.md#sglang-token-pool)."""
    return (running + 1) * (context_length + rules["req_to_token_extra_tokens"]) * rules["req_to_token_bytes"]


# ---- settings ----------------------------------------------------------------------------------------------


def _is_mla(spec: ModelSpec) -> bool:
    return any(layer.kind is LayerKind.MLA for layer in spec.layers)


VLM_FRACTION_NOTE = (
    "SGLang lowers mem_fraction_static further for vision-language models (adjust_mem_fraction_for_vlm); "
    "not modelled [unverified]"
)


def resolve_parallel(choice: EngineChoice, hardware: Hardware | None) -> tuple[int, int, int]:
    """(tp, pp, data-parallel replicas): ``--dp-size`` replicas of tp × pp GPUs each (SGLang's
    DataParallelController moves ``base_gpu_id`` by a whole TP group per replica, sglang.md#sglang-parallelism);
    with ``--enable-dp-attention`` the DP ranks live inside the TP group (tp GPUs in all, one replica)."""
    dp = common.setting_int(choice, "dp-size", "dp", "data-parallel-size") or 1
    replicas = 1 if common.setting_bool(choice, "enable-dp-attention") else dp
    tp, pp = common.resolve_parallel(
        choice, hardware, ("tp-size", "tp", "tensor-parallel-size"), ("pp-size", "pp"), dp=replicas
    )
    return tp, pp, replicas


def resolve_settings(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    rules: Mapping[str, Any],
    rules_version: str,
    warnings: list[str],
) -> Settings:
    """SGLang's effective settings: the user's ServerArgs over the defaults of the rule version and GPU tier.
    Longer than 60 lines: one keyword per ServerArgs field it resolves, read in one place."""
    tp, pp, replicas = resolve_parallel(choice, hardware)
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
    if not 0 < fraction <= 1:
        raise UsageError(f"mem-fraction-static must be in (0, 1], got {fraction}")
    if spec.multimodal:
        warnings.append(VLM_FRACTION_NOTE)

    context = common.setting_int(choice, "context-length") or workload.context or spec.max_position_embeddings
    if context is None:
        raise UsageError("the model does not state its maximum length; give --context")
    kv_name = workload.kv_dtype if workload.kv_dtype != "auto" else (common.setting(choice, "kv-cache-dtype") or "auto")
    kv_bytes = common.kv_dtype_bytes(kv_name, spec.dtype_bytes())
    warnings.extend(unmodelled_flag_warnings(spec, choice, rules))
    backend = (common.setting(choice, "attention-backend") or "").lower()
    page_default = rules["mla_backend_page_size"] if backend in rules["mla_backends_paged"] else rules["page_size"]
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
        hybrid_swa_memory=hybrid_swa_pool(spec, choice, rules, warnings),
        dp_size=replicas,
        context_is_default=workload.context is None,
        cpu_offload_gb=common.setting_float(choice, "cpu-offload-gb", default=0.0) or 0.0,
        lora=lora_pool_setting(spec, choice, rules, warnings),
    )


def lora_pool_setting(
    spec: ModelSpec, choice: EngineChoice, rules: Rules, warnings: list[str]
) -> features.LoraSettings | None:
    """SGLang's LoRA memory pool (docs/engines/sglang.md#sglang-features): ``--max-loras-per-batch`` slots (default
    8) of ``--max-lora-rank`` for ``--lora-target-modules all``, in the model dtype. Without an explicit rank and
    ``all``, the rank and target modules come from the adapters of ``--lora-paths``, which hfvram does not read: a
    warning, nothing counted. None without LoRA."""
    paths = common.setting(choice, "lora-paths")
    if not common.setting_bool(choice, "enable-lora") and not paths:
        return None
    rank = common.setting_int(choice, "max-lora-rank")
    targets = (common.setting(choice, "lora-target-modules") or "").strip().lower()
    slots = common.setting_int(choice, "max-loras-per-batch") or int(rules["lora_default_max_loras_per_batch"])
    if slots < 1 or (rank is not None and rank < 1):
        raise UsageError(f"max-loras-per-batch and max-lora-rank must be positive, got {slots} and {rank}")
    if rank is None or targets != "all":
        warnings.append(
            "--enable-lora: SGLang sizes its LoRA pool from the rank and target modules of the adapters in "
            "--lora-paths, which hfvram does not read; the pool is not counted (give --max-lora-rank R and "
            "--lora-target-modules all to have it sized)"
        )
        return None
    return features.LoraSettings(max_loras=slots, max_lora_rank=rank, dtype_bytes=spec.dtype_bytes())


def unmodelled_flag_warnings(spec: ModelSpec, choice: EngineChoice, rules: Rules) -> list[str]:
    """One warning per flag SGLang reads that hfvram does not model (sglang.md#sglang-unmodelled-flags): the
    TOML's ``unmodelled_flags``, ``--speculative-algorithm`` other than NGRAM, and ``--quantization`` on a
    checkpoint that states none (SGLang quantizes it while loading; hfvram counts it as stored)."""
    notes = []
    for flag, left_out in rules["unmodelled_flags"].items():
        raw = common.setting(choice, flag)
        if raw is None or raw.strip().lower() in ("false", "0", "no", "off"):
            continue
        shown = f"--{flag}" if raw.strip().lower() in ("", "true") else f"--{flag} {raw[:60]}"
        notes.append(f"{shown}: hfvram does not account for {left_out}")
    algorithm = (common.setting(choice, "speculative-algorithm") or "").strip()
    if algorithm.upper() == "NGRAM":
        notes.append("speculative decoding (NGRAM) drafts from the tokens already seen: no GPU memory")
    elif algorithm:
        draft = common.setting(choice, "speculative-draft-model-path")
        notes.append(
            f"--speculative-algorithm {algorithm[:40]}"
            + (f" (draft {draft[:120]})" if draft else "")
            + ": hfvram does not account for the draft model's weights and the KV cache of its layers, which "
            "SGLang adds to each token's cell (n-gram drafting alone costs no memory)"
        )
    quantization = (common.setting(choice, "quantization") or "").strip().lower()
    if quantization not in ("", "none", "auto") and spec.quantization is None:
        notes.append(
            f"--quantization {quantization[:40]}: the checkpoint states no quantization; SGLang quantizes it while "
            "loading (or refuses a method that needs a quantized checkpoint); hfvram does not model that and counts "
            "the weights as stored"
        )
    return notes


# ---- the breakdown ---------------------------------------------------------------------------------------


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
    return pool.tokens * cell.cell + (pool.mamba_budget or 0.0)


def overhead_bytes(cuda_context_gib: float, nccl_init_gib: float | None) -> int:
    """CUDA context plus NCCL init (None: a single GPU), taken before SGLang's baseline."""
    return int(cuda_context_gib * GiB + (nccl_init_gib * GiB if nccl_init_gib is not None else 0))


def weights_split(spec: ModelSpec, settings: Settings, rules: Rules) -> common.WeightsSplit:
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
        vocab_padding=rules["vocab_padding"],
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
        lora = features.lora_term(spec, settings.lora, settings.tp, layers, 0, {}, engine="sglang")
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


def compute(
    spec: ModelSpec, hardware: Hardware | None, settings: Settings, workload: Workload, rules: Rules
) -> Breakdown:
    """Every term for ``settings``: weights, overhead, cell size, token pool, the slack outside the static
    fraction and the req_to_token table in it, what the workload needs and the decode bound."""
    context = workload.context or settings.context_length
    split = feature_weights(spec, settings, weights_split(spec, settings, rules))
    cuda_context_gib = rules["cuda_context_gib"]
    nccl_init_gib = rules["nccl_init_gib"] if settings.tp * settings.pp > 1 else None
    overhead = overhead_bytes(cuda_context_gib, nccl_init_gib)
    cell = cell_size(
        spec, settings.tp, settings.pp, settings.kv_bytes, settings.swa_full_tokens_ratio, settings.hybrid_swa_memory
    )
    pool, slack, reserve_text = pool_and_slack(spec, hardware, overhead, split.bytes, cell, settings, rules)
    running = running_requests(settings.max_running_requests, pool, rules, settings.context_length)
    window = _window(spec)
    needed = pool_bytes_needed(
        cell, window, context, workload.concurrency, settings.page_size, settings.mamba_full_memory_ratio
    )
    start = start_condition(pool, settings, int(rules["max_req_input_margin"]))
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
        table=req_to_token_bytes(rules, running or 0, settings.context_length),
        req_to_token_extra_tokens=int(rules["req_to_token_extra_tokens"]),
        req_to_token_bytes=int(rules["req_to_token_bytes"]),
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
    rules: Rules,
) -> tuple[PoolTerm | None, float, str | None]:
    """(token pool, the slack outside mem_fraction_static, the reserve text without a GPU): with a GPU the slack
    is ``(1 − mfs)`` of the free memory before loading; without one, SGLang's own reserve estimate."""
    if hardware is not None:
        pool = pool_term(hardware.gpu.gpu_memory_bytes - overhead, weights, cell, settings, rules)
        slack = pool.pre_load_free * (1 - settings.mem_fraction_static)
        if settings.fraction_source == "given":
            # a fraction below SGLang's default leaves more outside the static pool than it uses: the server
            # starts with its pool sized from free memory, and only its own reserve is booked as activations
            # (sglang.md#sglang-mem-fraction); a fraction above the default leaves less, booked as it is
            reserved, _ = reserved_mib(
                rules,
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
        rules, 0, settings.tp, settings.pp, settings.chunked_prefill_size, settings.cuda_graph_max_bs, _is_mla(spec)
    )
    return None, reserved * MiB, reserve_text


def pool_term(pre: float, weights: int, cell: CellSize, settings: Settings, rules: Rules) -> PoolTerm:
    """The pool from free memory before loading (``pre``) and the weights; with recurrent layers the mamba
    budget comes off the rest first (docs/engines/sglang.md#sglang-mamba-state); ``max-total-tokens`` caps the tokens."""
    post = pre - weights
    tokens, rest = token_pool(pre, post, settings.mem_fraction_static, cell.cell, settings.page_size)
    mamba_budget = mamba_size = mamba_cap = None
    if cell.state_bytes_per_request > 0 and rest > 0:
        mamba_budget, mamba_size, mamba_cap = mamba_split(
            rest,
            settings.mamba_full_memory_ratio,
            cell.state_bytes_per_request,
            rules["mamba_cache_per_running_request"],
        )
        tokens, rest = token_pool(pre, post, settings.mem_fraction_static, cell.cell, settings.page_size, mamba_budget)
    if settings.max_total_tokens is not None:
        tokens = min(tokens, settings.max_total_tokens)
    return PoolTerm(pre, rest, tokens, mamba_budget, mamba_size, mamba_cap)


def running_requests(given: int | None, pool: PoolTerm | None, rules: Rules, context_length: int) -> int | None:
    """max_running_requests: the user's, capped by the mamba pool and by ``resolve_max_num_reqs``."""
    running = given
    if pool is not None and pool.mamba_cap is not None:
        running = min(running, pool.mamba_cap) if running else pool.mamba_cap
    tokens = pool.tokens if pool is not None else None
    auto_running = max_running_requests(rules, tokens, context_length) if tokens else None
    return min(running, auto_running) if running and auto_running else (running or auto_running)


# ---- narration --------------------------------------------------------------------------------------------


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
        + (f" + {settings.swa_full_tokens_ratio} × SWA layers {cell.swa_bytes:.0f} B" if cell.hybrid_swa else "")
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
            if cell.hybrid_swa
            else ""
        )
        + (
            f"; mamba share 1 : {settings.mamba_full_memory_ratio} with {cell.state_bytes_per_request:.0f} B state per request"
            if cell.state_bytes_per_request
            else ""
        )
    )


# ---- profile -----------------------------------------------------------------------------------------------


class SglangProfile(ProfileBase):
    name = ENGINE

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        rules_version, rules = self.rules(choice.version)
        notes: list[str] = []
        common.require_weights(spec)
        settings = resolve_settings(spec, hardware, choice, workload, rules, rules_version, notes)
        parts = compute(spec, hardware, settings, workload, rules)
        warnings, explain = narrate(parts, spec, workload)
        memory = hardware.gpu.gpu_memory_bytes if hardware else 0
        per_gpu = PerGpu(
            weights=parts.weights.bytes,
            kv_cache=parts.kv_needed,
            activations=int(parts.slack),
            overhead=parts.overhead,
            usable=memory,
            memory=memory,
        )
        return common.finish_estimate(
            spec=spec,
            hardware=hardware,
            engine=engine_report(parts, choice),
            workload=replace(workload, context=parts.context, kv_dtype=settings.kv_cache_dtype),
            per_gpu=per_gpu,
            capacity=parts.capacity,
            decode=parts.decode,
            warnings=[*notes, *warnings],
            explain=explain,
            tp=settings.tp,
            pp=settings.pp,
            force_does_not_fit=parts.refused or parts.requests_short,
        )


def engine_report(parts: Breakdown, choice: EngineChoice) -> dict[str, object]:
    """The settings the estimate assumed, under SGLang's names (``Estimate.engine``)."""
    settings, pool = parts.settings, parts.pool
    return {
        "name": ENGINE,
        "version": settings.rules,
        "requested_version": choice.version,
        "gpu_util": settings.mem_fraction_static,
        "mem_fraction_static": settings.mem_fraction_static,
        "mem_fraction_static_source": settings.fraction_source,
        "chunked_prefill_size": settings.chunked_prefill_size,
        "cuda_graph_max_bs": settings.cuda_graph_max_bs,
        "context_length": settings.context_length,
        "kv_cache_dtype": settings.kv_cache_dtype,
        "page_size": settings.page_size,
        "cell_size": parts.cell.cell,
        "swa_full_tokens_ratio": settings.swa_full_tokens_ratio if parts.cell.hybrid_swa else None,
        "max_total_num_tokens": parts.tokens,
        "max_running_requests": parts.running,
        "max_mamba_cache_size": pool.mamba_size if pool else None,
        "req_to_token_bytes": parts.table,
        "tp_size": settings.tp,
        "pp_size": settings.pp,
        "dp_size": settings.dp_size,
        "max_req_len": parts.max_req_len,
    }


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
        limits.append(tokens * cell.swa_ratio / min(window, context))
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


PROFILE = SglangProfile()
