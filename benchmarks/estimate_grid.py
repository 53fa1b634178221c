#!/usr/bin/env python3
"""Every figure of ``hfvram check --json`` over a broad grid, written to one file: to prove that a change to the
estimator's code (a faster path, a refactor) changes no figure. Run it before and after, then ``diff`` the files.

The grid: every repo the local test Hub serves (tests/hubserver.py: the fixture config repos, the safetensors
header repos and the GGUF header repos, each GGUF with its file named) x every engine x a set of option
combinations (GPUs, contexts 4k / 32k / 128k, concurrency 1 / 8, KV fp8, --explain). Each case is one check/1
document (or its error) as ``check --json`` prints it, in the process (``pipeline.check_report``) against the
local Hub (no latency), plus the scan rows (``scan_one``) of every repo under the default options and the scan benchmark's.

    python3 benchmarks/estimate_grid.py OUT.jsonl [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from hfvram.pipeline import RunOptions  # noqa: E402

ENGINES = ("vllm", "sglang", "llamacpp", "ollama", "trtllm", "lmdeploy", "exllamav2", "mlx", "transformers")

#: (gpu, context, concurrency, kv dtype, explain): the option combinations each (repo, engine) is checked under
COMBOS: tuple[tuple[str | None, str | None, str | None, str | None, bool], ...] = (
    (None, None, None, None, False),
    ("rtx4090", "4k", None, None, True),
    ("rtx4090", "32k", "8", None, False),
    ("h100x2", "32k", None, None, True),
    ("h100x2", "128k", "8", "fp8", False),
    ("a100-80gbx4", "128k", None, None, True),
    ("a100-80gbx4", "4k", "8", "fp8", True),
    ("h200x8", "128k", "8", None, False),
    ("rtx3090x2", "32k", None, "fp8", True),
    ("m2-ultra-192", "32k", None, None, False),
    ("rtx4090+rtx3060", "8k", "8", None, True),
)
QUICK = COMBOS[:4]
#: "fp8" in COMBOS is each engine's 8-bit KV cache type
KV_8BIT = {"sglang": "fp8_e4m3", "llamacpp": "q8_0", "ollama": "q8_0", "mlx": "q8", "transformers": "int8"}
#: the scan rows: the defaults, and the options of the scan benchmark (benchmarks/hub_cost.py)
SCAN_OPTIONS = (RunOptions(), RunOptions(gpu="rtx4090", context="8k"))


def hub_sources(files) -> list[str]:
    """Every repo of the test Hub; a GGUF repo with each of its .gguf files named (``repo:file``)."""
    sources = []
    for repo_id, repo in sorted(files.repos.items()):
        ggufs = sorted(name for name in repo.files if name.endswith(".gguf"))
        sources += [f"{repo_id}:{name}" for name in ggufs] if ggufs else [repo_id]
    return sources


def one_check(source: str, options) -> str:
    from hfvram.errors import HfvramError
    from hfvram.pipeline import check_report, resolve_request

    try:
        document = check_report(resolve_request(options, source), options)
    except HfvramError as error:
        return json.dumps({"error": type(error).__name__, "message": str(error)})
    return json.dumps(document, indent=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--quick", action="store_true", help="4 option combinations instead of all")
    args = parser.parse_args()
    home = tempfile.mkdtemp()
    from hubserver import HubFiles, HubServer

    server = HubServer(HubFiles()).start()
    os.environ.update(HF_ENDPOINT=server.url, HF_HOME=home, HF_HUB_CACHE=home + "/hub")
    os.environ.update(HFVRAM_CACHE_DIR=home + "/facts", HF_HUB_DISABLE_TELEMETRY="1")
    os.environ.pop("HF_HUB_OFFLINE", None)
    from hfvram import pipeline

    print(f"hfvram from {Path(pipeline.__file__).parent}", file=sys.stderr)
    sources = hub_sources(server.files)
    started, count = time.monotonic(), 0
    with args.out.open("w") as out:
        for source in sources:
            for scan in SCAN_OPTIONS:
                out.write(f"### scan {source} {scan}\n{json.dumps(pipeline.scan_one(source, scan))}\n")
            for engine in ENGINES:
                for gpu, context, concurrency, kv, explain in QUICK if args.quick else COMBOS:
                    options = RunOptions(
                        gpu=gpu,
                        engine=engine,
                        context=context,
                        concurrency=concurrency,
                        kv_dtype=KV_8BIT.get(engine, kv) if kv else None,
                        explain=explain,
                    )
                    out.write(f"### {source} {engine} {gpu} {context} {concurrency} {kv} {explain}\n")
                    out.write(one_check(source, options) + "\n")
                    count += 1
    server.stop()
    print(
        f"{count} checks + {len(sources) * len(SCAN_OPTIONS)} scan rows of {len(sources)} repos in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
