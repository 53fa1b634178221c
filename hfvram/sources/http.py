"""HTTP transport to the Hub, through huggingface_hub's shared session and error mapping.

Every request goes through ``huggingface_hub.utils.get_session()`` (so HF_ENDPOINT, proxies and the
library's offline switch apply), carries the token (argument, HF_TOKEN or the saved one) and a user agent, is streamed with a
hard byte cap, retried with bounded backoff on 429 / 5xx / transport errors, and fails as an
:class:`~hfvram.errors.HfvramError` with one clean line. The token never enters a message.

The Hub's rate limits: every answer's ``RateLimit`` / ``RateLimit-Policy`` headers (huggingface_hub's
``parse_ratelimit_headers``) feed one :class:`~hfvram.sources.limits.QuotaBudget` per endpoint and token, kept in
a state file next to the facts cache so that every thread and process spends the same budget; a request whose
bucket (``api`` for ``/api/``, ``resolvers`` for ``/resolve/``; a CDN URL counts in neither) has none left waits
for the window to reset, and a 429 that states its window is waited out (up to the window) instead of counting as
a failed try. That waiting does not count against the request's or the source's deadline.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import httpx2
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors
from huggingface_hub import get_token
from huggingface_hub.utils import get_session, hf_raise_for_status, parse_ratelimit_headers

from hfvram.errors import GatedRepoError, HfvramError, MalformedFileError, NetworkError, RepoNotFoundError
from hfvram.redaction import redact
from hfvram.sources.limits import (
    QuotaBudget,
    byte_cap,
    checked_endpoint,
    current_source_deadline,
    extend_source_deadline,
    request_deadline_seconds,
)

KIB = 1024
MIB = 1024 * KIB

#: Hard caps on what one response may deliver (a server that ignores Range is cut off here).
JSON_CAP = byte_cap("hub_json")
SAFETENSORS_HEADER_CAP = 100 * MIB + 8
GGUF_HEADER_CAP = 64 * MIB
#: what is read of an error answer's body (limits.toml [bytes] error_body)
ERROR_BODY_CAP = byte_cap("error_body")

T = TypeVar("T")

#: the statuses huggingface_hub's own backoff retries on too (``http_backoff``'s default ``retry_on_status_codes``)
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MAX_TRIES = 4
CONNECT_TRIES = 2
#: 429 answers one request waits out (each up to its window) before it gives up
RATE_LIMIT_WAITS = 8


class EntryMissingError(RepoNotFoundError):
    """The repo exists but the file does not (Hub X-Error-Code: EntryNotFound)."""


TOKEN_HELP = "pass a token with --token, set HF_TOKEN, or run `hf auth login`"


def hub_endpoint() -> str:
    """The Hub base URL, read at call time (HF_ENDPOINT may be set after import); a malformed one is a
    :class:`~hfvram.errors.UsageError` that shows it redacted."""
    return checked_endpoint(os.environ.get("HF_ENDPOINT") or hf_constants.ENDPOINT)


def _env_float(name: str, default: float) -> float:
    """A number of seconds from the environment: unset or empty is the default; anything but a finite number >= 0
    (``nan``, ``inf``, ``-1``, text) is a usage error, never a timeout that does not time out."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value >= 0) or (value == 0 and name == "HFVRAM_HTTP_TIMEOUT"):
        from hfvram.errors import UsageError

        raise UsageError(f"{name}={raw[:80]!r}: expected a finite, positive number of seconds")
    return value


def http_timeout() -> float:
    """Connect and read timeout in seconds (HFVRAM_HTTP_TIMEOUT, default 10)."""
    return _env_float("HFVRAM_HTTP_TIMEOUT", 10.0)


def retry_base_seconds() -> float:
    """First backoff sleep (HFVRAM_RETRY_BASE, default 0.5 s); doubles per try."""
    return _env_float("HFVRAM_RETRY_BASE", 0.5)


