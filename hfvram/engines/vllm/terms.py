"""The breakdown: every figure of the estimate on the worst GPU and the rule values it came from, as typed terms
before any text is written (:func:`hfvram.engines.vllm.breakdown.compute` fills them, :mod:`.narration` reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from hfvram.engines.vllm import features
from hfvram.engines.vllm.kv import KVGroupLayout, MambaSpec
from hfvram.engines.vllm.settings import Settings
from hfvram.estimate.types import Capacity


@dataclass(frozen=True)
class WeightsTerm:
    """ "Model loading took X GiB" on the worst rank, with what changed it from the checkpoint's bytes."""

    bytes: int
    split_explain: str
    notes: tuple[str, ...]
    #: the LoRA slots allocated with the weights (included in ``bytes``; docs/engines/vllm.md#vllm-features)
    lora: features.LoraTerm | None = None


@dataclass(frozen=True)
class ActivationTerm:
    """The torch peak of ``profile_run``: max(sampler, forward) + fused-MoE workspace (docs/engines/vllm.md#vllm-activations)."""

    sampler_bytes_per_logit: float
    sampler_rows: int  # min(max_num_seqs, max_num_batched_tokens)
    vocab: int
    forward_tokens: int  # max_num_batched_tokens
    sampler: float
    forward: float
    workspace: float
    #: dummy encoder outputs held through the dummy forward and sampler runs (multimodal, vllm.md#vllm-multimodal)
    encoder_cache: float = 0.0
    #: the LoRA shrink buffer of the widest LoRA matmul in the forward (docs/engines/vllm.md#vllm-features)
    lora: float = 0.0

    @property
    def bytes(self) -> int:
        return int(max(self.sampler, self.forward + self.lora) + self.workspace + self.encoder_cache)


@dataclass(frozen=True)
class OverheadTerm:
    """Non-torch memory and CUDA graphs inside the budget; CUDA context (+ graphs before v0.21) outside."""

    non_torch: int
    cudagraphs: int
    cuda_context: int
    cudagraph_in_budget: bool
    #: the [[non_torch]] row of vllm.toml the non-torch figure came from (its source and group)
    non_torch_source: str = ""
    #: how many decode batch sizes vLLM captures graphs for (0 eager or V0)
    capture_sizes: int = 0
    #: the model runs on Model Runner V2, which deducts nothing for its graphs (v0.25.1 on, dense models)
    mrv2_dense: bool = False

    @property
    def in_budget(self) -> int:
        return self.non_torch + (self.cudagraphs if self.cudagraph_in_budget else 0)

    @property
    def outside_budget(self) -> int:
        return self.cuda_context + (0 if self.cudagraph_in_budget else self.cudagraphs)


class BudgetMode(Enum):
    KV_CACHE_MEMORY_BYTES = "kv-cache-memory-bytes sets the KV pool"
    NUM_GPU_BLOCKS_OVERRIDE = "num-gpu-blocks-override sets the KV pool"
    UTILIZATION = "gpu_memory_utilization of the device"
    NONE = "no hardware given"


@dataclass(frozen=True)
class BudgetTerm:
    """What vLLM may use on one GPU and the KV pool it leaves, and how the budget was set."""

    mode: BudgetMode
    memory: int
    budget: float
    pool: float
    #: the pool the profile left, before --num-gpu-blocks-override replaced it (None otherwise)
    profiled_pool: float | None = None

    @property
    def fixed_pool(self) -> bool:
        """The pool was set by the user (bytes or blocks), not left by the budget."""
        return self.mode in (BudgetMode.KV_CACHE_MEMORY_BYTES, BudgetMode.NUM_GPU_BLOCKS_OVERRIDE)


#: why start-up fails (or may fail) in the memory outside the budget
class OutsideTrouble(Enum):
    CUDA_CONTEXT = "the CUDA context does not fit"  # start-up fails
    CUDA_GRAPHS = "the CUDA graphs captured after the KV cache do not fit"  # start-up fails
    SAMPLER_WARM_UP = "the sampler warm-up after start-up may not fit"  # a warning only
    #: V0 checks no free memory at start-up: context and graphs outside the budget may not fit (a warning only)
    UNCHECKED_OUTSIDE = "the CUDA context and graphs outside the budget may not fit (V0 does not check)"


@dataclass(frozen=True)
class Breakdown:
    """Every term of the estimate on the worst GPU, before any text is written."""

    settings: Settings
    context: int
    weights: WeightsTerm
    activations: ActivationTerm
    overhead: OverheadTerm
    budget: BudgetTerm
    layout: KVGroupLayout
    blocks_per_request: int
    kv_needed: int
    capacity: Capacity
    #: blocks one max_model_len request needs, the blocks the pool holds and the longest single request
    blocks_at_max: int
    num_blocks: int
    longest_single: int
    #: the pool was sized (hardware or kv-cache-memory-bytes given)
    sized: bool
    #: kv-cache-memory-bytes asks for more than the GPU has left
    kv_bytes_too_large: bool
    #: the first trouble outside the budget, or None
    outside_trouble: OutsideTrouble | None
    hybrid_moe_graphs: bool
    #: a decode bound was worked out (hardware and active weights known; it is None without a bandwidth)
    decode_modelled: bool
    decode: float | None
    #: the speculative draft checkpoint's weights and KV (included in weights and layout; None without one)
    draft: features.DraftTerm | None = None

    @property
    def pool_empty(self) -> bool:
        return self.sized and self.budget.pool <= 0

    @property
    def one_request_short(self) -> bool:
        return (
            self.sized and not self.pool_empty and self.layout.page_bytes > 0 and self.blocks_at_max > self.num_blocks
        )

    @property
    def state_seq_limit(self) -> int | None:
        """The largest ``max_num_seqs`` that starts when a recurrent state pool bounds it
        (docs/engines/vllm.md#vllm-state-seq-limit): with full CUDA graphs every decode sequence needs one block of
        the pool, so vLLM refuses ``max_num_seqs > num_blocks`` for a model with Mamba-like layers; None when
        nothing bounds it at start-up (no recurrent layer, eager mode, no sized pool, or a release before the check)."""
        if not self.settings.state_seq_check or self.settings.enforce_eager or not self.sized:
            return None
        if not any(type(spec) is MambaSpec for spec, _ in self.layout.groups):
            return None
        return self.num_blocks

    @property
    def seqs_over_state_pool(self) -> bool:
        limit = self.state_seq_limit
        return limit is not None and not self.pool_empty and self.settings.max_num_seqs > limit

    @property
    def refused(self) -> bool:
        """vLLM does not start (the verdict is does_not_fit whatever the sum says)."""
        return (
            self.pool_empty
            or self.one_request_short
            or self.kv_bytes_too_large
            or self.outside_trouble in (OutsideTrouble.CUDA_CONTEXT, OutsideTrouble.CUDA_GRAPHS)
        )
