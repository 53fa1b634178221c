"""Resolver-first reading of a Hub repo: the common layouts read by file name, with no API request.

The Hub counts every ``/resolve/`` URL in its ``resolvers`` bucket and every ``/api/`` call in its ``api`` bucket,
whose quota is 5 to 6 times smaller (hub-docs ``rate-limits.md``), and asks clients to use the resolver where they
can. A resolver answer says what the model info would: the commit (``X-Repo-Commit``, on the answer or on the 302
to the CDN, as huggingface_hub's ``get_hf_file_metadata`` reads it), and a gated, missing or disabled repo or
revision (401 / 403 / 404 with ``X-Error-Code``, read by ``hf_raise_for_status``). So:

- a safetensors repo is read as ``config.json`` + ``model.safetensors`` (its header) or, when that file is missing,
  ``model.safetensors.index.json``, whose ``weight_map`` names the shards, then the shards' headers; the companion
  quantization files only when the config states no quantization but the headers store quantized tensors;
- one GGUF file (``org/repo:file.gguf``, a split set named by its first part) is read by its name.

What only the API answers stays there: a repo without ``config.json`` (GGUF files to list), a repo whose weights are
not named ``model.safetensors`` or by an index, and a GGUF quant named by its tag. In a scan
(``limits.priced_by_quota``), a sharded repo whose shard headers cost more of the resolvers' quota than one model
info costs of the API's takes the model info's per-dtype counts instead; a single check never spends an API request
on these paths.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import cast

from hfvram.errors import MalformedFileError
from hfvram.sources.cache import FactsCache, is_commit_sha
from hfvram.sources.facts import COMPANION_FILES, INDEX_FILE, CheckpointFacts, spec_from_facts
from hfvram.sources.http import EntryMissingError
from hfvram.sources.hub import file_or_none, header_or_none
from hfvram.sources.repo_files import MODEL_INFO, RepoInfo, check_file_counts
from hfvram.spec import LoadedModel, SourceInfo

SINGLE_FILE = "model.safetensors"
#: stored dtypes of unquantized checkpoints (I64 / BOOL: buffers such as position_ids); any other dtype in a header
#: (I32 qweight, U8 packed 4-bit, F8_*) means quantized storage
PLAIN_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "I64", "BOOL"})
#: tensor names of quantized storage whatever their dtype
#: the endings of a quantized checkpoint's tensor names (``str.endswith``: a regex searched from every position
#: of 262,144 names of 280 characters cost 6 s)
QUANT_TENSOR_ENDINGS = ("qweight", "qzeros", "scales", "g_idx", "weight_scale", "input_scale", "absmax", "quant_map",
                        "weight_packed")  # fmt: skip


def quant_tensor_name(name: str) -> bool:
    """Whether a tensor name ends as a quantized tensor's does (as ``re.search("(?:...)$")``: before a final
    newline too)."""
    return name.endswith(QUANT_TENSOR_ENDINGS) or (name.endswith("\n") and name[:-1].endswith(QUANT_TENSOR_ENDINGS))


#: the quotas of hub-docs rate-limits.md (requests per 300 s window) used before the Hub has stated its own
DOCUMENTED_QUOTAS = {False: {"api": 500, "resolvers": 3000}, True: {"api": 1000, "resolvers": 5000}}


def _header_or_none(
    repo_id: str, at: str, filename: str, token: str | None
) -> tuple[dict[str, object], list[str]] | None:
    """A safetensors header's facts and the commits its answers named; None when the repo has no such file."""
    commits: list[str] = []
    header = header_or_none(repo_id, at, filename, token, commits)
    return None if header is None else (header, commits)


def index_shards(text: str, repo_id: str) -> tuple[list[str], dict]:
    """The shard files an index's ``weight_map`` names (top-level ``.safetensors`` names only), counts checked, and
    its ``metadata`` (``total_size``): the index is parsed once (a large checkpoint's is ~2 MB)."""
    from hfvram.readers.config import load_json_tolerant

    where = f"{repo_id} ({INDEX_FILE})"
    index = load_json_tolerant(text.encode("utf-8"), INDEX_FILE)
    metadata = index.get("metadata") if isinstance(index, dict) else None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise MalformedFileError("no weight_map object", file=where, field="weight_map")
    names = sorted({v for v in weight_map.values() if isinstance(v, str)})
    check_file_counts(names, kind="safetensors", where=where)
    bad = next((n for n in names if not _plain_name(n)), None)
    if bad is not None:
        raise MalformedFileError(f"shard name {bad[:80]!r} is not a .safetensors file of the repo", file=where)
    return names, dict(metadata) if isinstance(metadata, dict) else {}


