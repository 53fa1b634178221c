"""The estimator's entry point: spec + hardware + engine + workload -> Estimate (pure).

Each engine profile (``hfvram.engines.<engine>.profile``) computes the four terms on the worst GPU (weights,
KV cache, activations, engine overhead), the memory the engine may use, the verdict and the capacity, from
the shared building blocks in ``hfvram.estimate.common``. This module only checks the inputs and dispatches.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hfvram.engines import get_profile, parse_engine_name, registry
from hfvram.engines.contract import StagedProfile
from hfvram.errors import UsageError
from hfvram.estimate import common, engine_rules, mixed, speed
from hfvram.estimate.cpu_offload import with_cpu_offload_gb
from hfvram.estimate.types import EngineChoice, Estimate, Hardware, Workload
from hfvram.spec import GROWING_KINDS, RECURRENT_KINDS, WINDOWED_KINDS, LayerKind, ModelSpec


def validate_workload(workload: Workload) -> None:
    """UsageError for a context or concurrency no engine could serve."""
    if workload.context is not None and workload.context < 1:
        raise UsageError(f"context must be at least 1 token, got {workload.context}")
    if workload.concurrency < 1:
        raise UsageError(f"concurrency must be at least 1, got {workload.concurrency}")


def validate_choice(choice: EngineChoice, hardware: Hardware | None) -> None:
    """UsageError for a parallel layout that does not exist."""
    for label, value in (("--tp", choice.tp), ("--pp", choice.pp)):
        if value is not None and value < 1:
            raise UsageError(f"{label} must be at least 1, got {value}")
    if choice.gpu_util is not None and not 0 < choice.gpu_util <= 1:
        raise UsageError(f"--gpu-util must be in (0, 1], got {choice.gpu_util}")


def estimate(spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload) -> Estimate:
    """Memory on the worst GPU, verdict and capacity for ``spec`` served by ``choice`` on ``hardware``
    (``None``: the footprint only, no verdict).

    ``capacity.max_context`` has one meaning for every engine: the largest ``--context`` for which the verdict
    is not does_not_fit, everything else unchanged, never above the model's own limit (``hfvram.estimate.inverse
    .max_context``, the figure ``fit`` prints too)."""
    result = estimate_memory(spec, hardware, choice, workload)
    if result.hardware is None or result.verdict is None:
        return result
    from hfvram.estimate import inverse

    longest = inverse.max_context(spec, hardware, choice, workload, known=result)  # type: ignore[arg-type]
    # a layout the engine refuses serves no request, whatever its pool would hold
    held = 0.0 if result.refusal and result.capacity.max_concurrency is not None else result.capacity.max_concurrency
    result = replace(result, capacity=replace(result.capacity, max_context=longest, max_concurrency=held))
    return with_expected_prefill(with_expected_speed(with_offload(result, choice, workload)))


def with_expected_speed(result: Estimate) -> Estimate:
    """llama.cpp / Ollama on the GPUs alone: the expected decode speed from the bound (docs/methodology.md#expected-
    speed); a placement into RAM has set its own already."""
    if result.speed is not None or str(result.engine.get("name")) not in speed.GPU_ONLY_ENGINES:
        return result
    if result.offload is not None and result.offload.status == "offload":
        return result
    expected = speed.from_bound(result.decode_tokens_per_second, result.spec.num_layers)
    return replace(result, speed=expected) if expected is not None else result


def with_expected_prefill(result: Estimate) -> Estimate:
    """llama.cpp / Ollama on a GPU whose backend the prefill fit set measured (docs/methodology.md#expected-speed):
    the expected prefill of a ubatch-long prompt beside the expected decode, with the weights in RAM each ubatch
    copies over PCIe (the op offload, docs/engines/llamacpp.md#llamacpp-compute-buffer)."""
    expected, hardware = result.speed, result.hardware
    if expected is None or hardware is None or str(result.engine.get("name")) not in speed.GPU_ONLY_ENGINES:
        return result
    if hardware.gpu.vendor not in speed.speed_constants().prefill.vendors:
        return result
    from hfvram.estimate.host_memory import pcie_bandwidth_gbs

    ubatch = _whole(result.engine.get("ubatch-size"), 512)
    context = _whole(result.engine.get("ctx-size"), 0)
    # a ubatch never holds more tokens than the context
    ubatch = min(ubatch, context) if context > 0 else ubatch
    prefill = speed.expected_prefill(
        result.spec, hardware.gpu.fp16_tensor_tflops, ubatch, expected.prefill_host_bytes, pcie_bandwidth_gbs()
    )
    return replace(result, speed=replace(expected, prefill=prefill)) if prefill is not None else result


def _whole(value: object, default: int) -> int:
    """An engine setting as a whole number (a JSON-ish value: int, or a numeric string), else ``default``."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else default


#: engines whose ``--cpu-offload-gb`` keeps decoder weights in host memory, read over PCIe every step
WEIGHT_OFFLOAD_ENGINES = frozenset({"vllm", "sglang"})


def with_offload(result: Estimate, choice: EngineChoice, workload: Workload) -> Estimate:
    """``result`` with the engine's own placement into RAM applied (verdict ``offload``; ``capacity`` keeps the
    figures of the GPUs alone): vLLM / SGLang's ``--cpu-offload-gb``, or the staged profile's ``offload`` step
    (llama.cpp's --fit plan, Ollama's scheduler, docs/engines/llamacpp.md#llamacpp-offload-verdict; the other
    engines leave the estimate as it is)."""
    if result.hardware is None or result.verdict is None:
        return result
    engine = str(result.engine.get("name"))
    if engine in WEIGHT_OFFLOAD_ENGINES and common.setting(choice, "cpu-offload-gb"):
        return with_cpu_offload_gb(result, choice)
    profile = get_profile(engine) if engine in registry() else None
    if not isinstance(profile, StagedProfile):
        return result
    name, version = parse_engine_name(choice.name)
    if version and not choice.version:
        choice = replace(choice, name=name, version=version)
    return profile.offload(result, choice, workload)


def estimate_memory(spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload) -> Estimate:
    """The forward estimate alone: the engine profile's terms, verdict and capacity, with the engine's own
    refusals applied; ``capacity.max_context`` is the profile's own figure (see :func:`estimate`)."""
    validate_workload(workload)
    validate_choice(choice, hardware)
    name, version = parse_engine_name(choice.name)
    if version and not choice.version:
        choice = replace(choice, name=name, version=version)
    engine_rules.check_kv_dtype(name, choice, workload)
    profile = get_profile(name)
    result = engine_rules.without_decode_speed(profile.estimate(spec, hardware, choice, workload))
    notes = engine_rules.unknown_setting_warnings(name, choice) + engine_rules.version_warnings(
        name, choice.version, profile.rule_versions
    )
    tp_defaulted = choice.tp is None and common.setting(choice, "tp", "tp-size", "tensor-parallel-size") is None
    quant_refusal, quant_notes = engine_rules.quant_tp_refusal(name, spec, result.tp, hardware, defaulted=tp_defaulted)
    notes += quant_notes
    refusals = [
        result.refusal,  # the profile's own (vLLM's speculative-decoding checks)
        engine_rules.platform_refusal(name, hardware, common.setting(choice, "backend")),
        engine_rules.tp_refusal(name, spec, result.tp, defaulted=tp_defaulted),
        quant_refusal,
        context_refusal(name, spec, choice, result),
        mixed.mixed_refusal(name, hardware),
    ]
    notes += mixed.mixed_notes(name, hardware)
    result = engine_rules.with_refusals(result, [r for r in refusals if r], notes)
    pool = kv_pool_sized_by(name)
    return with_kv_figures(result, capacity=replace(result.capacity, kv_pool_sized_by=pool))


def kv_pool_sized_by(engine: str) -> str | None:
    """``memory`` / ``context`` / ``none``: what the engine sizes its KV pool by (``kv_pool_sized_by`` of its
    hfvram/engines/<engine>/engine.toml)."""
    entry = registry().get(engine)
    return entry.kv_pool_sized_by if entry else None


#: rope types whose factor does not lengthen the context the engine derives (vLLM _get_and_verify_max_len)
ROPE_TYPES_WITHOUT_LONGER_CONTEXT = frozenset({"llama3", "longrope", "su", "default", "mrope"})


def model_context_limit(spec: ModelSpec) -> int | None:
    """The longest context the engines derive from the model's config: ``max_position_embeddings``; None when the
    config does not state it or when a rope scaling factor lets the engine derive a longer one."""
    if not spec.max_position_embeddings:
        return None
    rope = spec.rope_scaling or {}
    kind = str(rope.get("rope_type") or rope.get("type") or "default").lower()
    factor = rope.get("factor")
    longer = isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 1
    if longer and kind not in ROPE_TYPES_WITHOUT_LONGER_CONTEXT:
        return None
    return spec.max_position_embeddings


def context_refusal(engine: str, spec: ModelSpec, choice: EngineChoice, result: Estimate) -> str | None:
    """The engine's refusal of a context above the model's limit (``context_setting`` / ``context_override`` in
    ``[accepts]`` of the engine's data file), unless the override is set (``--set NAME=1``)."""
    rules = engine_rules.accepts(engine)
    key, override = rules.get("context_setting"), rules.get("context_override")
    limit = model_context_limit(spec)
    if not key or limit is None:
        return None
    served = result.engine.get(str(key))
    if not isinstance(served, int) or isinstance(served, bool) or served <= limit:
        return None
    if override and (common.setting(choice, str(override)) or "").strip().lower() in ("1", "true", "yes"):
        return None
    return f"{engine} refuses {key} {served:,}: above the model's max_position_embeddings {limit:,}" + (
        f" (--set {override}=1 lifts the limit)" if override else ""
    )


def with_kv_figures(result: Estimate, **changes: Any) -> Estimate:
    """The KV bytes per token (K and V apart) and per sequence at the KV types the engine resolved, so that the
    reports only format them. A ``K/V`` type (llama.cpp ``-ctk q8_0 -ctv f16``) gives each half its own size.
    ``changes``: other fields replaced in the same copy."""
    spec = result.spec
    model_bytes = spec.dtype_bytes()
    k_name, _, v_name = str(result.workload.kv_dtype or "auto").partition("/")
    try:
        k_bytes = common.kv_dtype_bytes(k_name, model_bytes)
        v_bytes = common.kv_dtype_bytes(v_name or k_name, model_bytes)
    except UsageError:  # an engine's own cache class (MLX q8 groups, ExLlamaV2 Q4): its profile sized the cache
        note = (
            f"KV bytes per token are not given for {result.workload.kv_dtype} (the engine's own cache type; "
            "its KV cache term is)"
        )
        return replace(result, warnings=tuple(dict.fromkeys([*result.warnings, note])), **changes)
    summary = common.layer_summary(spec.layers)
    layers = summary.counts  # each distinct layer once, with its count
    k_elems = v_elems = 0
    for layer, count in layers:
        if layer.kind is LayerKind.MLA:
            k_elems += layer.kv_elems_per_token * count  # the latent is one cache (llama.cpp keeps it as K)
        elif layer.kind in GROWING_KINDS:
            k_elems += layer.num_kv_heads * layer.head_dim_k * count
            v_elems += layer.num_kv_heads * layer.head_dim_v * count
    k_per_token, v_per_token = round(k_elems * k_bytes), round(v_elems * v_bytes)
    context = result.workload.context
    # the recurrent state alone (none without recurrent layers)
    fixed = float(spec.kv_fixed_bytes_per_sequence(0.0, context)) if summary.kinds & RECURRENT_KINDS else 0.0
    for layer, count in layers:
        if layer.kind in WINDOWED_KINDS:
            tokens = min(layer.window or 0, context) if context is not None else layer.window or 0
            per_layer = layer.num_kv_heads * (layer.head_dim_k * k_bytes + layer.head_dim_v * v_bytes) * tokens
            fixed += per_layer * count
    return replace(
        result,
        kv_k_bytes_per_token=k_per_token,
        kv_v_bytes_per_token=v_per_token,
        kv_fixed_bytes_per_sequence=round(fixed),
        **changes,
    )
