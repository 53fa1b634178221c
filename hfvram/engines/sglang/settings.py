"""SGLang's effective settings: the user's ServerArgs over the defaults of the rule version and GPU tier, with the
default ``mem_fraction_static`` worked out as SGLang does (docs/engines/sglang.md#sglang-mem-fraction)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hfvram.engines.base import unmodelled_flag_notes
from hfvram.engines.sglang.constants import SglangConstants
from hfvram.engines.vllm import features
from hfvram.errors import UsageError
from hfvram.estimate import common
from hfvram.estimate.common import MiB
from hfvram.estimate.types import EngineChoice, Hardware, Workload
from hfvram.spec import WINDOWED_KINDS, LayerKind, ModelSpec


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
    #: --disable-radix-cache (the chunk cache), --disable-overlap-schedule and a speculative algorithm: what
    #: decides whether the SWA pool is capped (docs/engines/sglang.md#sglang-swa-chunk-cap)
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    speculative: bool = False
    #: the warnings written while the settings were resolved (they come first in the estimate's warnings)
    notes: tuple[str, ...] = ()


# ---- mem_fraction_static ----------------------------------------------------------------------------------


def gpu_tier(constants: SglangConstants, gpu_mem_mib: float) -> Mapping[str, Any]:
    """The chunked_prefill_size / cuda_graph_max_bs defaults of a GPU size (sglang.md#sglang-mem-fraction)."""
    for tier in constants.gpu_tiers:
        if gpu_mem_mib < tier["below_gib"] * 1024:
            return tier
    return constants.gpu_tiers[-1]


def prefill_graph_count(constants: SglangConstants, max_tokens: int) -> int:
    """Number of piecewise prefill CUDA graphs SGLang captures up to ``max_tokens``."""
    count = 0
    for start, stop, step in constants.prefill_graph_segments["segments"]:
        count += len(range(start, min(stop, max_tokens) + 1, step)) if start <= max_tokens else 0
    return count


def reserved_mib(
    constants: SglangConstants,
    gpu_mem_mib: float,
    tp: int,
    pp: int,
    chunked_prefill_size: int,
    cuda_graph_max_bs: int,
    mla: bool,
) -> tuple[float, str]:
    """The memory SGLang keeps outside the static fraction, in MiB, by the current formula (sglang.md#sglang-mem-fraction)."""
    chunk = max(chunked_prefill_size, constants.reserve_chunk_floor)
    graphs = prefill_graph_count(constants, chunked_prefill_size)
    prefill = constants.reserve_prefill_graph_mla_mib if mla else constants.reserve_prefill_graph_mib * graphs
    reserved = (
        constants.reserve_base_mib
        + constants.reserve_chunk_factor * chunk
        + tp * pp / constants.reserve_tp_pp_divisor * 1024
        + constants.reserve_decode_graph_factor * cuda_graph_max_bs
        + prefill
    )
    text = (
        f"{constants.reserve_base_mib} + {constants.reserve_chunk_factor}×{chunk} + {tp * pp}/"
        f"{constants.reserve_tp_pp_divisor}×1024 + {constants.reserve_decode_graph_factor}×{cuda_graph_max_bs} + "
        + (
            f"{prefill} (MLA prefill graphs)"
            if mla
            else f"{constants.reserve_prefill_graph_mib}×{graphs} prefill graphs"
        )
    )
    if (
        gpu_mem_mib > constants.reserve_large_gpu_threshold_gib * 1024
        and reserved < constants.reserve_large_gpu_min_mib
    ):
        reserved = constants.reserve_large_gpu_min_mib
        text += f", raised to {reserved} MiB (GPU > {constants.reserve_large_gpu_threshold_gib} GiB)"
    return float(reserved), text + f" = {reserved:.0f} MiB"


def default_mem_fraction(
    constants: SglangConstants,
    gpu_mem_mib: float | None,
    tp: int,
    pp: int,
    chunked_prefill_size: int,
    cuda_graph_max_bs: int,
    mla: bool,
) -> tuple[float, str, list[str]]:
    """SGLang's default ``mem_fraction_static`` under the rule of the chosen release (sglang.md#sglang-mem-fraction + history),
    where it came from, and the warnings the rule brings."""
    warnings: list[str] = []
    if gpu_mem_mib is None:
        fallback = float(constants.fraction_unknown_gpu)
        return fallback, f"GPU memory unknown: SGLang's fallback {fallback:g}", warnings
    rule = constants.fraction_rule
    if rule == "table":
        table = constants.fraction_table
        fraction = table[0][1]
        for threshold, value in table:
            if tp * pp >= threshold:
                fraction = value
        written_for = constants.fraction_table_max_gpu_gib
        if gpu_mem_mib > written_for * 1024:
            warnings.append(f"SGLang's pre-2025-06 fraction table was written for GPUs up to {written_for:g} GiB")
        return float(fraction), f"fixed table by tp×pp={tp * pp} (before 2025-06-10)", warnings
    if rule == "gpu_class":
        reserve_gib = constants.gpu_class_reserve_gib + constants.gpu_class_reserve_per_tp_pp_gib * tp * pp
        warnings.append(
            "SGLang 2025-06..09 reserved memory by GPU class; only the H100 class rule is known, "
            "used here for every GPU [unverified]"
        )
        fraction = round((gpu_mem_mib - reserve_gib * 1024) / gpu_mem_mib, 3)
        return fraction, f"GPU-class reserve ({reserve_gib:g} GiB, H100 rule, #7054)", warnings
    reserved, text = reserved_mib(constants, gpu_mem_mib, tp, pp, chunked_prefill_size, cuda_graph_max_bs, mla)
    source = f"round(({gpu_mem_mib:.0f} − reserved) / {gpu_mem_mib:.0f}, 3), reserved = {text}"
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3), source, warnings


