"""The estimator's entry point: spec + hardware + engine + workload -> Estimate (pure).

Each engine profile (``hfvram.estimate.engines.<name>``) computes the four terms on the worst GPU (weights,
KV cache, activations, engine overhead), the memory the engine may use, the verdict and the capacity, from
the shared building blocks in ``hfvram.estimate.common``. This module only checks the inputs and dispatches.
"""

from __future__ import annotations

from dataclasses import replace

from hfvram.errors import UsageError
from hfvram.estimate import common, engine_rules
from hfvram.estimate.engines import get_profile, parse_engine_name
from hfvram.estimate.types import EngineChoice, Estimate, Hardware, Workload
from hfvram.spec import ModelSpec


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
    (``None``: the footprint only, no verdict)."""
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
    refusals = [
        engine_rules.platform_refusal(name, hardware),
        engine_rules.tp_refusal(name, spec, result.tp, defaulted=tp_defaulted),
    ]
    return engine_rules.with_refusals(result, [r for r in refusals if r], notes)
