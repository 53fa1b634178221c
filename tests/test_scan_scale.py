"""`hfvram scan` at scale, through the real CLI against the local test Hub: one shared client whose pool keeps
at most jobs + a few connections for the whole scan (counted on the server, one client port per TCP
connection), one facts-cache write per repo, and the same rows whether the list is read by one process or
spread over worker processes; the job threads, the options parsed once and the request threads reused.
Nothing here is timed (benchmarks/hub_cost.py measures speed)."""

from __future__ import annotations

import json

import pytest
from cli_support import run_hfvram

from hfvram.scan import EXTRA_CONNECTIONS, process_count

TARGETS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "google/gemma-2-9b-it",
    "openai/gpt-oss-20b",
    "sentence-transformers/all-MiniLM-L6-v2",
]


def scan(hub, names: list[str], *args: str, processes: int, env: dict | None = None) -> list[dict]:
    result = run_hfvram(
        "scan", "-", "--json", "--gpu", "rtx4090", "--context", "8k", *args,
        stdin="\n".join(names) + "\n",
        env={"HFVRAM_SCAN_PROCESSES": str(processes), **(env or {})},
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr[-2000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == len(names) and not [r for r in rows if "error" in r], result.stdout[-2000:]
    return rows


@pytest.mark.parametrize("processes", [1, 2])
def test_connections_stay_within_jobs_plus_a_few(hub, processes):
    names = hub.files.alias_many(f"pool{processes}", 48, targets=TARGETS)
    jobs = 4
    scan(hub, names, "--jobs", str(jobs), processes=processes)
    connections = {r.client for r in hub.records}
    # config.json per repo, the model infos from one page of the owner's listing
    assert hub.request_count >= len(names) and len(hub.requests_to("/api/models")) == 1
    assert len(connections) <= jobs + processes * EXTRA_CONNECTIONS, len(connections)


def test_one_facts_cache_write_per_repo(hub, isolated_caches):
    names = hub.files.alias_many("writes", 12, targets=TARGETS)
    scan(hub, names, "--jobs", "4", processes=1)
    cache = isolated_caches / "hfvram_cache"
    entries = sorted(p for p in cache.rglob("*.json") if "transformers-facts" not in p.parts)
    assert len(entries) == len(names)  # the ref of each repo, carrying the facts read at its commit
    assert {json.loads(p.read_text())["repo"] for p in entries} == set(names)
    hub.records.clear()
    scan(hub, names, "--jobs", "4", processes=1)
    assert hub.request_count == 0  # a second scan answers from those entries alone


def test_worker_processes_give_the_same_rows(hub, tmp_path):
    names = hub.files.alias_many("procs", 24, targets=TARGETS)
    one = scan(hub, names, "--jobs", "4", processes=1)
    hub.records.clear()
    two = scan(hub, names, "--jobs", "4", processes=2, env={"HFVRAM_CACHE_DIR": str(tmp_path / "second")})
    # a fresh facts cache: read again, in two processes (config.json each, the owner's listing once)
    assert hub.request_count >= len(names) + 1

    def key(row: dict) -> str:
        return row["source"]["repo_id"]

    def comparable(row: dict) -> str:
        return json.dumps({k: v for k, v in row.items() if k != "source"}, sort_keys=True)

    assert sorted(map(key, one)) == sorted(map(key, two)) == sorted(names)
    assert {key(r): comparable(r) for r in one} == {key(r): comparable(r) for r in two}


def test_process_count_rules(monkeypatch):
    monkeypatch.delenv("HFVRAM_SCAN_PROCESSES", raising=False)
    assert process_count(10, 32) == 1  # a short list stays in one process
    assert process_count(10_000, 4) == 1  # few jobs: one core is not the bound
    monkeypatch.setenv("HFVRAM_SCAN_PROCESSES", "3")
    assert process_count(10_000, 16) == 3
    assert process_count(2, 16) == 2  # never more processes than sources


def test_job_threads_deliver_every_source_once_with_at_most_jobs_in_flight():
    import threading
    import time

    from hfvram.scan import _run_threads

    lock, running, most, delivered = threading.Lock(), [0], [0], []

    def work(source: str) -> dict:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.002)
        with lock:
            running[0] -= 1
        return {"source": source}

    sources = [f"org/repo-{i}" for i in range(60)]
    _run_threads(enumerate(sources), work, 4, lambda index, report: delivered.append((index, report["source"])))
    assert sorted(delivered) == list(enumerate(sources))  # each once, whatever the order they finished in
    assert 1 <= most[0] <= 4


def test_job_threads_stop_at_the_first_error_and_raise_it():
    from hfvram.scan import _run_threads

    delivered = []

    def work(source: str) -> dict:
        if source == "org/bad":
            raise ValueError("broken source")
        return {"source": source}

    sources = ["org/bad"] + [f"org/repo-{i}" for i in range(200)]
    with pytest.raises(ValueError, match="broken source"):
        _run_threads(enumerate(sources), work, 1, lambda index, report: delivered.append(index))
    assert delivered == []  # one thread: nothing was taken after the failing source


def test_a_scan_parses_its_options_once_into_the_request_of_each_source():
    from hfvram.pipeline import RunOptions, resolve_request, scan_request

    options = RunOptions(gpu="rtx4090x2", context="32k", engine="vllm", settings=("max-num-seqs=64",), kv_dtype="fp8")
    first, second = scan_request(options, "org/one"), scan_request(options, "org/two")
    assert first == resolve_request(options, "org/one") and second == resolve_request(options, "org/two")
    second.settings["max-num-seqs"] = "1"  # each source's request has its own settings
    assert scan_request(options, "org/three").settings == {"max-num-seqs": "64"}


def test_request_attempts_reuse_their_threads(hub):
    """A request is handed to a waiting runner thread, not a new thread per request (the deadline still
    applies: tests/test_faults.py)."""
    import threading

    from hfvram.sources.hub import fetch_repo_info

    def runners() -> int:
        return sum(t.name == "hfvram-fetch" for t in threading.enumerate())

    before = runners()  # idle runners left by earlier tests of this process wait for work too
    for _ in range(30):
        fetch_repo_info(TARGETS[0], None, None)
    assert 1 <= runners() <= max(before, 1) + 1, (before, runners())
