"""vLLM's constants: the keys of ``rules.toml``'s ``[defaults]`` and ``[versions]`` tables as a frozen dataclass,
checked when they load (hfvram/engines/contract.py); each value's source is beside it in the TOML. The ``[v0]``
table (V0's own constants, laid over these by ``v0.py``) and the ``[[non_torch]]`` rows are read as tables."""

from __future__ import annotations

from dataclasses import dataclass

from hfvram.engines.contract import Constants


@dataclass(frozen=True)
class VllmConstants(Constants):
    """The merged ``[defaults]`` + ``[versions]`` keys of ``hfvram/engines/vllm/rules.toml``."""

    #: the engine a release runs by default: "v1" or "v0" (docs/engines/vllm.md#vllm-v0)
    engine: str
    gpu_memory_utilization: float
    cudagraph_in_budget: bool
    state_seq_check: bool
    #: how "GPU KV cache size" is printed: "blocks" or "concurrency" (docs/engines/vllm.md#vllm-kv-groups)
    kv_tokens_formula: str
    block_size: int
    block_size_mla: int
    vocab_padding: int
    mxfp4_round_hidden: int
    mxfp4_round_intermediate: int
    large_gpu_min_gib: float
    small_gpu_names: list[str]
    large_gpu_max_num_batched_tokens: int
    large_gpu_max_num_seqs: int
    small_gpu_max_num_batched_tokens: int
    small_gpu_max_num_seqs: int
    sampler_bytes_per_logit: float
    forward_bytes_per_ffn: float
    forward_bytes_per_hidden: float
    moe_workspace_bytes_per_elem: float
    moe_workspace_exempt_quantizations: list[str]
    cuda_context_gib: float
    cudagraph_max_capture_size: int
    #: architecture -> its max_cudagraph_capture_size
    cudagraph_max_capture_size_by_architecture: dict[str, int]
    #: [start, stop, step] ranges of the capture sizes
    cudagraph_size_steps: list[list[int]]
    cudagraph_bytes_per_layer_size: float
    cudagraph_moe_bytes_per_layer_size: float
    cudagraph_mrv2_dense: bool
    cudagraph_hybrid_transient: bool
    cudagraph_hybrid_bytes_per_layer_hidden: float
    cudagraph_hybrid_min_gib: float
    fallback_max_model_len: int
    max_model_len_auto_since: str
    chunked_prefill: bool
    inflight_quantizations: list[str]
    lora_default_max_loras: int
    lora_default_max_lora_rank: int
    lora_max_vocab: int
    lora_buffer_bytes_per_elem: float
    lora_extra_vocab_size: int
    lora_extra_vocab_until: str
    lora_vocab_padding_size: int
    lora_input_embedding_architectures: list[str]
    lora_output_embedding_architectures: list[str]
    lora_ungated_model_types: list[str]
    speculative_free_methods: list[str]
    speculative_draft_methods: list[str]
    speculative_shared_embedding_methods: list[str]
    speculative_mtp_methods: list[str]
    #: flag -> what hfvram does not account for
    unmodelled_flags: dict[str, str]
