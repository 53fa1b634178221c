"""vLLM (V1 engine): the memory budget, the KV block pool and what it holds.

Rules follow ``docs/engines/vllm.md`` (read in vLLM's source; section anchors in parentheses below); constants live in
``hfvram/engines/vllm/rules.toml`` with their sources. In short, per GPU:

    budget  = ceil(memory × gpu_memory_utilization)                      (vllm.md#vllm-budget)
    kv_pool = budget − weights − activation peak − non-torch − CUDA graphs (graphs only from v0.21)
    outside the budget: CUDA context + NCCL (and CUDA graphs before v0.21)

The KV pool is paged: per layer type a page of ``block_size`` tokens, per request the blocks
``max_memory_usage_bytes`` asks for (vllm.md#vllm-kv-specs), grouped as in ``get_kv_cache_groups`` (vllm.md#vllm-kv-groups).

The profile works in three steps: :func:`resolve_settings` (vLLM's effective settings), :func:`compute`
(a typed :class:`Breakdown`, arithmetic only) and :func:`narrate` (warnings and ``--explain`` lines written
from the breakdown's own values, so a figure and its explanation cannot disagree).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from hfvram.engines.base import ProfileBase
from hfvram.engines.vllm import features
from hfvram.errors import UsageError
from hfvram.estimate import common, multimodal
from hfvram.estimate.common import GiB, Rules
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, PerGpu, Workload
from hfvram.spec import RECURRENT_KINDS, Layer, LayerKind, ModelSpec

ENGINE = "vllm"
#: vLLM --dtype names -> canonical name
DTYPE_NAMES = {
    "float32": "float32",
    "float": "float32",
    "fp32": "float32",
    "float16": "float16",
    "half": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}


def dtype_bytes_of(dtype: str) -> float:
    """Bytes per element of a canonical vLLM compute dtype (the shared KV dtype table)."""
    return common.kv_dtype_bytes(dtype)


@dataclass(frozen=True)
class Settings:
    """Everything the estimate assumed, under vLLM's own names (reported in ``Estimate.engine``)."""

    rules: str
    gpu_memory_utilization: float
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_cache_dtype: str
    kv_bytes: float
    block_size: int
    enforce_eager: bool
    enable_prefix_caching: bool
    kv_cache_memory_bytes: int | None
    cpu_offload_gb: float
    cudagraph_in_budget: bool
    #: vLLM refuses max_num_seqs above a recurrent state pool's blocks (docs/engines/vllm.md#vllm-state-seq-limit)
    state_seq_check: bool
    kv_tokens_formula: str
    #: the dtype vLLM computes (and stores unquantized weights) in: --dtype, auto = the checkpoint's,
    #: float32 checkpoints run in bfloat16
    dtype: str = "bfloat16"
    #: --quantization applied at load time to an unquantized checkpoint (only "fp8" changes bytes)
    online_quantization: str | None = None
    #: longest context a request may have: max-model-len when the user set it, else the model's maximum
    context_cap: int = 0
    #: -dp: replicas of tp × pp GPUs each; every figure is per GPU of one replica (vllm.md#vllm-parallelism)
    data_parallel_size: int = 1
    #: --num-gpu-blocks-override: the KV pool is that many blocks, whatever the profile left (vllm.md#vllm-budget)
    num_gpu_blocks_override: int | None = None
    #: the engine whose rules apply: "v1", or "v0" (vllm_v0.py; docs/engines/vllm.md#vllm-v0)
    engine_generation: str = "v1"
    #: the release asked for (--engine vllm@X), None for the newest; the non-torch table matches on it
    requested_version: str | None = None
    #: V0 pads each MLA cache entry to this many bytes (0 = no padding; V1)
    mla_entry_align_bytes: int = 0
    #: --limit-mm-per-prompt and --mm-encoder-tp-mode (vllm.md#vllm-multimodal)
    multimodal: multimodal.MultimodalSettings = field(default_factory=multimodal.MultimodalSettings)
    #: --enable-lora and its sizes (None without LoRA; docs/engines/vllm.md#vllm-features)
    lora: features.LoraSettings | None = None
    #: --speculative-config as vLLM resolves it (None without speculative decoding)
    speculative: features.Speculative | None = None
    #: --enable-prefix-caching / --no-enable-prefix-caching given on the command line (no memory change either way)
    prefix_caching_set: bool = False

    @property
    def dtype_bytes(self) -> float:
        return dtype_bytes_of(self.dtype)

    @property
    def speculative_method(self) -> str | None:
        """--speculative-config's method as vLLM resolves it ("ngram", "eagle", "mtp", …; None without it)."""
        return self.speculative.method if self.speculative else None


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


# ---------------------------------------------------------------------------------------------------------
# The breakdown: every figure and the rule values it came from
# ---------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------
# The profile: settings -> breakdown -> narration
# ---------------------------------------------------------------------------------------------------------


class VllmProfile(ProfileBase):
    name = ENGINE

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        rules_version, rules = self.rules(choice.version)
        rules = {**rules, "non_torch": tuple(self.data.get("non_torch", ()))}
        common.require_weights(spec)
        notes: list[str] = []
        generation = engine_generation(choice, rules, self.data.get("v0", {}), notes)
        if generation == "v0":
            from hfvram.engines.vllm import v0 as vllm_v0

            # V0 ran a draft in its own worker with its own cache: the draft read for V1 is not sized there
            choice = replace(choice, draft=None)
            return vllm_v0.estimate(self, spec, hardware, choice, workload, rules, rules_version, notes)
        if auto_length_asked(choice):
            choice, workload = fit_auto_length(spec, hardware, choice, workload, rules, rules_version, notes)
        settings = resolve_settings(spec, hardware, choice, workload, rules, rules_version, notes)
        parts = compute(spec, hardware, settings, workload, rules)
        warnings, explain = narrate(parts, spec, workload, self.first_version_with("cudagraph_in_budget", True))
        report = engine_report(parts, choice, rules_version, hardware)
        result = finish(parts, spec, hardware, workload, settings, report, [*notes, *warnings], explain)
        # a setup vLLM refuses at start-up is the verdict (hfvram/estimate/core.py applies it)
        refusal = features.speculative_refusal(settings.speculative, spec, rules)
        return replace(result, refusal=refusal) if refusal else result


