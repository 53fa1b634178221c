"""The facts cache on disk: parsed facts per (repo, commit sha, file), and (repo, revision) → sha.

Location: ``HFVRAM_CACHE_DIR``, else ``platformdirs.user_cache_dir("hfvram")``. Entries are JSON written
atomically (temporary file + ``os.replace``), so a crash mid-write leaves either the old entry or none; the
temporary files such a crash leaves are removed by a later write in the same folder once they are older than
``ORPHAN_SECONDS``. An entry is read only when it is a regular file under the size cap (a link to /dev/zero or
a FIFO is not read), parses, and has the shape of what is stored under its name (:func:`value_shape_ok`);
anything else is deleted and rebuilt by the next successful read. Folders inside the cache are regular folders
only: an entry whose path crosses a symbolic link (or an entry that is one) is neither read nor written, and
no ``.tmp-*`` file is swept there. A commit sha never expires; a branch or tag
name maps to a sha for ``REF_TTL_SECONDS``.

A Hub read stores everything it read in one write (:meth:`FactsCache.store`): the ref entry of the revision
carries the facts of its commit, so a later check reads one file and a scan writes one file per repo. Facts
stored one by one (:meth:`FactsCache.put`) live in their own files; :meth:`FactsCache.get` looks in the
facts of the refs this instance resolved first, then there.

transformers' reading of a config (the ``HfFacts`` of ``hfvram.readers.config_hf``) is kept here too, one entry
per (config, transformers version) under ``transformers-facts/`` (:meth:`FactsCache.transformers_facts`): the
readers compute those facts and never touch the disk; ``hfvram.sources.facts`` looks them up and stores them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from hfvram.memo import ValueCache

if TYPE_CHECKING:
    from hfvram.readers.config_hf import HfFacts

FORMAT = 1
#: the format of facts and ref entries: 2 since a safetensors header is stored as its parsed facts (its tensor table,
#: ``facts.header_facts``), never its text; an entry of another format is ignored and deleted (read again)
FACTS_FORMAT = 2
REF_TTL_SECONDS = 24 * 3600
#: a temporary entry file older than this is an orphan of a killed writer
ORPHAN_SECONDS = 600
_SHA = re.compile(r"^[0-9a-f]{40}$")
#: names whose stored value is the raw text of the file (the rest: model info, index metadata, GGUF summaries,
#: safetensors header facts)
_TEXT_SUFFIXES = (".json",)
#: the folder of transformers' facts per (config, transformers version), beside ``facts/`` and ``refs/``
TRANSFORMERS_FACTS = "transformers-facts"
MODEL_INFO = "model-info"  # = repo_files.MODEL_INFO (kept here so the cache imports nothing else)
INDEX_FILE = "model.safetensors.index.json"  # = facts.INDEX_FILE


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _model_info_ok(value: object) -> bool:
    if not isinstance(value, dict) or not is_commit_sha(value.get("sha")):
        return False
    files = value.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return False
    if not isinstance(value.get("gated", False), (bool, str)):
        return False
    params = value.get("dtype_parameters")
    return params is None or (
        isinstance(params, dict) and all(isinstance(k, str) and _is_int(v) and v >= 0 for k, v in params.items())
    )


def _gguf_summary_ok(value: object) -> bool:
    if not isinstance(value, dict) or not isinstance(value.get("metadata"), dict):
        return False
    if not all(_is_int(value.get(k)) and value[k] >= 0 for k in ("version", "header_end", "alignment", "data_start")):
        return False
    tensors = value.get("tensors")
    if not isinstance(tensors, list) or not isinstance(value.get("filename", ""), str):
        return False
    for t in tensors:
        if not (isinstance(t, list) and len(t) == 6 and isinstance(t[0], str) and isinstance(t[2], str)):
            return False
        if not (_is_int(t[1]) and _is_int(t[4]) and _is_int(t[5]) and isinstance(t[3], list)):
            return False
        if not all(_is_int(d) and d >= 0 for d in t[3]):
            return False
    return True


def _header_facts_ok(value: object) -> bool:
    """The shape of ``facts.header_facts`` (kept here so the cache imports nothing else; its rows are checked by
    the reader when read)."""
    if not isinstance(value, dict) or set(value) != {"tensors", "data_bytes"}:
        return False
    size = value["data_bytes"]
    return isinstance(value["tensors"], list) and (size is None or (_is_int(size) and size >= 0))


def _tables_size(facts: Mapping[str, object]) -> int:
    """About the JSON size of the safetensors header tables among ``facts`` (names plus ~40 bytes a row)."""
    total = 0
    for name, value in facts.items():
        if name.endswith(".safetensors") and isinstance(value, dict) and isinstance(value.get("tensors"), list):
            total += sum(len(row[0]) + 40 if isinstance(row, list) and row else 40 for row in value["tensors"])
    return total


def value_shape_ok(name: str, value: object) -> bool:
    """Whether ``value`` has the shape hfvram stores under ``name``: model info (sha, files, gated, per-dtype
    counts), a GGUF header summary, the index metadata (an object), or a file's raw text."""
    if name == MODEL_INFO:
        return _model_info_ok(value)
    if name.lower().endswith(".gguf"):
        return _gguf_summary_ok(value)
    if name == INDEX_FILE:
        return isinstance(value, dict)
    if name.endswith(".safetensors"):
        return _header_facts_ok(value)
    if name.endswith(_TEXT_SUFFIXES):
        return isinstance(value, str)
    return value is not None