def retry_sleep_budget() -> float:
    """Most seconds all retries of one request may sleep in total (HFVRAM_RETRY_BUDGET, default 15)."""
    return _env_float("HFVRAM_RETRY_BUDGET", 15.0)


@dataclass(frozen=True)
class Fetched:
    """One answered request: status, headers (lower-case keys), the body read (at most the cap)."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str
    #: True when the body was cut at the cap before the server finished sending
    truncated: bool = False
    history: tuple[int, ...] = field(default_factory=tuple)
    #: the commit the Hub served it from (``X-Repo-Commit`` of the answer or of the redirect that led to it: a CDN
    #: answer does not carry it, the Hub's 302 to the CDN does)
    commit: str | None = None


def share_connections(connections: int) -> None:
    """One client for the whole process (huggingface_hub's shared session) whose pool keeps up to
    ``connections`` connections open and reuses them, instead of the default pool that keeps 20 and opens a
    new connection (a TLS handshake on the real Hub) for every request past them. A scan calls this with its
    jobs plus a few before its first request."""
    from huggingface_hub import set_client_factory

    try:
        from huggingface_hub.utils._http import hf_request_event_hook

        hooks = {"request": [hf_request_event_hook]}
    except ImportError:  # pragma: no cover - a huggingface_hub without the hook: the client still works
        hooks = {}
    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)

    def factory() -> httpx2.Client:
        return httpx2.Client(event_hooks=hooks, follow_redirects=True, timeout=None, limits=limits)

    set_client_factory(factory)


_AGENT: list[str] = []


def _user_agent() -> str:
    if _AGENT:
        return _AGENT[0]
    _AGENT.append(_computed_user_agent())
    return _AGENT[0]


def _computed_user_agent() -> str:
    from hfvram import __version__  # what `hfvram --version` prints (no importlib.metadata on a check's path)

    return f"hfvram/{__version__}; huggingface_hub/{_hf_version()}"


def _hf_version() -> str:
    import huggingface_hub

    return huggingface_hub.__version__


#: the token of a scan in progress, looked up once for all its requests (see :func:`scan_token`)
_SCAN_TOKEN: list[str | None] = []


@contextlib.contextmanager
def scan_token() -> Iterator[None]:
    """While a scan runs, its requests carry the token found at its start (HF_TOKEN or the saved one) instead of
    reading the environment and the token file again for each of them."""
    _SCAN_TOKEN[:] = [get_token()]
    try:
        yield
    finally:
        _SCAN_TOKEN.clear()


def request_headers(token: str | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Auth (the token argument, else HF_TOKEN / the token saved by `hf auth login`) and user agent.

    Built here rather than with ``build_hf_headers`` because that helper first fetches the Hub's agent
    registry (one more blocking request per day and process)."""
    headers = {"user-agent": _user_agent()}
    secret = token if token else (_SCAN_TOKEN[0] if _SCAN_TOKEN else get_token())
    if secret:
        headers["authorization"] = f"Bearer {secret}"
    if extra:
        headers.update(extra)
    return headers


def same_origin(url: str, other: str) -> bool:
    from urllib.parse import urlsplit

    a, b = urlsplit(url), urlsplit(other)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


# ---- the Hub's rate limits ----------------------------------------------------------------------------------

#: one budget per state file (endpoint and token), for the life of the process
_BUDGETS: dict[str, QuotaBudget] = {}
_BUDGETS_LOCK = threading.Lock()
#: where the messages about waiting go (the scan's progress display sets its own)
_SAY: list[object] = []


def say_through(say: Callable[[str], None] | None) -> None:
    """Print this process's rate-limit messages through ``say`` (None: straight to stderr; a forked worker
    process always writes straight to stderr: the parent's display does not run there)."""
    _SAY[:] = [say, os.getpid()] if say is not None else []


def _say(message: str) -> None:
    if _SAY and _SAY[1] == os.getpid():
        _SAY[0](message)  # type: ignore[operator]
        return
    import sys

    # the process's own stderr: in a scan's worker process sys.stderr may still be the parent's progress display
    stream = sys.__stderr__ if sys.__stderr__ is not None else sys.stderr
    with contextlib.suppress(OSError, ValueError):
        stream.write(message + "\n")
        stream.flush()


def quota_budget(endpoint: str | None = None, token: str | None = None) -> QuotaBudget:
    """The budget of ``endpoint`` (HF_ENDPOINT) with the token in use (the quota is per user, or per address
    without one): a state file in the facts cache's folder, named by a hash of both (never the token)."""
    import hashlib

    from hfvram.sources.cache import default_cache_dir

    endpoint = endpoint or hub_endpoint()
    secret = token if token else (_SCAN_TOKEN[0] if _SCAN_TOKEN else get_token())
    who = hashlib.sha256(secret.encode()).hexdigest()[:16] if secret else "anonymous"
    name = hashlib.sha256(f"{endpoint}\n{who}".encode()).hexdigest()[:20]
    try:
        path = default_cache_dir() / f"ratelimit-{name}.state"
    except Exception:  # no cache folder to be found: this process only
        path = None
    key = str(path) if path is not None else f"memory:{name}"
    with _BUDGETS_LOCK:
        budget = _BUDGETS.get(key)
        if budget is None:
            budget = _BUDGETS[key] = QuotaBudget(path, say=_say)
    return budget


def _forget_budgets() -> None:
    global _BUDGETS_LOCK
    _BUDGETS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_budgets)


