"""The facts cache on disk: parsed facts per (repo, commit sha, file), and (repo, revision) → sha.

Location: ``HFVRAM_CACHE_DIR``, else ``platformdirs.user_cache_dir("hfvram")``. Entries are JSON written
atomically (temporary file + ``os.replace``), so a crash mid-write leaves either the old entry or none; an
entry that does not parse is ignored (and rewritten by the next successful read). A commit sha never
expires; a branch or tag name maps to a sha for ``REF_TTL_SECONDS``.

A Hub read stores everything it read in one write (:meth:`FactsCache.store`): the ref entry of the revision
carries the facts of its commit, so a later check reads one file and a scan writes one file per repo. Facts
stored one by one (:meth:`FactsCache.put`) live in their own files; :meth:`FactsCache.get` looks in the
facts of the refs this instance resolved first, then there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

FORMAT = 1
REF_TTL_SECONDS = 24 * 3600
_SHA = re.compile(r"^[0-9a-f]{40}$")


def is_commit_sha(revision: str | None) -> bool:
    return bool(revision and _SHA.match(revision))


def default_cache_dir() -> Path:
    override = os.environ.get("HFVRAM_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("hfvram"))


def _slug(text: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80]
    return f"{safe}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


class FactsCache:
    """JSON facts keyed by (repo, sha, file); refs keyed by (repo, revision)."""

    def __init__(self, root: Path | None = None, *, now: float | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self._now = now
        #: (repo, sha) -> facts carried by a ref entry read or written by this instance
        self._bundles: dict[tuple[str, str], dict[str, object]] = {}

    def _time(self) -> float:
        return self._now if self._now is not None else time.time()

    # ---- paths --------------------------------------------------------------------------------
    def _fact_path(self, repo_id: str, sha: str, name: str) -> Path:
        return self.root / "facts" / _slug(repo_id) / sha / f"{_slug(name)}.json"

    def _ref_path(self, repo_id: str, revision: str) -> Path:
        return self.root / "refs" / _slug(repo_id) / f"{_slug(revision)}.json"

    # ---- io -----------------------------------------------------------------------------------
    @staticmethod
    def _read(path: Path) -> dict | None:
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        if not isinstance(entry, dict) or entry.get("format") != FORMAT:
            return None
        return entry

    @staticmethod
    def _write(path: Path, entry: dict) -> bool:
        """Atomic write; a cache that cannot be written is skipped (the answer does not depend on it)."""
        try:
            try:
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            except FileNotFoundError:  # the folder is made on the first write only (not a mkdir per write)
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(entry, handle)
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            return True
        except OSError:
            return False

    # ---- facts --------------------------------------------------------------------------------
    def get(self, repo_id: str, sha: str, name: str) -> object | None:
        bundled = self._bundles.get((repo_id, sha))
        if bundled is not None and bundled.get(name) is not None:
            return bundled[name]
        entry = self._read(self._fact_path(repo_id, sha, name))
        if entry is None or entry.get("repo") != repo_id or entry.get("sha") != sha or entry.get("file") != name:
            return None
        return entry.get("value")

    def put(self, repo_id: str, sha: str, name: str, value: object) -> bool:
        entry = {"format": FORMAT, "repo": repo_id, "sha": sha, "file": name, "value": value, "stored": self._time()}
        return self._write(self._fact_path(repo_id, sha, name), entry)

    # ---- refs ---------------------------------------------------------------------------------
    def resolve(self, repo_id: str, revision: str, *, allow_stale: bool = False) -> str | None:
        """The commit sha a revision pointed at, if known and fresh (a sha maps to itself)."""
        entry = self._read(self._ref_path(repo_id, revision))
        if entry is None or entry.get("repo") != repo_id or not is_commit_sha(entry.get("sha")):
            return None
        facts = entry.get("facts")
        if isinstance(facts, dict):  # facts of a commit never change: usable even when the ref is stale
            self._bundles[(repo_id, entry["sha"])] = facts
        fresh = is_commit_sha(revision) or self._time() - float(entry.get("stored", 0)) < REF_TTL_SECONDS
        return entry["sha"] if fresh or allow_stale else None

    def remember(self, repo_id: str, revision: str, sha: str) -> bool:
        entry = {"format": FORMAT, "repo": repo_id, "revision": revision, "sha": sha, "stored": self._time()}
        return self._write(self._ref_path(repo_id, revision), entry)

    def store(self, repo_id: str, revision: str, sha: str, facts: Mapping[str, object]) -> bool:
        """``revision`` → ``sha`` and the facts read at that commit, in one write (merged with the facts of
        that commit this instance already holds, e.g. the config cached by an earlier check)."""
        merged = {**self._bundles.get((repo_id, sha), {}), **{k: v for k, v in facts.items() if v is not None}}
        entry = {
            "format": FORMAT,
            "repo": repo_id,
            "revision": revision,
            "sha": sha,
            "stored": self._time(),
            "facts": merged,
        }
        self._bundles[(repo_id, sha)] = merged
        return self._write(self._ref_path(repo_id, revision), entry)
