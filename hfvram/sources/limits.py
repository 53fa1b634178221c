"""Caps, deadlines and bounds for hostile input (``hfvram/data/limits.toml``), and reading local files safely.

Light on purpose (no HTTP stack): offline runs, the facts cache, ``calibrate`` and ``scan`` use it too.

- :func:`read_local_bytes`: a local file is opened without blocking (a FIFO cannot hang the open), must be a
  regular file (not ``/dev/zero``, a FIFO, a socket, a directory; links are followed to what they name), and
  is read up to a cap, never further.
- Deadlines: each HTTP request has a wall-clock deadline (``HFVRAM_REQUEST_DEADLINE``), and reading one model
  from the Hub has one for all its requests together (``HFVRAM_DEADLINE``), set with :func:`source_deadline`
  and carried to worker threads by ``contextvars``.
- :func:`checked_endpoint` turns a malformed ``HF_ENDPOINT`` into one usage error (shown through
  :func:`hfvram.redaction.redact`, which hides its user info and query).
- :class:`QuotaBudget`: the Hub's rate limits (fixed windows per bucket, hub-docs ``rate-limits.md``) as its
  answers state them, one budget for every thread of the process and, through a small locked state file in the
  facts cache's folder, every process: a request waits for the window to reset rather than be answered 429.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from hfvram.errors import HfvramError, MalformedFileError, ModelReadError, UsageError

KIB = 1024
MIB = 1024 * KIB


def _table() -> dict[str, Any]:
    from hfvram.datafiles import data_table

    return data_table("limits.toml")


def byte_cap(name: str) -> int:
    """``[bytes] name`` of limits.toml."""
    return int(_table()["bytes"][name])


def count_bound(name: str) -> int:
    """``[counts] name`` of limits.toml."""
    return int(_table()["counts"][name])


def size_words(n: int) -> str:
    """``16 MiB`` / ``4 KiB`` / ``100 bytes`` for a cap in a message."""
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} bytes"


# ---- local files ----------------------------------------------------------------------------------


def read_local_bytes(path: Path | str, cap: int, *, what: str | None = None, follow_links: bool = True) -> bytes:
    """The bytes of a regular file of at most ``cap`` bytes; a clean :class:`HfvramError` otherwise.

    Never blocks on a FIFO, never reads a device, never reads past ``cap`` (a file that grows while read is cut
    and refused). ``follow_links=False``: a symbolic link is refused (O_NOFOLLOW, and lstat where it is missing)."""
    name = what or str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
        if os.path.islink(path):
            raise ModelReadError("is a symbolic link: hfvram reads this file only as a regular file", file=name)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise ModelReadError("does not exist", file=name) from None
    except IsADirectoryError:
        raise ModelReadError("is a directory, not a file", file=name) from None
    except OSError as err:
        if err.errno == errno.ELOOP and not follow_links:
            raise ModelReadError(
                "is a symbolic link: hfvram reads this file only as a regular file", file=name
            ) from None
        raise ModelReadError(f"cannot be opened ({err.strerror or type(err).__name__})", file=name) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ModelReadError(f"is not a regular file ({_kind(info.st_mode)})", file=name)
        if info.st_size > cap:
            raise MalformedFileError(f"larger than the {size_words(cap)} cap for this file", file=name)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        chunks: list[bytes] = []
        received = 0
        while received <= cap:
            chunk = os.read(fd, min(MIB, cap + 1 - received))
            if not chunk:
                break
            chunks.append(chunk)
            received += len(chunk)
        if received > cap:
            raise MalformedFileError(f"larger than the {size_words(cap)} cap for this file", file=name)
        return b"".join(chunks)
    except HfvramError:  # a read error is an OSError too (like huggingface_hub's): ours pass through as they are
        raise
    except OSError as err:
        raise ModelReadError(f"cannot be read ({err.strerror or type(err).__name__})", file=name) from None
    finally:
        os.close(fd)


def read_local_text(
    path: Path | str, cap: int, *, what: str | None = None, errors: str = "strict", follow_links: bool = True
) -> str:
    """:func:`read_local_bytes` decoded as UTF-8 (a BOM is dropped)."""
    name = what or str(path)
    data = read_local_bytes(path, cap, what=name, follow_links=follow_links)
    try:
        return data.decode("utf-8-sig", errors=errors)
    except UnicodeDecodeError:
        raise MalformedFileError("not UTF-8 text", file=name) from None


def read_stream_text(stream: IO[Any], cap: int, *, what: str = "standard input", errors: str = "strict") -> str:
    """At most ``cap`` bytes of an open stream (stdin) as UTF-8 text; more is refused, not read."""
    raw = getattr(stream, "buffer", stream)
    data = raw.read(cap + 1)
    if isinstance(data, str):
        data = data.encode("utf-8", errors="surrogateescape")
    if len(data) > cap:
        raise MalformedFileError(f"larger than the {size_words(cap)} cap", file=what)
    try:
        return data.decode("utf-8-sig", errors=errors)
    except UnicodeDecodeError:
        raise MalformedFileError("not UTF-8 text", file=what) from None


def read_user_file(path: str, cap: int, *, what: str, errors: str = "strict", follow_links: bool = True) -> str:
    """A file named on the command line (``-`` = standard input: a scan list, a log) as text, capped; every
    problem — missing, a folder, a device or FIFO, over the cap, not UTF-8, a link with ``follow_links=False`` —
    is one usage error (exit 2)."""
    import sys

    try:
        if path == "-":
            return read_stream_text(sys.stdin, cap, what=f"{what} on standard input", errors=errors)
        if not os.path.lexists(path):
            raise UsageError(f"{what} not found: {path}")
        return read_local_text(path, cap, what=path, errors=errors, follow_links=follow_links)
    except UsageError:
        raise
    except HfvramError as err:
        raise UsageError(f"{what}: {err}") from None


def is_regular_file(path: Path | str) -> bool:
    """True for a regular file (links followed); False for devices, FIFOs, sockets, folders, nothing."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _kind(mode: int) -> str:
    for test, word in (
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return word
    return "not a plain file"


# ---- deadlines ------------------------------------------------------------------------------------


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise UsageError(f"{name}={raw!r} must be a positive number of seconds")
    return value


def request_deadline_seconds() -> float:
    """Wall-clock seconds one request may take (HFVRAM_REQUEST_DEADLINE, default from limits.toml)."""
    return _env_seconds("HFVRAM_REQUEST_DEADLINE", float(_table()["deadline"]["request_seconds"]))


def source_deadline_seconds() -> float:
    """Wall-clock seconds reading one model may take (HFVRAM_DEADLINE, default from limits.toml)."""
    return _env_seconds("HFVRAM_DEADLINE", float(_table()["deadline"]["source_seconds"]))


#: [monotonic time the current source must be read by, its length in seconds]; None outside a source. A list, so
#: that time spent waiting for the Hub's rate limit moves it for every thread reading the same source.
_SOURCE_DEADLINE: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "hfvram_source_deadline", default=None
)


