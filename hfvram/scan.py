"""The machinery of ``hfvram scan``: many sources read concurrently, results handed back as they finish.

One process runs ``jobs`` threads over the list, each taking the next source when it has finished one (at
most ``jobs`` sources in flight: memory does not grow with the list). Every request of the process goes through one shared HTTP client whose pool
keeps ``jobs`` + a few connections (``http.share_connections``) and every wave of parallel requests of one
repo through one shared thread pool (``hub.set_parallel_workers``): no executor and no new connection per repo.

A large scan is bound by one core (parsing answers and estimating cost a few milliseconds per repo), so it
is spread over worker processes, one per core (at most ``MAX_PROCESSES``), each with its share of the jobs;
results come back to this process as JSON over a pipe, in the order they finish. ``HFVRAM_SCAN_PROCESSES``
sets the number (1: threads only).

On huggingface.co the bound is the Hub's rate limits, not the CPU: before the threads start (and before the
workers fork, so that they inherit what was read), the repos of an owner with several sources in the list are
looked up in that owner's listing (``hub.read_owner_listings``: up to 1,000 model infos an API request), which
spares each of them its model-info request; the others are read through the resolver (``hub_resolver``: no API
request for the common layouts), a sharded repo taking the API's model info only where that costs less of its
quota than the shards' headers cost of the resolvers'. Every request goes through the one quota budget of
``http.quota_budget``, shared by the threads and the worker processes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

Report = dict[str, Any]
#: worker processes at most (one per core up to this)
MAX_PROCESSES = 4
#: a list shorter than this, or fewer jobs, stays in one process (a worker's start costs more than it saves)
MIN_SOURCES_PER_PROCESS = 32
MIN_JOBS_FOR_PROCESSES = 8
#: an owner with fewer sources than this is not looked up in its listing (``hub.LISTING_MIN_REPOS``)
LISTING_MIN_REPOS = 8
#: connections kept besides one per job (the redirect target of a Range, the model-info host)
EXTRA_CONNECTIONS = 4


def process_count(sources: int, jobs: int) -> int:
    """Worker processes for a scan: HFVRAM_SCAN_PROCESSES, else one per core when one core would be the
    bound (enough jobs and sources), on platforms that fork."""
    override = os.environ.get("HFVRAM_SCAN_PROCESSES", "").strip()
    if override.isdigit() and int(override) > 0:
        wanted = int(override)
    elif jobs < MIN_JOBS_FOR_PROCESSES or sources < 2 * MIN_SOURCES_PER_PROCESS:
        return 1
    else:
        wanted = min(os.cpu_count() or 1, MAX_PROCESSES)
    if not sys.platform.startswith("linux"):
        return 1  # fork is the only cheap start, and only Linux forks a threaded parent's copy safely enough
    return max(1, min(wanted, jobs, sources))


def _prepare_process(threads: int) -> None:
    """The shared client and thread pool of this process, sized for ``threads`` jobs (before any request)."""
    from hfvram.sources import http, hub

    http.share_connections(threads + EXTRA_CONNECTIONS)
    hub.set_parallel_workers(threads)


def _run_threads(
    indexed: Iterable[tuple[int, str]],
    work: Callable[[str], Report],
    threads: int,
    deliver: Callable[[int, Report], None],
) -> None:
    """``work`` over the sources in ``threads`` threads, each taking the next source when it is done (at most
    ``threads`` in flight, no futures to wait on); ``deliver`` is called for each result as it finishes, one at a
    time. The first exception (of ``work`` or ``deliver``) stops the others taking sources and is raised here;
    so is KeyboardInterrupt, after which nothing more is delivered."""
    todo: Iterator[tuple[int, str]] = iter(indexed)
    taking, giving = threading.Lock(), threading.Lock()
    stopped = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            while not stopped.is_set():
                with taking:
                    item = next(todo, None)
                if item is None:
                    return
                report = work(item[1])
                with giving:
                    if stopped.is_set():
                        return
                    deliver(item[0], report)
        except BaseException as err:  # raised by the calling thread
            errors.append(err)
            stopped.set()

    workers = [threading.Thread(target=run, name="hfvram-scan", daemon=True) for _ in range(max(1, threads))]
    for worker in workers:
        worker.start()
    try:
        for worker in workers:
            while worker.is_alive():
                worker.join(0.2)  # a timed wait, so that Ctrl-C reaches this thread
    finally:
        stopped.set()
    if errors:
        raise errors[0]


def _worker(
    connection: Any, sources: Sequence[tuple[int, str]], work: Callable[[str], Report], threads: int
) -> None:  # pragma: no cover - runs in a forked child (covered through the CLI tests' subprocesses)
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it terminates the workers on Ctrl-C

    def deliver(index: int, report: Report) -> None:
        connection.send_bytes(json.dumps([index, report], separators=(",", ":")).encode("utf-8"))

    try:
        _run_threads(sources, work, threads, deliver)
    finally:
        connection.close()
    os._exit(0)  # no interpreter teardown in the child: the parent owns stdout and the progress bar


def run_scan(
    sources: Sequence[str],
    work: Callable[[str], Report],
    jobs: int,
    emit: Callable[[Report], None],
    *,
    failed: Callable[[str, Exception], Report],
    render: Callable[[Report], Report] | None = None,
    token: str | None = None,
    offline: bool = False,
) -> None:
    """``emit(render(work(source)))`` for every source, as each finishes (any order); in this process or in worker
    processes (see the module docstring). ``render`` (default: none) turns a report into what is handed back,
    where the work is done: a worker process then sends the finished output (a JSON line) rather than the report
    for this process to decode and encode again. ``failed(source, error)`` stands in for a source whose worker
    process died before answering. KeyboardInterrupt propagates after the workers are stopped. ``token`` /
    ``offline``: as the sources are read (for the owners' listings read first)."""
    from hfvram.sources.http import scan_token

    if render is not None:
        work, failed = _rendered(work, failed, render)
    from hfvram.sources.limits import price_by_quota

    with scan_token():  # the token looked up once (the worker processes inherit it)
        if not offline:
            read_listings(sources, token)
        price_by_quota(True)  # the repos no listing answered: resolver or API, by what each costs of its quota
        try:
            _run_scan(sources, work, jobs, emit, failed)
        finally:
            price_by_quota(False)


def listing_candidates(sources: Sequence[str]) -> list[str]:
    """The Hub repos of ``sources`` read at their main branch whose facts the facts cache does not hold fresh."""
    from hfvram.errors import HfvramError
    from hfvram.sources.cache import FactsCache
    from hfvram.sources.resolve import HubSource, parse_source

    cache = FactsCache()
    names: list[str] = []
    seen: set[str] = set()
    for source in sources:
        try:
            parsed = parse_source(source)
        except HfvramError:
            continue
        if not isinstance(parsed, HubSource) or parsed.revision is not None or parsed.repo_id in seen:
            continue
        seen.add(parsed.repo_id)
        if cache.resolve(parsed.repo_id, "main") is None:
            names.append(parsed.repo_id)
    return names


def read_listings(sources: Sequence[str], token: str | None) -> int:
    """The owners' listings of the sources that pay for one (see ``hub.read_owner_listings``); the API requests
    sent. Nothing when offline or when no owner has enough sources in the list."""
    from hfvram.sources.repo_files import offline_requested

    if offline_requested():
        return 0
    names = listing_candidates(sources)
    counts: dict[str, int] = {}
    for name in names:
        owner = name.split("/", 1)[0]
        counts[owner] = counts.get(owner, 0) + 1
    if max(counts.values(), default=0) < LISTING_MIN_REPOS:
        return 0  # (and a scan answered from the facts cache never loads the HTTP stack)
    from hfvram.sources.limits import validate_endpoint_env

    validate_endpoint_env()  # before huggingface_hub's HTTP modules read HF_ENDPOINT
    from hfvram.sources import hub

    return hub.read_owner_listings(names, token)


def _rendered(
    work: Callable[[str], Report], failed: Callable[[str, Exception], Report], render: Callable[[Report], Report]
) -> tuple[Callable[[str], Report], Callable[[str, Exception], Report]]:
    return (lambda source: render(work(source))), (lambda source, error: render(failed(source, error)))


def _run_scan(
    sources: Sequence[str],
    work: Callable[[str], Report],
    jobs: int,
    emit: Callable[[Report], None],
    failed: Callable[[str, Exception], Report],
) -> None:
    processes = process_count(len(sources), jobs)
    if processes == 1:
        _prepare_process(jobs)
        _run_threads(enumerate(sources), work, jobs, lambda _index, report: emit(report))
        return
    import multiprocessing
    from multiprocessing.connection import wait as wait_connections

    context = multiprocessing.get_context("fork")
    workers = []
    shares = [list(enumerate(sources))[k::processes] for k in range(processes)]
    # before forking: the children inherit the client factory and no open client (the parent's, if any, is
    # closed here, never shared with a child); hub's thread pool is not inherited (see hub._forget_pool)
    _prepare_process(-(-jobs // processes))
    for k, share in enumerate(shares):
        threads = max(1, (jobs + processes - 1 - k) // processes)
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(target=_worker, args=(sender, share, work, threads), daemon=True)
        process.start()
        sender.close()
        workers.append((process, receiver, {index for index, _ in share}))
    try:
        open_connections: dict[Any, set[int]] = {receiver: left for _, receiver, left in workers}
        while open_connections:
            for ready in wait_connections(list(open_connections)):
                left = open_connections[ready]
                try:
                    index, report = json.loads(ready.recv_bytes())  # type: ignore[union-attr]
                except EOFError:
                    del open_connections[ready]
                    for index in sorted(left):  # a worker that died early: its unanswered sources are errors
                        emit(failed(sources[index], RuntimeError("the scan worker process stopped early")))
                    continue
                left.discard(index)
                emit(report)
    finally:
        for process, receiver, _ in workers:
            if process.is_alive():
                process.terminate()
            process.join(timeout=5)
            receiver.close()


def quota_eta(
    state: dict[str, dict[str, Any]], baseline: dict[str, int], done: int, total: int, now: float
) -> tuple[str, float, int, float] | None:
    """The bucket whose quota bounds the rest of a scan: (bucket, seconds its quota needs for the sources left,
    quota, window), from the requests a source has cost so far (``state``: a :class:`QuotaBudget` snapshot,
    ``baseline``: its ``sent`` counts when the scan began); None before the Hub has stated a quota, or when no
    bucket's quota holds the scan back."""
    import math

    if done <= 0:
        return None
    bound: tuple[str, float, int, float] | None = None
    for bucket, entry in state.items():
        quota, window = entry.get("q"), entry.get("w")
        if not isinstance(quota, int) or quota <= 0 or not isinstance(window, (int, float)) or window <= 0:
            continue
        sent = int(entry.get("sent") or 0) - baseline.get(bucket, 0)
        need = sent / done * (total - done)
        reset = float(entry.get("reset") or 0.0)
        left = max(0, int(entry.get("r") or 0)) if reset > now else quota
        if need <= left:
            continue
        until_reset = reset - now if reset > now else float(window)
        seconds = until_reset + (math.ceil((need - left) / quota) - 1) * float(window)
        if bound is None or seconds > bound[1]:
            bound = (bucket, seconds, quota, float(window))
    return bound


class QuotaProgress:
    """The text of a scan's progress line that names the bucket bounding it and the ETA its quota allows
    (read from the scan's quota budget at most twice a second)."""

    def __init__(self, total: int, token: str | None) -> None:
        self.total = total
        self.token = token
        self._budget: Any = None
        self._baseline: dict[str, int] = {}
        self._last = 0.0
        self.text = ""

    def start(self) -> None:
        from hfvram.sources.http import quota_budget

        self._budget = quota_budget(token=self.token)
        self._baseline = {k: int(v.get("sent") or 0) for k, v in self._budget.snapshot().items()}

    def update(self, done: int) -> str:
        import time

        now = time.monotonic()
        if self._budget is None or now - self._last < 0.5:
            return self.text
        self._last = now
        bound = quota_eta(self._budget.snapshot(), self._baseline, done, self.total, time.time())
        if bound is None:
            self.text = ""
        else:
            bucket, seconds, quota, window = bound
            minutes, secs = divmod(int(seconds + 0.5), 60)
            self.text = f"{bucket} quota {quota}/{window:g} s, ETA {minutes}:{secs:02d}"
        return self.text
