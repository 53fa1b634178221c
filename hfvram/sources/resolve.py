"""SOURCE → LoadedModel: local folder / .gguf, the HF cache, the facts cache, the Hub, the embedded catalogue."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hfvram.errors import HfvramError, NetworkError, UsageError
from hfvram.sources import catalog
from hfvram.sources.cache import FactsCache
from hfvram.sources.limits import check_token, source_deadline, validate_endpoint_env
from hfvram.sources.repo_files import offline_requested
from hfvram.spec import LoadedModel

_REPO = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.\-]*/[\w.\-]+)(?:@(?P<rev>[^:@\s]+))?(?::(?P<file>[^@\s]+))?$")


#: the Hub's host as Ollama (``ollama run hf.co/org/repo:Q4_K_M``) and browsers spell it before a repo id
_OLLAMA_HOST = re.compile(
    r"^(?:https?://)?(?:www\.)?(?:hf\.co|huggingface\.co)/(?=[A-Za-z0-9][\w.\-]*/)", re.IGNORECASE
)


def normalize_source(source: str) -> str:
    """SOURCE without Ollama's ``hf.co/`` host (so that a pasted ``ollama run hf.co/…`` names the same model)."""
    return _OLLAMA_HOST.sub("", source.strip()).rstrip("/")


@dataclass(frozen=True)
class HubSource:
    repo_id: str
    revision: str | None = None
    gguf: str | None = None  # quant tag or file name after ':'


def parse_source(source: str) -> Path | HubSource:
    """A local path when it exists (or looks like one), else ``org/name[@rev][:QUANT|:file.gguf]``."""
    text = source.strip()
    if not text:
        raise UsageError("empty SOURCE")
    text = _OLLAMA_HOST.sub("", text)  # Ollama's spelling: hf.co/org/repo:Q4_K_M
    if text.lower().endswith(":latest") and _REPO.match(text[: -len(":latest")]):
        text = text[: -len(":latest")]  # Ollama's default tag: the repo as a whole
    path = Path(text).expanduser()
    if path.exists() or text.startswith((".", "/", "~")) or (text.lower().endswith(".gguf") and "/" not in text):
        return path
    match = _REPO.match(text)
    if not match:
        raise UsageError(f"SOURCE {text[:80]!r} is neither an existing path nor a Hub repo id (org/name)")
    check_repo_id(match["repo"])
    if match["rev"] is not None:
        check_revision(match["rev"])
    return HubSource(match["repo"], match["rev"], match["file"])


#: one part of a Hub repo id as the Hub names them (huggingface_hub validate_repo_id): letters, digits, ``-``,
#: ``_``, ``.``, at most 96, not starting or ending with ``-`` or ``.``
_REPO_PART = re.compile(r"[A-Za-z0-9_](?:[\w.-]{0,94}[A-Za-z0-9_])?")


def check_repo_id(repo_id: str) -> None:
    """UsageError for a repo id the Hub cannot hold (``evil/..``, ``org/.x``, ``a--b``, ``org/x.git``): checked
    before any URL is built from it, so a path segment such as ``..`` never reaches the Hub's API."""
    parts = repo_id.split("/")
    well_formed = len(parts) == 2 and all(_REPO_PART.fullmatch(part) for part in parts)
    if not well_formed or "--" in repo_id or ".." in repo_id or repo_id.endswith(".git"):
        raise UsageError(f"SOURCE {repo_id[:80]!r}: not a Hub repo id (org/name: letters, digits, '-', '_', '.')")


def check_revision(revision: str) -> None:
    """UsageError for a revision git refuses as a ref name (``.``, ``..``, ``a..b``, a leading ``-`` or ``/``,
    white space or ``~^:?*[\\``) or longer than 256 characters; checked before any URL is built from it."""
    bad = (
        not revision
        or len(revision) > 256
        or revision in (".", "..")
        or ".." in revision
        or "@{" in revision
        or revision.startswith(("-", "/", "."))
        or revision.endswith(("/", ".", ".lock"))
        or any(char in revision for char in " ~^:?*[\\")
        or not revision.isprintable()
    )
    if bad:
        raise UsageError(f"revision {revision[:80]!r}: not a branch, tag or commit name")