@contextlib.contextmanager
def source_deadline(seconds: float | None = None) -> Iterator[None]:
    """Every request made inside (in this thread, or in threads started with a copy of its context) ends by
    ``seconds`` from now; an enclosing, earlier deadline stays in force."""
    length = source_deadline_seconds() if seconds is None else seconds
    until = time.monotonic() + length
    outer = _SOURCE_DEADLINE.get()
    if outer is not None and outer[0] < until:
        until, length = outer
    token = _SOURCE_DEADLINE.set([until, length])
    try:
        yield
    finally:
        _SOURCE_DEADLINE.reset(token)


def current_source_deadline() -> tuple[float, float] | None:
    held = _SOURCE_DEADLINE.get()
    return (held[0], held[1]) if held is not None else None


def extend_source_deadline(seconds: float) -> None:
    """Move the current source's deadline ``seconds`` later: time spent waiting for the Hub's rate-limit window
    is the Hub's, not the source's."""
    held = _SOURCE_DEADLINE.get()
    if held is not None and seconds > 0:
        held[0] += seconds


# ---- the Hub endpoint -----------------------------------------------------------------------------------------


#: endpoints already found valid (raw value -> checked value): every request checks HF_ENDPOINT, a scan thousands of
#: times; a malformed one is never kept, so it fails every time
_VALID_ENDPOINTS: dict[str, str] = {}