def _plain_name(name: str) -> bool:
    return name.endswith(".safetensors") and "/" not in name and "\\" not in name and not name.startswith(".")


def quantized_storage(config_text: str, headers: Mapping[str, Mapping[str, object]]) -> bool:
    """Whether the companion files may say how the weights are quantized: config.json states no quantization (or
    GPTQ without its bits) and a header (its facts: ``facts.header_facts``) holds a quantized dtype or tensor
    name."""
    try:
        config = json.loads(config_text)
    except ValueError:
        config = None
    quant = config.get("quantization_config") if isinstance(config, dict) else None
    if isinstance(quant, dict):
        return quant.get("quant_method") == "gptq" and quant.get("bits") is None
    for facts in headers.values():
        rows = facts.get("tensors") if isinstance(facts, Mapping) else None
        for row in rows if isinstance(rows, list) else ():
            if not (isinstance(row, list) and len(row) >= 2 and isinstance(row[0], str)):
                return True  # the readers say what is wrong with it; the companions are read as the API path would
            if row[1] not in PLAIN_DTYPES or quant_tensor_name(row[0]):
                return True
    return False


def prefer_model_info(resolver_requests: int, token: str | None) -> bool:
    """In a scan: whether one model info (an API request) costs less of its bucket's quota than
    ``resolver_requests`` resolver requests of theirs, with the quotas the Hub stated for both buckets (else the
    documented ones of the plan: a stated quota of one bucket is not compared with a documented one of the other)."""
    from hfvram.sources.http import quota_budget, request_headers
    from hfvram.sources.limits import priced_by_quota

    if not priced_by_quota():
        return False
    quotas = dict(DOCUMENTED_QUOTAS["authorization" in request_headers(token)])
    state = quota_budget(token=token).snapshot()
    stated = {b: state.get(b, {}).get("q") for b in quotas}
    if all(isinstance(q, int) and not isinstance(q, bool) and q > 0 for q in stated.values()):
        quotas = cast("dict[str, int]", stated)
    return resolver_requests / quotas["resolvers"] > 1 / quotas["api"]


def load_checkpoint(
    repo_id: str,
    *,
    revision: str | None,
    token: str | None,
    cache: FactsCache | None,
    need_split: bool = False,
    ref: str | None = None,
) -> LoadedModel | None:
    """A safetensors repo read through the resolver alone (see the module docstring); None when the Hub states no
    commit, NeedsListing when the weights are named neither ``model.safetensors`` nor by an index, NoConfigJson when
    the repo has no config.json (each: the model info answers). Gated, missing or disabled repos raise from the
    resolver's answer."""
    from hfvram.sources.hub import in_parallel
    from hfvram.sources.limits import priced_by_quota

    at = revision or "main"
    first: dict[str, Callable[[], object]] = {
        "config.json": partial(file_or_none, repo_id, at, "config.json", token),
        SINGLE_FILE: partial(_header_or_none, repo_id, at, SINGLE_FILE, token),
    }
    if not priced_by_quota():  # a single check: the index in the same wave (a scan asks only when it is needed)
        first[INDEX_FILE] = partial(file_or_none, repo_id, at, INDEX_FILE, token)
    got = in_parallel(first)
    config = cast("tuple[str, str | None] | None", got["config.json"])
    if config is None:
        raise NoConfigJson(repo_id)
    config_text, sha = config
    if sha is None or not is_commit_sha(sha):
        return None
    single = cast("tuple[dict[str, object], list[str]] | None", got[SINGLE_FILE])
    index = cast("tuple[str, str | None] | None", got.get(INDEX_FILE))
    seen = {*(single[1] if single else ()), *((index[1],) if index and index[1] else ())}
    if seen - {sha} and not is_commit_sha(at):  # the branch moved between the answers: read it all at one commit
        return load_checkpoint(repo_id, revision=sha, token=token, cache=cache, need_split=need_split, ref=ref or at)
    if single is not None:
        headers = {SINGLE_FILE: single[0]}
        return _finish(repo_id, ref or at, sha, config_text, (SINGLE_FILE,), headers, None, None, token, cache)
    if INDEX_FILE not in got:
        index = file_or_none(repo_id, sha, INDEX_FILE, token)
    if index is None:
        raise NeedsListing(config_text, sha)
    return _sharded(repo_id, ref or at, sha, config_text, index[0], need_split, token, cache)


