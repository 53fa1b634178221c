"""The JSON objects of the outer contract (README.md, 'The JSON contract'): ``hfvram.check/1`` and ``hfvram.inspect/1``.

Every size is in bytes; a figure the estimator could not know stays ``None`` (JSON ``null``) with a warning.
Fields beyond the contract's are additions (the contract allows adding, never renaming).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hfvram.estimate.types import (
    FITS_THRESHOLD,
    VERDICT_OFFLOAD,
    Estimate,
    ExpectedPrefill,
    ExpectedSpeed,
    Hardware,
    ListedVerdict,
    Workload,
    verdict_for,
    verdict_rank,
)
from hfvram.spec import ModelSpec, SourceInfo

CHECK_SCHEMA = "hfvram.check/1"
INSPECT_SCHEMA = "hfvram.inspect/1"


def kv_dtype_bytes(kv_dtype: str | None, spec: ModelSpec) -> float:
    """Bytes per KV element for a dtype name; ``auto``/None -> the model's compute dtype (UsageError if unknown)."""
    from hfvram.estimate.common import kv_dtype_bytes as element_bytes

    return element_bytes(kv_dtype or "auto", spec.dtype_bytes())


def kv_dtype_name(kv_dtype: str | None, spec: ModelSpec) -> str:
    """The KV cache type's name; a GGUF states no compute dtype, and llama.cpp's default cache type is f16."""
    from hfvram.estimate.common import canonical_kv_dtype

    if (
        kv_dtype in (None, "auto")
        and spec.dtype is None
        and spec.quantization is not None
        and spec.quantization.method == "gguf"
    ):
        return "f16"
    return canonical_kv_dtype(kv_dtype or "auto", spec.dtype)


def source_dict(source: SourceInfo) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": source.kind,
        "repo_id": source.repo_id,
        "revision": source.revision,
        "files": list(source.files),
    }
    if source.note:
        out["note"] = source.note
    return out


def _quantization_dict(spec: ModelSpec) -> dict[str, Any] | None:
    quant = spec.quantization
    if quant is None:
        return None
    return {"method": quant.method, "bits": quant.bits, "group_size": quant.group_size}


def model_dict(
    spec: ModelSpec, kv_dtype: str | None, context: int | None = None, est: Estimate | None = None
) -> dict[str, Any]:
    """The contract's ``model`` object with KV figures at ``kv_dtype``: the estimator's own (``est``, K and V
    apart) when there is an estimate, else the spec's at one element size (``inspect``)."""
    kv_per_token: int | None
    kv_fixed: int | None
    kv_split: dict[str, Any]
    if est is not None and est.kv_bytes_per_token is None:  # the engine's own cache type: unknown here
        kv_per_token, kv_fixed, kv_split = None, None, {"kv_k_bytes_per_token": None, "kv_v_bytes_per_token": None}
    elif est is not None:
        kv_per_token = est.kv_bytes_per_token
        kv_fixed = est.kv_fixed_bytes_per_sequence
        kv_split = {
            "kv_k_bytes_per_token": est.kv_k_bytes_per_token,
            "kv_v_bytes_per_token": est.kv_v_bytes_per_token,
        }
    else:
        per_element = kv_dtype_bytes(kv_dtype, spec)
        kv_per_token = spec.kv_bytes_per_token(per_element)
        kv_fixed = spec.kv_fixed_bytes_per_sequence(per_element, context)
        kv_split = {}
    return {
        "architecture": spec.architecture,
        "model_type": spec.model_type,
        "params_total": spec.params_total,
        "params_active": spec.params_active if spec.params_active is not None else _dense_active(spec),
        "weights_bytes": spec.weights_bytes,
        "num_layers": spec.num_layers,
        "kv_bytes_per_token": kv_per_token,
        "kv_fixed_bytes_per_sequence": kv_fixed,
        "layers": spec.layer_census(),
        # additions to the contract
        "dtype": spec.dtype,
        "kv_dtype": kv_dtype if kv_dtype and "/" in kv_dtype else kv_dtype_name(kv_dtype, spec),
        **kv_split,
        "max_position_embeddings": spec.max_position_embeddings,
        "quantization": _quantization_dict(spec),
        "weights_exact": spec.weights.exact if spec.weights else None,
        "multimodal": spec.multimodal,
        "decided_by": spec.decided_by,
    }