#: the values of ``--max-model-len`` that ask vLLM to pick the length (docs/engines/vllm.md#vllm-auto-length)
AUTO_LENGTHS = ("auto", "-1")


def auto_length_asked(choice: EngineChoice) -> bool:
    """``--max-model-len auto`` / ``-1`` (or ``--context auto``, which the pipeline passes as the former)."""
    value = common.setting(choice, "max-model-len")
    return value is not None and value.strip().lower() in AUTO_LENGTHS


def fit_auto_length(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    rules: Rules,
    rules_version: str,
    notes: list[str],
) -> tuple[EngineChoice, Workload]:
    """The length vLLM's auto-fit picks (docs/engines/vllm.md#vllm-auto-length): vLLM profiles at the model's own
    length, then, when one request of that length does not fit the KV pool, takes the largest length whose
    ``max_memory_usage_bytes`` does (a binary search over 1 … the model's length); a cap (``--max-context-cap``)
    lowers the upper end. Returns the choice with that length set and the workload at it."""
    since = str(rules.get("max_model_len_auto_since") or "0.12")
    if choice.version and _version_tuple(choice.version) < _version_tuple(since):
        raise UsageError(f"vLLM {choice.version} has no --max-model-len auto (-1): it came in vLLM {since}")
    derived = spec.max_position_embeddings or int(rules["fallback_max_model_len"])
    upper = min(derived, workload.context_cap) if workload.context_cap else derived
    settings_at = {
        key: value
        for key, value in choice.settings.items()
        if key.replace("_", "-").lstrip("-").lower() != "max-model-len"
    }
    trial = replace(choice, settings={**settings_at, "max-model-len": str(upper)})
    trial_workload = replace(workload, context=None)
    parts = compute(
        spec,
        hardware,
        resolve_settings(spec, hardware, trial, trial_workload, rules, rules_version, []),
        trial_workload,
        rules,
    )
    fitted = upper
    if parts.one_request_short and parts.longest_single > 0:
        fitted = parts.longest_single
    cap_note = f" (--max-context-cap: the model's own is {derived:,})" if upper < derived else ""
    if hardware is None:
        notes.append(f"max-model-len auto: without a GPU vLLM's pick is the model's length {upper:,}{cap_note}")
    elif fitted < upper:
        notes.append(
            f"max-model-len auto: vLLM reduces the length from {upper:,} to {fitted:,}, the longest one request's KV "
            f"cache fits in the {parts.budget.pool / GiB:.2f} GiB pool{cap_note}"
        )
    elif parts.pool_empty or parts.one_request_short:
        notes.append(
            "max-model-len auto: not even one token fits: vLLM refuses to start (Cannot auto-fit max_model_len)"
        )
    else:
        notes.append(f"max-model-len auto: the full length {upper:,} fits{cap_note}")
    context = workload.context if workload.context and workload.context <= fitted else fitted
    return replace(choice, settings={**settings_at, "max-model-len": str(fitted)}), replace(workload, context=context)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def finish(
    parts: Breakdown,
    spec: ModelSpec,
    hardware: Hardware | None,
    workload: Workload,
    settings: Settings,
    report: dict[str, object],
    warnings: list[str],
    explain: dict[str, str],
) -> Estimate:
    """The estimate of a computed breakdown (V1 and V0 alike): its per-GPU terms inside vLLM's budget."""
    per_gpu = PerGpu(
        weights=parts.weights.bytes,
        kv_cache=parts.kv_needed,
        activations=parts.activations.bytes,
        overhead=parts.overhead.in_budget,
        usable=int(parts.budget.budget) if parts.sized else 0,
        memory=parts.budget.memory,
    )
    return common.finish_estimate(
        spec=spec,
        hardware=hardware,
        engine=report,
        workload=replace(workload, context=parts.context, kv_dtype=settings.kv_cache_dtype),
        per_gpu=per_gpu,
        capacity=parts.capacity,
        decode=parts.decode,
        warnings=warnings,
        explain=explain,
        tp=settings.tensor_parallel_size,
        pp=settings.pipeline_parallel_size,
        force_does_not_fit=parts.refused,
    )


def newest_release_running(generation: str) -> str | None:
    """The newest release whose rules run ``generation`` ("v0" / "v1") by default (``engine`` of its
    ``[versions]`` table; docs/engines/vllm.md#vllm-v0), None when none does."""
    running = [v for v in PROFILE.rule_versions if PROFILE.rules(v)[1].get("engine", "v1") == generation]
    return max(running, key=common.version_key) if running else None


def engine_generation(choice: EngineChoice, rules: Rules, v0: Rules, notes: list[str]) -> str:
    """Which engine's rules apply (docs/engines/vllm.md#vllm-v0): the release's default (``engine`` of its
    ``[versions]`` table), or what ``VLLM_USE_V1`` says (``--set VLLM_USE_V1=0``); V0 asked for on a release without
    it is a warning and the V1 rules."""
    default = str(rules.get("engine", "v1"))
    raw = common.setting(choice, "VLLM_USE_V1")
    if raw is None:
        return default
    wants_v0 = not common.setting_bool(choice, "VLLM_USE_V1")
    if not wants_v0:
        return "v1"
    removed_in = str(v0.get("removed_in", ""))
    if removed_in and (choice.version is None or common.version_key(choice.version) >= common.version_key(removed_in)):
        asked = f"vllm@{choice.version}" if choice.version else "the newest vLLM"
        notes.append(
            f"VLLM_USE_V1=0: {asked} has no V0 engine (removed in v{removed_in}); the V1 rules apply "
            f"(name an older release, e.g. --engine vllm@0.9, for V0)"
        )
        return "v1"
    return "v0"


