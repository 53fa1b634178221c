"""The expected decode speed against published measurements, in two sets kept apart (docs/accuracy.md "Expected
speed"; issue 24).

``benchmarks/data/speed_runs.jsonl``: each run with its source and its set. ``fit``: published llama.cpp / llmfit
runs with layers or experts in RAM, the only ones the constants of ``hfvram/data/speed.toml`` were fitted on.
``check``: the article's MoE offload table (never used to fit). Every run goes through the real command line
(``hfvram check … --json --offline``); the dense 8 GB vLLM ``--cpu-offload-gb`` case of the article is the PCIe
part alone on the article's own GPU-only speed (its model is not named).

The expected prefill likewise (``benchmarks/data/prefill_runs.jsonl``): ``fit``: llama-bench prompt-processing
runs of LLaMA-3-8B on an RTX 4090 and an RTX 3090 from llama.cpp's CUDA pull requests (one microbatch sweep); ``check``:
another GPU (RTX 3080), another model on another GPU (Qwen3-32B on an A10), a 32k-token depth, and MoEs. Each goes
through ``hfvram check … --json`` at the run's ubatch; the run's own prompt length and depth replace the
ubatch-long prompt of the attention part (its FLOPs grow with the keys each prompt token sees).

Run: ``python3 benchmarks/accuracy_speed.py`` (``--prefill`` / ``--decode`` for one of the two; measured / predicted per run, and the spread per set, which is the
uncertainty ``hfvram/data/speed.toml`` [uncertainty] / [prefill_uncertainty] prints); ``--fit`` also searches the
constants on the fit sets. Asserts nothing (tests/test_speed.py and tests/test_prefill_speed.py do).
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
PREFILL_RUNS = REPO / "benchmarks" / "data" / "prefill_runs.jsonl"
#: the article's dense case: 168.7 -> about 7.4 tokens/s with 8 GB of weights offloaded (vLLM --cpu-offload-gb 8);
#: "Die Karten liefen mit acht statt sechzehn PCIe-Lanes" (its machine's two slots share the CPU's lanes): gen4 x8;
#: its load test elsewhere is four users ("Tempo bei vier Nutzern"), the concurrency of this case is not stated
DENSE = {"baseline": 168.7, "measured": 7.4, "offloaded_gib": 8.0, "link": "gen4x8", "users": 4}
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
        "gpu_memory_mb": run.get("measured_gpu_memory_mb"),
        "gpu_total_mib": document["per_gpu"]["total"] / 2**20,
        "cpu_moe_layers": document["engine"].get("n-cpu-moe"),
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
    """The article's dense 8 GB, its parts named. UVA offloading reads every moved byte of a dense layer over PCIe
    each step (docs/engines/vllm.md#vllm-features), whatever the number of sequences in the step:

    - ``predicted``: hfvram's per-sequence figure, one sequence per step over the default link (gen4 x16): the
      article's GPU-only speed plus 8 GiB / (link x pcie_efficiency);
    - ``ceiling_x16`` / ``ceiling_x8``: one sequence per step can go no faster than the link's line rate over the
      8 GiB (PCI-SIG, hfvram/data/host_memory.toml); ``sequences_x16`` / ``sequences_x8``: the sequences per step
      the measured speed then needs at least;
    - ``four_users``: the article's four users on its x8 link, the GPU step at its own throughput (168.7 tok/s
      at the same load) plus the 8 GiB at pcie_efficiency."""
    moved = DENSE["offloaded_gib"] * 2**30
    efficiency = speed_constants().pcie_efficiency
    x16, _ = pcie_bandwidth_gbs()
    x8, _ = pcie_bandwidth_gbs(str(DENSE["link"]))
    step = moved / (x16 * 1e9 * efficiency)
    predicted = 1.0 / (1.0 / DENSE["baseline"] + step)
    users = DENSE["users"]
    four = users / (users / DENSE["baseline"] + moved / (x8 * 1e9 * efficiency))
    ceiling16, ceiling8 = x16 * 1e9 / moved, x8 * 1e9 / moved
    return {
        "predicted": predicted,
        "measured": DENSE["measured"],
        "slowdown": DENSE["baseline"] / predicted,
        "ceiling_x16": ceiling16,
        "ceiling_x8": ceiling8,
        "sequences_x16": DENSE["measured"] / ceiling16,
        "sequences_x8": DENSE["measured"] / ceiling8,
        "four_users": four,
    }


def marginal(rows: Sequence[Mapping[str, Any]], key: str) -> list[tuple[int, int, float]]:
    """(from, to, ms per layer) between successive check runs by the layers whose experts are in RAM (the
    effective ``n-cpu-moe``): the time one more layer of experts in RAM adds to a token, measured (``key`` =
    "measured") or expected ("expected")."""
    runs = sorted((int(row["cpu_moe_layers"]), row[key]) for row in rows if row.get("cpu_moe_layers") is not None)
    return [(a, b, (1 / tb - 1 / ta) * 1000 / (b - a)) for (a, ta), (b, tb) in itertools.pairwise(runs) if b > a]


def gpu_memory(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, float, float]]:
    """(run, the article's GPU memory in MB, hfvram's GPU total in MiB) for the check runs that state one: the
    article reads nvidia-smi, whose "MB" are MiB."""
    return [(row["id"], row["gpu_memory_mb"], row["gpu_total_mib"]) for row in rows if row.get("gpu_memory_mb")]


def spread(rows: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    ratios = [row["measured"] / row["expected"] for row in rows]
    return min(ratios), max(ratios)


def load_prefill() -> list[dict[str, Any]]:
    return [json.loads(line) for line in PREFILL_RUNS.read_text(encoding="utf-8").splitlines() if line.strip()]


def prefill_command(run: Mapping[str, Any]) -> list[str]:
    args = [sys.executable, "-m", "hfvram", "check", run["model"], "--offline", "--json", "--engine", "llama.cpp"]
    args += ["--quant", run["quant"], "--gpu", run["gpu"], "--context", "4096"]
    return [*args, "--set", f"ubatch-size={run['ubatch']}", "--set", "parallel=1", "--set", "n-gpu-layers=99"]


def predict_prefill(run: Mapping[str, Any]) -> dict[str, Any]:
    """hfvram's expected prefill for one run, through the command line, its attention part at the run's prompt and
    depth (the command's is a ubatch-long prompt at depth 0: (ubatch + 1) / 2 keys per token on average)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(prefill_command(run), capture_output=True, text=True, env=env, check=False, timeout=120)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{run['id']}: {done.stderr.strip()}")
    prefill = json.loads(done.stdout)["speed"]["prefill"]
    parts = {part["name"]: part["seconds_per_token"] for part in prefill["parts"]}
    keys = run["depth"] + (run["prompt"] + 1) / 2
    parts["gpu_attention"] = parts.get("gpu_attention", 0.0) * keys / ((prefill["ubatch"] + 1) / 2)
    return {
        "id": run["id"],
        "set": run["set"],
        "ubatch": prefill["ubatch"],
        "measured": float(run["measured_tokens_per_second"]),
        "expected": 1.0 / sum(parts.values()),
        "parts": parts,
    }


def prefill_rescaled(row: Mapping[str, Any], efficiency: float, half: float) -> float:
    """Tokens/s of a dense run's GPU parts under another efficiency and half-saturation batch (every product of a
    dense model sees the whole ubatch)."""
    table = speed_constants().prefill
    batch = row["ubatch"]
    scale = (table.compute_efficiency / efficiency) * ((batch + half) / (batch + table.half_batch_tokens))
    seconds = sum(value * (scale if name.startswith("gpu_") else 1.0) for name, value in row["parts"].items())
    return 1.0 / seconds


def fit_prefill(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """compute_efficiency and half_batch_tokens minimising Σ log²(measured / predicted) over ``rows`` on a grid."""
    best, best_cost = {}, math.inf
    for efficiency, half in itertools.product([x / 200 for x in range(40, 201)], range(0, 201, 5)):
        cost = sum(math.log(row["measured"] / prefill_rescaled(row, efficiency, half)) ** 2 for row in rows)
        if cost < best_cost:
            best, best_cost = {"compute_efficiency": efficiency, "half_batch_tokens": float(half)}, cost
    return best


def print_prefill(rows: Sequence[Mapping[str, Any]]) -> None:
    for name in ("fit", "check"):
        chosen = [row for row in rows if row["set"] == name]
        print(f"prefill {name} set: measured / predicted (expected)")
        for row in chosen:
            parts = ", ".join(f"{key} {value * 1e6:.1f}" for key, value in row["parts"].items())
            print(
                f"  {row['id']}: measured {row['measured']:,.1f}, expected {row['expected']:,.1f} "
                f"-> {row['measured'] / row['expected']:.2f}  [us/token: {parts}]"
            )
        low, high = spread(chosen)
        print(f"  spread: measured / predicted {low:.2f}-{high:.2f}")


def main(argv: Sequence[str] = ()) -> int:
    if "--decode" not in argv:
        prefill = [predict_prefill(run) for run in load_prefill()]
        print_prefill(prefill)
        if "--fit" in argv:
            best = fit_prefill([row for row in prefill if row["set"] == "fit"])
            print("prefill constants fitted on the fit set:", ", ".join(f"{k} = {v:g}" for k, v in best.items()))
    if "--prefill" in argv:
        return 0
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
    check = [row for row in rows if row["set"] == "check"]
    print("check set, ms per token each further layer of experts in RAM adds (measured / expected):")
    for (a, b, measured), (_, _, expected) in zip(
        marginal(check, "measured"), marginal(check, "expected"), strict=True
    ):
        print(f"  {a} -> {b} layers: {measured:.2f} / {expected:.2f}")
    memory = gpu_memory(rows)
    print("check set, GPU memory (the placement): the article's nvidia-smi MB against hfvram's total (MiB)")
    for key, article, ours in memory:
        print(f"  {key}: article {article:,.0f}, hfvram {ours:,.0f} -> {article - ours:+,.0f}")
    dense = dense_case()
    print(
        f"check set, dense 8 GB (vLLM --cpu-offload-gb 8, article 003): one sequence per step over PCIe 4.0 x16 "
        f"predicted {dense['predicted']:.1f} tok/s ({dense['slowdown']:.0f}x slower), measured {dense['measured']:.1f} "
        f"(22x) -> {dense['measured'] / dense['predicted']:.2f}"
    )
    print(
        f"  one sequence per step cannot pass the line rate: {dense['ceiling_x16']:.2f} tok/s on x16, "
        f"{dense['ceiling_x8']:.2f} on the article's x8; 7.4 needs >= {dense['sequences_x16']:.1f} / "
        f"{dense['sequences_x8']:.1f} sequences per step; its four users on x8: {dense['four_users']:.1f} tok/s -> "
        f"{dense['measured'] / dense['four_users']:.2f}"
    )
    if "--fit" in argv:
        best = fit([row for row in rows if row["set"] == "fit"])
        print("constants fitted on the fit set:", ", ".join(f"{key} = {value:g}" for key, value in best.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
