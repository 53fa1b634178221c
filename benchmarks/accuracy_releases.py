"""hfvram on the newest engine releases: published start-ups of vLLM >= 0.22 (issue 28), by release.

Reads ``benchmarks/data/vllm_release_logs.jsonl`` (each case with its source, release, log lines and group) and runs
each through ``benchmarks/accuracy.py``'s case runner (the same fixture map, hardware and settings readers, end to end
and with the logged weights given). The group keeps apart what the rules were fitted on (``fit``) from what they are
only checked against (``check``); no constant has been fitted on these releases, so every case is ``check``.

Beside the totals, the terms the newer INFO line prints are set next to hfvram's: non-torch memory (the line's
``consumed`` less ``Model loading took``), the peak activation (which holds the CUDA-graph estimate the budget
deducts, docs/engines/common.md#calibration-logs-vllm) against hfvram's activations plus its CUDA-graph term, and the
graph pool captured afterwards.

Usage:  python3 benchmarks/accuracy_releases.py [--markdown]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accuracy

from hfvram.estimate.core import estimate
from hfvram.estimate.types import EngineChoice, Workload

GiB = 1 << 30
CASES = accuracy.DATA / "vllm_release_logs.jsonl"
GROUPS = ("fit", "check")


def load(path: Path = CASES) -> list[dict[str, Any]]:
    return accuracy.load_cases(path)


def terms(case: Mapping[str, Any]) -> dict[str, float | None]:
    """hfvram's per-GPU terms for the case (GiB, end to end) next to the ones its log prints."""
    row = accuracy.load_fixture_map().get(accuracy.case_model_id(case))
    measured = case.get("measured", {})
    logged = {
        "non_torch": _gib(measured.get("non_torch_memory_derived")),
        "peak_with_graphs": _gib(measured.get("peak_activation_with_graph_estimate")),
        "graphs_captured": _gib(measured.get("cuda_graph_actual")),
    }
    if logged["non_torch"] is None:
        consumed, weights = _gib(measured.get("consumed_weights_non_torch")), _gib(measured.get("model_loading"))
        logged["non_torch"] = None if consumed is None or weights is None else round(consumed - weights, 2)
    if row is None:
        return {"logged_" + k: v for k, v in logged.items()}
    tp, pp = accuracy.case_parallel(case)
    hardware = accuracy.case_hardware(case, tp * pp)
    spec, _ = accuracy.checkpoint_weights(accuracy.fixture_spec(row), row)
    context = accuracy.leading_number(case.get("settings", {}).get("max_model_len"))
    choice = EngineChoice("vllm", accuracy.case_version(case), accuracy.case_settings(case), tp=tp, pp=pp)
    result = estimate(spec, hardware, choice, Workload(context=int(context) if context else None))
    graphs = result.engine["cudagraph_bytes"] if result.engine.get("cudagraph_in_budget") else 0
    return {
        **{"logged_" + k: v for k, v in logged.items()},
        "hfvram_non_torch": (result.per_gpu.overhead - graphs) / GiB,
        "hfvram_activations": result.per_gpu.activations / GiB,
        "hfvram_graphs": graphs / GiB,
        "hfvram_rules": str(result.engine.get("version")),
    }


def _gib(text: object) -> float | None:
    value = accuracy.size_bytes(text)
    return None if value is None else value / GiB


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:+.1f} %"


def report(
    markdown: bool = False, out: Any = sys.stdout, results: list[accuracy.CaseResult] | None = None
) -> list[accuracy.CaseResult]:
    """Print the per-case table, the groups and the terms; ``results`` when the cases were already run."""
    cases = load()
    results = results if results is not None else accuracy.run_benchmark(cases)
    by_id = {case["id"]: case for case in cases}
    per_case = {case["id"]: terms(case) for case in cases}
    if markdown:
        print(
            "| case | group | release (rules used) | model, set-up | weights | KV pool | KV tokens | non-KV |", file=out
        )
        print("|---|---|---|---|---|---|---|---|", file=out)
    for result in results:
        case = by_id[result.case_id]
        errors = result.errors()
        cells = [_pct(errors.get(m)) for m in ("weights", "kv_pool", "kv_tokens", "non_kv")]
        rules = per_case[case["id"]].get("hfvram_rules", "—")
        setup = f"{result.model}, {case['hardware']['gpu']} x{case['hardware']['gpu_count']}"
        if result.skipped:
            cells = [f"skipped: {result.skipped}"] + [""] * 3
        line = [result.case_id, case["group"], f"{case['release']} ({rules})", setup, *cells]
        print(("| " + " | ".join(line) + " |") if markdown else "  ".join(line), file=out)
    print(file=out)
    for group in GROUPS:
        scored = [r for r in results if by_id[r.case_id]["group"] == group and not r.skipped]
        pools = [abs(r.errors()["kv_pool"]) for r in scored if "kv_pool" in r.errors()]
        summary = f"median |KV pool error| {statistics.median(pools):.1%}, worst {max(pools):.1%}" if pools else "none"
        print(f"{group}: {len(scored)} scored; {summary}", file=out)
    print(file=out)
    if markdown:
        print(
            "| case | non-torch logged / hfvram | peak (with graph estimate) logged / hfvram activations + graphs "
            "| graphs captured (logged) |",
            file=out,
        )
        print("|---|---|---|---|", file=out)
    for case in cases:
        t = per_case[case["id"]]
        if "hfvram_activations" not in t:
            continue
        booked = t["hfvram_activations"] + t["hfvram_graphs"]
        line = [
            case["id"],
            f"{_fmt(t['logged_non_torch'])} / {t['hfvram_non_torch']:.2f}",
            f"{_fmt(t['logged_peak_with_graphs'])} / {t['hfvram_activations']:.2f} + {t['hfvram_graphs']:.2f} = "
            f"{booked:.2f}",
            _fmt(t["logged_graphs_captured"]),
        ]
        print(("| " + " | ".join(line) + " |") if markdown else "  ".join(line), file=out)
    return results


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--markdown", action="store_true")
    report(parser.parse_args(argv).markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