def engine_report(
    parts: Breakdown, choice: EngineChoice, rules_version: str, hardware: Hardware | None
) -> dict[str, object]:
    """The settings the estimate assumed, under vLLM's names (``Estimate.engine``)."""
    settings = parts.settings
    return {
        "name": ENGINE,
        "version": rules_version,
        "requested_version": choice.version,
        "engine_generation": settings.engine_generation,
        "gpu_util": settings.gpu_memory_utilization,
        "max_model_len": settings.max_model_len,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "max_num_seqs": settings.max_num_seqs,
        # the largest max_num_seqs that starts (a recurrent state pool's blocks; None: nothing bounds it at start-up)
        "max_num_seqs_that_starts": parts.state_seq_limit,
        "num_gpu_blocks": parts.num_blocks if parts.sized else None,
        "kv_cache_dtype": settings.kv_cache_dtype,
        "block_size": parts.layout.min_block_size,
        "enforce_eager": settings.enforce_eager,
        "enable_prefix_caching": settings.enable_prefix_caching,
        "cudagraph_bytes": parts.overhead.cudagraphs,
        "cudagraph_in_budget": settings.cudagraph_in_budget,
        "outside_budget_bytes": parts.overhead.outside_budget,
        "kv_pool_bytes": int(max(0.0, parts.budget.pool))
        if (hardware is not None or parts.budget.fixed_pool)
        else None,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "pipeline_parallel_size": settings.pipeline_parallel_size,
        "data_parallel_size": settings.data_parallel_size,
        "num_gpu_blocks_override": settings.num_gpu_blocks_override,
        "lora_bytes": parts.weights.lora.bytes if parts.weights.lora else None,
        "speculative_method": settings.speculative.method if settings.speculative else None,
        "speculative_draft": parts.draft.as_dict() if parts.draft else None,
    }


# ---------------------------------------------------------------------------------------------------------
# Step 1: settings
# ---------------------------------------------------------------------------------------------------------


def resolve_settings(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    rules: Rules,
    rules_version: str,
    warnings: list[str],
) -> Settings:
    """vLLM's effective settings: user values (``--set`` under vLLM's names) over the defaults of the
    rule version and GPU class (vllm.md#vllm-batch-defaults)."""
    dp = common.setting_int(choice, "data-parallel-size", "dp") or 1
    tp, pp = common.resolve_parallel(
        choice, hardware, ("tensor-parallel-size", "tp"), ("pipeline-parallel-size", "pp"), dp=dp
    )
    util = choice.gpu_util or common.setting_float(choice, "gpu-memory-utilization")
    util = util if util is not None else float(rules["gpu_memory_utilization"])
    if not 0 < util <= 1:
        raise UsageError(f"gpu-memory-utilization must be in (0, 1], got {util}")
    set_len = common.setting_int(choice, "max-model-len")
    max_model_len = resolve_max_model_len(spec, workload, set_len, rules, warnings)
    batched, max_num_seqs = resolve_batch(hardware, choice, rules, max_model_len)
    dtype = load_dtype(spec, common.setting(choice, "dtype"))
    quant_setting = (common.setting(choice, "quantization", "q") or "").strip().lower()
    online = quant_setting if quant_setting not in ("", "none", "auto") and spec.quantization is None else None
    kv_name = kv_dtype_name(choice, workload)
    block_default = default_block_size(spec, rules)
    kv_mem = common.setting(choice, "kv-cache-memory-bytes")
    warnings.extend(unmodelled_flag_warnings(spec, choice, rules, quant_setting))
    mm_settings = multimodal.settings_of(spec, choice.settings, tp, choice.version or rules_version, warnings)
    speculative = speculative_setting(choice, spec, rules, warnings, tp, pp)
    return Settings(
        rules=rules_version,
        gpu_memory_utilization=util,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        max_model_len=max_model_len,
        max_num_batched_tokens=batched,
        max_num_seqs=max_num_seqs,
        kv_cache_dtype=common.canonical_kv_dtype(kv_name, dtype),
        kv_bytes=common.kv_dtype_bytes(kv_name, dtype_bytes_of(dtype)),
        block_size=common.setting_int(choice, "block-size", default=block_default) or block_default,
        enforce_eager=common.setting_bool(choice, "enforce-eager"),
        enable_prefix_caching=prefix_caching_on(choice, spec),
        kv_cache_memory_bytes=_parse_bytes(kv_mem) if kv_mem else None,
        cpu_offload_gb=common.setting_float(choice, "cpu-offload-gb", default=0.0) or 0.0,
        cudagraph_in_budget=bool(rules["cudagraph_in_budget"]) and not is_mrv2_dense(spec, rules),
        state_seq_check=bool(rules.get("state_seq_check", False)),
        kv_tokens_formula=str(rules["kv_tokens_formula"]),
        dtype=dtype,
        online_quantization=online,
        context_cap=max_model_len if set_len else max(max_model_len, spec.max_position_embeddings or 0),
        data_parallel_size=dp,
        num_gpu_blocks_override=gpu_blocks_override(choice),
        requested_version=choice.version,
        multimodal=mm_settings,
        lora=lora_setting(choice, rules, dtype),
        speculative=speculative,
        prefix_caching_set=prefix_caching_given(choice),
    )


def kv_dtype_name(choice: EngineChoice, workload: Workload) -> str:
    """The KV cache dtype asked for: ``--kv-dtype`` over ``--kv-cache-dtype`` (``auto`` = the model's dtype)."""
    if workload.kv_dtype not in ("", "auto"):
        return workload.kv_dtype
    return common.setting(choice, "kv-cache-dtype") or "auto"


