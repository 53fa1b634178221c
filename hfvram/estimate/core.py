"""The estimator's entry point: spec + hardware + engine + workload -> Estimate (pure)."""

from __future__ import annotations

from hfvram.estimate.engines import get_profile
from hfvram.estimate.types import EngineChoice, Estimate, Hardware, Workload
from hfvram.spec import ModelSpec


def estimate(spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload) -> Estimate:
    return get_profile(choice.name).estimate(spec, hardware, choice, workload)
