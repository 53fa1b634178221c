"""The embedded catalogue: real config files of well-known repos, shipped in ``hfvram/data/catalog.json``.

Built by ``scripts/build_catalog.py`` from ``fixtures/hub/``. Used when the Hub is unreachable or offline;
facts are re-derived by the readers at load time, so reader fixes apply to catalogue entries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from hfvram.sources.facts import CheckpointFacts, spec_from_facts
from hfvram.spec import LoadedModel, SourceInfo

CATALOG_FILE = "catalog.json"


@lru_cache(maxsize=1)
def load_catalog() -> Mapping[str, object]:
    try:
        text = (Path(__file__).resolve().parent.parent / "data" / CATALOG_FILE).read_text(encoding="utf-8")
    except OSError:
        return {"built": None, "repos": {}}
    return json.loads(text)


@lru_cache(maxsize=1)
def _hf_facts_by_config() -> dict[str, Mapping[str, object]]:
    """transformers' facts precomputed by scripts/build_catalog.py (JSON form), by config sha256."""
    repos = load_catalog().get("repos", {})
    found: dict[str, Mapping[str, object]] = {}
    for entry in repos.values() if isinstance(repos, Mapping) else ():
        facts, sha = (entry.get("hf_facts"), entry.get("config_sha256")) if isinstance(entry, Mapping) else (None, None)
        if isinstance(facts, Mapping) and isinstance(sha, str):
            found[sha] = facts
    return found


def catalogue_hf_facts(config_sha256: str) -> Mapping[str, object] | None:
    """The catalogue's precomputed transformers facts for the config of this canonical sha256, if it has them
    (whichever repo the config was read from: the facts belong to the config)."""
    return _hf_facts_by_config().get(config_sha256)


def catalog_date() -> str | None:
    return load_catalog().get("built")  # type: ignore[return-value]


def catalog_repos() -> list[str]:
    repos = load_catalog().get("repos")
    return sorted(repos) if isinstance(repos, dict) else []


def _entry(repo_id: str) -> Mapping[str, object] | None:
    repos: Mapping[str, Mapping[str, object]] = load_catalog().get("repos", {})  # type: ignore[assignment]
    if repo_id in repos:
        return repos[repo_id]
    folded = {name.lower(): name for name in repos}
    return repos.get(folded.get(repo_id.lower(), ""))


def _notes(repo_id: str, reason: str, revision: str | None) -> tuple[str, ...]:
    notes: tuple[str, ...] = (f"using hfvram's embedded catalogue (built {catalog_date()}); {reason}",)
    if revision and revision != "main":
        notes += (
            f"revision {revision!r} was asked for, but the embedded catalogue holds one revision of {repo_id} "
            f"(as of {catalog_date()}): the requested revision could not be checked",
        )
    return notes


def load_gguf_from_catalog(
    repo_id: str, selector: str, *, reason: str, revision: str | None = None
) -> LoadedModel | None:
    """One GGUF file of a catalogued GGUF repo (``org/name:Q4_K_M`` or ``org/name:file.gguf``), from its stored
    header facts; None when the catalogue lacks the repo or the file."""
    from dataclasses import replace

    from hfvram.readers.gguf import spec_from_gguf
    from hfvram.sources.facts import gguf_header_from_json
    from hfvram.sources.repo_files import gguf_files

    entries: Mapping[str, Mapping[str, object]] = load_catalog().get("gguf", {})  # type: ignore[assignment]
    folded = {name.lower(): name for name in entries}
    files = entries.get(folded.get(repo_id.lower(), ""))
    chosen = gguf_files(sorted(files), selector) if files else []
    if not chosen:
        return None
    headers = [gguf_header_from_json(files[name]) for name in chosen]  # type: ignore[index, arg-type]
    spec = spec_from_gguf(headers, filename=chosen[0])
    spec = replace(spec, warnings=(*_notes(repo_id, reason, revision), *spec.warnings))
    return LoadedModel(
        spec,
        SourceInfo(
            kind="catalog",
            repo_id=folded[repo_id.lower()],
            revision=None,
            files=tuple(chosen),
            note=f"catalogue built {catalog_date()}",
        ),
    )