def default_block_size(spec: ModelSpec, rules: Rules) -> int:
    """vLLM's default block size: ``block_size_mla`` for an MLA model, else ``block_size`` (vllm.md#vllm-kv-specs)."""
    has_mla = LayerKind.MLA in common.layer_summary(spec.layers).kinds
    return int(rules["block_size_mla"] if has_mla else rules["block_size"])


def prefix_caching_on(choice: EngineChoice, spec: ModelSpec) -> bool:
    """Whether prefix caching is on: the flag given, else V1's default (docs/engines/vllm.md#vllm-features): on,
    except for hybrid models with recurrent layers, which run with it off (docs/engines/vllm.md#vllm-mamba-state)."""
    if common.setting(choice, "no-enable-prefix-caching") is not None:
        return False
    if common.setting(choice, "enable-prefix-caching") is not None:
        return common.setting_bool(choice, "enable-prefix-caching")
    return not any(layer.kind in RECURRENT_KINDS for layer in spec.layers)


def prefix_caching_given(choice: EngineChoice) -> bool:
    """``--enable-prefix-caching`` or ``--no-enable-prefix-caching`` on the command line (neither changes memory)."""
    return any(
        common.setting(choice, flag) is not None for flag in ("enable-prefix-caching", "no-enable-prefix-caching")
    )


def lora_setting(choice: EngineChoice, rules: Rules, dtype: str) -> features.LoraSettings | None:
    """``--enable-lora`` with ``--max-loras`` / ``--max-lora-rank`` / ``--max-cpu-loras`` / ``--lora-dtype`` /
    ``--fully-sharded-loras`` (LoRAConfig's defaults when not set, docs/engines/vllm.md#vllm-features); None without
    --enable-lora (vLLM then reads none of them)."""
    if not common.setting_bool(choice, "enable-lora"):
        return None
    loras = common.setting_int(choice, "max-loras") or int(rules["lora_default_max_loras"])
    rank = common.setting_int(choice, "max-lora-rank") or int(rules["lora_default_max_lora_rank"])
    cpu_loras = common.setting_int(choice, "max-cpu-loras")
    if loras < 1 or rank < 1:
        raise UsageError(f"max-loras and max-lora-rank must be positive, got {loras} and {rank}")
    if cpu_loras is not None and cpu_loras < loras:
        raise UsageError(f"max-cpu-loras ({cpu_loras}) must be >= max-loras ({loras}), as vLLM requires")
    named = (common.setting(choice, "lora-dtype") or "auto").strip().lower()
    lora_dtype = dtype if named == "auto" else DTYPE_NAMES.get(named)
    if lora_dtype is None:
        raise UsageError(f"unknown lora-dtype {named!r}; vLLM takes auto, float16 or bfloat16")
    until = common.version_key(str(rules["lora_extra_vocab_until"]))
    old_release = choice.version is not None and common.version_key(choice.version)[: len(until)] <= until
    extra = common.setting_int(choice, "lora-extra-vocab-size") if old_release else None
    return features.LoraSettings(
        max_loras=loras,
        max_lora_rank=rank,
        dtype_bytes=dtype_bytes_of(lora_dtype),
        fully_sharded_loras=common.setting_bool(choice, "fully-sharded-loras"),
        max_cpu_loras=cpu_loras,
        extra_vocab=(int(rules["lora_extra_vocab_size"]) if extra is None else extra) if old_release else 0,
    )


def speculative_setting(
    choice: EngineChoice, spec: ModelSpec, rules: Rules, warnings: list[str], tp: int = 1, pp: int = 1
) -> features.Speculative | None:
    """``--speculative-config`` (JSON), else the old ``--speculative-model`` / ``--num-speculative-tokens`` /
    ``--speculative-draft-tensor-parallel-size``, as vLLM resolves the method and the draft's TP
    (docs/engines/vllm.md#vllm-features), with the draft checkpoint the pipeline read (``choice.draft``) and its note
    or warning; None without speculative decoding."""
    text = common.setting(choice, "speculative-config")
    if text is not None:
        method, model, tokens = speculative_method(text)
        draft_tp = speculative_draft_tp(text)
    else:
        method, model = None, common.setting(choice, "speculative-model")
        tokens = common.setting_int(choice, "num-speculative-tokens")
        draft_tp = common.setting_int(choice, "speculative-draft-tensor-parallel-size")
        model = model[:120] if model else None
    draft = choice.draft if choice.draft is not None and choice.draft.name == model else None
    speculative = features.resolve_speculative(method, model, tokens, spec, rules, draft, draft_tp, tp)
    warnings.extend(features.speculative_warnings(speculative, rules))
    warnings.extend(features.draft_warnings(speculative, spec, pp, rules))
    return speculative


def speculative_draft_name(choice: EngineChoice) -> str | None:
    """The draft checkpoint the settings name for a method whose draft hfvram reads (draft_model / eagle /
    eagle3; docs/engines/vllm.md#vllm-features), None otherwise: what the pipeline loads before the estimate."""
    _, rules = PROFILE.rules(choice.version)
    text = common.setting(choice, "speculative-config")
    if text is not None:
        method, model, _ = speculative_method(text)
    else:
        method, model = None, common.setting(choice, "speculative-model")
        model = model[:120] if model else None
    if not model or model in ("ngram", "[ngram]") or features.names_custom_class(model):
        return None
    resolved = method or "draft_model"
    return model if resolved in rules["speculative_draft_methods"] else None


def speculative_draft_tp(text: str) -> int | None:
    """``draft_tensor_parallel_size`` of a ``--speculative-config`` JSON value (None when not set); vLLM refuses
    ``tensor_parallel_size`` there (it names the draft's TP ``draft_tensor_parallel_size``)."""
    try:
        value = json.loads(text[:4096]) if text.strip() else {}
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if "tensor_parallel_size" in value:
        raise UsageError(
            "--speculative-config: vLLM refuses 'tensor_parallel_size' there; the draft's TP is "
            "'draft_tensor_parallel_size'"
        )
    size = value.get("draft_tensor_parallel_size")
    if size is None:
        return None
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= 1024:
        raise UsageError(
            f"--speculative-config: draft_tensor_parallel_size must be a positive whole number, got {size!r}"
        )
    return size


