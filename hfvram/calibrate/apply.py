"""Applying a calibration to an estimate: whether a saved record describes it (engine rule set, GPU, model family
and size), replacing its activation / overhead terms by the measured ones, and comparing a log with a prediction."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from hfvram.calibrate.files import rules_version_of
from hfvram.estimate.types import Capacity, Estimate, verdict_for

if TYPE_CHECKING:
    from hfvram.calibrate.logs import Measured

GIB = 1024**3

#: a calibration carries over to a model of the same family whose parameter count is within this factor
SIZE_FACTOR = 1.5


def calibration_match(est: Estimate, record: Mapping[str, object]) -> tuple[str, ...]:
    """Why ``record`` does not describe ``est`` (empty when it does): another engine, rule set (release range), GPU,
    model family or model size, or a record that does not say which model it measured."""
    reasons = []
    engine = est.engine.get("name")
    if record.get("engine") != engine:
        reasons.append(f"measured with {record.get('engine')}, not {engine}")
    rules = record.get("engine_rules") or rules_version_of(str(record.get("engine")), record.get("engine_version"))
    used = est.engine.get("version")
    if not rules:
        reasons.append("the log does not say which engine release ran")
    elif used and rules != used:
        reasons.append(
            f"measured on {record.get('engine')} {record.get('engine_version')} ({rules} rules), this estimate follows "
            f"the {used} rules (--engine {engine}@{record.get('engine_version')} compares like with like)"
        )
    if est.hardware is not None and record.get("gpu") != est.hardware.gpu.id:
        reasons.append(f"measured on {record.get('gpu')}, not {est.hardware.gpu.id}")
    model = record.get("model")
    if not isinstance(model, Mapping) or not model.get("family"):
        reasons.append("saved without --model, so the model family it measured is unknown")
    else:
        if model.get("family") != est.spec.model_type:
            reasons.append(f"measured on a {model.get('family')} model, this is {est.spec.model_type}")
        size, here = model.get("params_total"), est.spec.params_total
        if isinstance(size, int) and here and not (size / SIZE_FACTOR <= here <= size * SIZE_FACTOR):
            reasons.append(f"measured on a {size / 1e9:.1f}B model, this one has {here / 1e9:.1f}B parameters")
    return tuple(reasons)


def not_applied_warning(path: object, reasons: Iterable[str]) -> str:
    return f"calibration {path} not applied: " + "; ".join(reasons)


def apply_calibration(est: Estimate, record: Mapping[str, object], origin: str) -> Estimate:
    """Replace the activation / overhead terms by the measured ones; verdict and capacity follow.

    Capacity is scaled by the change of the memory left for the KV cache (tokens are proportional to the pool
    for paged engines); this is stated in the estimate's explanation.
    """
    old = est.per_gpu
    activations = record.get("activations")
    overhead = record.get("overhead")
    new = replace(
        old,
        activations=old.activations if not isinstance(activations, (int, float)) else int(activations),
        overhead=old.overhead if not isinstance(overhead, (int, float)) else int(overhead),
    )
    explain = dict(est.explain)
    note = f"calibrated from {origin}"
    explain["activations"] = (
        f"{note} (was {old.activations / GIB:.2f} GiB by the rules)"
        if activations is not None
        else explain.get("activations", "")
    )
    explain["overhead"] = (
        f"{note} (was {old.overhead / GIB:.2f} GiB by the rules)"
        if overhead is not None
        else explain.get("overhead", "")
    )
    capacity = est.capacity
    old_pool = old.usable - old.weights - old.activations - old.overhead
    new_pool = new.usable - new.weights - new.activations - new.overhead
    if est.hardware is not None and old_pool > 0:
        ratio = max(0.0, new_pool) / old_pool
        capacity = Capacity(
            kv_tokens=None if capacity.kv_tokens is None else int(capacity.kv_tokens * ratio),
            max_concurrency=None if capacity.max_concurrency is None else capacity.max_concurrency * ratio,
            max_context=None if capacity.max_context is None else int(capacity.max_context * ratio),
        )
        explain["capacity"] = f"derived: scaled by the KV pool change after calibration (× {ratio:.3f})"
    verdict = verdict_for(new.total, new.usable) if est.hardware is not None else None
    utilization = new.total / new.usable if est.hardware is not None and new.usable else est.utilization
    return replace(
        est,
        per_gpu=new,
        verdict=verdict,
        utilization=utilization,
        capacity=capacity,
        explain=explain,
        warnings=(*est.warnings, f"activations / overhead measured: {note}", *calibration_mismatches(est, record)),
    )


def _minor(version: object) -> str | None:
    """``0.19.0`` / ``v0.19`` -> ``0.19``: releases that share their memory rules."""
    match = re.match(r"v?(\d+)\.(\d+)", str(version or ""))
    return f"{match[1]}.{match[2]}" if match else None


def calibration_mismatches(est: Estimate, record: Mapping[str, object]) -> tuple[str, ...]:
    """A calibration measured with another engine, release or GPU than the estimate's: said, not refused."""
    notes = []
    engine = est.engine.get("name")
    if record.get("engine") and engine and record["engine"] != engine:
        notes.append(
            f"the calibration was measured with {record['engine']}, this estimate is for {engine}: "
            "its activation / overhead terms may not carry over"
        )
    measured, used = _minor(record.get("engine_version")), _minor(est.engine.get("version"))
    if measured and used and measured != used and record.get("engine") == engine:
        notes.append(
            f"the calibration was measured on {engine} {record.get('engine_version')}; this estimate "
            f"follows the {used} rules (pass --engine {engine}@{measured} to compare like with like)"
        )
    if est.hardware is not None and record.get("gpu") and record["gpu"] != est.hardware.gpu.id:
        notes.append(f"the calibration was measured on {record['gpu']}, this estimate is for {est.hardware.gpu.id}")
    return tuple(notes)


def predicted_terms(est: Estimate) -> dict[str, int | None]:
    """The estimate's figures in the shape of :class:`Measured` (KV as the pool the engine would allocate)."""
    per_gpu = est.per_gpu
    stated = est.engine.get("kv_pool_bytes")
    pool: int | None = stated if isinstance(stated, int) else None
    if pool is None and est.hardware is not None:
        pool = per_gpu.usable - per_gpu.weights - per_gpu.activations - per_gpu.overhead
    if pool is not None and pool <= 0:
        pool = 0  # the engine would find no memory for its KV cache, as a failed start-up log shows
    return {
        "weights": per_gpu.weights,
        "kv_cache": pool if pool is not None else per_gpu.kv_cache,
        "activations": per_gpu.activations,
        "overhead": per_gpu.overhead,
        "kv_tokens": est.capacity.kv_tokens,
    }


#: measured and predicted weights further apart than this share point at a different checkpoint or offload
WEIGHTS_MISMATCH = 0.2


def comparison_warnings(measured: Measured, predicted: Mapping[str, int | None]) -> list[str]:
    """What to check when the prediction is far from the log: usually not hfvram's rules but the inputs."""
    weights = predicted.get("weights")
    if measured.weights is None or not weights:
        return []
    if abs(measured.weights - weights) <= WEIGHTS_MISMATCH * max(measured.weights, weights):
        return []
    return [
        f"the log's weights ({measured.weights / GIB:.2f} GiB per GPU) are far from --model's "
        f"({weights / GIB:.2f} GiB): is --model the checkpoint that ran (same quantization / GGUF file), "
        "and do --set / --engine match the run (tensor parallel, -ngl, -ot / --n-cpu-moe offload)? "
        "The other differences follow from that one"
    ]
