"""SGLang's constants: the keys of ``rules.toml``'s ``[defaults]`` and ``[versions]`` tables as a frozen dataclass,
checked when they load (hfvram/engines/contract.py); each value's source is beside it in the TOML."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hfvram.engines.contract import Constants


@dataclass(frozen=True)
class SglangConstants(Constants):
    """The merged ``[defaults]`` + ``[versions]`` keys of ``hfvram/engines/sglang/rules.toml``."""

    #: the default mem_fraction_static rule: "table", "gpu_class" or "formula" (sglang.md#sglang-mem-fraction)
    fraction_rule: str
    reserve_base_mib: int
    reserve_chunk_factor: float
    reserve_chunk_floor: int
    reserve_tp_pp_divisor: int
    reserve_decode_graph_factor: int
    reserve_prefill_graph_mib: int
    reserve_prefill_graph_mla_mib: int
    reserve_large_gpu_min_mib: int
    reserve_large_gpu_threshold_gib: float
    fraction_unknown_gpu: float
    #: [[tp*pp threshold, fraction], ...] of the "table" rule
    fraction_table: list[list[float]]
    fraction_table_max_gpu_gib: float
    gpu_class_reserve_gib: float
    gpu_class_reserve_per_tp_pp_gib: float
    swa_full_tokens_ratio: float
    mamba_full_memory_ratio: float
    mamba_cache_per_running_request: int
    max_running_requests_per_context: int
    max_running_requests_min: int
    max_running_requests_max: int
    req_to_token_extra_tokens: int
    req_to_token_bytes: int
    page_size: int
    mla_backend_page_size: int
    mla_backends_paged: list[str]
    cuda_context_gib: float
    nccl_init_gib: float
    vocab_padding: int
    max_req_input_margin: int
    hybrid_swa_architectures: list[str]
    #: the SWA pool capped with the chunk cache (docs/engines/sglang.md#sglang-swa-chunk-cap)
    swa_chunk_cap: bool
    swa_eviction_interval: int
    lora_default_max_loras_per_batch: int
    #: flag -> what hfvram does not account for
    unmodelled_flags: dict[str, str]
    #: chunked_prefill_size / cuda_graph_max_bs defaults by GPU size ({below_gib, ...} rows)
    gpu_tiers: list[dict[str, Any]]
    #: {"segments": [[start, stop, step], ...]}: the piecewise prefill CUDA-graph token sizes
    prefill_graph_segments: dict[str, list[list[int]]]