def load_from_catalog(repo_id: str, *, reason: str, revision: str | None = None) -> LoadedModel | None:
    """The catalogue's entry for ``repo_id`` as a LoadedModel (None when the catalogue lacks it). The catalogue
    holds one revision of each repo: a ``revision`` asked for is said to be unchecked, not silently dropped."""
    entry = _entry(repo_id)
    if entry is None:
        return None
    files: Mapping[str, str] = entry["files"]  # type: ignore[assignment]
    companions = {name: text for name, text in files.items() if name != "config.json"}
    facts = CheckpointFacts(
        config_text=files["config.json"],
        companions=companions,
        index_metadata=index.get("metadata") if isinstance(index := entry.get("index"), dict) else None,
        origin=f"embedded catalogue {catalog_date()}",
    )
    spec = spec_from_facts(facts)
    from dataclasses import replace

    spec = replace(spec, warnings=(*_notes(repo_id, reason, revision), *spec.warnings))
    used = ("config.json", *companions, *(("model.safetensors.index.json",) if entry.get("index") else ()))
    return LoadedModel(
        spec,
        SourceInfo(
            kind="catalog",
            repo_id=str(entry.get("repo_id", repo_id)),
            revision=None,
            files=used,
            note=f"catalogue built {catalog_date()}",
        ),
    )


def gguf_listing(repo_id: str):
    """The recorded file listing of a catalogued GGUF repo as a GgufListing (None when the catalogue has none)."""
    from hfvram.sources.gguf_repo import listing_from_json

    listings: Mapping[str, Mapping[str, object]] = load_catalog().get("gguf_listings", {})  # type: ignore[assignment]
    folded = {name.lower(): name for name in listings}
    name = folded.get(repo_id.lower())
    if name is None:
        return None
    entry = listings[name]
    origin = f"embedded catalogue {catalog_date()}: file listing recorded in {entry.get('recorded', 'fixtures/')}"
    listing = listing_from_json(name, entry.get("files"), revision=None, origin=origin)
    return replace(listing, partial=bool(entry.get("partial"))) if listing is not None else None


def load_gguf_repo_from_catalog(repo_id: str, *, reason: str):
    """(listing, model of the header held) of a catalogued GGUF repo, or None when the catalogue lacks either."""
    listing = gguf_listing(repo_id)
    if listing is None or not listing.quants:
        return None
    entries: Mapping[str, Mapping[str, object]] = load_catalog().get("gguf", {})  # type: ignore[assignment]
    held = entries.get(listing.repo_id, {})
    readable = [q for q in listing.quants if all(f in held for f in q.files)]
    if not readable:
        return None
    chosen = min(readable, key=lambda q: (len(q.files) > 1, q.file_bytes or 0, q.name))
    loaded = load_gguf_from_catalog(listing.repo_id, chosen.files[0], reason=reason)
    return None if loaded is None else (listing, loaded)


def did_you_mean(repo_id: str, *, shown: int = 3) -> str:
    """``"; did you mean a/b, c/d?"`` from the catalogue's closest repo ids ("" when none is close)."""
    import difflib

    names = sorted(
        {*catalog_repos(), *load_catalog().get("gguf", {}), *load_catalog().get("gguf_listings", {})}  # type: ignore[misc]
    )
    by_lower = {name.lower(): name for name in names}
    wanted = repo_id.lower()[:200]
    close = difflib.get_close_matches(wanted, list(by_lower), n=shown, cutoff=0.6)
    if not close:  # the name alone (a misspelled org, or none)
        tails = {name.split("/", 1)[-1]: name for name in by_lower}
        close = [
            tails[t] for t in difflib.get_close_matches(wanted.split("/", 1)[-1], list(tails), n=shown, cutoff=0.7)
        ]
    close = [c for c in close if c != wanted]
    return f"; did you mean {', '.join(by_lower[c] for c in close)}?" if close else ""
