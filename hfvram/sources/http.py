"""HTTP transport to the Hub, through huggingface_hub's shared session and error mapping.

Every request goes through ``huggingface_hub.utils.get_session()`` (so HF_ENDPOINT, proxies and the
library's offline switch apply), carries the token (argument, HF_TOKEN or the saved one) and a user agent, is streamed with a
hard byte cap, retried with bounded backoff on 429 / 5xx / transport errors, and fails as an
:class:`~hfvram.errors.HfvramError` with one clean line. The token never enters a message.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx2
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors
from huggingface_hub import get_token
from huggingface_hub.utils import get_session, hf_raise_for_status

from hfvram.errors import GatedRepoError, HfvramError, MalformedFileError, NetworkError, RepoNotFoundError

KIB = 1024
MIB = 1024 * KIB

#: Hard caps on what one response may deliver (a server that ignores Range is cut off here).
JSON_CAP = 16 * MIB
SAFETENSORS_HEADER_CAP = 100 * MIB + 8
GGUF_HEADER_CAP = 64 * MIB

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MAX_TRIES = 4
CONNECT_TRIES = 2


class EntryMissingError(RepoNotFoundError):
    """The repo exists but the file does not (Hub X-Error-Code: EntryNotFound)."""


TOKEN_HELP = "pass a token with --token, set HF_TOKEN, or run `hf auth login`"


def hub_endpoint() -> str:
    """The Hub base URL, read at call time (HF_ENDPOINT may be set after import)."""
    return (os.environ.get("HF_ENDPOINT") or hf_constants.ENDPOINT).rstrip("/")


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ[name])
    except (KeyError, ValueError):
        return default


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


def request_headers(token: str | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Auth (the token argument, else HF_TOKEN / the token saved by `hf auth login`) and user agent.

    Built here rather than with ``build_hf_headers`` because that helper first fetches the Hub's agent
    registry (one more blocking request per day and process)."""
    headers = {"user-agent": _user_agent()}
    secret = token if token else get_token()
    if secret:
        headers["authorization"] = f"Bearer {secret}"
    if extra:
        headers.update(extra)
    return headers


def same_origin(url: str, other: str) -> bool:
    from urllib.parse import urlsplit

    a, b = urlsplit(url), urlsplit(other)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


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


def _hub_error(err: Exception, *, repo_id: str | None, filename: str | None) -> HfvramError:
    """One clean line for a huggingface_hub HTTP error (never the request headers)."""
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
    status = getattr(getattr(err, "response", None), "status_code", None)
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


def _read_capped(response: httpx2.Response, cap: int) -> tuple[bytes, bool]:
    """Read at most ``cap`` bytes of the body, then stop (the connection is dropped, not drained).

    Returns the bytes and whether the server had more to send."""
    chunks: list[bytes] = []
    received = 0
    stream = response.iter_bytes(chunk_size=256 * KIB)
    for chunk in stream:
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
    """GET (or HEAD) ``url`` with retries and a byte cap; ``byte_range`` is inclusive (start, end).

    A server that ignores Range (200 instead of 206) is read only up to ``end + 1`` bytes and sliced, so a
    whole-file body is never downloaded.
    """
    extra = {"Range": f"bytes={byte_range[0]}-{byte_range[1]}"} if byte_range else None
    headers = request_headers(token, extra)
    if not same_origin(url, hub_endpoint()):  # e.g. a CDN URL reused for the next Range: never send the token
        headers.pop("authorization", None)
    limit = cap if byte_range is None else min(cap, byte_range[1] + 1)
    timeout = httpx2.Timeout(http_timeout())
    slept = 0.0
    budget = retry_sleep_budget()
    last_problem = ""
    for attempt in range(1, MAX_TRIES + 1):
        wait: float | None = None
        try:
            with get_session().stream(
                method, url, headers=headers, timeout=timeout, follow_redirects=True, params=params
            ) as response:
                if response.status_code in RETRY_STATUSES:
                    wait = _retry_after_seconds(response.headers)
                    last_problem = f"HTTP {response.status_code}"
                    if attempt == MAX_TRIES:
                        response.read()
                        _raise_for_status(response, repo_id=repo_id, filename=filename)
                else:
                    if response.status_code >= 400:
                        response.read()
                        _raise_for_status(response, repo_id=repo_id, filename=filename)
                    body, truncated = (b"", False) if method == "HEAD" else _read_capped(response, limit)
                    partial = response.status_code == 206
                    if byte_range is not None and not partial:
                        body = body[byte_range[0] :]
                        truncated = False
                    return Fetched(
                        status=response.status_code,
                        headers={k.lower(): v for k, v in response.headers.items()},
                        body=body,
                        url=str(response.url),
                        truncated=truncated,
                        history=tuple(r.status_code for r in response.history),
                    )
        except HfvramError:
            raise
        except hf_errors.OfflineModeIsEnabled:
            raise NetworkError(f"cannot reach the Hub for {_what(repo_id, filename)}: offline mode is on") from None
        except httpx2.TooManyRedirects:
            raise NetworkError(f"too many redirects while fetching {_what(repo_id, filename)}") from None
        except (httpx2.TransportError, httpx2.DecodingError, httpx2.StreamError) as err:
            last_problem = _transport_problem(err)
            if isinstance(err, httpx2.ConnectError) and attempt >= CONNECT_TRIES:
                break  # DNS failure / refused connection: the network is down, more tries only delay the fallback
        backoff = retry_base_seconds() * (2 ** (attempt - 1)) * (1 + random.random() / 4)
        sleep_for = backoff if wait is None else wait
        if attempt == MAX_TRIES or slept + sleep_for > budget:
            break
        time.sleep(sleep_for)
        slept += sleep_for
    raise NetworkError(
        f"could not fetch {_what(repo_id, filename)} from {hub_endpoint()}: {last_problem} "
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
    except (UnicodeDecodeError, ValueError) as err:
        raise MalformedFileError(f"not valid JSON ({err.__class__.__name__})", file=_what(repo_id, filename)) from None