def _sharded(
    repo_id: str,
    ref: str,
    sha: str,
    config_text: str,
    index_text: str,
    need_split: bool,
    token: str | None,
    cache: FactsCache | None,
) -> LoadedModel:
    """A sharded repo: sized from the index's exact ``total_size`` (split like the config shapes), or — for the
    per-tensor split, or an index without one — from the shards' headers at ``sha`` (in a scan, the model info's
    per-dtype counts instead when they cost less of the quota)."""
    from hfvram.sources.hub import _first_ranges, fetch_repo_info, fetch_safetensors_header, in_parallel

    shards, meta = index_shards(index_text, repo_id)
    files = (*shards, INDEX_FILE)
    total = meta.get("total_size")
    if not need_split and isinstance(total, int) and not isinstance(total, bool) and total > 0:
        return _finish(repo_id, ref, sha, config_text, files, {}, None, meta, token, cache)
    if not need_split and prefer_model_info(len(shards), token):
        info = fetch_repo_info(repo_id, sha, token)
        if info.dtype_parameters and info.sha == sha:
            return _finish(repo_id, ref, sha, config_text, info.files, {}, info.dtype_parameters, None, token, cache)
    first = _first_ranges(config_text, shards)
    jobs = {s: partial(fetch_safetensors_header, repo_id, sha, s, token, first[s]) for s in shards}
    headers = cast("dict[str, dict[str, object]]", in_parallel(jobs))
    return _finish(repo_id, ref, sha, config_text, files, headers, None, None, token, cache)


def _companions(
    repo_id: str, sha: str, files: Sequence[str], listed: bool, wanted: bool, token: str | None
) -> dict[str, str]:
    """The companion files: those a listing names, or (``wanted``, without a listing) each asked for by name."""
    from hfvram.sources.hub import _fetch_text_only, in_parallel

    if listed:
        names = [n for n in COMPANION_FILES if n in files]
        return in_parallel({n: partial(_fetch_text_only, repo_id, sha, n, token) for n in names}) if names else {}
    if not wanted:
        return {}
    found = in_parallel({n: partial(file_or_none, repo_id, sha, n, token) for n in COMPANION_FILES})
    return {name: got[0] for name, got in found.items() if got is not None}


def _finish(
    repo_id: str,
    ref: str,
    sha: str,
    config_text: str,
    files: Sequence[str],
    headers: Mapping[str, Mapping[str, object]],
    dtype_parameters: Mapping[str, int] | None,
    index_meta: Mapping[str, object] | None,
    token: str | None,
    cache: FactsCache | None,
) -> LoadedModel:
    """The spec from what was read, stored in the facts cache in one write (a partial file list when the resolver
    alone found the files) as ``hub.load_hub_checkpoint`` stores it, so that the warm path answers the next check."""
    listed = dtype_parameters is not None  # the model info listed the files
    wanted = not listed and quantized_storage(config_text, headers)
    companions = _companions(repo_id, sha, files, listed, wanted, token)
    known = tuple(files) if listed else ("config.json", *files, *companions)
    info = RepoInfo(repo_id, sha, known, False, dtype_parameters, partial=not listed)
    facts = CheckpointFacts(
        config_text=config_text,
        companions=companions,
        headers=headers,
        dtype_parameters=dtype_parameters,
        index_metadata=index_meta,
        origin=f"{repo_id}@{sha[:12]}",
    )
    spec = spec_from_facts(facts, cache)  # before caching: facts that do not parse are not kept
    if cache is not None:
        facts_read = {MODEL_INFO: info.to_json(), "config.json": config_text, **companions, **headers}
        cache.store(repo_id, ref, sha, {**facts_read, **({INDEX_FILE: dict(index_meta)} if index_meta else {})})
    used = ("config.json", *companions, *headers, *((INDEX_FILE,) if index_meta else ()))
    return LoadedModel(spec, SourceInfo(kind="hub", repo_id=repo_id, revision=sha, files=tuple(used)))