def bucket_of(url: str, endpoint: str) -> str | None:
    """The Hub's rate-limit bucket of a request: ``api`` for its /api/ routes, ``resolvers`` for /resolve/ URLs;
    None for another host (the CDN a file redirects to counts in neither)."""
    if not same_origin(url, endpoint):
        return None
    from urllib.parse import urlsplit

    path = urlsplit(url).path
    prefix = urlsplit(endpoint).path.rstrip("/")
    rest = path[len(prefix) :] if path.startswith(prefix) else path
    if rest.startswith("/api/"):
        return "api"
    if "/resolve/" in rest:
        return "resolvers"
    return None


def _note_limits(budget: QuotaBudget, response: httpx2.Response) -> bool:
    """Feed the RateLimit figures of the answer (and of the redirects that led to it) to the budget; True when a
    429 stated its bucket's window (then the budget holds the next request back until it resets)."""
    stated = False
    for answer in (*response.history, response):
        info = parse_ratelimit_headers(answer.headers)
        if info is None:
            continue
        limited = answer.status_code == 429
        left = 0 if limited else info.remaining
        budget.after(info.resource_type, left, float(info.reset_in_seconds), info.limit, info.window_seconds)
        stated = stated or limited
    return stated


def _repo_commit(response: httpx2.Response) -> str | None:
    """``X-Repo-Commit`` of the answer, else of the last redirect that carried one (huggingface_hub's
    ``get_hf_file_metadata`` reads it from the Hub's answer before the CDN)."""
    for answer in (response, *reversed(response.history)):
        commit = answer.headers.get("x-repo-commit")
        if commit:
            return commit
    return None


def _retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        return None


def _what(repo_id: str | None, filename: str | None) -> str:
    if repo_id and filename:
        return f"{repo_id}/{filename}"
    return repo_id or filename or "the Hub"


