"""The expected decode speed against published measurements, in two sets kept apart (docs/accuracy.md "Expected
speed"; issue 24).

``benchmarks/data/speed_runs.jsonl``: each run with its source and its set. ``fit``: published llama.cpp / llmfit
runs with layers or experts in RAM, the only ones the constants of ``hfvram/data/speed.toml`` were fitted on.
``check``: the article's MoE offload table (never used to fit). Every run goes through the real command line
(``hfvram check … --json --offline``); the dense 8 GB vLLM ``--cpu-offload-gb`` case of the article is the PCIe
part alone on the article's own GPU-only speed (its model is not named).

Run: ``python3 benchmarks/accuracy_speed.py`` (measured / predicted per run, and the spread per set, which is the
uncertainty ``hfvram/data/speed.toml`` [uncertainty] prints); ``--fit`` also searches the constants on the fit set.
Asserts nothing (tests/test_speed.py does).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hfvram.estimate.host_memory import pcie_bandwidth_gbs  # noqa: E402
from hfvram.estimate.speed import speed_constants  # noqa: E402

RUNS = REPO / "benchmarks" / "data" / "speed_runs.jsonl"
#: the article's dense case: 168.7 -> about 7.4 tokens/s with 8 GB of weights offloaded (vLLM --cpu-offload-gb 8)
DENSE = {"baseline": 168.7, "measured": 7.4, "offloaded_gib": 8.0}
#: which constant each part scales with (seconds ∝ 1 / efficiency, or ∝ the per-layer time)
SCALES = {
    "gpu_weights": ("gpu_bandwidth_efficiency", -1),
    "gpu_layers": ("gpu_layer_us", 1),
    "ram_weights": ("host_bandwidth_efficiency", -1),
    "cpu_hops": ("cpu_layer_hop_us", 1),
}


def load() -> list[dict[str, Any]]:
    return [json.loads(line) for line in RUNS.read_text(encoding="utf-8").splitlines() if line.strip()]


def command(run: Mapping[str, Any]) -> list[str]:
    args = [sys.executable, "-m", "hfvram", "check", run["model"], "--offline", "--json", "--engine", run["engine"]]
    args += ["--quant", run["quant"], "--gpu", run["gpu"], "--context", str(run["context"])]
    if run.get("host_memory"):
        args += ["--host-memory", run["host_memory"]]
    for key, value in run["settings"].items():
        args += ["--set", f"{key}={value}"]
    return args


def predict(run: Mapping[str, Any]) -> dict[str, Any]:
    """hfvram's expected speed and its parts for one run, through the command line."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command(run), capture_output=True, text=True, env=env, check=False, timeout=120)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{run['id']}: {done.stderr.strip()}")
    document = json.loads(done.stdout)
    speed = document["speed"]
    return {
        "id": run["id"],
        "set": run["set"],
        "measured": float(run["measured_tokens_per_second"]),
        "bound": document["decode_tokens_per_second"],
        "expected": speed["expected_decode_tokens_per_second"],
        "parts": {part["name"]: part["seconds_per_token"] for part in speed["parts"]},
    }


def rescaled(parts: Mapping[str, float], constants: Mapping[str, float]) -> float:
    """Tokens/s of ``parts`` (computed at the table's constants) under other ``constants``."""
    table = speed_constants()
    seconds = 0.0
    for name, value in parts.items():
        key, power = SCALES.get(name, ("", 0))
        if key:
            old = float(getattr(table, key))
            value = value * (constants[key] / old) ** power if old else 0.0
        seconds += value
    return 1.0 / seconds


def fit(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The constants minimising Σ log²(measured / predicted) over ``rows`` on a grid."""
    grid = {
        "gpu_bandwidth_efficiency": [x / 100 for x in range(50, 101, 5)],
        "gpu_layer_us": [0, 10, 20, 30, 40, 50, 60, 80, 100],
        "host_bandwidth_efficiency": [x / 100 for x in range(20, 101, 5)],
        "cpu_layer_hop_us": [0, 50, 100, 150, 200, 250, 300, 400, 500],
    }
    best, best_cost = {}, math.inf
    for values in itertools.product(*grid.values()):
        constants = dict(zip(grid, values, strict=True))
        cost = sum(math.log(row["measured"] / rescaled(row["parts"], constants)) ** 2 for row in rows)
        if cost < best_cost:
            best, best_cost = constants, cost
    return best


def dense_case() -> dict[str, float]:
    """The article's dense 8 GB: its GPU-only speed plus hfvram's PCIe part for 8 GiB per step."""
    pcie, _ = pcie_bandwidth_gbs()
    step = DENSE["offloaded_gib"] * 2**30 / (pcie * 1e9 * speed_constants().pcie_efficiency)
    predicted = 1.0 / (1.0 / DENSE["baseline"] + step)
    return {"predicted": predicted, "measured": DENSE["measured"], "slowdown": DENSE["baseline"] / predicted}


def spread(rows: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    ratios = [row["measured"] / row["expected"] for row in rows]
    return min(ratios), max(ratios)


def main(argv: Sequence[str] = ()) -> int:
    rows = [predict(run) for run in load()]
    for name in ("fit", "check"):
        chosen = [row for row in rows if row["set"] == name]
        print(f"{name} set: measured / predicted (expected) and measured / bound")
        for row in chosen:
            parts = ", ".join(f"{key} {value * 1000:.2f}" for key, value in row["parts"].items())
            print(
                f"  {row['id']}: measured {row['measured']:.1f}, expected {row['expected']:.1f} "
                f"-> {row['measured'] / row['expected']:.2f}; bound {row['bound']:.1f} "
                f"-> {row['measured'] / row['bound']:.2f}  [ms: {parts}]"
            )
        low, high = spread(chosen)
        print(f"  spread (the uncertainty): measured / predicted {low:.2f}-{high:.2f}")
    dense = dense_case()
    print(
        f"check set, dense 8 GB (vLLM --cpu-offload-gb 8, article 003): predicted {dense['predicted']:.1f} tok/s "
        f"({dense['slowdown']:.0f}x slower), measured {dense['measured']:.1f} (22x) -> "
        f"{dense['measured'] / dense['predicted']:.2f}"
    )
    if "--fit" in argv:
        best = fit([row for row in rows if row["set"] == "fit"])
        print("constants fitted on the fit set:", ", ".join(f"{key} = {value:g}" for key, value in best.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
