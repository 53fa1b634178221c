"""``fit --plot`` draws a series computed in the estimator (hfvram.estimate.inverse.memory_series), not in the
report: each point is the forward estimate at that context. Model: meta-llama/Llama-3.1-8B-Instruct (its Hub
config.json in fixtures/hub, weights derived by the readers)."""

from __future__ import annotations

import pytest
from spec_support import derived_spec

from hfvram.estimate.core import estimate_memory
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.inverse import MAX_SERIES_POINTS, MEMORY_TERMS, memory_series
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.report.plot import TERM_COLOURS

CONTEXTS = [4096, 16384, 65536, 131072]


@pytest.mark.parametrize("engine", ["vllm", "llama.cpp"])
def test_each_point_is_the_forward_estimate_at_its_context(engine):
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    hardware = parse_gpu_spec("rtx4090")
    choice = EngineChoice(name=engine)
    workload = Workload(context=8192, concurrency=2)
    series = memory_series(spec, hardware, choice, workload, CONTEXTS)
    assert [point.context for point in series] == CONTEXTS
    for point in series:
        expected = estimate_memory(spec, hardware, choice, Workload(context=point.context, concurrency=2)).per_gpu
        assert point.terms == {term: getattr(expected, term) for term in MEMORY_TERMS}
        assert point.usable == expected.usable
    kv = [point.terms["kv_cache"] for point in series]
    assert kv == sorted(kv) and kv[0] < kv[-1]  # the KV cache grows with the context
    assert len({point.terms["weights"] for point in series}) == 1  # the weights do not


def test_the_plot_stacks_the_terms_the_series_has():
    assert tuple(term for term, _ in TERM_COLOURS) == MEMORY_TERMS


def test_a_series_is_bounded():
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    with pytest.raises(ValueError, match="at most"):
        memory_series(
            spec, parse_gpu_spec("rtx4090"), EngineChoice(name="vllm"), Workload(), range(1, MAX_SERIES_POINTS + 2)
        )