def is_commit_sha(revision: object) -> bool:
    return isinstance(revision, str) and bool(_SHA.match(revision))


def default_cache_dir() -> Path:
    override = os.environ.get("HFVRAM_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("hfvram"))


@functools.lru_cache(maxsize=4096)
def _slug(text: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80]
    return f"{safe}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


#: the Hub's own endpoint: its facts keep the cache's top folders (``facts/``, ``refs/``)
DEFAULT_ENDPOINT = "https://huggingface.co"


def endpoint_folder(endpoint: str | None = None) -> tuple[str, ...]:
    """The folders under the cache root for the facts of ``endpoint`` (default: HF_ENDPOINT): none for the Hub
    itself, ``endpoints/<hash>`` for any other (a hash only: the endpoint's text, user info included, is never a
    file name). Transformers' facts depend on a config's text only and stay shared."""
    text = (endpoint if endpoint is not None else os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).strip()
    text = text.rstrip("/") or DEFAULT_ENDPOINT
    if text.lower() == DEFAULT_ENDPOINT:
        return ()
    return ("endpoints", hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:24])


#: transformers' facts entries read and checked by this process, by (path, inode, size, mtime): the facts they hold
_CHECKED_FACTS: ValueCache[tuple[str, int, int, int], HfFacts] = ValueCache("sources.checked_transformers_facts", 256)