def _dense_active(spec: ModelSpec) -> int | None:
    """A model without experts activates all its parameters; for MoE without a count, unknown (None)."""
    if spec.num_experts in (None, 0, 1) and not any(layer.moe for layer in spec.layers):
        return spec.params_total
    return None


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _hardware_dict(est: Estimate) -> dict[str, Any] | None:
    """The check's ``hardware`` object: None without a GPU; a mixed set lists every device."""
    per_gpu = est.per_gpu
    hardware = None
    if est.hardware is not None:
        hardware = {
            "gpu": est.hardware.gpu.id,
            "count": est.hardware.count,
            "memory_bytes": est.hardware.gpu.gpu_memory_bytes,
            "usable_bytes": per_gpu.usable,
            "name": est.hardware.gpu.name,
        }
        if est.hardware.mixed:  # a mixed set: every device in order; gpu / memory_bytes are the worst device's
            devices = est.hardware.gpus
            if est.worst_device is not None and 0 <= est.worst_device < len(devices):
                worst = devices[est.worst_device]
                hardware.update(gpu=worst.id, name=worst.name, worst_device=est.worst_device)
            hardware["memory_bytes"] = per_gpu.memory or est.hardware.gpu.gpu_memory_bytes
            hardware["label"] = est.hardware.label
            hardware["devices"] = [{"gpu": gpu.id, "memory_bytes": gpu.gpu_memory_bytes} for gpu in est.hardware.gpus]
    return hardware


def check_dict(source: SourceInfo, est: Estimate, *, explain: bool = False) -> dict[str, Any]:
    """One ``hfvram.check/1`` object."""
    per_gpu = est.per_gpu
    hardware = _hardware_dict(est)
    engine = dict(est.engine)
    engine.setdefault("name", None)
    engine.setdefault("gpu_util", None)
    engine = {key: _jsonable(value) for key, value in engine.items()}
    out: dict[str, Any] = {
        "schema": CHECK_SCHEMA,
        "source": source_dict(source),
        "model": model_dict(est.spec, est.workload.kv_dtype, est.workload.context, est),
        "hardware": hardware,
        "engine": engine,
        "workload": {
            "context": est.workload.context,
            "concurrency": est.workload.concurrency,
            "kv_dtype": est.workload.kv_dtype,
        },
        "per_gpu": {
            "weights": per_gpu.weights,
            "kv_cache": per_gpu.kv_cache,
            "activations": per_gpu.activations,
            "overhead": per_gpu.overhead,
            "total": per_gpu.total,
            "usable": per_gpu.usable if est.hardware is not None else None,
            "memory": per_gpu.memory if est.hardware is not None else None,
            "reserve": per_gpu.reserve if est.hardware is not None else None,
        },
        "utilization": est.utilization,
        "verdict": est.verdict,
        "verdict_reason": verdict_reason(est),
        "capacity": {
            "kv_tokens": est.capacity.kv_tokens,
            "max_concurrency": est.capacity.max_concurrency,
            "max_context": est.capacity.max_context,
            "kv_pool_sized_by": est.capacity.kv_pool_sized_by,
        },
        "decode_tokens_per_second": est.decode_tokens_per_second,
        "parallel": {"tp": est.tp, "pp": est.pp},
        "warnings": _unique(list(est.spec.warnings) + list(est.warnings)),
    }
    if est.speed is not None:
        out["speed"] = speed_dict(est.speed)
    if est.offload is not None:
        out["offload_plan"] = est.offload.as_dict(moe=any(layer.moe for layer in est.spec.layers))
    if explain:
        out["explain"] = {"terms": dict(est.explain), "provenance": dict(est.spec.provenance)}
    return out