def _hub_error(err: hf_errors.HfHubHTTPError, *, repo_id: str | None, filename: str | None) -> HfvramError:
    """One clean line for a huggingface_hub HTTP error (never the request headers).

    The error's type, as ``hf_raise_for_status`` chose it from the Hub's X-Error-Code / X-Error-Message headers,
    decides; the status code is read only for what the hub leaves a plain ``HfHubHTTPError`` (a 401 / 403 / 404
    outside the repo API, without those headers), which no type names."""
    what = _what(repo_id, filename)
    if isinstance(err, hf_errors.GatedRepoError):
        return GatedRepoError(f"{repo_id or what} is gated: accept its licence on the Hub, then {TOKEN_HELP}")
    if isinstance(err, hf_errors.RevisionNotFoundError):
        return RepoNotFoundError(f"revision not found in {repo_id or what}")
    if isinstance(err, hf_errors.RemoteEntryNotFoundError):
        return EntryMissingError(f"{filename or 'file'} not found in {repo_id or what}")
    if isinstance(err, hf_errors.RepositoryNotFoundError):
        return RepoNotFoundError(
            f"repository {repo_id or what} not found on the Hub (if it is private or gated, {TOKEN_HELP})"
        )
    if isinstance(err, hf_errors.DisabledRepoError):  # no token opens it: not the 403 "refused" below
        return RepoNotFoundError(f"repository {repo_id or what} is disabled on the Hub (access to it is turned off)")
    status = err.response.status_code if err.response is not None else None
    if status in (401, 403):
        return GatedRepoError(f"access to {what} was refused (HTTP {status}): {TOKEN_HELP}")
    if status == 404:
        return RepoNotFoundError(f"{what} not found on the Hub (HTTP 404)")
    return NetworkError(f"the Hub answered HTTP {status} for {what}")


def _raise_for_status(response: httpx2.Response, *, repo_id: str | None, filename: str | None) -> None:
    try:
        hf_raise_for_status(response)
    except hf_errors.HfHubHTTPError as err:
        raise _hub_error(err, repo_id=repo_id, filename=filename) from None


def _read_capped(response: httpx2.Response, cap: int, cancelled: threading.Event | None = None) -> tuple[bytes, bool]:
    """Read at most ``cap`` bytes of the (decoded) body, then stop (the connection is dropped, not drained).

    Decompressed bytes count against the cap (httpx2 inflates in bounded pieces), so a gzip bomb is cut like an
    endless body. Returns the bytes and whether the server had more to send. Stops at once when ``cancelled``
    is set (the request's deadline passed)."""
    chunks: list[bytes] = []
    received = 0
    stream = response.iter_bytes(chunk_size=min(cap, 256 * KIB) or 1)
    for chunk in stream:
        if cancelled is not None and cancelled.is_set():
            raise _Abandoned()
        room = cap - received
        if len(chunk) > room:
            chunks.append(chunk[:room])
            return b"".join(chunks), True
        chunks.append(chunk)
        received += len(chunk)
        if received == cap:
            more = next(stream, b"")
            return b"".join(chunks), bool(more)
    return b"".join(chunks), False


class _Abandoned(Exception):
    """The caller stopped waiting (deadline): the worker thread drops what it was reading."""


