"""The machinery of ``hfvram scan``: many sources read concurrently, results handed back as they finish.

One process runs ``jobs`` threads over the list, each taking the next source when it has finished one (at
most ``jobs`` sources in flight: memory does not grow with the list). Every request of the process goes through one shared HTTP client whose pool
keeps ``jobs`` + a few connections (``http.share_connections``) and every wave of parallel requests of one
repo through one shared thread pool (``hub.set_parallel_workers``): no executor and no new connection per repo.

A large scan is bound by one core (parsing answers and estimating cost a few milliseconds per repo), so it
is spread over worker processes, one per core (at most ``MAX_PROCESSES``), each with its share of the jobs;
results come back to this process as JSON over a pipe, in the order they finish. ``HFVRAM_SCAN_PROCESSES``
sets the number (1: threads only).
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
) -> None:
    """``emit(render(work(source)))`` for every source, as each finishes (any order); in this process or in worker
    processes (see the module docstring). ``render`` (default: none) turns a report into what is handed back,
    where the work is done: a worker process then sends the finished output (a JSON line) rather than the report
    for this process to decode and encode again. ``failed(source, error)`` stands in for a source whose worker
    process died before answering. KeyboardInterrupt propagates after the workers are stopped."""
    from hfvram.sources.http import scan_token

    if render is not None:
        work, failed = _rendered(work, failed, render)
    with scan_token():  # the token looked up once (the worker processes inherit it)
        _run_scan(sources, work, jobs, emit, failed)


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
