"""Reading a model from the Hub with as few round trips and bytes as possible.

Wave 1 (parallel): one model-info call (``expand``: sha, siblings, gated, safetensors) and config.json by
``resolve/<revision>``; a repo is sized from these alone (the Hub's exact per-dtype counts, split over
components like the config shapes; a quantized repo's parameters counted unpacked from those shapes). Wave 2
(parallel): companion quantization files where the repo has them, and — only for the per-tensor split, or when
the Hub gives no per-dtype counts — the safetensors headers (one Range per shard, sized from the header the
config shapes predict, continued — never restarted — when a header is longer).
GGUF files are read with growing Range windows up to the end of their tensor infos. Everything read is
stored in the facts cache under the commit sha, so checking the same repo again makes no request.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar, cast
from urllib.parse import quote

from huggingface_hub import hf_hub_url

from hfvram.errors import (
    GgufRepoWithoutSelector,
    HfvramError,
    MalformedFileError,
    ModelReadError,
    RepoNotFoundError,
    UnsupportedLayoutError,
)
from hfvram.sources.cache import FactsCache, is_commit_sha
from hfvram.sources.facts import (
    COMPANION_FILES,
    INDEX_FILE,
    CheckpointFacts,
    gguf_header_from_json,
    gguf_header_to_json,
    spec_from_facts,
)
from hfvram.sources.http import (
    GGUF_HEADER_CAP,
    KIB,
    SAFETENSORS_HEADER_CAP,
    EntryMissingError,
    fetch,
    fetch_json,
    hub_endpoint,
)
from hfvram.sources.rangestream import RangeStream
from hfvram.sources.repo_files import (
    _WEIGHT_SUFFIXES_UNSUPPORTED,
    MODEL_INFO,
    RepoInfo,
    check_file_counts,
    gguf_files,
    quant_tags,
    safetensors_shards,
)
from hfvram.spec import LoadedModel, SourceInfo

EXPAND = ("sha", "siblings", "gated", "safetensors")
EXPAND_QUERY = "&".join(f"expand={field}" for field in EXPAND)
#: first Range of a safetensors file: holds the whole header of most single-file checkpoints and dense
#: shards; a longer header (large MoE shards) is continued with one more Range
FIRST_HEADER_RANGE = 32 * KIB
SINGLE_FILE = "model.safetensors"
PARALLEL = 16

T = TypeVar("T")


# ---- single requests ------------------------------------------------------------------------------


def fetch_repo_info(repo_id: str, revision: str | None, token: str | None) -> RepoInfo:
    listed = _LISTED.pop(repo_id, None) if revision is None else None
    if listed is not None:  # read from the owner's listing at the start of a scan: no request
        return listed
    url = model_api_url(repo_id) if revision is None else model_api_url(repo_id, "revision", revision)
    # the query as httpx would encode params={"expand": EXPAND}, written out: the URL is parsed once, not twice
    data, _ = fetch_json(f"{url}?{EXPAND_QUERY}", token=token, repo_id=repo_id, filename=None)
    return repo_info_from(data, repo_id, where=f"{repo_id} (Hub model info)")


def repo_info_from(data: object, repo_id: str, *, where: str) -> RepoInfo:
    """A model info (or one entry of a listing) with ``sha``, ``siblings``, ``gated``, ``safetensors`` expanded."""
    if not isinstance(data, dict) or not is_commit_sha(data.get("sha")):
        raise MalformedFileError("model info without a commit sha", file=where)
    siblings = data.get("siblings") or []
    if not isinstance(siblings, list):
        raise MalformedFileError("siblings is not a list", file=where)
    files = tuple(s["rfilename"] for s in siblings if isinstance(s, dict) and isinstance(s.get("rfilename"), str))
    safetensors = data.get("safetensors")
    params = safetensors.get("parameters") if isinstance(safetensors, dict) else None
    if not (isinstance(params, dict) and params and all(isinstance(v, int) for v in params.values())):
        params = None
    elif any(isinstance(v, bool) or v < 0 for v in params.values()):
        bad = next(k for k, v in params.items() if isinstance(v, bool) or v < 0)
        raise MalformedFileError(
            f"{str(bad)[:40]!r} is {str(params[bad])[:40]}, not an element count",
            file=where,
            field="safetensors.parameters",
        )
    elif sum(params.values()) == 0:
        params = None  # no elements at all says nothing: the headers are read instead
    return RepoInfo(repo_id, data["sha"], files, data.get("gated", False), params)


# ---- owners' listings ----------------------------------------------------------------------------

#: model infos read from owners' listings (repo id -> its model info at main), each used once in place of a
#: model-info request
_LISTED: dict[str, RepoInfo] = {}
#: an owner with fewer repos than this in a scan gets one model-info request per repo (a listing page of an owner
#: with thousands of repos may hold none of them); the scan applies the same bound before loading this module
LISTING_MIN_REPOS = 8
#: repos a listing page asks for (the Hub's largest page)
LISTING_PAGE = 1000
#: pages of one owner's listing read at most
LISTING_PAGES = 50
LISTING_EXPAND = ("sha", "siblings", "gated", "safetensors")


#: the listing's sorts as ``models --hub --sort`` names them
HUB_SORTS = {"downloads": "downloads", "likes": "likes", "trending": "trendingScore"}


def list_hub_models(
    *,
    author: str | None,
    search: str | None,
    filters: Sequence[str],
    sort: str,
    limit: int,
    token: str | None,
) -> list[RepoInfo]:
    """The Hub's own listing (``GET /api/models`` with author, search, filter, sort, ``expand[]`` sha, siblings,
    gated, safetensors), in its order, at most ``limit`` repos (pages of up to 1,000, followed by their ``Link``
    only on the Hub's host). Each model info is kept for the reading of that repo that follows (no model-info
    request); an entry that does not parse is left out."""
    import re

    endpoint = hub_endpoint().rstrip("/")
    params: Mapping[str, object] | None = {
        k: v
        for k, v in {
            "author": author,
            "search": search,
            "filter": list(filters) or None,
            "sort": HUB_SORTS[sort],
            "direction": "-1",
            "limit": str(min(limit, LISTING_PAGE)),
            "expand[]": list(LISTING_EXPAND),
        }.items()
        if v
    }
    url: str | None = f"{endpoint}/api/models"
    found: list[RepoInfo] = []
    seen: set[str] = set()
    for _ in range(min(LISTING_PAGES, -(-limit // LISTING_PAGE) + 1)):
        if url is None or len(found) >= limit:
            break
        data, answer = fetch_json(url, token=token, repo_id=None, filename="the Hub's model listing", params=params)
        if not isinstance(data, list):
            raise MalformedFileError("the model listing is not a list", file="the Hub's model listing")
        for entry in data[:LISTING_PAGE]:
            name = entry.get("id") if isinstance(entry, dict) else None
            if not isinstance(name, str) or name in seen or len(found) >= limit:
                continue
            try:
                info = repo_info_from(entry, name, where=f"{name} (the Hub's model listing)")
            except HfvramError:
                continue
            seen.add(name)
            found.append(info)
            _LISTED[name] = info
        link = re.search(r'<([^>]{1,4000})>\s*;\s*rel="?next"?', str(answer.headers.get("link", ""))[:8000])
        url, params = (link[1], None) if link and link[1].startswith(endpoint + "/") else (None, None)
    return found


def listed_info(repo_id: str) -> RepoInfo | None:
    """The model info an owner's listing gave ``repo_id`` (at main), if any, without using it up."""
    return _LISTED.get(repo_id)


