"""Regression guard for the vLLM accuracy benchmark (benchmarks/accuracy.py) on the published start-up logs
copied to benchmarks/data/groundtruth_cases.jsonl. Targets (task brief): weights within 2 %, KV tokens within
5 % (median), no failure case predicted to start. Two failure cases are known misses, see below."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: start-ups that failed AFTER the KV cache was allocated, in memory outside vLLM's budget: "CUDA OOM while
#: warming up sampler with 1024 dummy requests" (gt-0085, gt-0086, gpt-oss-20b on H100, util 0.95). The budget
#: arithmetic fits; the estimator flags the risk with a warning instead of a verdict, since the same rule would
#: fail gemma-2-9b (gt-0053), which started.
KNOWN_POST_START_OOM = {"gt-0085", "gt-0086"}


@pytest.fixture(scope="module")
def results():
    spec = importlib.util.spec_from_file_location("hfvram_accuracy", ROOT / "benchmarks" / "accuracy.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["hfvram_accuracy"] = module
    spec.loader.exec_module(module)
    return module, module.run_benchmark()


def _median_abs(values):
    values = sorted(abs(v) for v in values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def test_enough_cases_are_evaluated(results):
    _, cases = results
    evaluated = [r for r in cases if not r.skipped]
    assert len(evaluated) >= 25
    assert len({r.family for r in evaluated}) >= 6


def test_weights_within_two_percent(results):
    _, cases = results
    errors = [r.errors()["weights"] for r in cases if not r.skipped and "weights" in r.errors()]
    assert len(errors) >= 20
    assert _median_abs(errors) <= 0.02


def test_kv_tokens_within_five_percent_median(results):
    _, cases = results
    end_to_end = [r.errors()["kv_tokens"] for r in cases if not r.skipped and "kv_tokens" in r.errors()]
    given = [
        r.errors("given_weights")["kv_tokens"]
        for r in cases
        if not r.skipped and "kv_tokens" in r.errors("given_weights")
    ]
    assert len(end_to_end) >= 20 and len(given) >= 20
    assert _median_abs(end_to_end) <= 0.05
    assert _median_abs(given) <= 0.05
    # with the measured weights given, every KV pool is within 10 % (the worst is the V0 log gt-0004)
    pools = [r.errors("given_weights")["kv_pool"] for r in cases if "kv_pool" in r.errors("given_weights")]
    assert max(abs(e) for e in pools) <= 0.10


def test_failure_cases_are_not_predicted_to_start(results):
    _, cases = results
    failures = [r for r in cases if r.failure and not r.skipped]
    assert any(r.case_id == "gt-0004" for r in failures)  # max_model_len 29000 does not fit: vLLM refuses
    flipped = {r.case_id for r in failures if r.verdict_flipped}
    assert flipped <= KNOWN_POST_START_OOM
    for r in failures:
        if r.case_id in KNOWN_POST_START_OOM:
            assert any("warms up the sampler" in w for w in r.warnings)


def test_v0_kv_pool_median_within_ten_percent(results):
    """Issue 12: on the published V0 start-ups (gt-0003, 0004, 0006, 0007, 0009, 0010: v0.6.4 - v0.7.3) the KV pool
    median is within 10 %, end to end and with the logged weights given."""
    _, cases = results
    v0 = [r for r in cases if not r.skipped and r.generation == "v0"]
    assert {r.case_id for r in v0} >= {"gt-0003", "gt-0004", "gt-0006", "gt-0009", "gt-0010"}
    for which in ("predicted", "given_weights"):
        pools = [r.errors(which)["kv_pool"] for r in v0 if "kv_pool" in r.errors(which)]
        assert len(pools) >= 3
        assert _median_abs(pools) <= 0.10
    assert all(r.verdict_given_weights == "does_not_fit" for r in v0 if r.failure)


def test_cases_added_after_the_fit_are_reported_apart(results):
    """docs/accuracy.md keeps the cases the constants were fitted on apart from those added later (``group``)."""
    module, cases = results
    groups = {r.group for r in cases}
    assert groups == {"fitted", "later"}
    summary = module.summarize(cases, "predicted", "group")
    assert "later" in summary and "fitted" in summary


def test_verdicts_right_on_ninety_percent_of_published_starts_and_failures(results):
    """Issue 12 target: a start is not called "does not fit" and a failure is, on >= 90 % of the judged cases."""
    module, cases = results
    right, judged, wrong = module.verdict_score(cases)
    assert judged >= 35
    assert right >= 0.9 * judged
    assert set(wrong) <= KNOWN_POST_START_OOM
