#!/usr/bin/env python3
"""CPU per check outside HTTP: what ``hfvram scan`` spends on a repo once its bytes have arrived.

In one process, against the local test Hub (tests/hubserver.py, no latency), for the six safetensors repos of the
scan benchmark (benchmarks/hub_cost.py) under the scan benchmark's options (``--gpu rtx4090 --context 8k``,
vLLM by default), single thread, CPU time (``time.process_time``), in ms per repo (the fastest of five equal
slices of each phase's work, each slice the six repos alike):

- ``spec``: the config reader and the weights (``sources.facts.spec_from_facts`` on the repo's facts);
- ``estimate``: the estimate of a check (``estimate.core.estimate``: the forward estimate and the longest
  context's extra ones), and ``forward``: one forward estimate (``estimate.core.estimate_memory``);
- ``render``: the check/1 document and its JSON line (``report.jsonout.check_dict``, ``report.tabular.jsonl_line``);
- ``scan_one``: a whole scan row with the facts cache warm (no HTTP at all): load + estimate + document + line,
  over ``--aliases`` distinct repo names (aliases of the six repos), each read once before the timed pass.

``--against TREE`` (another checkout of hfvram, e.g. main) runs this script's measurement in child processes on
this tree and on TREE alternately, ``--rounds`` times each, and prints every round, the medians and minima, and
their ratios: on a shared machine the same code varies by tens of percent between runs minutes apart, so only
figures taken back to back compare.

    python3 benchmarks/estimate_cost.py [--repeat 200] [--aliases 600] [--against /path/to/main] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPOS = (
    "sentence-transformers/all-MiniLM-L6-v2",
    "meta-llama/Llama-3.1-8B-Instruct",
    "google/gemma-2-9b-it",
    "Qwen/Qwen3-30B-A3B",
    "openai/gpt-oss-20b",
    "TheBloke/Llama-2-13B-chat-GPTQ",
)
PHASES = ("spec", "forward", "estimate", "render", "scan_one")


def per_repo_ms(run, items: list, repeat: int, slices: int = 5) -> float:
    """CPU ms per item of ``run(item)`` over ``repeat`` passes of ``items``: the fastest of ``slices`` equal
    slices of that work (a slice that another process interrupted counts less)."""
    work = list(items) * repeat
    size = max(1, len(work) // slices)
    best = float("inf")
    for start in range(0, len(work) - size + 1, size):
        began = time.process_time()
        for item in work[start : start + size]:
            run(item)
        best = min(best, (time.process_time() - began) / size)
    return best * 1000


def fresh_spec(spec):
    """``spec`` with a new tuple of its layers, as a newly read spec has."""
    from dataclasses import replace

    return replace(spec, layers=tuple(list(spec.layers)))


def measure(tree: Path, repeat: int, aliases: int) -> dict[str, float]:
    """The phases of one tree, in this process (``tree`` is first on sys.path)."""
    sys.path[:0] = [str(tree), str(ROOT / "tests")]
    home = tempfile.mkdtemp()
    from hubserver import HubFiles, HubServer

    server = HubServer(HubFiles()).start()
    os.environ.update(HF_ENDPOINT=server.url, HF_HOME=home, HF_HUB_CACHE=home + "/hub")
    os.environ.update(HFVRAM_CACHE_DIR=home + "/facts", HF_HUB_DISABLE_TELEMETRY="1")
    os.environ.pop("HF_HUB_OFFLINE", None)
    from hfvram import pipeline
    from hfvram.estimate.core import estimate, estimate_memory
    from hfvram.report.jsonout import check_dict
    from hfvram.report.tabular import jsonl_line
    from hfvram.sources.facts import CheckpointFacts, spec_from_facts
    from hfvram.sources.http import scan_token

    assert Path(pipeline.__file__).resolve().is_relative_to(tree.resolve()), pipeline.__file__
    options = pipeline.RunOptions(gpu="rtx4090", context="8k")
    names = server.files.alias_many("bench", aliases, targets=list(REPOS))
    with scan_token():
        for name in names:  # the facts cache warm: the timed pass reads no byte over HTTP
            pipeline.scan_one(name, options)
        requests = [pipeline.scan_request(options, repo) for repo in REPOS]
        loaded = [pipeline.load(request, options) for request in requests]
        cases = []
        for repo, request, model in zip(REPOS, requests, loaded):
            repo_files = server.files.repos[repo]
            facts = CheckpointFacts(
                config_text=repo_files.files["config.json"].content().decode(),
                dtype_parameters=server.files.parameters(repo_files),
            )
            choice = pipeline.engine_choice(request, model)
            cases.append((facts, model, request.hardware, choice, pipeline.workload(request)))
        estimates = [estimate(model.spec, hw, choice, work) for _, model, hw, choice, work in cases]
        documents = list(zip([model.source for _, model, *_ in cases], estimates))
        # a scan reads a new spec for every repo: each timed estimate gets its own copy (what an estimate remembers
        # of its spec's layers serves that estimate, not the next repo's)
        fresh = [(fresh_spec(c[1].spec), *c[2:]) for _ in range(2 * repeat) for c in cases]
        forward, whole = fresh[: len(fresh) // 2], fresh[len(fresh) // 2 :]
        figures = {
            "spec": per_repo_ms(lambda case: spec_from_facts(case[0]), cases, repeat),
            "forward": per_repo_ms(lambda c: estimate_memory(*c), forward, 1),
            "estimate": per_repo_ms(lambda c: estimate(*c), whole, 1),
            "render": per_repo_ms(lambda d: jsonl_line(check_dict(d[0], d[1])), documents, repeat),
            "scan_one": per_repo_ms(lambda name: jsonl_line(pipeline.scan_one(name, options)), names, 1),
        }
    server.stop()
    return figures


def compare(trees: dict[str, Path], rounds: int, repeat: int, aliases: int) -> None:
    """Child processes on each tree in turn, ``rounds`` times; every figure, then the medians' ratios."""
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in trees}
    for round_no in range(rounds):
        for label, tree in trees.items():
            command = [sys.executable, __file__, "--tree", str(tree), "--repeat", str(repeat)]
            done = subprocess.run([*command, "--aliases", str(aliases), "--json"], capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{label}: {done.stderr}")
            runs[label].append(json.loads(done.stdout))
            print(f"round {round_no + 1} {label:>6}: " + fmt(runs[label][-1]), flush=True)
    first, second = trees
    for name, pick in (("median", statistics.median), ("min", min)):
        picked = {label: {p: pick(r[p] for r in rs) for p in PHASES} for label, rs in runs.items()}
        for label in trees:
            print(f"{name:>6} {label:>6}: " + fmt(picked[label]))
        ratios = "  ".join(f"{p} {picked[first][p] / picked[second][p]:.2f}" for p in PHASES)
        print(f"{name:>6} ratio {first} / {second}: {ratios}")


def fmt(figures: dict[str, float]) -> str:
    return "  ".join(f"{phase} {figures[phase]:.3f}" for phase in PHASES) + "  (ms per repo)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the hfvram checkout to measure (default: this one)")
    parser.add_argument("--repeat", type=int, default=200, help="passes over the six repos per phase")
    parser.add_argument("--aliases", type=int, default=600, help="distinct repo names of the scan_one phase")
    parser.add_argument("--against", type=Path, help="another checkout: compare the two, back to back")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    if args.against:
        compare({"this": args.tree, "other": args.against}, args.rounds, args.repeat, args.aliases)
        return
    figures = measure(args.tree, args.repeat, args.aliases)
    print(json.dumps(figures) if args.json else fmt(figures))


if __name__ == "__main__":
    main()