def load_model(
    source: str,
    *,
    revision: str | None = None,
    token: str | None = None,
    offline: bool | None = None,
    need_split: bool = False,
    cache_dir: Path | None = None,
) -> LoadedModel:
    """Read one model's facts from any SOURCE form (contract.md); raises HfvramError (exit 3) when it cannot."""
    from hfvram.sources import local

    parsed = parse_source(source)
    if isinstance(parsed, Path):
        return _load_path(parsed)
    check_token(token)
    repo_id = parsed.repo_id
    if revision is not None:
        check_revision(revision)
    revision = revision or parsed.revision
    if offline is None:
        validate_endpoint_env()  # huggingface_hub's constants module cannot even be imported with a malformed one
        offline = offline_requested()
    cache = FactsCache(cache_dir)

    if parsed.gguf is None:
        snapshot = local.cached_snapshot(repo_id, revision)
        if snapshot is not None and (offline or local.snapshot_is_complete(snapshot)):
            return local.load_cached_repo(repo_id, snapshot)

    if offline:
        return _offline(parsed, revision, cache)
    from hfvram.sources import warm

    if parsed.gguf is not None:
        found = warm.gguf_from_cache(repo_id, parsed.gguf, revision, cache)
    else:
        found = warm.checkpoint_from_cache(repo_id, revision, cache, need_split=need_split)
    if found is not None:  # every fact cached under a fresh commit: no request, no HTTP stack
        return found
    return _from_hub(parsed, revision, token, need_split, cache)


def _from_hub(
    parsed: HubSource, revision: str | None, token: str | None, need_split: bool, cache: FactsCache
) -> LoadedModel:
    """Read the model from the Hub under one deadline; a name the Hub does not know gets a did-you-mean, an
    unreachable Hub falls back to the facts cache, then the catalogue."""
    repo_id = parsed.repo_id
    validate_endpoint_env()  # before huggingface_hub's HTTP modules read HF_ENDPOINT
    from hfvram.errors import GgufRepoWithoutSelector, RepoNotFoundError
    from hfvram.sources import hub  # the HTTP stack, only when the Hub is asked
    from hfvram.sources.http import EntryMissingError

    try:
        with source_deadline():  # every request of this model together (HFVRAM_DEADLINE)
            if parsed.gguf is not None:
                loaded = hub.load_hub_gguf(repo_id, parsed.gguf, revision=revision, token=token, cache=cache)
                assert loaded is not None  # only a cache_only read can come back empty
                return loaded
            return hub.load_hub_checkpoint(repo_id, revision=revision, token=token, need_split=need_split, cache=cache)
    except RepoNotFoundError as err:
        hint = "" if isinstance(err, (GgufRepoWithoutSelector, EntryMissingError)) else catalog.did_you_mean(repo_id)
        if not hint:
            raise
        raise RepoNotFoundError(f"{err}{hint}") from None
    except NetworkError as err:
        fallback = _from_facts_cache(parsed, revision, cache, reason="the Hub was not reachable")
        if fallback is None:
            fallback = _from_catalog(parsed, revision, reason=f"the Hub was not reachable ({err})")
        if fallback is None:
            raise
        return fallback


def load_gguf_repo(source: str, *, revision: str | None, token: str | None, offline: bool | None):
    """A GGUF repo as a whole (no ``:QUANT``): (its listing, the model of the one header read), from the Hub, else
    (offline, or the Hub unreachable) from the embedded catalogue; None when the Hub lists no GGUF model file."""
    from hfvram.errors import ModelReadError

    parsed = parse_source(source)
    assert isinstance(parsed, HubSource)
    revision = revision or parsed.revision
    if offline is None:
        validate_endpoint_env()
        offline = offline_requested()
    if offline:
        found = catalog.load_gguf_repo_from_catalog(parsed.repo_id, reason="offline mode: the Hub was not asked")
        if found is None:
            raise ModelReadError(
                f"{parsed.repo_id} is not a GGUF repo of hfvram's embedded catalogue, and offline mode forbids "
                "asking the Hub for its file listing" + catalog.did_you_mean(parsed.repo_id)
            )
        return found
    validate_endpoint_env()
    from hfvram.sources import hub

    try:
        with source_deadline():
            return hub.load_hub_gguf_repo(parsed.repo_id, revision=revision, token=token, cache=FactsCache())
    except NetworkError as err:
        found = catalog.load_gguf_repo_from_catalog(parsed.repo_id, reason=f"the Hub was not reachable ({err})")
        if found is None:
            raise
        return found


