"""vLLM (V1 engine): the memory budget, the KV block pool and what it holds.

Rules follow ``design/engines.md`` §2 (read in vLLM's source); constants live in
``hfvram/data/engines/vllm.toml`` with their sources. In short, per GPU:

    budget  = ceil(memory × gpu_memory_utilization)                      (§2.1)
    kv_pool = budget − weights − activation peak − non-torch − CUDA graphs (graphs only from v0.21)
    outside the budget: CUDA context + NCCL (and CUDA graphs before v0.21)

The KV pool is paged: per layer type a page of ``block_size`` tokens, per request the blocks
``max_memory_usage_bytes`` asks for (§2.5), grouped as in ``get_kv_cache_groups`` (§2.6).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from hfvram.errors import UsageError
from hfvram.estimate import common
from hfvram.estimate.common import GiB
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, PerGpu, Workload
from hfvram.spec import RECURRENT_KINDS, Layer, LayerKind, ModelSpec

ENGINE = "vllm"
#: vLLM --dtype names -> (canonical name, bytes per element)
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
DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}


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
    kv_tokens_formula: str
    #: the dtype vLLM computes (and stores unquantized weights) in: --dtype, auto = the checkpoint's,
    #: float32 checkpoints run in bfloat16
    dtype: str = "bfloat16"
    #: --quantization applied at load time to an unquantized checkpoint (only "fp8" changes bytes)
    online_quantization: str | None = None
    #: longest context a request may have: max-model-len when the user set it, else the model's maximum
    context_cap: int = 0

    @property
    def dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class KVGroupLayout:
    """The paged KV layout on one rank: page bytes, layers per group and blocks one request needs."""

    page_bytes: int  # one block of one layer (the unified page)
    group_size: int  # layers sharing one block table
    num_groups: int
    min_block_size: int
    #: per-group (kind, block_size_tokens, count_of_groups) to compute blocks per request
    groups: tuple[tuple[str, int, int, int | None], ...]  # (kind, block tokens, groups of it, window)
    max_num_batched_tokens: int

    def blocks_per_request(self, context: int) -> int:
        """Σ over groups of ``cdiv(max_memory_usage_bytes, page)`` for a request of ``context`` tokens."""
        total = 0
        for kind, block, count, window in self.groups:
            total += count * _blocks_for(kind, block, context, window, self.max_num_batched_tokens)
        return total

    def num_blocks(self, pool_bytes: float) -> int:
        if self.page_bytes <= 0 or self.group_size <= 0:
            return 0
        return max(0, int(pool_bytes // self.page_bytes // self.group_size))

    def bytes_for(self, blocks: float) -> float:
        """Pool bytes that ``blocks`` blocks take (each block spans ``group_size`` layers)."""
        return blocks * self.page_bytes * self.group_size


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _blocks_for(kind: str, block: int, context: int, window: int | None, batched: int) -> int:
    """Blocks of one layer group for one request (``max_memory_usage_bytes`` / page, §2.5)."""
    if kind in (LayerKind.FULL.value, LayerKind.MLA.value):
        return _cdiv(context, block)
    if kind == LayerKind.SLIDING.value:
        return _cdiv(min((window or 0) - 1 + batched, context), block) + 1
    if kind == LayerKind.CHUNKED.value:
        return _cdiv(min((window or 0) + batched, context), block)
    return 1  # recurrent state: one page per request (mamba_cache_mode "none")


# ---------------------------------------------------------------------------------------------------------


class VllmProfile:
    name = ENGINE

    def __init__(self) -> None:
        data = common.load_engine_data(ENGINE)
        self.data: Mapping[str, Any] = data
        self.rule_versions: tuple[str, ...] = tuple(sorted(data.get("versions", {}), key=common.version_key))

    # ---- entry point --------------------------------------------------------------------------------

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        rules_version, rules = common.engine_rules(ENGINE, choice.version)
        warnings: list[str] = []
        explain: dict[str, str] = {}
        common.require_weights(spec)
        settings = resolve_settings(spec, hardware, choice, workload, rules, rules_version, warnings)
        tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
        context = workload.context or settings.max_model_len
        resolved_workload = replace(workload, context=context, kv_dtype=settings.kv_cache_dtype)

        weights = weights_per_gpu(spec, settings, rules, warnings, explain)
        activations = activation_peak(spec, settings, rules, explain)
        non_torch = non_torch_bytes(tp, pp, rules)
        cudagraphs = cudagraph_bytes(spec, settings, rules)
        if cudagraphs and any(layer.kind in RECURRENT_KINDS for layer in spec.layers) and spec.num_experts:
            warnings.append(
                "hybrid linear-attention MoE: vLLM's CUDA-graph and buffer memory for this class is fitted on one "
                "dense hybrid (article 003) and came out 34 % below the one MoE hybrid measured (Qwen3.6-35B-A3B: "
                "13.3 GB overhead on 2 × RTX 4090); the KV pool may be several GiB smaller than shown"
            )
        context_bytes = int(rules["cuda_context_gib"] * GiB)
        overhead_in_budget = non_torch + (cudagraphs if settings.cudagraph_in_budget else 0)
        outside_budget = context_bytes + (0 if settings.cudagraph_in_budget else cudagraphs)
        explain["overhead"] = (
            f"non-torch memory {non_torch / GiB:.2f} GiB (§1.3, TP={tp})"
            + (
                f" + CUDA graphs {cudagraphs / GiB:.2f} GiB (deducted from the budget since v0.21)"
                if settings.cudagraph_in_budget
                else ""
            )
            + f"; outside the budget: CUDA context + NCCL {context_bytes / GiB:.2f} GiB"
            + ("" if settings.cudagraph_in_budget else f" + CUDA graphs {cudagraphs / GiB:.2f} GiB (before v0.21)")
        )

        layout = kv_layout(spec, settings)
        memory = hardware.gpu.gpu_memory_bytes if hardware else 0
        failure_kv_bytes = False
        if settings.kv_cache_memory_bytes is not None:
            pool = float(settings.kv_cache_memory_bytes)
            budget = weights + activations + overhead_in_budget + settings.kv_cache_memory_bytes
            explain["budget"] = "kv-cache-memory-bytes set: the KV pool is that size, utilization ignored (§2.1)"
            if hardware is not None and budget + outside_budget > memory:
                warnings.append(
                    f"kv-cache-memory-bytes asks for {settings.kv_cache_memory_bytes / GiB:.2f} GiB of KV cache but "
                    f"weights, activations and overhead leave only {(memory - outside_budget - budget + pool) / GiB:.2f} GiB "
                    "on this GPU: the KV cache allocation runs out of memory"
                )
                failure_kv_bytes = True
        elif hardware is not None:
            budget = math.ceil(memory * settings.gpu_memory_utilization)
            pool = budget - weights - activations - overhead_in_budget
            explain["budget"] = (
                f"ceil({memory / GiB:.2f} GiB × gpu_memory_utilization {settings.gpu_memory_utilization}) = "
                f"{budget / GiB:.2f} GiB per GPU; KV pool = budget − weights − activations − overhead"
                + (
                    f" = {pool / GiB:.2f} GiB"
                    if pool >= 0
                    else f": none, short by {-pool / GiB:.2f} GiB (the three exceed the budget)"
                )
            )
        else:
            budget, pool = 0, 0.0

        blocks_per_request = layout.blocks_per_request(context)
        kv_needed = int(layout.bytes_for(blocks_per_request * workload.concurrency))
        explain["kv_cache"] = (
            f"{workload.concurrency} × {blocks_per_request} blocks of {layout.page_bytes} B × {layout.group_size} "
            f"layers (block_size {layout.min_block_size}, {settings.kv_cache_dtype}, {layout.num_groups} groups) "
            f"for {context} tokens per request on the worst rank"
        )
        capacity, failure = kv_capacity(layout, pool, settings, context, workload.concurrency, spec, hardware)
        if layout.page_bytes <= 0:
            warnings.append("the model keeps no per-sequence KV cache: concurrency is not bounded by a KV pool")
        if failure:
            warnings.append(failure)
        if failure_kv_bytes:
            failure = failure or "kv-cache-memory-bytes"
        if hardware is not None and settings.kv_cache_memory_bytes is None:
            left = memory - budget
            if context_bytes > left:
                warnings.append(
                    f"vLLM needs ~{context_bytes / GiB:.2f} GiB per GPU outside its budget (CUDA context, NCCL) but "
                    f"gpu_memory_utilization={settings.gpu_memory_utilization} leaves {left / GiB:.2f} GiB: start-up fails "
                    "with 'Free memory on device … is less than desired GPU memory utilization'"
                )
                failure = failure or "outside-budget"
            elif outside_budget > left:
                warnings.append(
                    f"CUDA graphs ({cudagraphs / GiB:.2f} GiB) are captured after the KV cache fills the budget, in the "
                    f"{left / GiB:.2f} GiB gpu_memory_utilization leaves (minus {context_bytes / GiB:.2f} GiB CUDA "
                    "context): start-up runs out of memory while capturing them; lower gpu-memory-utilization or "
                    "set enforce-eager"
                )
                failure = failure or "outside-budget"
            elif outside_budget + activations > left:
                # gt-0085/0086: the sampler is warmed up again after the KV cache is allocated
                warnings.append(
                    f"after start-up vLLM warms up the sampler with {settings.max_num_seqs} dummy requests outside its "
                    f"budget (~{activations / GiB:.2f} GiB on top of {outside_budget / GiB:.2f} GiB, "
                    f"{left / GiB:.2f} GiB left): this can run out of memory; a lower gpu-memory-utilization or "
                    "max-num-seqs is safer"
                )

        per_gpu = PerGpu(
            weights=weights,
            kv_cache=kv_needed,
            activations=activations,
            overhead=overhead_in_budget,
            usable=int(budget) if hardware is not None or settings.kv_cache_memory_bytes is not None else 0,
            memory=memory,
        )
        explain["verdict"] = (
            "total = what the workload needs (weights + KV for context × concurrency + activations + overhead "
            "inside the budget) against usable = vLLM's budget; the KV pool vLLM allocates is the whole rest"
        )
        active = common.active_weight_bytes(spec)
        decode = None
        if hardware is not None and active is not None:
            kv_read = layout.bytes_for(blocks_per_request)
            decode = common.decode_tokens_per_second(active / tp + kv_read, hardware.gpu.memory_bandwidth_gbs)
            explain["decode"] = (
                "upper bound: memory bandwidth / (active weights per GPU + KV at the context), one sequence; "
                "compute, communication and scheduling ignored"
            )
        engine = {
            "name": ENGINE,
            "version": rules_version,
            "requested_version": choice.version,
            "gpu_util": settings.gpu_memory_utilization,
            "max_model_len": settings.max_model_len,
            "max_num_batched_tokens": settings.max_num_batched_tokens,
            "max_num_seqs": settings.max_num_seqs,
            "kv_cache_dtype": settings.kv_cache_dtype,
            "block_size": layout.min_block_size,
            "enforce_eager": settings.enforce_eager,
            "enable_prefix_caching": settings.enable_prefix_caching,
            "cudagraph_bytes": cudagraphs,
            "cudagraph_in_budget": settings.cudagraph_in_budget,
            "outside_budget_bytes": outside_budget,
            "kv_pool_bytes": int(max(0.0, pool)) if (hardware is not None or settings.kv_cache_memory_bytes) else None,
            "tensor_parallel_size": tp,
            "pipeline_parallel_size": pp,
        }
        return common.finish_estimate(
            spec=spec,
            hardware=hardware,
            engine=engine,
            workload=resolved_workload,
            per_gpu=per_gpu,
            capacity=capacity,
            decode=decode,
            warnings=warnings,
            explain=explain,
            tp=tp,
            pp=pp,
            force_does_not_fit=bool(failure),
        )


# ---------------------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------------------


def resolve_settings(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    rules: Mapping[str, Any],
    rules_version: str,
    warnings: list[str],
) -> Settings:
    """vLLM's effective settings: user values (``--set`` under vLLM's names) over the defaults of the
    rule version and GPU class (§2.3)."""
    tp, pp = common.resolve_parallel(choice, hardware, ("tensor-parallel-size", "tp"), ("pipeline-parallel-size", "pp"))
    util = choice.gpu_util or common.setting_float(choice, "gpu-memory-utilization")
    util = util if util is not None else float(rules["gpu_memory_utilization"])
    if not 0 < util <= 1:
        raise UsageError(f"gpu-memory-utilization must be in (0, 1], got {util}")

    model_max = spec.max_position_embeddings
    set_len = common.setting_int(choice, "max-model-len")
    if set_len is not None and set_len > 0:
        max_model_len = set_len
        if workload.context and workload.context > set_len:
            warnings.append(f"context {workload.context} exceeds max-model-len {set_len}: vLLM rejects such requests")
    elif workload.context:
        max_model_len = workload.context
    elif model_max:
        max_model_len = model_max
    else:
        max_model_len = 8192
        warnings.append("the config states no max_position_embeddings; assumed max_model_len 8192 (set --context)")
    if model_max and max_model_len > model_max:
        warnings.append(
            f"max_model_len {max_model_len} is above the model's max_position_embeddings {model_max}: vLLM refuses "
            "it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (or rope scaling allows it)"
        )

    large = hardware is None or (
        hardware.gpu.gpu_memory_bytes >= float(rules["large_gpu_min_gib"]) * GiB
        and "a100" not in (hardware.gpu.id + hardware.gpu.name).lower()
    )
    default_batched = int(rules["large_gpu_max_num_batched_tokens" if large else "small_gpu_max_num_batched_tokens"])
    default_seqs = int(rules["large_gpu_max_num_seqs" if large else "small_gpu_max_num_seqs"])
    max_num_seqs = common.setting_int(choice, "max-num-seqs", default=default_seqs) or default_seqs
    batched = common.setting_int(choice, "max-num-batched-tokens")
    chunked = common.setting_bool(choice, "enable-chunked-prefill", default=bool(rules["chunked_prefill"]))
    if batched is None:
        batched = default_batched if chunked else max(max_model_len, default_batched)
        batched = min(max_num_seqs * max_model_len, batched)
    max_num_seqs = min(max_num_seqs, batched)

    dtype = load_dtype(spec, common.setting(choice, "dtype"))
    quant_setting = (common.setting(choice, "quantization", "q") or "").strip().lower()
    online = quant_setting if quant_setting not in ("", "none", "auto") and spec.quantization is None else None
    kv_name = (
        workload.kv_dtype
        if workload.kv_dtype not in ("", "auto")
        else (common.setting(choice, "kv-cache-dtype") or "auto")
    )
    kv_bytes = common.kv_dtype_bytes(kv_name, DTYPE_BYTES[dtype])
    kv_label = common.canonical_kv_dtype(kv_name, dtype)

    has_mla = any(layer.kind is LayerKind.MLA for layer in spec.layers)
    block_default = int(rules["block_size_mla"] if has_mla else rules["block_size"])
    block_size = common.setting_int(choice, "block-size", default=block_default) or block_default
    kv_mem = common.setting(choice, "kv-cache-memory-bytes")
    kv_cache_memory_bytes = _parse_bytes(kv_mem) if kv_mem else None
    return Settings(
        rules=rules_version,
        gpu_memory_utilization=util,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        max_model_len=max_model_len,
        max_num_batched_tokens=batched,
        max_num_seqs=max_num_seqs,
        kv_cache_dtype=kv_label,
        kv_bytes=kv_bytes,
        block_size=block_size,
        enforce_eager=common.setting_bool(choice, "enforce-eager"),
        enable_prefix_caching=common.setting_bool(choice, "enable-prefix-caching"),
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        cpu_offload_gb=common.setting_float(choice, "cpu-offload-gb", default=0.0) or 0.0,
        cudagraph_in_budget=bool(rules["cudagraph_in_budget"]),
        kv_tokens_formula=str(rules["kv_tokens_formula"]),
        dtype=dtype,
        online_quantization=online,
        context_cap=max_model_len if set_len else max(max_model_len, model_max or 0),
    )


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
# The terms
# ---------------------------------------------------------------------------------------------------------


def weights_per_gpu(
    spec: ModelSpec, settings: Settings, rules: Mapping[str, Any], warnings: list[str], explain: dict[str, str]
) -> int:
    """ "Model loading took X GiB" on the worst rank (§2.2): TP/PP split, vocab padding, MXFP4 padding,
    float32 checkpoints loaded as bfloat16, minus ``cpu-offload-gb``."""
    scale: dict[str, float] = {}
    notes = []
    quant = (spec.quantization.method if spec.quantization else "").lower()
    if quant == "mxfp4" and spec.hidden_size and spec.moe_intermediate_size:
        hidden, inter = spec.hidden_size, spec.moe_intermediate_size
        padded = common.pad_to_multiple(hidden, int(rules["mxfp4_round_hidden"])) * common.pad_to_multiple(
            inter, int(rules["mxfp4_round_intermediate"])
        )
        scale["experts"] = padded / (hidden * inter)
        notes.append(f"MXFP4 experts padded {hidden}×{inter} → kernel sizes (×{scale['experts']:.3f})")
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
    split = common.weights_per_rank(
        spec, settings.tensor_parallel_size, settings.pipeline_parallel_size, int(rules["vocab_padding"]), scale
    )
    weights = split.bytes
    if settings.cpu_offload_gb:
        offload = int(settings.cpu_offload_gb * GiB)
        weights = max(0, weights - offload)
        notes.append(f"cpu-offload-gb {settings.cpu_offload_gb} moved to host memory")
    explain["weights"] = split.explain + ("; " + "; ".join(notes) if notes else "")
    return weights


def activation_peak(spec: ModelSpec, settings: Settings, rules: Mapping[str, Any], explain: dict[str, str]) -> int:
    """Torch peak during ``profile_run`` (§2.3), the same on every rank:

    max(sampler, forward) + fused-MoE workspace, where
    sampler = 15.3 B × min(max_num_seqs, max_num_batched_tokens) × vocab (logits gathered on every rank),
    forward = max_num_batched_tokens × (6 × ffn per rank + 9 × hidden) (ffn: one expert's width for a MoE),
    workspace = max_num_batched_tokens × experts_per_token × (2 × moe_ffn per rank + hidden) × 2 B."""
    tp = settings.tensor_parallel_size
    batched = settings.max_num_batched_tokens
    seqs = min(settings.max_num_seqs, batched)
    vocab = spec.vocab_size or 0
    hidden = spec.hidden_size or 0
    sampler = float(rules["sampler_bytes_per_logit"]) * seqs * vocab
    is_moe = bool(spec.num_experts and spec.num_experts > 1 and spec.experts_per_token)
    moe_ffn = spec.moe_intermediate_size or spec.intermediate_size or 0
    ffn = moe_ffn if is_moe else (spec.intermediate_size or 4 * hidden)
    forward = batched * (
        float(rules["forward_bytes_per_ffn"]) * ffn / tp + float(rules["forward_bytes_per_hidden"]) * hidden
    )
    workspace = 0.0
    quant = (spec.quantization.method if spec.quantization else "").lower()
    if is_moe and quant not in rules["moe_workspace_exempt_quantizations"]:
        workspace = (
            batched
            * (spec.experts_per_token or 0)
            * (2 * moe_ffn / tp + hidden)
            * float(rules["moe_workspace_bytes_per_elem"])
        )
    explain["activations"] = (
        f"max(sampler 15.3 B × {seqs} seqs × vocab {vocab} = {sampler / GiB:.2f} GiB, forward {batched} tokens "
        f"= {forward / GiB:.2f} GiB)"
        + (f" + fused-MoE workspace {workspace / GiB:.2f} GiB" if workspace else "")
        + (" — multimodal encoder profiling not modelled" if spec.multimodal else "")
    )
    return int(max(sampler, forward) + workspace)


def non_torch_bytes(tp: int, pp: int, rules: Mapping[str, Any]) -> int:
    """Non-torch memory that grows during the first forward, inside the budget (§1.3 [gt])."""
    if tp >= 2:
        return int(float(rules["non_torch_gib_tp_multi"]) * GiB)
    if pp >= 2:
        return int(float(rules["non_torch_gib_pp_only"]) * GiB)
    return int(float(rules["non_torch_gib_tp1"]) * GiB)


def cudagraph_bytes(spec: ModelSpec, settings: Settings, rules: Mapping[str, Any]) -> int:
    """CUDA-graph memory per GPU (§2.4 defaults; hybrid linear-attention scaled from article 003); 0 eager.

    The hybrid scale was measured on Qwen3.5/3.6, where every decoder layer is a token mixer plus an MLP; models
    that list the MLP as a block of its own (Nemotron-H: 118 blocks = 54 Mamba + 10 attention + 54 MLP) count
    only their mixer blocks, else each mixer+MLP pair would be charged twice."""
    if settings.enforce_eager:
        return 0
    if any(layer.kind in RECURRENT_KINDS for layer in spec.layers) and spec.hidden_size:
        mixers = sum(1 for layer in spec.layers if layer.kind is not LayerKind.NONE)
        per_rank = float(rules["cudagraph_hybrid_bytes_per_layer_hidden"]) * mixers * spec.hidden_size
        per_rank /= settings.pipeline_parallel_size
        return int(max(per_rank, float(rules["cudagraph_hybrid_min_gib"]) * GiB))
    params = spec.params_total or 0
    small = (
        params
        and params <= float(rules["cudagraph_small_max_params"])
        and not (spec.num_experts and spec.num_experts > 1)
        and settings.tensor_parallel_size == 1
    )
    return int(float(rules["cudagraph_gib_small" if small else "cudagraph_gib_large"]) * GiB)


# ---------------------------------------------------------------------------------------------------------
# KV layout and capacity
# ---------------------------------------------------------------------------------------------------------


def kv_layout(spec: ModelSpec, settings: Settings) -> KVGroupLayout:
    """Per-rank page sizes and groups (§2.5–2.7) for the worst pipeline stage."""
    tp = settings.tensor_parallel_size
    layers = common.worst_stage_layers(spec, settings.pipeline_parallel_size)
    attention = [layer for layer in layers if layer.kv_elems_per_token]
    recurrent = [layer for layer in layers if layer.kind in RECURRENT_KINDS]
    block = settings.block_size
    kv_bytes = settings.kv_bytes
    batched = settings.max_num_batched_tokens
    state_fallback = settings.dtype_bytes

    def per_token(layer: Layer) -> float:
        return common.layer_kv_elems_per_token_rank(layer, tp) * kv_bytes

    if not attention and not recurrent:
        return KVGroupLayout(0, 0, 0, block, (), batched)

    if recurrent and attention:
        # §2.7: the attention block grows until one attention page holds one mamba state; mamba padded to it
        mamba_page = max(common.layer_state_bytes_rank(layer, tp, state_fallback) for layer in recurrent)
        attn_token = max(per_token(layer) for layer in attention)
        align = block
        attn_block = align * _cdiv(int(math.ceil(mamba_page)), int(align * attn_token))
        page = int(attn_block * attn_token)
        block = attn_block
    elif recurrent:
        page = int(math.ceil(max(common.layer_state_bytes_rank(layer, tp, state_fallback) for layer in recurrent)))
    else:
        page = int(block * max(per_token(layer) for layer in attention))

    kinds: dict[tuple[str, int | None], int] = {}
    for layer in attention:
        key = (
            layer.kind.value,
            layer.window if layer.kind.value in ("sliding_attention", "chunked_attention") else None,
        )
        kinds[key] = kinds.get(key, 0) + 1
    if recurrent:
        kinds[("recurrent", None)] = len(recurrent)

    if len(kinds) == 1:
        # one type: one group spanning every layer (UniformTypeKVCacheSpecs when page sizes differ)
        (kind, window), count = next(iter(kinds.items()))
        page_sum = sum(int(block * per_token(layer)) for layer in attention) if attention else page * count
        # express as one page × group_size so that bytes_for() is exact
        return KVGroupLayout(
            page_bytes=int(page_sum // count) if count else 0,
            group_size=count,
            num_groups=1,
            min_block_size=block,
            groups=((kind, block, 1, window),),
            max_num_batched_tokens=batched,
        )

    counts = list(kinds.values())
    smallest, largest = min(counts), max(counts)
    group_size = largest if largest < 1.5 * smallest else smallest
    groups = tuple((kind, block, _cdiv(count, group_size), window) for (kind, window), count in kinds.items())
    num_groups = sum(count for _, _, count, _ in groups)
    return KVGroupLayout(
        page_bytes=page,
        group_size=group_size,
        num_groups=num_groups,
        min_block_size=block,
        groups=groups,
        max_num_batched_tokens=batched,
    )


def kv_capacity(
    layout: KVGroupLayout,
    pool: float,
    settings: Settings,
    context: int,
    concurrency: int,
    spec: ModelSpec,
    hardware: Hardware | None,
) -> tuple[Capacity, str | None]:
    """Start-up figures (§2.6): GPU KV cache size in tokens, maximum concurrency at ``context``, longest
    context at ``concurrency``; and vLLM's start-up error when one max_model_len request does not fit."""
    if hardware is None and settings.kv_cache_memory_bytes is None:
        return Capacity(), None
    if pool <= 0:
        return Capacity(kv_tokens=0, max_concurrency=0.0, max_context=0), (
            f"No available memory for the cache blocks: weights, activations and overhead exceed the budget by "
            f"{-pool / GiB:.2f} GiB. Try increasing `gpu_memory_utilization` when initializing the engine."
        )
    if layout.page_bytes <= 0:
        # no per-sequence cache (encoder-only / attention-free): the KV pool does not bound requests
        return Capacity(kv_tokens=None, max_concurrency=None, max_context=settings.context_cap or None), None
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
    failure = None
    if per_request_at_max > num_blocks:
        longest_single = _longest_context(layout, num_blocks, 1, settings.max_model_len)
        failure = (
            f"To serve at least one request with the model's max seq len ({settings.max_model_len}), "
            f"({layout.bytes_for(per_request_at_max) / GiB:.2f} GiB KV cache is needed, which is larger than the "
            f"available KV cache memory ({pool / GiB:.2f} GiB). Based on the available memory, the estimated "
            f"maximum model length is {longest_single}. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine."
        )
    return Capacity(kv_tokens=kv_tokens, max_concurrency=round(max_concurrency, 2), max_context=max_context), failure


def _longest_context(layout: KVGroupLayout, num_blocks: int, concurrency: int, cap: int) -> int:
    """Largest context ≤ cap with ``concurrency × blocks_per_request(context) ≤ num_blocks`` (monotone)."""
    if concurrency * layout.blocks_per_request(1) > num_blocks:
        return 0
    low, high = 1, cap
    while low < high:
        mid = (low + high + 1) // 2
        if concurrency * layout.blocks_per_request(mid) <= num_blocks:
            low = mid
        else:
            high = mid - 1
    return low


PROFILE = VllmProfile()