# ---- settings ---------------------------------------------------------------------------------------------


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
    constants: SglangConstants,
    rules_version: str,
) -> tuple[Settings, list[str]]:
    """SGLang's effective settings: the user's ServerArgs over the defaults of the rule version and GPU tier; and
    the warnings met on the way, in the order they arose.
    Longer than 60 lines: one keyword per ServerArgs field it resolves, read in one place."""
    warnings: list[str] = []
    tp, pp, replicas = resolve_parallel(choice, hardware)
    gpu_mem_mib = hardware.gpu.gpu_memory_bytes / MiB if hardware else None
    tier = gpu_tier(constants, gpu_mem_mib if gpu_mem_mib is not None else 0.0)
    chunk = common.setting_int(choice, "chunked-prefill-size", default=tier["chunked_prefill_size"])
    graph_bs_default = tier["cuda_graph_max_bs_tp4"] if tp >= 4 else tier["cuda_graph_max_bs"]
    disable_graphs = common.setting_bool(choice, "disable-cuda-graph")
    graph_bs = 0 if disable_graphs else common.setting_int(choice, "cuda-graph-max-bs", default=graph_bs_default)
    fraction = choice.gpu_util if choice.gpu_util is not None else common.setting_float(choice, "mem-fraction-static")
    if fraction is None:
        fraction, source, fraction_notes = default_mem_fraction(
            constants, gpu_mem_mib, tp, pp, chunk, graph_bs, _is_mla(spec)
        )
        warnings.extend(fraction_notes)
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
    warnings.extend(unmodelled_flag_warnings(spec, choice, constants))
    backend = (common.setting(choice, "attention-backend") or "").lower()
    page_default = constants.mla_backend_page_size if backend in constants.mla_backends_paged else constants.page_size
    hybrid_swa_memory, swa_notes = hybrid_swa_pool(spec, choice, constants)
    warnings.extend(swa_notes)
    lora, lora_notes = lora_pool_setting(spec, choice, constants)
    warnings.extend(lora_notes)
    settings = Settings(
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
            choice, "swa-full-tokens-ratio", default=constants.swa_full_tokens_ratio
        ),
        mamba_full_memory_ratio=common.setting_float(
            choice, "mamba-full-memory-ratio", default=constants.mamba_full_memory_ratio
        ),
        max_running_requests=common.setting_int(choice, "max-running-requests"),
        max_total_tokens=common.setting_int(choice, "max-total-tokens"),
        disable_cuda_graph=disable_graphs,
        hybrid_swa_memory=hybrid_swa_memory,
        dp_size=replicas,
        context_is_default=workload.context is None,
        cpu_offload_gb=common.setting_float(choice, "cpu-offload-gb", default=0.0) or 0.0,
        lora=lora,
        disable_radix_cache=common.setting_bool(choice, "disable-radix-cache"),
        disable_overlap_schedule=common.setting_bool(choice, "disable-overlap-schedule"),
        speculative=bool((common.setting(choice, "speculative-algorithm") or "").strip()),
    )
    return settings, warnings