def gguf_split_names(selector: str) -> list[str]:
    """The files a ``:file.gguf`` selector names: the file, or every part of the split set its first part names."""
    split = re.match(r"^(.*)-00001-of-(\d{5})\.gguf$", selector)
    if not split:
        return [selector]
    return [f"{split[1]}-{i:05d}-of-{split[2]}.gguf" for i in range(1, int(split[2]) + 1)]


def load_gguf_file(
    repo_id: str, selector: str, *, revision: str | None, token: str | None, cache: FactsCache | None
) -> LoadedModel | None:
    """One GGUF file (or split set) named by its file name, read through the resolver alone; None when the repo has
    no file of that name at its top (a file in a folder, a quant tag: the model info lists them) or names no
    commit."""
    from hfvram.readers.gguf import spec_from_gguf
    from hfvram.sources.facts import gguf_header_to_json
    from hfvram.sources.hub import fetch_gguf_header, in_parallel

    check_file_counts([selector], kind="gguf", where=f"{repo_id} ({selector[:80]})")  # the count its name declares
    chosen = gguf_split_names(selector)
    at = revision or "main"
    commits: list[str] = []
    try:
        headers = in_parallel({f: partial(fetch_gguf_header, repo_id, at, f, token, commits) for f in chosen})
    except EntryMissingError:
        return None
    if len(set(commits)) != 1 or not is_commit_sha(commits[0]):
        return None  # no commit stated, or the branch moved between the parts: the model info path reads it
    sha = commits[0]
    spec = spec_from_gguf([headers[f][0] for f in chosen], filename=chosen[0])
    if cache is not None:
        info = RepoInfo(repo_id, sha, tuple(chosen), False, None, partial=True)
        facts = {MODEL_INFO: info.to_json(), **{f: gguf_header_to_json(headers[f][0]) for f in chosen}}
        cache.store(repo_id, at, sha, facts)
    return LoadedModel(spec, SourceInfo(kind="hub", repo_id=repo_id, revision=sha, files=tuple(chosen)))


def model_info_with_sizes(
    repo_id: str, revision: str | None, token: str | None
) -> tuple[RepoInfo, list[tuple[str, int | None]]]:
    """One model info with the files' sizes (``?blobs=true``, as huggingface_hub's ``model_info(files_metadata=True)``
    asks; the Hub does not take ``expand`` with it): the repo's info and its (path, size) pairs, in place of a model
    info and a tree listing."""
    from hfvram.sources.http import fetch_json
    from hfvram.sources.hub import model_api_url, repo_info_from

    url = model_api_url(repo_id) if revision is None else model_api_url(repo_id, "revision", revision)
    data, _ = fetch_json(f"{url}?blobs=true", token=token, repo_id=repo_id, filename=None)
    where = f"{repo_id} (Hub model info)"
    info = repo_info_from(data, repo_id, where=where)
    siblings = data.get("siblings") if isinstance(data, dict) else None
    pairs: list[tuple[str, int | None]] = []
    for item in siblings if isinstance(siblings, list) else ():
        if not isinstance(item, dict) or not isinstance(item.get("rfilename"), str):
            continue
        lfs = item.get("lfs")
        size = lfs.get("size") if isinstance(lfs, dict) else None
        size = size if isinstance(size, int) else item.get("size")
        pairs.append((item["rfilename"], size if isinstance(size, int) and not isinstance(size, bool) else None))
    return info, pairs


class NeedsListing(Exception):
    """config.json was read, but the weights are named neither ``model.safetensors`` nor by an index: the model
    info lists them (config.json's text and commit go with it, so that it is not asked again)."""

    def __init__(self, config_text: str, sha: str) -> None:
        super().__init__(sha)
        self.config_text, self.sha = config_text, sha