def _error_response(response: httpx2.Response, cancelled: threading.Event) -> httpx2.Response:
    """The error answer with only the first ``error_body`` bytes of its body (an endless or gzip-bomb body is
    cut there), as a read response ``hf_raise_for_status`` can inspect."""
    body, _ = _read_capped(response, ERROR_BODY_CAP, cancelled)
    headers = [
        (k, v)
        for k, v in response.headers.multi_items()
        if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    return httpx2.Response(response.status_code, headers=headers, content=body, request=response.request)


@dataclass
class _Retry:
    """One attempt that asks for another: how long the server asked to wait, and what went wrong."""

    wait: float | None
    problem: str
    #: the connection itself failed (DNS, refused): the network is down
    connect_failed: bool = False
    #: a 429 that stated its bucket's window: waited out by the budget, not counted as a try
    rate_limited: bool = False


def _deadline() -> tuple[float, str]:
    """When this request must be finished (monotonic), and the words naming the deadline that ends first."""
    request_s = request_deadline_seconds()
    until, words = time.monotonic() + request_s, f"the {request_s:g} s request deadline (HFVRAM_REQUEST_DEADLINE)"
    source = current_source_deadline()
    if source is not None and source[0] < until:
        until, words = source[0], f"the {source[1]:g} s deadline for reading one model (HFVRAM_DEADLINE)"
    return until, words


def _deadline_error(what: str, words: str) -> NetworkError:
    return NetworkError(f"could not fetch {what} from {redact(hub_endpoint())}: no complete answer within {words}")


class _Runner:
    """A daemon thread that runs request attempts handed to it one at a time; once idle it waits in ``_IDLE`` for
    the next, so that a request costs a hand-over, not a thread start (a scan makes tens of thousands). A runner
    stuck in an abandoned attempt stays out of ``_IDLE`` until that attempt ends."""

    def __init__(self) -> None:
        import queue

        self.tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="hfvram-fetch", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self.tasks.get()()
            with _IDLE_LOCK:
                if len(_IDLE) >= MAX_IDLE_RUNNERS:
                    return
                _IDLE.append(self)


#: idle runner threads, the last one to finish on top; at most MAX_IDLE_RUNNERS kept
_IDLE: list[_Runner] = []
_IDLE_LOCK = threading.Lock()
MAX_IDLE_RUNNERS = 64


def idle_runner_threads() -> set[threading.Thread]:
    """The threads of the runners waiting for their next attempt (none of them is reading)."""
    with _IDLE_LOCK:
        return {runner.thread for runner in _IDLE}


def _forget_runners() -> None:
    """In a forked child the parent's runner threads do not exist: start fresh ones."""
    global _IDLE_LOCK
    _IDLE.clear()
    _IDLE_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_runners)


def _start(task: Callable[[], None]) -> None:
    with _IDLE_LOCK:
        runner = _IDLE.pop() if _IDLE else None
    (runner or _Runner()).tasks.put(task)


def _within(until: float, work: Callable[[threading.Event, dict[str, object]], T]) -> T | None:
    """``work(cancelled, box)`` in a runner thread; its result, or None when ``until`` passes first (the socket
    of the response it put in ``box`` is shut down, and the thread drops the answer when it next wakes)."""
    box: dict[str, object] = {}
    done = threading.Event()
    cancelled = threading.Event()
    context = contextvars.copy_context()

    def run() -> None:
        try:
            box["value"] = context.run(work, cancelled, box)
        except BaseException as err:  # handed to the waiting thread
            box["error"] = err
        finally:
            done.set()

    _start(run)
    if not done.wait(max(0.0, until - time.monotonic())):
        cancelled.set()
        _shut_down(box)
        return None
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def _shut_down(box: Mapping[str, object]) -> None:
    """Wake a thread blocked reading an answer: shut its socket down (not closed under the reader's feet). The
    socket is the response's, or — while the status line is still coming — the one the connection trace saw
    opened (a reused keep-alive connection has none: that thread ends when the server stops or times out)."""
    import socket

    response = box.get("response")
    stream = getattr(response, "extensions", {}).get("network_stream") if response is not None else None
    stream = stream if stream is not None else box.get("stream")
    sock = stream.get_extra_info("socket") if stream is not None else None  # type: ignore[union-attr]
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _connection_trace(box: dict[str, object]) -> Callable[[str, Mapping[str, object]], None]:
    """An httpcore trace hook that keeps the network stream of a new connection in ``box``."""

    def trace(event: str, info: Mapping[str, object]) -> None:
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            stream = info.get("return_value")
            if stream is not None:
                box["stream"] = stream

    return trace


