"""vLLM's effective settings, step 1 of the profile (docs/engines/vllm.md#vllm-batch-defaults): the user's values
(``--set`` under vLLM's names) over the defaults of the rule version and GPU class, in a frozen :class:`Settings`
(reported in ``Estimate.engine``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from hfvram.engines.base import unmodelled_flag_notes
from hfvram.engines.vllm import features
from hfvram.engines.vllm.constants import VllmConstants
from hfvram.errors import UsageError
from hfvram.estimate import common, multimodal
from hfvram.estimate.common import GiB
from hfvram.estimate.types import EngineChoice, Hardware, Workload
from hfvram.spec import RECURRENT_KINDS, LayerKind, ModelSpec

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
    #: V0 keeps a flat CUDA-graph reserve of this many GiB outside the budget (None: V1's graphs by capture size)
    cudagraph_flat_gib: float | None = None
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


def resolve_settings(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    constants: VllmConstants,
    rules_version: str,
) -> tuple[Settings, list[str]]:
    """vLLM's effective settings: user values (``--set`` under vLLM's names) over the defaults of the
    rule version and GPU class (vllm.md#vllm-batch-defaults); and the warnings met on the way, in order."""
    dp = common.setting_int(choice, "data-parallel-size", "dp") or 1
    tp, pp = common.resolve_parallel(
        choice, hardware, ("tensor-parallel-size", "tp"), ("pipeline-parallel-size", "pp"), dp=dp
    )
    util = choice.gpu_util or common.setting_float(choice, "gpu-memory-utilization")
    util = util if util is not None else float(constants.gpu_memory_utilization)
    if not 0 < util <= 1:
        raise UsageError(f"gpu-memory-utilization must be in (0, 1], got {util}")
    set_len = common.setting_int(choice, "max-model-len")
    max_model_len, warnings = resolve_max_model_len(spec, workload, set_len, constants)
    batched, max_num_seqs = resolve_batch(hardware, choice, constants, max_model_len)
    dtype = load_dtype(spec, common.setting(choice, "dtype"))
    quant_setting = (common.setting(choice, "quantization", "q") or "").strip().lower()
    online = quant_setting if quant_setting not in ("", "none", "auto") and spec.quantization is None else None
    kv_name = kv_dtype_name(choice, workload)
    block_default = default_block_size(spec, constants)
    kv_mem = common.setting(choice, "kv-cache-memory-bytes")
    warnings.extend(unmodelled_flag_warnings(spec, choice, constants, quant_setting))
    mm_settings, mm_warnings = multimodal.settings_of(spec, choice.settings, tp, choice.version or rules_version)
    speculative, speculative_warnings = speculative_setting(choice, spec, constants, tp, pp)
    warnings.extend([*mm_warnings, *speculative_warnings])
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
        cudagraph_in_budget=constants.cudagraph_in_budget and not is_mrv2_dense(spec, constants),
        state_seq_check=bool(constants.state_seq_check),
        kv_tokens_formula=constants.kv_tokens_formula,
        dtype=dtype,
        online_quantization=online,
        context_cap=max_model_len if set_len else max(max_model_len, spec.max_position_embeddings or 0),
        data_parallel_size=dp,
        num_gpu_blocks_override=gpu_blocks_override(choice),
        requested_version=choice.version,
        multimodal=mm_settings,
        lora=lora_setting(choice, constants, dtype),
        speculative=speculative,
        prefix_caching_set=prefix_caching_given(choice),
    ), warnings


def kv_dtype_name(choice: EngineChoice, workload: Workload) -> str:
    """The KV cache dtype asked for: ``--kv-dtype`` over ``--kv-cache-dtype`` (``auto`` = the model's dtype)."""
    if workload.kv_dtype not in ("", "auto"):
        return workload.kv_dtype
    return common.setting(choice, "kv-cache-dtype") or "auto"


def default_block_size(spec: ModelSpec, constants: VllmConstants) -> int:
    """vLLM's default block size: ``block_size_mla`` for an MLA model, else ``block_size`` (vllm.md#vllm-kv-specs)."""
    has_mla = LayerKind.MLA in common.layer_summary(spec.layers).kinds
    return int(constants.block_size_mla if has_mla else constants.block_size)


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


def lora_setting(choice: EngineChoice, constants: VllmConstants, dtype: str) -> features.LoraSettings | None:
    """``--enable-lora`` with ``--max-loras`` / ``--max-lora-rank`` / ``--max-cpu-loras`` / ``--lora-dtype`` /
    ``--fully-sharded-loras`` (LoRAConfig's defaults when not set, docs/engines/vllm.md#vllm-features); None without
    --enable-lora (vLLM then reads none of them)."""
    if not common.setting_bool(choice, "enable-lora"):
        return None
    loras = common.setting_int(choice, "max-loras") or constants.lora_default_max_loras
    rank = common.setting_int(choice, "max-lora-rank") or constants.lora_default_max_lora_rank
    cpu_loras = common.setting_int(choice, "max-cpu-loras")
    if loras < 1 or rank < 1:
        raise UsageError(f"max-loras and max-lora-rank must be positive, got {loras} and {rank}")
    if cpu_loras is not None and cpu_loras < loras:
        raise UsageError(f"max-cpu-loras ({cpu_loras}) must be >= max-loras ({loras}), as vLLM requires")
    named = (common.setting(choice, "lora-dtype") or "auto").strip().lower()
    lora_dtype = dtype if named == "auto" else DTYPE_NAMES.get(named)
    if lora_dtype is None:
        raise UsageError(f"unknown lora-dtype {named!r}; vLLM takes auto, float16 or bfloat16")
    until = common.version_key(constants.lora_extra_vocab_until)
    old_release = choice.version is not None and common.version_key(choice.version)[: len(until)] <= until
    extra = common.setting_int(choice, "lora-extra-vocab-size") if old_release else None
    return features.LoraSettings(
        max_loras=loras,
        max_lora_rank=rank,
        dtype_bytes=dtype_bytes_of(lora_dtype),
        fully_sharded_loras=common.setting_bool(choice, "fully-sharded-loras"),
        max_cpu_loras=cpu_loras,
        extra_vocab=(constants.lora_extra_vocab_size if extra is None else extra) if old_release else 0,
    )