def hybrid_swa_pool(spec: ModelSpec, choice: EngineChoice, constants: SglangConstants) -> tuple[bool, list[str]]:
    """Whether SGLang gives the sliding-window layers a pool of their own (docs/engines/sglang.md#sglang-swa-list):
    ``ModelConfig._derive_hybrid_model`` sets ``is_hybrid_swa`` only for the architectures of ``is_hybrid_swa_model``'s
    hard-coded set (and not with --disable-hybrid-swa-memory); any other model caches its sliding-window layers at
    full length in the one pool, which hfvram says (the warnings returned) when the model has such layers."""
    if common.setting_bool(choice, "disable-hybrid-swa-memory"):
        return False, []
    listed = spec.architecture in set(constants.hybrid_swa_architectures)
    windowed = any(layer.kind in WINDOWED_KINDS for layer in spec.layers)
    full = any(layer.kind not in WINDOWED_KINDS and layer.kv_elems_per_token for layer in spec.layers)
    if windowed and full and not listed:
        return listed, [
            f"SGLang keeps no separate sliding-window pool for {spec.architecture or 'this architecture'} (not in "
            "is_hybrid_swa_model's list): its sliding-window layers are cached at full length in the one KV pool "
            "(docs/engines/sglang.md#sglang-swa-list)"
        ]
    return listed, []


def lora_pool_setting(
    spec: ModelSpec, choice: EngineChoice, constants: SglangConstants
) -> tuple[features.LoraSettings | None, list[str]]:
    """SGLang's LoRA memory pool (docs/engines/sglang.md#sglang-features): ``--max-loras-per-batch`` slots (default
    8) of ``--max-lora-rank`` for ``--lora-target-modules all``, in the model dtype. Without an explicit rank and
    ``all``, the rank and target modules come from the adapters of ``--lora-paths``, which hfvram does not read: a
    warning, nothing counted. None without LoRA. With the warnings it gives."""
    paths = common.setting(choice, "lora-paths")
    if not common.setting_bool(choice, "enable-lora") and not paths:
        return None, []
    rank = common.setting_int(choice, "max-lora-rank")
    targets = (common.setting(choice, "lora-target-modules") or "").strip().lower()
    slots = common.setting_int(choice, "max-loras-per-batch") or int(constants.lora_default_max_loras_per_batch)
    if slots < 1 or (rank is not None and rank < 1):
        raise UsageError(f"max-loras-per-batch and max-lora-rank must be positive, got {slots} and {rank}")
    if rank is None or targets != "all":
        return None, [
            "--enable-lora: SGLang sizes its LoRA pool from the rank and target modules of the adapters in "
            "--lora-paths, which hfvram does not read; the pool is not counted (give --max-lora-rank R and "
            "--lora-target-modules all to have it sized)"
        ]
    return features.LoraSettings(max_loras=slots, max_lora_rank=rank, dtype_bytes=spec.dtype_bytes()), []


def unmodelled_flag_warnings(spec: ModelSpec, choice: EngineChoice, constants: SglangConstants) -> list[str]:
    """One warning per flag SGLang reads that hfvram does not model (sglang.md#sglang-unmodelled-flags): the
    TOML's ``unmodelled_flags``, ``--speculative-algorithm`` other than NGRAM, and ``--quantization`` on a
    checkpoint that states none (SGLang quantizes it while loading; hfvram counts it as stored)."""
    notes = unmodelled_flag_notes(choice, constants.unmodelled_flags)
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