def checked_endpoint(raw: str) -> str:
    """``raw`` (HF_ENDPOINT) when it is an http(s) URL with a host and a valid port; else one usage error
    that shows the value redacted."""
    known = _VALID_ENDPOINTS.get(raw)
    if known is not None:
        return known
    from urllib.parse import urlsplit

    value = raw.strip().rstrip("/")
    from hfvram.redaction import redact

    shown = redact(value)
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError:
        raise UsageError(f"HF_ENDPOINT {shown} is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise UsageError(f"HF_ENDPOINT {shown} is not an http(s) URL with a host name")
    if any(ch.isspace() or ord(ch) < 32 for ch in value):
        raise UsageError(f"HF_ENDPOINT {shown} contains spaces or control characters")
    if len(_VALID_ENDPOINTS) < 16:
        _VALID_ENDPOINTS[raw] = value
    return value


def validate_endpoint_env() -> None:
    """Check HF_ENDPOINT before huggingface_hub's HTTP modules read it (a bad one makes their import print), and
    the token variables (a header must be ASCII: a non-ASCII token would fail inside the HTTP client)."""
    raw = os.environ.get("HF_ENDPOINT")
    if raw:
        checked_endpoint(raw)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        check_token(os.environ.get(name), name)


def check_token(token: str | None, origin: str = "--token") -> None:
    """UsageError (the value never shown) for a token that cannot be sent in a header: not printable ASCII, or
    longer than any the Hub issues."""
    if token is None:
        return
    if len(token) > 4096 or not all(" " < char < "\x7f" for char in token.strip()):
        raise UsageError(f"{origin} is not a token (printable ASCII without spaces expected); its value is not shown")


# ---- the Hub's rate limits ---------------------------------------------------------------------------------


#: a window (or a wait for one to reset) longer than this is not believed (the Hub's are 300 s): a hostile answer
#: cannot hold a request back longer
LONGEST_WINDOW = 900.0


#: set by ``hfvram scan`` (its worker processes inherit it): a read chooses between the resolver and the API by what
#: each costs of its bucket's quota (``hub_resolver``); a single check reads through the resolver wherever it can
_PRICED_BY_QUOTA = [False]


def price_by_quota(on: bool) -> None:
    _PRICED_BY_QUOTA[0] = on


def priced_by_quota() -> bool:
    return _PRICED_BY_QUOTA[0]


def _say(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


class QuotaBudget:
    """The requests left in each bucket's window as the Hub last stated them (``RateLimit: "api";r=…;t=…``,
    ``RateLimit-Policy: …;q=…;w=…``), less those sent since. :meth:`before` holds a request back while its
    bucket has none left, until the window resets; :meth:`after` reads each answer's figures. With a ``path``,
    the state lives in that file under an exclusive lock, so that every process of a scan (and any other hfvram
    process on the same Hub and token) spends one budget; without one, or where the file cannot be used, in this
    process. Times in the state are wall-clock seconds (shared between processes)."""

    def __init__(self, path: Path | None = None, *, say: Callable[[str], None] = _say) -> None:
        self.path = path
        self.say = say
        self._lock = threading.Lock()
        self._state: dict[str, dict[str, Any]] = {}
        self._fd: int | None = None
        self._fd_pid = 0
        #: whether a quota is known (stated by an answer, or found in the state file): until then a request costs
        #: no bookkeeping (a Hub that states no limits pays nothing for them)
        self._active: bool | None = None

    # -- state ---------------------------------------------------------------------------------------------
    def _open(self) -> int | None:
        if self.path is None:
            return None
        if self._fd is not None and self._fd_pid == os.getpid():
            return self._fd
        try:  # one descriptor per process: flock is per open file, and a forked child shares its parent's
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
            self._fd_pid = os.getpid()
        except OSError:
            self.path = None
            return None
        return self._fd

    @contextlib.contextmanager
    def _held(self) -> Iterator[dict[str, dict[str, Any]]]:
        with self._lock:
            fd = self._open()
            if fd is None:
                yield self._state
                return
            try:
                import fcntl
            except ImportError:  # pragma: no cover - no flock (Windows): this process only
                self.path = None
                yield self._state
                return
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                raw = os.pread(fd, 64 * KIB, 0)
                try:
                    loaded = json.loads(raw) if raw else {}
                except ValueError:
                    loaded = {}
                state = {k: v for k, v in loaded.items() if isinstance(v, dict)} if isinstance(loaded, dict) else {}
                yield state
                data = json.dumps(state, separators=(",", ":")).encode()
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    # -- requests ------------------------------------------------------------------------------------------
    def before(self, bucket: str | None) -> float:
        """Count one request of ``bucket``, first waiting while its window has no request left (saying on stderr,
        once a window, what it waits for and how long); returns the seconds waited."""
        if bucket is None:
            return 0.0
        if self._active is None:  # once per process: does the state file (another process) know a quota?
            self._active = self.path is not None and self.path.is_file() and b'"q"' in self._peek()
        if not self._active:
            return 0.0
        waited = 0.0
        while True:
            with self._held() as state:
                entry = state.setdefault(bucket, {"sent": 0})
                now = time.time()
                reset = float(entry.get("reset") or 0.0)
                left = entry.get("r")
                if reset and now >= reset:  # that window is over: a fresh one, with the whole quota
                    left = entry.get("q")
                    entry["r"], entry["reset"], reset = left, 0.0, 0.0
                if left is None or left > 0 or not reset:
                    if isinstance(left, int):
                        entry["r"] = left - 1
                    entry["sent"] = int(entry.get("sent") or 0) + 1
                    return waited
                pause = min(reset - now, LONGEST_WINDOW) + 0.05
                announce = entry.get("announced") != reset
                entry["announced"] = reset
            if announce:
                quota, window = entry.get("q"), entry.get("w")
                rule = f" ({quota} requests per {window:g} s)" if quota and window else ""
                self.say(
                    f"hfvram: the Hub's {bucket!r} rate limit{rule} is spent for this window; waiting {pause:.{1 if pause < 10 else 0}f} s "
                    "for it to reset"
                )
            time.sleep(pause)
            waited += pause

    def _peek(self) -> bytes:
        try:
            with open(self.path, "rb") as fh:  # type: ignore[arg-type]
                return fh.read(64 * KIB)
        except OSError:
            return b""

    def after(self, bucket: str, left: int, reset_in: float, quota: int | None, window: float | None) -> None:
        """What an answer states of ``bucket``: ``left`` requests, the window resets in ``reset_in`` seconds."""
        self._active = True
        # no longer than the window the answer states (a reset after the window's end is not believed)
        reset_in = min(max(0.0, reset_in), float(window) if window else LONGEST_WINDOW, LONGEST_WINDOW)
        with self._held() as state:
            entry = state.setdefault(bucket, {"sent": 0})
            now = time.time()
            new_reset = now + reset_in
            known = float(entry.get("reset") or 0.0)
            old_left = entry.get("r")
            if known and now < known and new_reset <= known + 1.0:  # the same window: the tighter of both
                entry["r"] = min(left, old_left) if isinstance(old_left, int) else left
                entry["reset"] = min(known, new_reset)  # t is whole seconds: the earliest bound is the closest
            else:
                entry["r"], entry["reset"] = left, new_reset
            if quota:
                entry["q"] = quota
            if window:
                entry["w"] = min(float(window), LONGEST_WINDOW)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Each bucket's state: ``r`` left, ``reset`` (wall clock), ``q``, ``w``, ``sent`` (requests counted)."""
        with self._held() as state:
            return {k: dict(v) for k, v in state.items()}


__all__ = [
    "QuotaBudget",
    "byte_cap",
    "checked_endpoint",
    "count_bound",
    "current_source_deadline",
    "extend_source_deadline",
    "is_regular_file",
    "price_by_quota",
    "priced_by_quota",
    "read_local_bytes",
    "read_local_text",
    "read_stream_text",
    "read_user_file",
    "request_deadline_seconds",
    "source_deadline",
    "source_deadline_seconds",
    "validate_endpoint_env",
]