def fetch(
    url: str,
    *,
    token: str | None = None,
    cap: int = JSON_CAP,
    byte_range: tuple[int, int] | None = None,
    method: str = "GET",
    repo_id: str | None = None,
    filename: str | None = None,
    params: Mapping[str, object] | None = None,
) -> Fetched:
    """GET (or HEAD) ``url`` with retries, a byte cap and a wall-clock deadline; ``byte_range`` is inclusive.

    A server that ignores Range (200 instead of 206) is read only up to ``end + 1`` bytes and sliced, so a
    whole-file body is never downloaded. The deadline (per request, and per model read when one is set with
    :func:`~hfvram.sources.limits.source_deadline`) covers every try and every backoff sleep; a server that
    dribbles its answer ends in a :class:`~hfvram.errors.NetworkError` when it passes.

    Why this loop and not ``huggingface_hub.utils.http_backoff`` / ``http_stream_backoff`` (huggingface_hub 2.x):
    the session and the error types (``hf_raise_for_status``) are the hub's and the retried statuses the same as
    its, but its backoff cannot be held to hfvram's caps and time budget. ``http_backoff`` reads every body whole.
    ``http_stream_backoff`` streams, but once its retries are spent it calls ``hf_raise_for_status`` on the unread
    answer, which reads the whole error body (against the local test Hub, an endless 503 body: 1.8 GiB read in 3 s,
    still reading); it sleeps with ``time.sleep`` for as long as ``Retry-After`` says plus 1 s (``Retry-After: 600``:
    a 601 s sleep; whole seconds only), with no overall deadline or sleep budget, and cannot be interrupted, so an abandoned
    call would wake later and ask the Hub again; every try gets the same timeout, not what is left of the deadline;
    a failed connection makes it close the process-wide client that a scan's worker threads share
    (``close_session``) and retry up to ``max_retries`` times where hfvram stops after ``CONNECT_TRIES`` (the
    network is down: fall back to the catalogue); and it logs each retry with its URL as a warning, where hfvram
    prints one clean line.

    Longer than 60 lines: the retry loop and its one try share the deadline, the sleep budget and the rate-limit
    count; split apart, the deadline logic would be scattered over functions that each pass it on.
    """
    what = _what(repo_id, filename)
    endpoint = hub_endpoint()  # a malformed HF_ENDPOINT is a usage error before any request
    extra = {"Range": f"bytes={byte_range[0]}-{byte_range[1]}"} if byte_range else None
    headers = request_headers(token, extra)
    if not same_origin(url, endpoint):  # e.g. a CDN URL reused for the next Range: never send the token
        headers.pop("authorization", None)
    limit = cap if byte_range is None else min(cap, byte_range[1] + 1)
    until, deadline_words = _deadline()
    slept = 0.0
    budget = retry_sleep_budget()
    last_problem = ""
    bucket = bucket_of(url, endpoint)
    quota = quota_budget(endpoint, token)
    rate_waits = 0

    def attempt_once(final: bool, cancelled: threading.Event, box: dict[str, object]) -> Fetched | _Retry:
        remaining = max(0.01, until - time.monotonic())
        timeout = httpx2.Timeout(min(http_timeout(), remaining))
        try:
            with get_session().stream(
                method,
                url,
                headers=headers,
                timeout=timeout,
                follow_redirects=True,
                params=params,  # type: ignore[arg-type]
                extensions={"trace": _connection_trace(box)},
            ) as response:
                box["response"] = response
                stated = _note_limits(quota, response)
                if response.status_code == 429 and stated and rate_waits < RATE_LIMIT_WAITS:
                    return _Retry(None, "HTTP 429 (rate limited)", rate_limited=True)
                if response.status_code in RETRY_STATUSES and not final:
                    return _Retry(_retry_after_seconds(response.headers), f"HTTP {response.status_code}")
                if response.status_code >= 400:
                    _raise_for_status(_error_response(response, cancelled), repo_id=repo_id, filename=filename)
                body, truncated = (b"", False) if method == "HEAD" else _read_capped(response, limit, cancelled)
                if byte_range is not None and response.status_code != 206:
                    body = body[byte_range[0] :]
                    truncated = False
                return Fetched(
                    status=response.status_code,
                    headers={k.lower(): v for k, v in response.headers.items()},
                    body=body,
                    url=str(response.url),
                    truncated=truncated,
                    history=tuple(r.status_code for r in response.history),
                    commit=_repo_commit(response),
                )
        except HfvramError:
            raise
        except hf_errors.OfflineModeIsEnabled:
            raise NetworkError(f"cannot reach the Hub for {what}: offline mode is on") from None
        except httpx2.TooManyRedirects:
            raise NetworkError(f"too many redirects while fetching {what}") from None
        except httpx2.UnsupportedProtocol:
            # the endpoint is checked, so this is a redirect to file://, ftp://, …: final, never retried
            raise NetworkError(
                f"the Hub redirected {what} to a URL that is not http(s); hfvram follows only http and https"
            ) from None
        except httpx2.RemoteProtocolError as err:
            if "location header" not in str(err).lower():
                return _Retry(None, _transport_problem(err))
            raise NetworkError(f"the Hub redirected {what} to a malformed URL") from None
        except (httpx2.TransportError, httpx2.DecodingError, httpx2.StreamError) as err:
            if cancelled.is_set():
                raise _Abandoned() from None
            if isinstance(err, httpx2.ConnectError):
                return _Retry(None, _transport_problem(err), connect_failed=True)
            return _Retry(None, _transport_problem(err))

    attempt = 1
    while attempt <= MAX_TRIES:
        waited = quota.before(bucket)  # the bucket's window spent: wait for it to reset (the Hub's time, not ours)
        if waited:
            until += waited
            extend_source_deadline(waited)
        if time.monotonic() >= until:
            raise _deadline_error(what, deadline_words)
        outcome = _within(until, functools.partial(attempt_once, attempt == MAX_TRIES))
        if outcome is None:
            raise _deadline_error(what, deadline_words)
        if isinstance(outcome, Fetched):
            return outcome
        last_problem = outcome.problem
        if outcome.rate_limited:
            rate_waits += 1
            continue  # the next round waits in quota.before until the window the 429 stated resets
        if outcome.connect_failed and attempt >= CONNECT_TRIES:
            break  # DNS failure / refused connection: the network is down, more tries only delay the fallback
        backoff = retry_base_seconds() * (2 ** (attempt - 1)) * (1 + random.random() / 4)
        sleep_for = backoff if outcome.wait is None else outcome.wait
        if attempt == MAX_TRIES or slept + sleep_for > budget:
            break
        if time.monotonic() + sleep_for >= until:
            raise _deadline_error(what, deadline_words)
        time.sleep(sleep_for)
        slept += sleep_for
        attempt += 1
    attempt = min(attempt, MAX_TRIES)
    raise NetworkError(
        f"could not fetch {what} from {redact(endpoint)}: {last_problem} "
        f"(after {attempt} tr{'y' if attempt == 1 else 'ies'})"
    )


def _transport_problem(err: Exception) -> str:
    if isinstance(err, httpx2.TimeoutException):
        return "timed out"
    if isinstance(err, httpx2.ConnectError):
        return "connection failed (network down or Hub unreachable)"
    if isinstance(err, (httpx2.RemoteProtocolError, httpx2.ReadError)):
        return "connection dropped mid-answer"
    return type(err).__name__


def fetch_json(
    url: str,
    *,
    token: str | None,
    repo_id: str | None,
    filename: str | None,
    params: Mapping[str, object] | None = None,
) -> tuple[object, Fetched]:
    """GET a JSON document (capped at 16 MiB) and decode it."""
    import json

    answer = fetch(url, token=token, cap=JSON_CAP, repo_id=repo_id, filename=filename, params=params)
    if answer.truncated:
        raise MalformedFileError(f"larger than the {JSON_CAP // MIB} MiB cap for JSON", file=_what(repo_id, filename))
    try:
        return json.loads(answer.body.decode("utf-8")), answer
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise MalformedFileError(f"not valid JSON ({err.__class__.__name__})", file=_what(repo_id, filename)) from None