def gpu_blocks_override(choice: EngineChoice) -> int | None:
    """``--num-gpu-blocks-override``: a positive block count (UsageError otherwise), None when not set."""
    override = common.setting_int(choice, "num-gpu-blocks-override")
    if override is not None and override < 1:
        raise UsageError(f"num-gpu-blocks-override must be a positive number of blocks, got {override}")
    return override


def unmodelled_flag_warnings(spec: ModelSpec, choice: EngineChoice, rules: Rules, quantization: str) -> list[str]:
    """One warning per flag vLLM reads that hfvram does not model (vllm.md#vllm-unmodelled-flags): the TOML's
    ``unmodelled_flags`` and ``--quantization`` on an unquantized checkpoint other than fp8 (speculative decoding:
    :func:`vllm_features.speculative_warnings`)."""
    notes = []
    for flag, left_out in rules["unmodelled_flags"].items():
        raw = common.setting(choice, flag)
        if raw is None or raw.strip().lower() in ("false", "0", "no", "off"):
            continue
        shown = f"--{flag}" if raw.strip().lower() in ("", "true") else f"--{flag} {raw[:60]}"
        notes.append(f"{shown}: hfvram does not account for {left_out}")
    if quantization in rules["inflight_quantizations"] and spec.quantization is None:
        notes.append(
            f"--quantization {quantization}: vLLM quantizes this unquantized checkpoint while loading it; hfvram "
            "does not model that and counts the weights at the checkpoint's dtype (an upper bound)"
        )
    elif (
        quantization not in ("", "none", "auto", "fp8", *rules["inflight_quantizations"]) and spec.quantization is None
    ):
        notes.append(
            f"--quantization {quantization}: the checkpoint states no quantization; vLLM loads {quantization} weights "
            "only from a checkpoint quantized that way (it looks for the checkpoint's quantization config and "
            "stops without one); hfvram counts the weights as stored"
        )
    return notes


def speculative_method(text: str) -> tuple[str | None, str | None, int | None]:
    """(method, draft model, num_speculative_tokens) of a ``--speculative-config`` JSON value (``{"method":
    "ngram", …}``, ``{"model": "…", "num_speculative_tokens": 5}``); a value that is not a JSON object is bad input."""
    if not text.strip():
        return None, None, None
    try:
        value = json.loads(text[:4096])
    except ValueError as exc:
        raise UsageError(f"--speculative-config is not JSON: {text[:60]!r}") from exc
    if not isinstance(value, dict):
        raise UsageError(f"--speculative-config must be a JSON object, got {text[:60]!r}")
    method, model, tokens = value.get("method"), value.get("model"), value.get("num_speculative_tokens")
    return (
        str(method)[:40].lower() if isinstance(method, str) else None,
        str(model)[:120] if isinstance(model, str) else None,
        tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and 0 < tokens <= 1024 else None,
    )


def resolve_max_model_len(
    spec: ModelSpec, workload: Workload, set_len: int | None, rules: Rules, warnings: list[str]
) -> int:
    """max-model-len when set, else the requested context, else the model's maximum (else the TOML's
    fallback), with vLLM's refusals of a length it cannot serve as warnings."""
    model_max = spec.max_position_embeddings
    if set_len is not None and set_len > 0:
        max_model_len = set_len
        if workload.context and workload.context > set_len:
            warnings.append(f"context {workload.context} exceeds max-model-len {set_len}: vLLM rejects such requests")
    elif workload.context:
        max_model_len = workload.context
    elif model_max:
        max_model_len = model_max
    else:
        max_model_len = int(rules["fallback_max_model_len"])
        warnings.append(
            f"the config states no max_position_embeddings; assumed max_model_len {max_model_len} (set --context)"
        )
    if model_max and max_model_len > model_max:
        warnings.append(
            f"max_model_len {max_model_len} is above the model's max_position_embeddings {model_max}: vLLM refuses "
            "it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (or rope scaling allows it)"
        )
    return max_model_len


def is_large_gpu(hardware: Hardware | None, rules: Rules) -> bool:
    """The OpenAI server's GPU class (docs/engines/vllm.md#vllm-activations): at least ``large_gpu_min_gib`` and not named like one of
    ``small_gpu_names`` (the A100s keep the small defaults); no hardware counts as large."""
    if hardware is None:
        return True
    label = (hardware.gpu.id + hardware.gpu.name).lower()
    return hardware.gpu.gpu_memory_bytes >= float(rules["large_gpu_min_gib"]) * GiB and not any(
        str(name) in label for name in rules["small_gpu_names"]
    )