class FactsCache:
    """JSON facts keyed by (repo, sha, file); refs keyed by (repo, revision)."""

    def __init__(self, root: Path | None = None, *, now: float | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        #: where this endpoint's facts and refs live: facts read from one HF_ENDPOINT are never answers for another
        self.hub_root = os.path.join(self.root, *endpoint_folder())
        self._now = now
        #: (repo, sha) -> facts carried by a ref entry read or written by this instance
        self._bundles: dict[tuple[str, str], dict[str, object]] = {}

    def _time(self) -> float:
        return self._now if self._now is not None else time.time()

    # ---- paths --------------------------------------------------------------------------------
    # (joined as text, one Path made: a scan builds several per repo)
    def _fact_path(self, repo_id: str, sha: str, name: str) -> Path:
        return Path(os.path.join(self.hub_root, "facts", _slug(repo_id), sha, f"{_slug(name)}.json"))

    def _ref_path(self, repo_id: str, revision: str) -> Path:
        return Path(os.path.join(self.hub_root, "refs", _slug(repo_id), f"{_slug(revision)}.json"))

    def transformers_path(self, canonical: str, version: str) -> Path:
        """The entry of transformers' facts for a config (canonical JSON) and transformers version."""
        key = hashlib.sha256(f"{canonical}\ntransformers {version}".encode()).hexdigest()
        return self.root / TRANSFORMERS_FACTS / f"{key}.json"

    # ---- io -----------------------------------------------------------------------------------
    @staticmethod
    def _read(path: Path, cap: str = "cache_entry", fmt: int = FACTS_FORMAT) -> dict | None:
        """The entry at ``path``, or None; an entry that is not a regular file of JSON within the ``[bytes] cap``
        of limits.toml is deleted."""
        from hfvram.errors import HfvramError
        from hfvram.sources.limits import byte_cap, read_local_bytes

        if not os.path.lexists(path):
            return None
        try:
            entry = json.loads(read_local_bytes(path, byte_cap(cap), follow_links=False).decode("utf-8"))
        except FileNotFoundError:
            return None
        except (HfvramError, OSError, ValueError, UnicodeDecodeError, RecursionError):
            FactsCache._discard(path)
            return None
        if not isinstance(entry, dict) or entry.get("format") != fmt or not _is_number(entry.get("stored", 0)):
            FactsCache._discard(path)
            return None
        return entry

    @staticmethod
    def _discard(path: Path) -> None:
        """Delete a bad entry (a link is removed, never what it points to)."""
        with contextlib.suppress(OSError):
            os.unlink(path)

    @staticmethod
    def _sweep_orphans(folder: Path, now: float) -> None:
        """Remove ``.tmp-*.json`` left by writers killed mid-write, once older than ``ORPHAN_SECONDS``."""
        try:
            names = [n for n in os.listdir(folder) if n.startswith(".tmp-") and n.endswith(".json")]
        except OSError:
            return
        for name in names[:1000]:
            path = folder / name
            try:
                if now - os.lstat(path).st_mtime > ORPHAN_SECONDS:
                    os.unlink(path)
            except OSError:
                pass

    def _regular_folders(self, path: Path) -> bool:
        """Whether each folder from the cache root down to ``path``'s is a real folder (or not made yet), never a
        symbolic link: an entry is never written, and no ``.tmp-*`` swept, in a folder a link points to outside the
        cache. (The root itself may be a link: the user named it.)"""
        current = str(self.root)
        for part in os.path.relpath(path.parent, current).split(os.sep):
            if part in ("", "."):
                continue
            current = os.path.join(current, part)
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                return True
            except OSError:
                return False
            if not stat.S_ISDIR(mode):
                return False
        return True

    def _write_inside(self, path: Path, entry: dict | str) -> bool:
        """:meth:`_write` when every folder on the way is a regular folder of the cache; else nothing is written."""
        return self._regular_folders(path) and self._write(path, entry)

    @staticmethod
    def _write(path: Path, entry: dict | str) -> bool:
        """Atomic write (of ``entry``, or of its JSON text); a cache that cannot be written is skipped (the answer
        does not depend on it)."""
        try:
            FactsCache._sweep_orphans(path.parent, time.time())
            try:
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            except FileNotFoundError:  # the folder is made on the first write only (not a mkdir per write)
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            replaced = False
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    # the same text as json.dump, from the C encoder in one piece
                    handle.write(entry if isinstance(entry, str) else json.dumps(entry))
                os.replace(tmp, path)
                replaced = True
            finally:
                if not replaced and os.path.exists(tmp):
                    os.unlink(tmp)
            return True
        except OSError:
            return False

    # ---- facts --------------------------------------------------------------------------------
    def get(self, repo_id: str, sha: str, name: str) -> object | None:
        path = self._fact_path(repo_id, sha, name)
        bundled = self._bundles.get((repo_id, sha))
        if bundled is not None and bundled.get(name) is not None:
            if value_shape_ok(name, bundled[name]):
                return bundled[name]
            del bundled[name]  # valid JSON of the wrong shape: read again, and stored again by this run's store()
        entry = self._read(path) if self._regular_folders(path) else None
        if entry is None or entry.get("repo") != repo_id or entry.get("sha") != sha or entry.get("file") != name:
            return None
        value = entry.get("value")
        if not value_shape_ok(name, value):
            self._discard(path)  # valid JSON of the wrong shape: rebuilt by this run
            return None
        return value

    def put(self, repo_id: str, sha: str, name: str, value: object) -> bool:
        entry = {"format": FACTS_FORMAT, "repo": repo_id, "sha": sha, "file": name, "value": value}
        entry["stored"] = self._time()
        return self._write_inside(self._fact_path(repo_id, sha, name), entry)

    # ---- refs ---------------------------------------------------------------------------------
    def resolve(self, repo_id: str, revision: str, *, allow_stale: bool = False) -> str | None:
        """The commit sha a revision pointed at, if known and fresh (a sha maps to itself)."""
        path = self._ref_path(repo_id, revision)
        entry = self._read(path) if self._regular_folders(path) else None
        if entry is None or entry.get("repo") != repo_id or not is_commit_sha(entry.get("sha")):
            return None
        facts = entry.get("facts")
        if isinstance(facts, dict):  # facts of a commit never change: usable even when the ref is stale
            self._bundles[(repo_id, entry["sha"])] = facts
        fresh = is_commit_sha(revision) or self._time() - float(entry.get("stored", 0)) < REF_TTL_SECONDS
        return entry["sha"] if fresh or allow_stale else None

    def remember(self, repo_id: str, revision: str, sha: str) -> bool:
        entry = {"format": FACTS_FORMAT, "repo": repo_id, "revision": revision, "sha": sha, "stored": self._time()}
        return self._write_inside(self._ref_path(repo_id, revision), entry)

    def store(self, repo_id: str, revision: str, sha: str, facts: Mapping[str, object]) -> bool:
        """``revision`` → ``sha`` and the facts read at that commit, in one write (merged with the facts of
        that commit this instance already holds, e.g. the config cached by an earlier check). An entry over the
        ``[bytes] cache_entry`` cap is written without its safetensors header facts (read again when needed):
        the cap is what every later run may have to read."""
        from hfvram.sources.limits import byte_cap

        merged = {**self._bundles.get((repo_id, sha), {}), **{k: v for k, v in facts.items() if v is not None}}
        entry = {"format": FACTS_FORMAT, "repo": repo_id, "revision": revision, "sha": sha, "stored": self._time()}
        if _tables_size(merged) > byte_cap("cache_entry"):  # (estimated first: not an 80 MB text made to be dropped)
            merged = {k: v for k, v in merged.items() if not k.endswith(".safetensors")}
        text = json.dumps({**entry, "facts": merged})
        if len(text) > byte_cap("cache_entry"):
            merged = {k: v for k, v in merged.items() if not k.endswith(".safetensors")}
            text = json.dumps({**entry, "facts": merged})
        self._bundles[(repo_id, sha)] = merged
        fits = len(text) <= byte_cap("cache_entry")
        return fits and self._write_inside(self._ref_path(repo_id, revision), text)

    def forget(self, repo_id: str, revision: str, sha: str, names: tuple[str, ...] | list[str]) -> None:
        """Drop facts of ``sha`` that a reader refused (a stored table that does not add up): removed from the ref
        entry of ``revision`` (rewritten without them, or deleted when that fails), so they are read again once."""
        bundled = self._bundles.get((repo_id, sha))
        if bundled is None or not any(name in bundled for name in names):
            return
        for name in names:
            bundled.pop(name, None)
        if not self.store(repo_id, revision, sha, {}):
            self._discard(self._ref_path(repo_id, revision))

    # ---- transformers facts -------------------------------------------------------------------
    def transformers_facts(self, canonical: str, version: str) -> HfFacts | None:
        """transformers' facts for a config (its canonical JSON, ``config_hf.canonical_config``) as transformers
        ``version`` read it, when stored. The entry must be a regular file within ``[bytes] transformers_facts``,
        name this config and version, and hold facts of the current format within hfvram's bounds
        (``HfFacts.from_json``); anything else is deleted and computed again by the caller."""
        from hfvram.readers.config_hf import HfFacts

        path = self.transformers_path(canonical, version)
        try:
            seen = os.lstat(path)
        except OSError:
            return None
        # the same file, unchanged since this process last read and checked it (a scan of many repos that share
        # a config reads it once): (path, inode, size, modification time) name one version of a regular file
        stamp = (str(path), seen.st_ino, seen.st_size, seen.st_mtime_ns) if stat.S_ISREG(seen.st_mode) else None
        known = _CHECKED_FACTS.get(stamp) if stamp else None
        if known is not None:
            return known
        entry = self._read(path, cap="transformers_facts", fmt=FORMAT) if self._regular_folders(path) else None
        if entry is None:
            return None
        sha = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        try:
            if entry.get("config_sha256") != sha or entry.get("transformers") != version:
                raise ValueError("another config or transformers version")
            value = entry.get("value")
            if not isinstance(value, dict):
                raise ValueError("no facts")
            facts = HfFacts.from_json(value, origin="facts cache")
            if facts.version != version:
                raise ValueError("facts of another transformers version")
        except ValueError:  # valid JSON of the wrong shape: computed again, and this entry rewritten
            self._discard(path)
            return None
        if stamp is not None:
            _CHECKED_FACTS.put(stamp, facts)
        return facts

    def put_transformers_facts(self, canonical: str, version: str, facts: HfFacts) -> bool:
        """Store what transformers ``version`` made of a config (written atomically, like every entry)."""
        entry = {
            "format": FORMAT,
            "config_sha256": hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
            "transformers": version,
            "value": facts.to_json(),
            "stored": self._time(),
        }
        return self._write_inside(self.transformers_path(canonical, version), entry)