def listed_check_dict(
    source: SourceInfo,
    listed: ListedVerdict,
    context: tuple[Hardware, str, float | None, Workload],
    *,
    params_total: int,
    provenance: str,
    explain: bool = False,
) -> dict[str, Any]:
    """The ``hfvram.check/1`` row of a repo answered from the Hub listing alone (:class:`ListedVerdict`): does not
    fit, on its weights; what was not read (the config: layers, KV, activations, overhead) is null or 0 with a
    warning. ``context``: the hardware, the engine's name, its gpu_util and the workload asked for."""
    from hfvram.report.units import gib

    hardware, engine, gpu_util, workload = context
    devices = f"{listed.count} GPUs' memory together" if listed.count > 1 else "the GPU's memory"
    out: dict[str, Any] = {
        "schema": CHECK_SCHEMA,
        "source": source_dict(source),
        "model": {
            **dict.fromkeys(("architecture", "model_type", "params_active", "num_layers", "layers"), None),
            **dict.fromkeys(("kv_bytes_per_token", "kv_fixed_bytes_per_sequence"), None),
            "params_total": params_total,
            "weights_bytes": listed.weights,
        },
        "hardware": _listed_hardware(hardware, listed),
        "engine": {"name": engine, "gpu_util": gpu_util},
        "workload": {"context": workload.context, "concurrency": workload.concurrency, "kv_dtype": workload.kv_dtype},
        "per_gpu": {
            **dict.fromkeys(("kv_cache", "activations", "overhead"), 0),
            "weights": listed.per_gpu_weights,
            "total": listed.per_gpu_weights,
            "usable": listed.per_gpu_memory,
            "memory": listed.per_gpu_memory,
            "reserve": None,
        },
        "utilization": listed.per_gpu_weights / listed.per_gpu_memory,
        "verdict": "does_not_fit",
        "verdict_reason": f"memory: the weights alone ({gib(listed.weights)}, {provenance}) are more than {devices}"
        f" ({gib(listed.memory)}), and {engine} holds every weight on its GPUs",
        "capacity": {"kv_tokens": None, "max_concurrency": None, "max_context": None, "kv_pool_sized_by": None},
        "decode_tokens_per_second": None,
        "warnings": [
            f"answered from the Hub listing's per-dtype parameter counts alone ({provenance}): the weights do not "
            "fit, so nothing else of the repo was read; KV cache, activations and overhead are not counted"
        ],
    }
    if explain:
        out["explain"] = {
            "terms": {"weights": f"{provenance}, split evenly over {listed.count}"},
            "provenance": {"weights": provenance},
        }
    return out


def _listed_hardware(hardware: Hardware, listed: ListedVerdict) -> dict[str, Any]:
    """The ``hardware`` object of :func:`listed_check_dict`: the GPU with the least memory sets the row."""
    worst = min(hardware.gpus, key=lambda gpu: gpu.gpu_memory_bytes)
    hardware_out: dict[str, Any] = {
        "gpu": worst.id,
        "count": listed.count,
        "memory_bytes": listed.per_gpu_memory,
        "usable_bytes": listed.per_gpu_memory,  # at most the whole card: the engine's budget was not worked out
        "name": worst.name,
    }
    if hardware.mixed:
        hardware_out["label"] = hardware.label
        hardware_out["devices"] = [{"gpu": gpu.id, "memory_bytes": gpu.gpu_memory_bytes} for gpu in hardware.gpus]
    return hardware_out


def speed_dict(speed: ExpectedSpeed) -> dict[str, Any]:
    """The expected decode speed (docs/methodology.md#expected-speed): the total, its range over the spread of the
    published runs it was fitted on, each part in seconds per token with its basis, and the bound it refines
    (``decode_tokens_per_second`` at the top level is that bound)."""
    rate = speed.decode_tokens_per_second
    return {
        "expected_decode_tokens_per_second": rate,
        "range_tokens_per_second": None
        if speed.low is None or speed.high is None
        else [rate * speed.low, rate * speed.high],
        "decode_bound_tokens_per_second": speed.decode_bound,
        "seconds_per_token": speed.seconds_per_token,
        "parts": [{"name": p.name, "seconds_per_token": p.seconds, "basis": p.basis} for p in speed.parts],
        "prefill": None if speed.prefill is None else prefill_dict(speed.prefill),
    }