def resolve_batch(hardware: Hardware | None, choice: EngineChoice, rules: Rules, max_model_len: int) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs): the user's, else the GPU class defaults; without chunked
    prefill a whole max_model_len prompt is one batch."""
    large = is_large_gpu(hardware, rules)
    default_batched = int(rules["large_gpu_max_num_batched_tokens" if large else "small_gpu_max_num_batched_tokens"])
    default_seqs = int(rules["large_gpu_max_num_seqs" if large else "small_gpu_max_num_seqs"])
    max_num_seqs = common.setting_int(choice, "max-num-seqs", default=default_seqs) or default_seqs
    batched = common.setting_int(choice, "max-num-batched-tokens")
    chunked = common.setting_bool(choice, "enable-chunked-prefill", default=bool(rules["chunked_prefill"]))
    if batched is None:
        batched = default_batched if chunked else max(max_model_len, default_batched)
        batched = min(max_num_seqs * max_model_len, batched)
    return batched, min(max_num_seqs, batched)


def load_dtype(spec: ModelSpec, requested: str | None) -> str:
    """The dtype vLLM runs in: ``--dtype`` when set, else the checkpoint's, with float32 checkpoints run in
    bfloat16 (vLLM's ``dtype=auto`` downcasts them); bfloat16 when the checkpoint does not say."""
    if requested and requested.strip().lower() != "auto":
        key = requested.strip().lower()
        if key not in DTYPE_NAMES:
            raise UsageError(f"unknown vLLM dtype {requested!r}; known: auto, {', '.join(sorted(DTYPE_NAMES))}")
        return DTYPE_NAMES[key]
    checkpoint = DTYPE_NAMES.get((spec.dtype or "").lower(), "bfloat16")
    return "bfloat16" if checkpoint == "float32" else checkpoint


def _parse_bytes(text: str) -> int:
    """``"8589934592"``, ``"8G"`` / ``"8GiB"`` (vLLM reads G as GiB) -> bytes."""
    value = text.strip().lower().rstrip("b").rstrip("i")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    multiplier = units.get(value[-1:], 1)
    number = value[:-1] if value[-1:] in units else value
    try:
        return int(float(number) * multiplier)
    except ValueError as exc:
        raise UsageError(f"kv-cache-memory-bytes={text!r} is not a size") from exc


# ---------------------------------------------------------------------------------------------------------
# Step 2: the breakdown (arithmetic only)
# ---------------------------------------------------------------------------------------------------------


def compute(
    spec: ModelSpec, hardware: Hardware | None, settings: Settings, workload: Workload, rules: Rules
) -> Breakdown:
    """Every term on the worst GPU for ``settings``: weights, activations, overhead, budget, KV pool and what
    the workload takes of it, start-up checks and the decode bound."""
    context = workload.context or settings.max_model_len
    weights = weights_per_gpu(spec, settings, rules)
    activations = activation_peak(spec, settings, rules, weights.lora)
    non_torch, non_torch_row = non_torch_bytes(settings, hardware, rules)
    overhead = OverheadTerm(
        non_torch=non_torch,
        cudagraphs=cudagraph_bytes(spec, settings, rules),
        cuda_context=int(rules["cuda_context_gib"] * GiB),
        cudagraph_in_budget=settings.cudagraph_in_budget,
        capture_sizes=0 if "cudagraph_flat_gib" in rules else len(capture_sizes(settings, rules, spec.architecture)),
        mrv2_dense=is_mrv2_dense(spec, rules),
        non_torch_source=f"{non_torch_row.get('source', '')} [{non_torch_row.get('group', '')}]"
        if non_torch_row
        else "",
    )
    draft = draft_term(settings, rules)
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


def draft_term(settings: Settings, rules: Rules) -> features.DraftTerm | None:
    """The draft checkpoint's weights on one rank, loaded as vLLM's ``get_model`` loads the target's (the target's
    dtype, the draft's TP, whole on the last pipeline stage, no --quantization, no LoRA, no CPU offload) inside
    "Model loading took", and its attention layers' K+V bytes per token in the shared pool
    (docs/engines/vllm.md#vllm-features)."""
    speculative = settings.speculative
    draft = speculative.draft_spec if speculative is not None else None
    if speculative is None or draft is None or draft.weights is None:
        return None
    if speculative.method not in rules["speculative_draft_methods"]:
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
    weights = weights_per_gpu(draft, own, rules)
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


def weights_per_gpu(spec: ModelSpec, settings: Settings, rules: Rules) -> WeightsTerm:
    """ "Model loading took X GiB" on the worst rank (vllm.md#vllm-weights): TP/PP split, vocab padding, MXFP4 padding,
    float32 checkpoints loaded as bfloat16, the encoder tower and rotary cache (vllm.md#vllm-multimodal), minus
    ``cpu-offload-gb``."""
    scale: dict[str, float] = {}
    notes = []
    quant = (spec.quantization.method if spec.quantization else "").lower()
    if quant == "mxfp4" and spec.hidden_size and spec.moe_intermediate_size:
        # the kernels pad intermediate_size_per_partition, the TP shard (vllm.md#vllm-weights)
        hidden, inter, tp = spec.hidden_size, spec.moe_intermediate_size, settings.tensor_parallel_size
        shard = _cdiv(inter, tp)
        padded = common.pad_to_multiple(hidden, int(rules["mxfp4_round_hidden"])) * common.pad_to_multiple(
            shard, int(rules["mxfp4_round_intermediate"])
        )
        scale["experts"] = padded * tp / (hidden * inter)
        shape = f"{hidden}×{shard} per TP shard" if tp > 1 else f"{hidden}×{inter}"
        notes.append(f"MXFP4 experts padded {shape} → kernel sizes (×{scale['experts']:.3f})")
    if (
        spec.weights is not None
        and spec.weights.bytes_by_component.get("mtp")
        and "mtp" not in (settings.speculative_method or "")
    ):
        # the main model's load_weights skips the MTP layers (get_spec_layer_idx_from_weight_name); only an MTP draft
        # (--speculative-config method *mtp) loads them (vllm.md#vllm-weights)
        scale["mtp"] = 0.0
        notes.append(
            f"{spec.num_mtp_layers or 'the'} multi-token-prediction layer(s) of the checkpoint "
            f"({spec.weights.bytes_by_component['mtp'] / GiB:.2f} GiB) not loaded: vLLM loads them only as an MTP draft"
        )
    stored = spec.dtype_bytes()
    if spec.quantization is None and spec.weights is not None and stored != settings.dtype_bytes:
        for component in {*spec.weights.bytes_by_component, "other"}:
            scale[component] = scale.get(component, 1.0) * settings.dtype_bytes / stored
        notes.append(f"{spec.dtype or 'bfloat16'} checkpoint loaded as {settings.dtype}")
    if settings.online_quantization == "fp8" and spec.weights is not None:
        # online FP8: every Linear of the layers stored in one byte; embeddings, lm_head and norms keep the dtype
        for component in ("attention", "mlp", "experts", "mtp"):
            scale[component] = scale.get(component, 1.0) / settings.dtype_bytes
        notes.append("--quantization fp8: linear layers quantized to 1 byte per weight at load time")
    replicated = common.mla_replicated_bytes(spec, settings.tensor_parallel_size, scale.get("attention", 1.0))
    kept: dict[str, float] = {"attention": replicated} if replicated else {}
    notes.extend(multimodal.place_tower(spec, settings.tensor_parallel_size, settings.multimodal, scale, kept))
    split = common.weights_per_rank(
        spec,
        settings.tensor_parallel_size,
        settings.pipeline_parallel_size,
        int(rules["vocab_padding"]),
        scale,
        replicated=kept or None,
    )
    if replicated:
        notes.append(
            f"the attention kept whole is MLA's fused_qkv_a_proj / kv_a_proj_with_mqa (not split by vLLM): "
            f"+{replicated * (1 - 1 / settings.tensor_parallel_size) / GiB:.2f} GiB per GPU over an even split"
        )
    return feature_weights(spec, settings, rules, split, notes)


def feature_weights(
    spec: ModelSpec, settings: Settings, rules: Rules, split: common.WeightsSplit, notes: list[str]
) -> WeightsTerm:
    """The split weights less ``--cpu-offload-gb`` (decoder-layer parameters only) plus the LoRA slots allocated
    while the model loads (docs/engines/vllm.md#vllm-features)."""
    weights = split.bytes + multimodal.rope_cache_noted(spec, settings.dtype_bytes, notes)
    if settings.cpu_offload_gb:
        moved, movable = features.offloaded_bytes(
            split.by_component, settings.pipeline_parallel_size, settings.cpu_offload_gb
        )
        weights -= moved
        short = moved < settings.cpu_offload_gb * GiB
        notes.append(
            f"cpu-offload-gb {settings.cpu_offload_gb}: {moved / GiB:.2f} GiB of decoder-layer parameters moved to "
            "host memory" + (f" (all {movable / GiB:.2f} GiB the layers hold)" if short else "")
        )
    lora = None
    if settings.lora is not None:
        layers = common.worst_stage_layers(spec, settings.pipeline_parallel_size)
        lora = features.lora_term(
            spec, settings.lora, settings.tensor_parallel_size, layers, settings.max_num_batched_tokens, rules
        )
        weights += lora.bytes
        notes.append(f"+{lora.bytes / GiB:.3f} GiB LoRA slots (--enable-lora)")
    return WeightsTerm(bytes=weights, split_explain=split.explain, notes=tuple(notes), lora=lora)


def activation_peak(
    spec: ModelSpec, settings: Settings, rules: Rules, lora: features.LoraTerm | None = None
) -> ActivationTerm:
    """Torch peak during ``profile_run`` (vllm.md#vllm-activations), the same on every rank:

    max(sampler, forward) + fused-MoE workspace, where
    sampler = sampler_bytes_per_logit × min(max_num_seqs, max_num_batched_tokens) × vocab (logits gathered
    on every rank), forward = max_num_batched_tokens × (forward_bytes_per_ffn × ffn per rank +
    forward_bytes_per_hidden × hidden) (ffn: one expert's width for a MoE), workspace =
    max_num_batched_tokens × experts_per_token × (2 × moe_ffn per rank + hidden) × moe_workspace_bytes_per_elem."""
    tp = settings.tensor_parallel_size
    batched = settings.max_num_batched_tokens
    seqs = min(settings.max_num_seqs, batched)
    vocab = spec.vocab_size or 0
    hidden = spec.hidden_size or 0
    per_logit = float(rules["sampler_bytes_per_logit"])
    experts_per_token = spec.experts_per_token or 0
    is_moe = bool(spec.num_experts and spec.num_experts > 1 and experts_per_token)
    moe_ffn = spec.moe_intermediate_size or spec.intermediate_size or 0
    ffn = moe_ffn if is_moe else (spec.intermediate_size or 4 * hidden)
    forward = batched * (
        float(rules["forward_bytes_per_ffn"]) * ffn / tp + float(rules["forward_bytes_per_hidden"]) * hidden
    )
    workspace = 0.0
    quant = (spec.quantization.method if spec.quantization else "").lower()
    if is_moe and quant not in rules["moe_workspace_exempt_quantizations"]:
        per_elem = float(rules["moe_workspace_bytes_per_elem"])
        workspace = batched * experts_per_token * (2 * moe_ffn / tp + hidden) * per_elem
    tower = multimodal.tower_placement(spec, "vllm", tp, settings.multimodal)
    encoder = multimodal.encoder_cache_bytes(spec, batched, settings.dtype_bytes) if tower.profiled else 0
    return ActivationTerm(
        sampler_bytes_per_logit=per_logit,
        sampler_rows=seqs,
        vocab=vocab,
        forward_tokens=batched,
        sampler=per_logit * seqs * vocab,
        forward=forward,
        workspace=workspace,
        encoder_cache=encoder,
        lora=float(lora.activation) if lora else 0.0,
    )


def non_torch_row(settings: Settings, hardware: Hardware | None, rows: Sequence[Rules]) -> Rules | None:
    """The first ``[[non_torch]]`` row of vllm.toml for this engine generation, parallelism, release and GPU
    (docs/engines/vllm.md#vllm-non-torch); None when no row matches."""
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    parallel = "tp" if tp >= 2 else ("pp" if pp >= 2 else "tp1")
    gpu = f"{hardware.gpu.id} {hardware.gpu.name}".lower() if hardware is not None else ""
    asked = common.version_key(settings.requested_version) if settings.requested_version else None
    for row in rows:
        if row.get("engine", "v1") != settings.engine_generation or row.get("parallel", parallel) != parallel:
            continue
        since, until = row.get("since"), row.get("until")
        if since and asked is not None and asked < common.version_key(str(since)):
            continue
        if until and (asked is None or asked[: len(common.version_key(str(until)))] > common.version_key(str(until))):
            continue
        names = [str(name).lower() for name in row.get("gpus", ())]
        if names and not any(name in gpu for name in names):
            continue
        return row
    return None


def non_torch_bytes(settings: Settings, hardware: Hardware | None, rules: Rules) -> tuple[int, Rules | None]:
    """Non-torch memory that grows during the first forward, inside the budget, and the table row it came from
    (docs/engines/vllm.md#vllm-non-torch); 0 when no row matches."""
    row = non_torch_row(settings, hardware, rules.get("non_torch", ()))
    return (int(float(row["gib"]) * GiB), row) if row else (0, None)


def capture_sizes(settings: Settings, rules: Rules, architecture: str | None = None) -> list[int]:
    """The decode batch sizes vLLM captures graphs for (``VllmConfig._set_cudagraph_sizes``; none eager): up to
    min(max_num_seqs x decode_query_len x 2, 512, max_num_batched_tokens), on the default grid of
    ``cudagraph_size_steps`` ([1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)); GPT-OSS raises the 512."""
    if settings.enforce_eager:
        return []
    speculative = settings.speculative
    query_len = 1 + (speculative.num_speculative_tokens or 0 if speculative else 0)
    cap = dict(rules.get("cudagraph_max_capture_size_by_architecture", {})).get(architecture or "")
    largest = min(settings.max_num_seqs * query_len * 2, int(cap or rules["cudagraph_max_capture_size"]))
    largest = max(1, min(settings.max_num_batched_tokens, largest))
    sizes: list[int] = []
    for start, stop, step in rules["cudagraph_size_steps"]:
        sizes.extend(range(int(start), min(int(stop), largest) + 1, int(step)))
    return sizes


def is_mrv2_dense(spec: ModelSpec, rules: Rules) -> bool:
    """True where vLLM runs the model on Model Runner V2, whose graph profiler returns 0 (v0.25.1 on, dense
    models: no experts, no recurrent layers; docs/engines/vllm.md#vllm-mrv2)."""
    if not rules.get("cudagraph_mrv2_dense"):
        return False
    recurrent = not RECURRENT_KINDS.isdisjoint(common.layer_summary(spec.layers).kinds)
    return not recurrent and not (spec.num_experts and spec.num_experts > 1)


def cudagraph_bytes(spec: ModelSpec, settings: Settings, rules: Rules) -> int:
    """CUDA-graph memory per GPU (docs/engines/vllm.md#vllm-cuda-graphs); 0 eager.

    Bytes per (decoder layer x capture size): the graphs of every size are extrapolated from two captures, so
    the figure follows ``max_num_seqs`` (7 sizes at 16 sequences, 51 at the defaults). Layers are the token
    mixers (Nemotron-H lists its MLPs as blocks of their own: counting them would charge each mixer+MLP pair
    twice), divided over the pipeline stages. From v0.26 a hybrid linear-attention model is charged the profile's
    transient as well (``cudagraph_hybrid_transient``, scaled from article 003 by layers x hidden)."""
    if "cudagraph_flat_gib" in rules:  # the V0 engine: a flat reserve (docs/engines/vllm.md#vllm-v0)
        return 0 if settings.enforce_eager else int(float(rules["cudagraph_flat_gib"]) * GiB)
    sizes = capture_sizes(settings, rules, spec.architecture)
    if not sizes:
        return 0
    mixers = sum(1 for layer in spec.layers if layer.kind is not LayerKind.NONE) or len(spec.layers)
    layers = mixers / settings.pipeline_parallel_size
    moe = bool(spec.num_experts and spec.num_experts > 1)
    per = float(rules["cudagraph_moe_bytes_per_layer_size" if moe else "cudagraph_bytes_per_layer_size"])
    graphs = per * layers * len(sizes)
    hybrid = not RECURRENT_KINDS.isdisjoint(common.layer_summary(spec.layers).kinds)
    if hybrid and rules.get("cudagraph_hybrid_transient") and spec.hidden_size:
        transient = float(rules["cudagraph_hybrid_bytes_per_layer_hidden"]) * layers * spec.hidden_size
        graphs = max(graphs, transient, float(rules["cudagraph_hybrid_min_gib"]) * GiB)
    return int(graphs)


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


#: layouts already worked out: id(spec.layers) -> (those layers, {settings the layout reads: layout}). One estimate
#: (its longest-context and concurrency searches) and a scan's repeated models ask for the same layout many times.
_LAYOUTS: dict[int, tuple[tuple[Layer, ...], dict[tuple[object, ...], KVGroupLayout]]] = {}
_LAYOUTS_KEPT = 256


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
    entry = _LAYOUTS.get(id(spec.layers))
    if entry is None or entry[0] is not spec.layers:  # the layers held keep their id from being reused
        if len(_LAYOUTS) >= _LAYOUTS_KEPT:
            _LAYOUTS.clear()
        entry = _LAYOUTS[id(spec.layers)] = (spec.layers, {})
    layout = entry[1].get(key)
    if layout is None:
        layout = entry[1][key] = _kv_layout(spec, settings)
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
    groups = tuple(
        (_spec_of_type(spec_type, block, page, window), _cdiv(count, group_size))
        for (spec_type, window), count in kinds.items()
    )
    num_groups = sum(count for _, count in groups)
    return KVGroupLayout(page, group_size, num_groups, block, groups, batched)


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


# ---------------------------------------------------------------------------------------------------------
# Step 3: narration (every figure read from the breakdown)
# ---------------------------------------------------------------------------------------------------------

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


PROFILE = VllmProfile()
