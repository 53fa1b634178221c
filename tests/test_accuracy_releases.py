"""hfvram on the newest vLLM releases (issue 28): the published start-ups of benchmarks/data/vllm_release_logs.jsonl,
each with its source and release, run by benchmarks/accuracy_releases.py. Guards: each case's log lines read back to
the figures recorded for it, and the check set stays within the targets of tests/test_accuracy_vllm.py (weights 2 %,
KV pool 5 %)."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import pytest

from hfvram.calibrate.logs import parse_log

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(
        "hfvram_accuracy_releases", ROOT / "benchmarks" / "accuracy_releases.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def results(bench):
    return bench.accuracy.run_benchmark(bench.load())


def test_every_case_names_its_source_release_and_group(bench):
    cases = bench.load()
    assert len(cases) >= 2
    for case in cases:
        source = case["source"]
        assert source.get("url") or source.get("stored_file_id"), case["id"]
        assert source.get("date") and source.get("note"), case["id"]
        assert case["release"] and case["group"] in bench.GROUPS
        assert case["log_lines"]


def test_log_lines_read_back_to_the_recorded_figures(bench):
    """The start-up lines of each case, read by hfvram's own log reader, give the weights and KV pool recorded for
    the case, and the budget closes with the CUDA graphs counted once (requested − weights − activations − overhead
    − KV within the print rounding)."""
    for case in bench.load():
        measured = parse_log("\n".join(case["log_lines"]))
        recorded = bench.accuracy.measured_figures(case)
        assert abs(measured.kv_cache - recorded["kv_pool"]) < 0.006 * GIB, case["id"]
        if recorded["weights"] is None:
            # weights and non-torch memory printed as one figure (rl-0004): no overhead to close the budget with
            assert measured.weights is None and measured.overhead is None, case["id"]
            continue
        assert abs(measured.weights - recorded["weights"]) < 0.006 * GIB, case["id"]
        requested = measured.gpu_util * measured.total_memory
        rest = requested - measured.weights - measured.activations - measured.overhead - measured.kv_cache
        assert abs(rest) < 0.03 * GIB, case["id"]


def test_check_set_within_the_vllm_targets(results):
    scored = [r for r in results if not r.skipped]
    assert len(scored) >= 2
    for r in scored:
        errors = r.errors()
        assert abs(errors["weights"]) <= 0.02, r.case_id
        assert abs(errors["kv_pool"]) <= 0.05, r.case_id
        assert abs(r.errors("given_weights")["kv_pool"]) <= 0.05, r.case_id


def test_report_keeps_the_fit_and_check_sets_apart(bench, results):
    out = io.StringIO()
    bench.report(markdown=True, out=out, results=results)
    text = out.getvalue()
    for group in bench.GROUPS:
        assert f"\n{group}: " in text
    assert "| rl-0001 | check |" in text