def _load_path(path: Path) -> LoadedModel:
    from hfvram.errors import ModelReadError
    from hfvram.sources import local

    if path.is_dir():
        return local.load_folder(path)
    if path.is_file() and path.suffix.lower() == ".gguf":
        return local.load_gguf_file(path)
    if path.is_file() and path.name == "config.json":
        return local.load_folder(path.parent)
    if not path.exists():
        raise ModelReadError(f"{path} does not exist")
    raise ModelReadError(f"{path} is neither a model folder nor a .gguf file")


def _from_facts_cache(parsed: HubSource, revision: str | None, cache: FactsCache, *, reason: str) -> LoadedModel | None:
    """What an earlier run stored, even past the branch TTL (used only when the Hub cannot be asked)."""
    from dataclasses import replace

    from hfvram.sources.facts import INDEX_FILE, CheckpointFacts, spec_from_facts
    from hfvram.sources.repo_files import MODEL_INFO, RepoInfo, safetensors_shards
    from hfvram.spec import SourceInfo

    repo_id = parsed.repo_id
    if parsed.gguf is not None:
        from hfvram.sources.warm import gguf_from_cache

        loaded = gguf_from_cache(repo_id, parsed.gguf, revision, cache, allow_stale=True)
        if loaded is not None:
            warning = f"{reason}: using hfvram's facts cached for commit {loaded.source.revision}"
            loaded = LoadedModel(replace(loaded.spec, warnings=(warning, *loaded.spec.warnings)), loaded.source)
        return loaded
    sha = cache.resolve(repo_id, revision or "main", allow_stale=True)
    if sha is None:
        return None
    info_json = cache.get(repo_id, sha, MODEL_INFO)
    config_text = cache.get(repo_id, sha, "config.json")
    if not isinstance(info_json, dict) or not isinstance(config_text, str):
        return None
    info = RepoInfo.from_json(repo_id, info_json)
    from hfvram.sources.facts import COMPANION_FILES

    companions = {n: cache.get(repo_id, sha, n) for n in COMPANION_FILES if n in info.files}
    headers = {s: cache.get(repo_id, sha, s) for s in safetensors_shards(info.files)}
    if any(v is None for v in companions.values()):
        return None
    complete_headers = headers and all(isinstance(v, dict) for v in headers.values())
    facts = CheckpointFacts(
        config_text=config_text,
        companions=companions,  # type: ignore[arg-type]
        headers=headers if complete_headers else {},  # type: ignore[arg-type]
        dtype_parameters=None if complete_headers else info.dtype_parameters,
        index_metadata=cache.get(repo_id, sha, INDEX_FILE),  # type: ignore[arg-type]
        origin=f"{repo_id}@{sha[:12]}",
    )
    try:
        spec = spec_from_facts(facts, cache)
    except HfvramError:
        if complete_headers:  # a stored table refused: dropped, so the next run does not meet it again
            cache.forget(repo_id, revision or "main", sha, list(headers))
        raise
    spec = replace(spec, warnings=(f"{reason}: using hfvram's facts cached for commit {sha}", *spec.warnings))
    return LoadedModel(
        spec, SourceInfo(kind="hub", repo_id=repo_id, revision=sha, files=("config.json",), note="facts cache")
    )


def _from_catalog(parsed: HubSource, revision: str | None, *, reason: str) -> LoadedModel | None:
    if parsed.gguf is not None:
        return catalog.load_gguf_from_catalog(parsed.repo_id, parsed.gguf, reason=reason, revision=revision)
    return catalog.load_from_catalog(parsed.repo_id, reason=reason, revision=revision)


def _offline(parsed: HubSource, revision: str | None, cache: FactsCache) -> LoadedModel:
    from hfvram.errors import ModelReadError

    found = _from_facts_cache(parsed, revision, cache, reason="offline mode")
    if found is not None:
        return found
    found = _from_catalog(parsed, revision, reason="offline mode: the Hub was not asked")
    if found is not None:
        return found
    raise ModelReadError(
        f"{parsed.repo_id} is not in the HF cache, hfvram's facts cache or its embedded catalogue, and offline mode "
        "forbids asking the Hub (drop --offline / HF_HUB_OFFLINE, or download the repo first)"
        + catalog.did_you_mean(parsed.repo_id)
    )


__all__ = ["HfvramError", "HubSource", "load_model", "parse_source"]
