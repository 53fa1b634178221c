"""Start-up cost of the command line, measured in one run next to a bare interpreter.

    python benchmarks/startup.py [--repeat 5]

Prints the median wall time of ``python -c pass``, ``hfvram --help`` and a cached ``hfvram check`` (the
embedded catalogue, offline: no network, facts already on this machine), and each as a ratio of the bare
interpreter. Everything runs as real subprocesses of this Python, from the repository root.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "hfvram --help": [sys.executable, "-m", "hfvram", "--help"],
    "hfvram check (cached, offline)": [
        sys.executable,
        "-m",
        "hfvram",
        "check",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--offline",
        "--gpu",
        "rtx4090",
        "--context",
        "32k",
        "--json",
    ],
}


def wall_time(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if result.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.decode()[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command (median reported)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HF_HOME": home, "HFVRAM_CACHE_DIR": str(Path(home) / "facts")}
        for command in COMMANDS.values():  # warm the OS file cache and the facts cache once
            wall_time(command, env)
        medians = {
            name: statistics.median(wall_time(command, env) for _ in range(args.repeat))
            for name, command in COMMANDS.items()
        }
    base = medians["python -c pass"]
    print(f"{'command':34} {'median s':>9} {'× python -c pass':>17}")
    for name, seconds in medians.items():
        print(f"{name:34} {seconds:9.3f} {seconds / base:17.1f}")


if __name__ == "__main__":
    main()