def speculative_setting(
    choice: EngineChoice, spec: ModelSpec, constants: VllmConstants, tp: int = 1, pp: int = 1
) -> tuple[features.Speculative | None, list[str]]:
    """``--speculative-config`` (JSON), else the old ``--speculative-model`` / ``--num-speculative-tokens`` /
    ``--speculative-draft-tensor-parallel-size``, as vLLM resolves the method and the draft's TP
    (docs/engines/vllm.md#vllm-features), with the draft checkpoint the pipeline read (``choice.draft``) and its note
    or warning (the list returned with it); None without speculative decoding."""
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
    speculative = features.resolve_speculative(method, model, tokens, spec, constants, draft, draft_tp, tp)
    warnings = [*features.speculative_warnings(speculative, constants)]
    warnings.extend(features.draft_warnings(speculative, spec, pp, constants))
    return speculative, warnings


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


def unmodelled_flag_warnings(
    spec: ModelSpec, choice: EngineChoice, constants: VllmConstants, quantization: str
) -> list[str]:
    """One warning per flag vLLM reads that hfvram does not model (vllm.md#vllm-unmodelled-flags): the TOML's
    ``unmodelled_flags`` and ``--quantization`` on an unquantized checkpoint other than fp8 (speculative decoding:
    :func:`vllm_features.speculative_warnings`)."""
    notes = unmodelled_flag_notes(choice, constants.unmodelled_flags)
    if quantization in constants.inflight_quantizations and spec.quantization is None:
        notes.append(
            f"--quantization {quantization}: vLLM quantizes this unquantized checkpoint while loading it; hfvram "
            "does not model that and counts the weights at the checkpoint's dtype (an upper bound)"
        )
    elif (
        quantization not in ("", "none", "auto", "fp8", *constants.inflight_quantizations) and spec.quantization is None
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
    spec: ModelSpec, workload: Workload, set_len: int | None, constants: VllmConstants
) -> tuple[int, list[str]]:
    """max-model-len when set, else the requested context, else the model's maximum (else the TOML's
    fallback), with vLLM's refusals of a length it cannot serve as warnings."""
    warnings: list[str] = []
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
        max_model_len = constants.fallback_max_model_len
        warnings.append(
            f"the config states no max_position_embeddings; assumed max_model_len {max_model_len} (set --context)"
        )
    if model_max and max_model_len > model_max:
        warnings.append(
            f"max_model_len {max_model_len} is above the model's max_position_embeddings {model_max}: vLLM refuses "
            "it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (or rope scaling allows it)"
        )
    return max_model_len, warnings


def is_large_gpu(hardware: Hardware | None, constants: VllmConstants) -> bool:
    """The OpenAI server's GPU class (docs/engines/vllm.md#vllm-activations): at least ``large_gpu_min_gib`` and not named like one of
    ``small_gpu_names`` (the A100s keep the small defaults); no hardware counts as large."""
    if hardware is None:
        return True
    label = (hardware.gpu.id + hardware.gpu.name).lower()
    return hardware.gpu.gpu_memory_bytes >= float(constants.large_gpu_min_gib) * GiB and not any(
        str(name) in label for name in constants.small_gpu_names
    )


def resolve_batch(
    hardware: Hardware | None, choice: EngineChoice, constants: VllmConstants, max_model_len: int
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs): the user's, else the GPU class defaults; without chunked
    prefill a whole max_model_len prompt is one batch."""
    large = is_large_gpu(hardware, constants)
    default_batched = (
        constants.large_gpu_max_num_batched_tokens if large else constants.small_gpu_max_num_batched_tokens
    )
    default_seqs = constants.large_gpu_max_num_seqs if large else constants.small_gpu_max_num_seqs
    max_num_seqs = common.setting_int(choice, "max-num-seqs", default=default_seqs) or default_seqs
    batched = common.setting_int(choice, "max-num-batched-tokens")
    chunked = common.setting_bool(choice, "enable-chunked-prefill", default=constants.chunked_prefill)
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


def is_mrv2_dense(spec: ModelSpec, constants: VllmConstants) -> bool:
    """True where vLLM runs the model on Model Runner V2, whose graph profiler returns 0 (v0.25.1 on, dense
    models: no experts, no recurrent layers; docs/engines/vllm.md#vllm-mrv2)."""
    if not constants.cudagraph_mrv2_dense:
        return False
    recurrent = not RECURRENT_KINDS.isdisjoint(common.layer_summary(spec.layers).kinds)
    return not recurrent and not (spec.num_experts and spec.num_experts > 1)
