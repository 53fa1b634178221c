"""vLLM's CUDA-graph term (docs/engines/vllm.md#vllm-cuda-graphs) against published start-up logs, by release.

Fitted: the v0.19 H100 start-ups of benchmarks/data/groundtruth_cases.jsonl that print both "Estimated CUDA graph
memory" (compared with the 0.21 rules, whose budget deducts that estimate) and "Graph capturing finished … took X
GiB" (compared with the 0.19 rules, whose graphs are captured outside the budget). Checked: the start-ups of
benchmarks/data/vllm_graph_logs.jsonl, which the constants were not fitted on (each with its thread and log lines).

Usage:  python3 benchmarks/accuracy_vllm_graphs.py [--markdown]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accuracy

from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload

GiB = 1 << 30
CHECKED = Path(__file__).resolve().parent / "data" / "vllm_graph_logs.jsonl"


def _graphs(spec: Any, hardware: Any, version: str, tp: int, pp: int, settings: dict[str, str]) -> float:
    choice = EngineChoice("vllm", version, settings, tp=tp, pp=pp)
    return estimate(spec, hardware, choice, Workload(context=None)).engine["cudagraph_bytes"] / GiB


def fitted_rows() -> list[dict[str, Any]]:
    fixtures = accuracy.load_fixture_map()
    rows = []
    for case in accuracy.load_cases():
        measured = case.get("measured", {})
        if case.get("engine") != "vllm" or "estimated_cuda_graph_memory" not in measured:
            continue
        row = fixtures.get(accuracy.case_model_id(case))
        if row is None:
            continue
        tp, pp = accuracy.case_parallel(case)
        hardware = accuracy.case_hardware(case, tp * pp)
        settings = accuracy.case_settings(case)
        spec, _ = accuracy.checkpoint_weights(accuracy.fixture_spec(row), row)
        if spec.weights is None:
            continue
        for version, key, what in (
            ("0.21", "estimated_cuda_graph_memory", "estimate"),
            ("0.19", "cuda_graph_actual", "capture"),
        ):
            value = accuracy.leading_number(measured.get(key))
            if value is None:
                continue
            predicted = _graphs(spec, hardware, version, tp, pp, settings)
            rows.append(
                {
                    "id": case["id"],
                    "group": "fitted",
                    "release": "0.19.0",
                    "what": what,
                    "model": row["fixture"],
                    "predicted": predicted,
                    "measured": value,
                }
            )
    return rows


def checked_rows() -> list[dict[str, Any]]:
    rows = []
    for line in CHECKED.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        predicted = None
        if case["fixture"]:
            spec, _ = accuracy.checkpoint_weights(accuracy.fixture_spec({"fixture": case["fixture"]}), case)
            hardware = parse_gpu_spec(f"{case['gpu']}x{case['count']}" if case["count"] > 1 else case["gpu"])
            predicted = _graphs(spec, hardware, case["rules"], case["tp"], 1, dict(case["settings"]))
        rows.append(
            {
                "id": case["id"],
                "group": "checked",
                "release": case["release"],
                "what": "estimate",
                "model": case["model"],
                "predicted": predicted,
                "measured": case["measured_gib"],
                "note": case.get("note", ""),
                "source": case["source"],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    rows = fitted_rows() + checked_rows()
    for group, what in (("fitted", "estimate"), ("fitted", "capture")):
        errors = [r["predicted"] / r["measured"] - 1 for r in rows if r["group"] == group and r["what"] == what]
        if errors:
            print(
                f"{group} {what} (v0.19, {len(errors)} start-ups): median abs error "
                f"{statistics.median(abs(e) for e in errors):.1%}, max {max(abs(e) for e in errors):.1%}"
            )
    for row in rows:
        if row["group"] != "checked" and not args.markdown:
            continue
        predicted = "—" if row["predicted"] is None else f"{row['predicted']:.2f}"
        error = "—" if row["predicted"] is None else f"{row['predicted'] / row['measured'] - 1:+.0%}"
        print(
            f"| {row['id']} | {row['group']} | {row['release']} | {row['model']} | {row['what']} | "
            f"{predicted} | {row['measured']:.2f} | {error} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