def prefill_dict(prefill: ExpectedPrefill) -> dict[str, Any]:
    """The expected prefill (docs/methodology.md#expected-speed): tokens/s of a ubatch-long prompt, its range over
    the spread of the published runs it was fitted on, each part in seconds per prompt token with its basis."""
    rate = prefill.tokens_per_second
    return {
        "expected_tokens_per_second": rate,
        "range_tokens_per_second": None
        if prefill.low is None or prefill.high is None
        else [rate * prefill.low, rate * prefill.high],
        "prompt_tokens": prefill.prompt_tokens,
        "ubatch": prefill.ubatch,
        "seconds_per_token": prefill.seconds_per_token,
        "parts": [{"name": p.name, "seconds_per_token": p.seconds, "basis": p.basis} for p in prefill.parts],
    }


def offload_summary(est: Estimate) -> str:
    """``runs with the experts of 35 of 48 layers in RAM (12.70 GiB)``: what the engine keeps off the GPUs."""
    plan = est.offload
    placed, model = est.engine.get("layers_offload"), est.engine.get("layers_model")
    if plan is None and isinstance(placed, int) and isinstance(model, int):
        return f"runs with {model - placed} of {model} layers in RAM (the engine's own layer count)"
    if plan is None and str(est.engine.get("name")) in ("vllm", "sglang"):
        return "runs with weights in host memory, streamed over PCIe every step (--cpu-offload-gb)"
    if plan is None:
        return "runs with layers or weights in CPU RAM (the placement set)"
    ram = plan.usage.host_total / 2**30
    moe = any(layer.moe for layer in est.spec.layers)
    if moe and plan.planner == "llama.cpp":
        kept = f"the experts of {plan.expert_layers_in_ram + plan.expert_layers_split} of {plan.n_layer} layers"
    else:
        kept = f"{plan.n_layer + 1 - plan.n_gpu_layers} of {plan.n_layer + 1} layers"
    return f"runs with {kept} in RAM ({ram:.2f} GiB)"


def verdict_reason(est: Estimate) -> str | None:
    """Why the verdict is what it is: the memory threshold, or an engine rule that overrides it."""
    if est.hardware is None or est.verdict is None:
        return None
    if getattr(est, "refusal", None):
        return f"engine rule: {est.refusal}"
    per_gpu = est.per_gpu
    share = per_gpu.total / per_gpu.usable if per_gpu.usable > 0 else None
    used = "no usable memory" if share is None else f"the four terms take {share * 100:.0f}% of usable memory"
    if est.verdict == VERDICT_OFFLOAD:
        on_gpu = f"; on the GPU {used}" if share is not None and share <= 1 else ""
        return f"offload: {offload_summary(est)}{on_gpu}"
    by_memory = verdict_for(per_gpu.total, per_gpu.usable)
    if by_memory == est.verdict:
        return f"memory: {used} (fits up to {FITS_THRESHOLD * 100:.0f}%, tight up to 100%)"
    if verdict_rank(est.verdict) > verdict_rank(by_memory):
        return f"engine rule: {used}, but the engine would not start with these settings: see the warnings"
    return f"engine rule: {used}, but the engine's own rules call it {est.verdict.replace('_', ' ')}"


def inspect_dict(source: SourceInfo, spec: ModelSpec, kv_dtype: str | None = None) -> dict[str, Any]:
    """One ``hfvram.inspect/1`` object: facts only; KV figures at ``kv_dtype`` (default the checkpoint's)."""
    return {
        "schema": INSPECT_SCHEMA,
        "source": source_dict(source),
        "model": model_dict(spec, kv_dtype),
        "provenance": dict(spec.provenance),
        "warnings": list(spec.warnings),
    }


def error_dict(source_text: str, error: BaseException) -> dict[str, Any]:
    """The row ``scan`` writes for a source that could not be read."""
    kind = getattr(error, "kind", None) or "internal"
    return {
        "schema": CHECK_SCHEMA,
        "source": {"kind": None, "repo_id": None, "revision": None, "files": [], "text": source_text},
        "error": {"kind": kind, "message": str(error) or type(error).__name__},
    }


def _jsonable(value: object) -> object:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value  # first: most values are, and the Mapping check is an ABC's
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(item) for item in value]
    return str(value)