def forget_listed(repo_id: str) -> None:
    """Drop the listing's model info of ``repo_id`` (a scan answered it from the listing alone)."""
    _LISTED.pop(repo_id, None)


def read_owner_listings(repo_ids: Sequence[str], token: str | None) -> int:
    """Read the listing (``GET /api/models?author=…`` with ``expand[]`` sha, siblings, gated, safetensors: the
    model info of up to 1,000 repos a request) of each owner with at least ``LISTING_MIN_REPOS`` of ``repo_ids``,
    for as long as it pays: while fewer pages were read than half the owner's repos still missing. What it finds
    of ``repo_ids`` answers their model info without a request; a listing that fails costs nothing but its
    requests (each repo then asks for its own model info). Returns the listing requests sent."""
    import re

    owners: dict[str, set[str]] = {}
    for repo_id in repo_ids:
        owners.setdefault(repo_id.split("/", 1)[0], set()).add(repo_id)
    endpoint = hub_endpoint().rstrip("/")
    sent = 0
    for owner, wanted in owners.items():
        if len(wanted) < LISTING_MIN_REPOS:
            continue
        missing = set(wanted) - _LISTED.keys()  # (those a listing already answered need nothing more)
        url: str | None = f"{endpoint}/api/models"
        params: Mapping[str, object] | None = {
            "author": owner,
            "limit": str(LISTING_PAGE),
            "expand[]": list(LISTING_EXPAND),
        }
        pages = 0
        while url is not None and missing and pages < LISTING_PAGES and pages < max(1, len(missing) // 2):
            try:
                data, answer = fetch_json(url, token=token, repo_id=None, filename=f"listing of {owner}", params=params)
            except HfvramError:
                break
            pages += 1
            sent += 1
            if not isinstance(data, list):
                break
            for entry in data[:LISTING_PAGE]:
                name = entry.get("id") if isinstance(entry, dict) else None
                if not isinstance(name, str) or name not in missing:
                    continue
                try:
                    _LISTED[name] = repo_info_from(entry, name, where=f"{name} (Hub listing of {owner})")
                except HfvramError:
                    continue  # that repo asks for its own model info
                missing.discard(name)
            link = re.search(r'<([^>]{1,4000})>\s*;\s*rel="?next"?', str(answer.headers.get("link", ""))[:8000])
            url, params = (link[1], None) if link and link[1].startswith(endpoint + "/") else (None, None)
    return sent


def model_api_url(repo_id: str, kind: str | None = None, revision: str | None = None) -> str:
    """``/api/models/<repo_id>[/<kind>/<revision>]`` as huggingface_hub's ``HfApi.model_info`` builds it: the id
    checked first (``resolve.check_repo_id``: no ``..``, no third segment), the revision quoted whole (``refs/pr/1``
    is ``refs%2Fpr%2F1``, one path segment, as the Hub reads it), so no input names another endpoint."""
    from hfvram.sources.resolve import check_repo_id, check_revision

    check_repo_id(repo_id)
    base = f"{hub_endpoint().rstrip('/')}/api/models/{quote(repo_id, safe='/')}"
    if kind is None or revision is None:
        return base
    check_revision(revision)
    return f"{base}/{kind}/{quote(revision, safe='')}"


def file_url(repo_id: str, revision: str, filename: str) -> str:
    """``<repo_id>/resolve/<revision>/<filename>`` by huggingface_hub's ``hf_hub_url`` (the revision quoted whole,
    the file name's parts quoted); the id and revision checked, and a file name a listing sent with an empty, ``.``
    or ``..`` part refused (such a path would be read as another URL of the Hub)."""
    from hfvram.sources.resolve import check_repo_id, check_revision

    check_repo_id(repo_id)
    check_revision(revision)
    if any(part in ("", ".", "..") for part in filename.split("/")):
        raise MalformedFileError("a file name with an empty, '.' or '..' part", file=filename[:80])
    return hf_hub_url(repo_id, filename, revision=revision, endpoint=hub_endpoint())


def fetch_text(repo_id: str, revision: str, filename: str, token: str | None) -> tuple[str, str | None]:
    """A small JSON file's text (capped at 16 MiB) and the commit the Hub served it from."""
    from hfvram.sources.http import JSON_CAP

    answer = fetch(file_url(repo_id, revision, filename), token=token, cap=JSON_CAP, repo_id=repo_id, filename=filename)
    if answer.truncated:
        raise MalformedFileError("larger than the 16 MiB cap for JSON files", file=filename)
    try:
        text = answer.body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise MalformedFileError("not UTF-8 text", file=filename) from None
    return text, answer.headers.get("x-repo-commit")


def _fetch_text_only(repo_id: str, revision: str, filename: str, token: str | None) -> str:
    """The text of :func:`fetch_text`, without the commit it was served from."""
    return fetch_text(repo_id, revision, filename, token)[0]


def ranged_reader(
    repo_id: str,
    sha: str,
    filename: str,
    token: str | None,
    cap: int,
    sizes: list[int] | None = None,
    commits: list[str] | None = None,
) -> Callable[[int, int], bytes]:
    """``read(offset, length)`` by HTTP Range. After the first answer, later Ranges go straight to the URL the
    Hub redirected to (the CDN), saving the redirect round trip; on failure there, back to ``resolve``.
    ``sizes``: gets the file's whole size each answer states (``Content-Range: bytes a-b/SIZE``); ``commits``: the
    commit each answer was served from (``X-Repo-Commit``), when it says one."""
    resolve = file_url(repo_id, sha, filename)
    target = [resolve]

    def read(offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        if offset + length > cap:
            raise MalformedFileError(f"header extends past the {cap} byte read cap", file=filename)
        span = (offset, offset + length - 1)
        try:
            answer = fetch(target[0], token=token, cap=cap, byte_range=span, repo_id=repo_id, filename=filename)
        except HfvramError:
            if target[0] == resolve:
                raise
            target[0] = resolve  # the redirect may have expired
            answer = fetch(resolve, token=token, cap=cap, byte_range=span, repo_id=repo_id, filename=filename)
        if answer.history:
            target[0] = answer.url
        if commits is not None and answer.commit:
            commits.append(answer.commit)
        total = str(answer.headers.get("content-range", "")).rpartition("/")[2]
        if sizes is not None and total.isdigit() and len(total) <= 20:
            sizes.append(int(total))
        return answer.body

    return read


def fetch_safetensors_header(
    repo_id: str,
    sha: str,
    filename: str,
    token: str | None,
    first: int = FIRST_HEADER_RANGE,
    commits: list[str] | None = None,
) -> dict[str, object]:
    """The header's facts (``facts.header_facts``: its tensor table, never its text): one Range of ``first``
    bytes, then one more Range for the rest if the header is longer. Tensors running past the file's size as the
    answers state it (``Content-Range``) are a read error (``commits``: see :func:`ranged_reader`)."""
    from hfvram.readers.safetensors import header_json, header_length, header_text
    from hfvram.sources.facts import header_facts

    sizes: list[int] = []
    read = ranged_reader(repo_id, sha, filename, token, SAFETENSORS_HEADER_CAP, sizes, commits)
    head = read(0, min(first, SAFETENSORS_HEADER_CAP))
    length = header_length(head[:8], filename=filename)
    if 8 + length > len(head):
        if len(head) < first:
            raise MalformedFileError(f"file ends inside its {length}-byte header", file=filename, field="header")
        head = head[8:] + read(len(head), 8 + length - len(head))  # (one copy of a long header, not two)
    else:
        head = head[8 : 8 + length]
    if len(head) < length:
        raise MalformedFileError(f"truncated: header needs {length} bytes, got {len(head)}", file=filename)
    data_bytes = sizes[0] - 8 - length if sizes else None
    if data_bytes is not None and data_bytes < 0:
        raise MalformedFileError(f"the {length}-byte header runs past the file's end ({sizes[0]} bytes)", file=filename)
    text = header_text(head[:length], filename)
    del head  # (from here the header is held once: as text, then parsed)
    parsed = header_json(text, filename)
    del text
    return header_facts(parsed, filename=filename, length=length, data_bytes=data_bytes)


def fetch_gguf_header(repo_id: str, sha: str, filename: str, token: str | None, commits: list[str] | None = None):
    """Parse a GGUF header from growing Range windows; returns (header, bytes fetched) (``commits``: see
    :func:`ranged_reader`)."""
    from hfvram.readers.gguf import read_gguf_header

    stream = RangeStream(
        ranged_reader(repo_id, sha, filename, token, GGUF_HEADER_CAP, commits=commits),
        filename=filename,
        cap=GGUF_HEADER_CAP,
    )
    return read_gguf_header(stream, filename=filename), stream.bytes_fetched


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_POOL_WORKERS = [PARALLEL]


def set_parallel_workers(workers: int) -> None:
    """Size of the one thread pool every concurrent read of the process shares (a scan sets it to its
    jobs, so that each job's requests run side by side); takes effect before the pool's first use."""
    _POOL_WORKERS[0] = max(1, workers)


def _forget_pool() -> None:
    """In a forked child: the parent's pool object has no threads here, so start a fresh one on first use."""
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(max_workers=_POOL_WORKERS[0], thread_name_prefix="hfvram-read")
    return _POOL


def in_parallel(jobs: Mapping[str, Callable[[], T]]) -> dict[str, T]:
    """Run jobs side by side: the first in the calling thread, the others in the process's shared pool (no
    executor per call); the first HfvramError (in job order) is raised after all finished."""
    if not jobs:
        return {}
    items = list(jobs.items())
    if len(items) == 1:
        ((name, job),) = items
        return {name: job()}
    # each job runs in a copy of this context: the model's deadline (HFVRAM_DEADLINE) applies in the threads
    futures = {name: _pool().submit(contextvars.copy_context().run, job) for name, job in items[1:]}
    results: dict[str, T] = {}
    first_error: BaseException | None = None
    name, job = items[0]
    try:
        results[name] = job()
    except BaseException as err:
        first_error = err
    for name, future in futures.items():
        try:
            results[name] = future.result()
        except BaseException as err:
            first_error = first_error or err
    if first_error is not None:
        raise first_error
    return {name: results[name] for name, _ in items}


# ---- picking files -------------------------------------------------------------------------------

# ---- loading -------------------------------------------------------------------------------------


def _cached_or(cache: FactsCache | None, repo_id: str, sha: str | None, name: str) -> object | None:
    return cache.get(repo_id, sha, name) if cache is not None and sha else None


def _first_wave(
    repo_id: str,
    revision: str | None,
    at: str,
    token: str | None,
    need_info: bool,
    need_config: bool,
    need_split: bool,
) -> dict[str, object]:
    """What the cache does not hold, read in parallel: the model info (of ``revision``), config.json at ``at``, and
    with ``need_split`` the header of model.safetensors."""
    wave1: dict[str, Callable[[], object]] = {}
    if need_info:
        wave1["info"] = lambda: fetch_repo_info(repo_id, revision, token)
    if need_config:
        wave1["config"] = lambda: file_or_none(repo_id, at, "config.json", token)
    if need_split and need_info:
        # Most single-file checkpoints are named model.safetensors: asking for its header now, next to the
        # model info, saves a whole wave; a sharded repo answers a cheap EntryNotFound.
        wave1[SINGLE_FILE] = lambda: header_or_none(repo_id, at, SINGLE_FILE, token)
    return in_parallel(wave1)


def _config_at_commit(
    got: dict[str, object], repo_id: str, rev: str, info: RepoInfo, token: str | None, cache: FactsCache | None
) -> str:
    """config.json from the first wave, read again at the model info's commit when the branch moved between the
    two calls (the single-file header read with it is then dropped from ``got``); a repo without one raises."""
    if got["config"] is None:
        error = _no_config(repo_id, info)
        if isinstance(error, GgufRepoWithoutSelector) and cache is not None:
            cache.store(repo_id, rev, info.sha, {MODEL_INFO: info.to_json()})  # the repo is listed next
        raise error
    served_from: str | None
    config_text, served_from = cast("tuple[str, str | None]", got["config"])
    if served_from and served_from != info.sha:  # the branch moved between the two calls
        config_text, _ = fetch_text(repo_id, info.sha, "config.json", token)
        got.pop(SINGLE_FILE, None)
    return config_text


def _safetensors_shards(repo_id: str, info: RepoInfo) -> list[str]:
    """The repo's safetensors shards (counts checked); a repo with only pickled weights is refused."""
    shards = safetensors_shards(info.files)
    check_file_counts(shards, kind="safetensors", where=f"{repo_id} (Hub model info)")
    if not shards and not [f for f in info.files if f.endswith(".safetensors")]:
        unsupported = [f for f in info.files if f.endswith(_WEIGHT_SUFFIXES_UNSUPPORTED) and "/" not in f]
        if unsupported:
            raise UnsupportedLayoutError(
                f"{repo_id} ships its weights only as {', '.join(sorted({f.rsplit('.', 1)[-1] for f in unsupported}))} "
                "files (pickled PyTorch); hfvram reads safetensors or GGUF checkpoints"
            )
    return shards


def _second_wave(
    repo_id: str,
    sha: str,
    token: str | None,
    config_text: str,
    shards: list[str],
    companions: dict[str, object | None],
    headers: dict[str, object | None],
    want_index: bool,
) -> dict[str, object]:
    """Every fact not cached yet, read at ``sha`` in parallel: companions, missing shard headers, the index."""
    wave2: dict[str, Callable[[], object]] = {}
    for name, text in companions.items():
        if text is None:
            wave2[name] = partial(_fetch_text_only, repo_id, sha, name, token)
    missing_headers = [shard for shard, text in headers.items() if text is None]
    first = _first_ranges(config_text, shards) if missing_headers else {}
    for shard in missing_headers:
        wave2[shard] = partial(fetch_safetensors_header, repo_id, sha, shard, token, first[shard])
    if want_index:
        wave2[INDEX_FILE] = lambda: _index_summary(fetch_text(repo_id, sha, INDEX_FILE, token)[0])
    return in_parallel(wave2)


def load_hub_checkpoint(
    repo_id: str, *, revision: str | None, token: str | None, need_split: bool, cache: FactsCache | None
) -> LoadedModel:
    """A safetensors repo: config.json (+ companions) and weights facts, in at most two waves."""
    rev = revision or "main"
    sha = cache.resolve(repo_id, rev) if cache is not None else None
    info_json = _cached_or(cache, repo_id, sha, MODEL_INFO)
    listed = _LISTED.pop(repo_id, None) if info_json is None and revision is None else None
    if listed is not None:  # the owner's listing gave the model info: config.json is asked for at its commit
        sha, info_json = listed.sha, listed.to_json()
    config_text = _cached_or(cache, repo_id, sha, "config.json")
    resolver_read: tuple[str, str] | None = None
    if not isinstance(info_json, dict) or info_json.get("partial"):
        from hfvram.sources.hub_resolver import read_checkpoint

        loaded, resolver_read = read_checkpoint(repo_id, revision, token, cache, need_split, info_json, config_text)
        if loaded is not None:
            return loaded
        info_json = None  # a layout only the model info answers (config.json read at the commit the resolver said)
        config_text = resolver_read[0] if resolver_read else config_text

    need_info, need_config = info_json is None, config_text is None
    probe = need_split and resolver_read is None  # the resolver found no model.safetensors
    got = _first_wave(repo_id, revision, sha or rev, token, need_info, need_config, probe)
    info = got["info"] if "info" in got else RepoInfo.from_json(repo_id, info_json)  # type: ignore[arg-type]
    assert isinstance(info, RepoInfo)
    if "config" in got:
        config_text = _config_at_commit(got, repo_id, rev, info, token, cache)
    elif resolver_read is not None and resolver_read[1] != info.sha:  # the branch moved since the resolver read
        config_text = fetch_text(repo_id, info.sha, "config.json", token)[0]
    sha = info.sha
    assert isinstance(config_text, str)

    companion_names = [n for n in COMPANION_FILES if n in info.files]
    companions = {n: _cached_or(cache, repo_id, sha, n) for n in companion_names}
    shards = _safetensors_shards(repo_id, info)
    want_headers = bool(shards) and (need_split or not info.dtype_parameters)
    headers = {s: _cached_or(cache, repo_id, sha, s) for s in shards} if want_headers else {}
    if SINGLE_FILE in headers and headers[SINGLE_FILE] is None and got.get(SINGLE_FILE):
        headers[SINGLE_FILE] = got[SINGLE_FILE]
    want_index = not shards and INDEX_FILE in info.files
    index_meta = _cached_or(cache, repo_id, sha, INDEX_FILE) if want_index else None

    want_index_read = want_index and index_meta is None
    fetched = _second_wave(repo_id, sha, token, config_text, shards, companions, headers, want_index_read)
    for name in companions:
        companions[name] = companions[name] if companions[name] is not None else fetched[name]
    for shard in headers:
        headers[shard] = headers[shard] if headers[shard] is not None else fetched[shard]
    if INDEX_FILE in fetched:
        index_meta = fetched[INDEX_FILE]

    return _checkpoint_model(repo_id, rev, info, config_text, companions, headers, index_meta, cache)


def _checkpoint_model(
    repo_id: str,
    rev: str,
    info: RepoInfo,
    config_text: str,
    companions: Mapping[str, object],
    headers: Mapping[str, object],
    index_meta: object,
    cache: FactsCache | None,
) -> LoadedModel:
    """The spec from the facts read at ``info.sha``, stored in the facts cache in one write (the ref and every
    fact read at its commit)."""
    sha = info.sha
    facts = CheckpointFacts(
        config_text=config_text,
        companions=companions,  # type: ignore[arg-type]
        headers=headers,  # type: ignore[arg-type]
        dtype_parameters=None if headers else info.dtype_parameters,
        index_metadata=index_meta,  # type: ignore[arg-type]
        origin=f"{repo_id}@{sha[:12]}",
    )
    spec = spec_from_facts(facts, cache)  # before caching: facts that do not parse are not kept
    if cache is not None:
        cache.store(
            repo_id,
            rev,
            sha,
            {MODEL_INFO: info.to_json(), "config.json": config_text, **companions, **headers, INDEX_FILE: index_meta},
        )
    used = ("config.json", *companions, *headers, *((INDEX_FILE,) if index_meta else ()))
    return LoadedModel(spec, SourceInfo(kind="hub", repo_id=repo_id, revision=sha, files=tuple(used)))


def _first_ranges(config_text: str, shards: Sequence[str]) -> dict[str, int]:
    """First Range per shard sized from the header the config shapes predict (one request per shard)."""
    from hfvram.sources.header_size import first_ranges, predicted_tensors

    return first_ranges(predicted_tensors(config_text), shards, FIRST_HEADER_RANGE)


def header_or_none(
    repo_id: str, revision: str, filename: str, token: str | None, commits: list[str] | None = None
) -> dict[str, object] | None:
    """A safetensors header's facts (the commits its answers named appended to ``commits``); None when the repo
    has no such file."""
    try:
        return fetch_safetensors_header(repo_id, revision, filename, token, commits=commits)
    except EntryMissingError:
        return None


def file_or_none(repo_id: str, revision: str, filename: str, token: str | None) -> tuple[str, str | None] | None:
    """A small JSON file's text and the commit it was served from; None when the repo has no such file."""
    try:
        return fetch_text(repo_id, revision, filename, token)
    except EntryMissingError:
        return None


def _index_summary(text: str) -> dict:
    from hfvram.readers.config import load_json_tolerant

    index = load_json_tolerant(text.encode("utf-8"), INDEX_FILE)
    metadata = index.get("metadata") if isinstance(index, dict) else None
    return dict(metadata) if isinstance(metadata, dict) else {}


def _some(names: Sequence[str], shown: int = 12) -> str:
    """The first few of a listing from the Hub (which may hold thousands) for a one-line message."""
    head = ", ".join(str(n)[:60] for n in names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _no_config(repo_id: str, info: RepoInfo) -> HfvramError:
    ggufs = [f for f in info.files if f.lower().endswith(".gguf")]
    if ggufs:
        tags = quant_tags(ggufs)
        hint = f"{repo_id}:{tags[0]}" if tags else f"{repo_id}:{ggufs[0]}"
        return GgufRepoWithoutSelector(
            f"{repo_id} has no config.json but holds GGUF files: name one, e.g. `{hint}`"
            + (f" (available: {_some(tags)})" if tags else "")
        )
    return RepoNotFoundError(f"{repo_id} has no config.json, so it is not a transformers model repo hfvram can read")


def _gguf_from_cache(value: object):
    """A cached GGUF header summary decoded, or None (then read again) when it does not decode."""
    if not isinstance(value, dict):
        return None
    try:
        return gguf_header_from_json(value)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None


def load_hub_gguf(
    repo_id: str,
    selector: str,
    *,
    revision: str | None,
    token: str | None,
    cache: FactsCache | None,
    cache_only: bool = False,
) -> LoadedModel | None:
    """One GGUF file or split set of a Hub repo, read up to the end of its tensor infos.

    ``cache_only``: answer from the facts cache alone (even past the branch TTL), None when it lacks a part."""
    from hfvram.readers.gguf import spec_from_gguf

    rev = revision or "main"
    sha = cache.resolve(repo_id, rev, allow_stale=cache_only) if cache is not None else None
    info_json = _cached_or(cache, repo_id, sha, MODEL_INFO)
    if cache_only and not info_json:
        return None
    info = RepoInfo.from_json(repo_id, info_json) if info_json else None  # type: ignore[arg-type]
    by_name = selector.lower().endswith(
        ".gguf"
    )  # a quant tag is matched against the repo's listing, never a partial one
    if info is None or (info.partial and not (by_name and gguf_files(info.files, selector))):
        if cache_only:
            return None
        from hfvram.sources.hub_resolver import read_gguf_by_name

        loaded = read_gguf_by_name(repo_id, selector, revision, token, cache)
        if loaded is not None:
            return loaded
        info = fetch_repo_info(repo_id, revision, token)
    chosen = gguf_files(info.files, selector)
    if not chosen:
        tags = quant_tags([f for f in info.files if f.lower().endswith(".gguf")])
        raise ModelReadError(
            f"no GGUF file matching {selector!r} in {repo_id}"
            + (f"; available: {_some(tags)}" if tags else "; the repo holds no .gguf files")
        )
    check_file_counts(chosen, kind="gguf", where=f"{repo_id} (Hub model info)")
    cached = {f: _gguf_from_cache(_cached_or(cache, repo_id, info.sha, f)) for f in chosen}
    if cache_only and any(v is None for v in cached.values()):
        return None
    missing = {f: (lambda f=f: fetch_gguf_header(repo_id, info.sha, f, token)[0]) for f in chosen if cached[f] is None}
    fetched = in_parallel(missing)
    headers = [fetched[f] if f in fetched else cached[f] for f in chosen]
    spec = spec_from_gguf(headers, filename=chosen[0])
    if cache is not None:  # one write: the ref and every fact read at its commit
        facts = {MODEL_INFO: info.to_json(), **{f: gguf_header_to_json(h) for f, h in fetched.items()}}
        cache.store(repo_id, rev, info.sha, facts)
    return LoadedModel(spec, SourceInfo(kind="hub", repo_id=repo_id, revision=info.sha, files=tuple(chosen)))


#: pages of one tree listing hfvram follows (the Hub pages long listings, ~1000 entries a page)
TREE_PAGES = 8


def fetch_tree(repo_id: str, sha: str, token: str | None) -> list[tuple[str, int | None]]:
    """The repo's files with their sizes at ``sha`` (the tree API, recursive: one request a page; the next page is
    followed only on the Hub's own host, at most TREE_PAGES pages)."""
    import re

    from hfvram.sources.gguf_repo import tree_entries

    endpoint = hub_endpoint().rstrip("/")
    url: str | None = model_api_url(repo_id, "tree", sha)
    params: Mapping[str, object] | None = {"recursive": "true"}
    entries: list[tuple[str, int | None]] = []
    for _ in range(TREE_PAGES):
        assert url is not None
        data, answer = fetch_json(url, token=token, repo_id=repo_id, filename=None, params=params)
        entries += tree_entries(data, repo_id)
        link = re.search(r'<([^>]{1,2000})>\s*;\s*rel="?next"?', str(answer.headers.get("link", ""))[:4000])
        if link is None:
            return entries
        url, params = link[1], None
        if not url.startswith(endpoint + "/"):
            raise MalformedFileError(
                "the next page of the tree listing is on another host", file=f"{repo_id} (Hub tree API)"
            )
    raise MalformedFileError(f"tree listing longer than {TREE_PAGES} pages", file=f"{repo_id} (Hub tree API)")


def load_hub_gguf_repo(repo_id: str, *, revision: str | None, token: str | None, cache: FactsCache | None):
    """A GGUF repo as a whole: (its listing, the model of the one header read), None when it lists no GGUF model
    file. Requests: one model info with the files' sizes (the commit sha and the listing; the tree listing at that
    commit only when the Hub gives no size for a GGUF file), and the Range reads of one header; all cached by
    commit."""
    from hfvram.sources.gguf_repo import LISTING, group_listing, header_quant, listing_from_json, listing_to_json

    rev = revision or "main"
    sha = cache.resolve(repo_id, rev) if cache is not None else None
    info_json = _cached_or(cache, repo_id, sha, MODEL_INFO)
    info = RepoInfo.from_json(repo_id, info_json) if isinstance(info_json, dict) else None
    cached = listing_from_json(
        repo_id,
        _cached_or(cache, repo_id, sha, LISTING),
        revision=sha,
        origin=f"Hub listing of {repo_id} at {(sha or '')[:12]}",
    )
    entries: list[tuple[str, int | None]] | None = None
    if info is None or info.partial or cached is None:
        from hfvram.sources.hub_resolver import info_and_sizes

        info, entries = info_and_sizes(repo_id, revision, token)
    listing = cached if entries is None and cached is not None else None
    if listing is None:
        origin = f"Hub model info of {repo_id} at {info.sha[:12]}"
        if entries is None:
            entries = fetch_tree(repo_id, info.sha, token)
            origin = f"Hub tree listing of {repo_id} at {info.sha[:12]}"
        listing = group_listing(repo_id, entries, revision=info.sha, origin=origin)
        if cache is not None:
            cache.store(repo_id, rev, info.sha, {MODEL_INFO: info.to_json(), LISTING: listing_to_json(entries)})
    if not listing.quants:
        return None  # no GGUF model file: read as a checkpoint repo
    chosen = header_quant(listing)
    if cache is not None:
        loaded = load_hub_gguf(repo_id, chosen.files[0], revision=rev, token=token, cache=cache)
    else:
        loaded = load_hub_gguf(repo_id, chosen.files[0], revision=info.sha, token=token, cache=None)
    assert loaded is not None
    return listing, loaded
