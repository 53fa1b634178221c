"""A Hub repo answered from the facts cache alone, without the HTTP stack.

When the revision maps to a commit sha within the ref TTL and every file a Hub read would use is cached under
that sha, the LoadedModel is exactly the one ``hub.load_hub_checkpoint`` / ``hub.load_hub_gguf`` would build
from the same cache (the same facts, the same readers), and no request is needed, so neither huggingface_hub
nor httpx2 is imported. Anything missing → None, and the caller asks the Hub.
"""

from __future__ import annotations

from hfvram.errors import MalformedFileError, ModelReadError
from hfvram.sources.cache import FactsCache
from hfvram.sources.facts import COMPANION_FILES, INDEX_FILE, CheckpointFacts, gguf_header_from_json, spec_from_facts
from hfvram.sources.repo_files import MODEL_INFO, RepoInfo, gguf_files, quant_tags, safetensors_shards
from hfvram.spec import LoadedModel, SourceInfo


def _info(cache: FactsCache, repo_id: str, revision: str | None, allow_stale: bool) -> RepoInfo | None:
    sha = cache.resolve(repo_id, revision or "main", allow_stale=allow_stale)
    info_json = cache.get(repo_id, sha, MODEL_INFO) if sha else None
    if not isinstance(info_json, dict):
        return None
    try:
        info = RepoInfo.from_json(repo_id, info_json)
    except (KeyError, TypeError):
        return None
    return info if info.sha == sha else None


def checkpoint_from_cache(
    repo_id: str, revision: str | None, cache: FactsCache, *, need_split: bool
) -> LoadedModel | None:
    """A safetensors repo from the facts cache (what ``load_hub_checkpoint`` reads: config.json, companions,
    the headers when the split or the dtype counts need them, else the index metadata); None if a part is missing."""
    info = _info(cache, repo_id, revision, allow_stale=False)
    if info is None:
        return None
    sha = info.sha
    config_text = cache.get(repo_id, sha, "config.json")
    if not isinstance(config_text, str):
        return None
    companions = {n: cache.get(repo_id, sha, n) for n in COMPANION_FILES if n in info.files}
    shards = safetensors_shards(info.files)
    if not shards and not any(f.endswith(".safetensors") for f in info.files):
        return None  # unsupported layouts get their error from the Hub path
    want_headers = bool(shards) and (need_split or not info.dtype_parameters)
    # a resolver read (partial file list) sized a sharded repo from the index's total_size, without the headers
    by_index = (
        want_headers and not need_split and info.partial and isinstance(cache.get(repo_id, sha, INDEX_FILE), dict)
    )
    want_headers = want_headers and not by_index
    headers = {s: cache.get(repo_id, sha, s) for s in shards} if want_headers else {}
    want_index = (not shards or by_index) and INDEX_FILE in info.files
    index_meta = cache.get(repo_id, sha, INDEX_FILE) if want_index else None
    if not all(isinstance(v, str) for v in companions.values()) or not all(
        isinstance(v, dict) for v in headers.values()
    ):
        return None
    if want_index and not isinstance(index_meta, dict):
        return None
    facts = CheckpointFacts(
        config_text=config_text,
        companions=companions,  # type: ignore[arg-type]
        headers=headers,  # type: ignore[arg-type]
        dtype_parameters=None if headers else info.dtype_parameters,
        index_metadata=index_meta,  # type: ignore[arg-type]
        origin=f"{repo_id}@{sha[:12]}",
    )
    try:
        spec = spec_from_facts(facts, cache)
    except MalformedFileError:
        if not headers:
            raise
        cache.forget(repo_id, revision or "main", sha, list(headers))  # a stored table refused: read once more
        return None
    used = ("config.json", *companions, *headers, *((INDEX_FILE,) if index_meta else ()))
    return LoadedModel(spec, SourceInfo(kind="hub", repo_id=repo_id, revision=sha, files=tuple(used)))


def gguf_from_cache(
    repo_id: str, selector: str, revision: str | None, cache: FactsCache, *, allow_stale: bool = False
) -> LoadedModel | None:
    """One GGUF file or split set from the facts cache (``allow_stale``: even past the branch TTL, for offline
    runs and a Hub that cannot be reached); None when a part is missing; ModelReadError when the cached file
    list has no file the selector matches."""
    from hfvram.readers.gguf import spec_from_gguf

    info = _info(cache, repo_id, revision, allow_stale=allow_stale)
    if info is None:
        return None
    if info.partial and not selector.lower().endswith(".gguf"):
        return None  # only the files read by name are known: a quant tag is matched against the repo's listing
    chosen = gguf_files(info.files, selector)
    if not chosen and info.partial:
        return None  # only the files read by name are known: the Hub is asked
    if not chosen:  # the file list is known: the same error the Hub path gives
        tags = quant_tags([f for f in info.files if f.lower().endswith(".gguf")])
        raise ModelReadError(
            f"no GGUF file matching {selector!r} in {repo_id}"
            + (f"; available: {', '.join(tags)}" if tags else "; the repo holds no .gguf files")
        )
    cached = [cache.get(repo_id, info.sha, f) for f in chosen]
    if not all(isinstance(v, dict) for v in cached):
        return None
    headers = [gguf_header_from_json(v) for v in cached]  # type: ignore[arg-type]
    spec = spec_from_gguf(headers, filename=chosen[0])
    return LoadedModel(spec, SourceInfo(kind="hub", repo_id=repo_id, revision=info.sha, files=tuple(chosen)))