class NoConfigJson(Exception):
    """The repo has no config.json at its top: only the model info says what it holds (GGUF files, or nothing)."""


def complete_cached(
    repo_id: str,
    ref: str,
    info: RepoInfo,
    config_text: str,
    need_split: bool,
    token: str | None,
    cache: FactsCache | None,
) -> LoadedModel:
    """A repo an earlier resolver read left in the facts cache (its partial file list and config.json), read on
    where that read stopped: the shards' headers at the cached commit (``--explain`` after a plain check)."""
    from hfvram.sources.hub import _first_ranges, fetch_safetensors_header, in_parallel
    from hfvram.sources.repo_files import safetensors_shards

    shards = safetensors_shards(info.files)
    check_file_counts(shards, kind="safetensors", where=f"{repo_id} (facts cache)")
    cached = {s: cache.get(repo_id, info.sha, s) if cache is not None else None for s in shards}
    first = _first_ranges(config_text, [s for s, value in cached.items() if not isinstance(value, dict)])
    jobs = {s: partial(fetch_safetensors_header, repo_id, info.sha, s, token, first[s]) for s in first}
    found = cast("dict[str, dict[str, object]]", in_parallel(jobs))
    headers = {**{s: t for s, t in cached.items() if isinstance(t, dict)}, **found}
    files = [f for f in info.files if f != "config.json" and f not in COMPANION_FILES]
    return _finish(repo_id, ref, info.sha, config_text, files, headers, None, None, token, cache)


def read_checkpoint(
    repo_id: str,
    revision: str | None,
    token: str | None,
    cache: FactsCache | None,
    need_split: bool,
    partial_info: object,
    config_text: object,
) -> tuple[LoadedModel | None, tuple[str, str] | None]:
    """The repo read by file name through the resolver, with no API request (``hub_resolver``), or read on from
    the partial file list and config.json an earlier resolver read cached. For a layout only the model info
    answers: (None, (config.json's text, its commit)) so that it is not asked again. A repo without config.json:
    the model info (with the files' sizes) says what it holds, and the error names its GGUF files."""
    from hfvram.errors import GgufRepoWithoutSelector
    from hfvram.sources.hub import _no_config

    if isinstance(partial_info, dict) and isinstance(config_text, str):
        info = RepoInfo.from_json(repo_id, partial_info)
        return complete_cached(repo_id, revision or "main", info, config_text, need_split, token, cache), None
    try:
        return load_checkpoint(repo_id, revision=revision, token=token, cache=cache, need_split=need_split), None
    except NeedsListing as known:
        return None, (known.config_text, known.sha)
    except NoConfigJson:
        from hfvram.sources.gguf_repo import LISTING, listing_to_json

        info, entries = info_and_sizes(repo_id, revision, token)  # the GGUF repo's listing comes with it
        error = _no_config(repo_id, info)
        if isinstance(error, GgufRepoWithoutSelector) and cache is not None:  # the repo is listed next
            listing = {LISTING: listing_to_json(entries)} if entries is not None else {}
            cache.store(repo_id, revision or "main", info.sha, {MODEL_INFO: info.to_json(), **listing})
        raise error from None


def read_gguf_by_name(
    repo_id: str, selector: str, revision: str | None, token: str | None, cache: FactsCache | None
) -> LoadedModel | None:
    """A GGUF file named by its file name, read through the resolver alone; None for a quant tag or a file the
    resolver does not find by that name (the model info lists the repo's files)."""
    if not selector.lower().endswith(".gguf"):
        return None
    return load_gguf_file(repo_id, selector, revision=revision, token=token, cache=cache)


def info_and_sizes(
    repo_id: str, revision: str | None, token: str | None
) -> tuple[RepoInfo, list[tuple[str, int | None]] | None]:
    """The model info with the files' sizes in one API request (``hub_resolver.model_info_with_sizes``); the sizes
    None when the Hub gave none for a GGUF file (the tree listing is then read)."""
    info, pairs = model_info_with_sizes(repo_id, revision, token)
    sized = all(size is not None for path, size in pairs if path.lower().endswith(".gguf"))
    return info, pairs if sized else None
