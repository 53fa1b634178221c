"""The releases of each engine hfvram knows: when each came out, whether its memory-relevant changes were
reviewed, and which rule set it runs under.

The facts are data: the ``[releases."X"]`` tables of ``hfvram/engines/<engine>/rules.toml`` (docs/engines/README.md
says how to add one). A release is ``reviewed`` when its changes were read (its rules are then the rule set in
force at it, possibly an older one: "none found"); ``reviewed = false`` marks a release known to exist whose
changes were not read. Dates are exact, or ``date_bound = "by"`` (the release existed on that date).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from hfvram.estimate import common

#: bounds on what an engine file may list (hostile-input rule: every count is capped)
MAX_RELEASES = 500
MAX_TEXT = 600
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Release:
    version: str
    #: YYYY-MM-DD, or None when no source dates it
    date: str | None
    #: "" (the release date) or "by" (the release existed on that date)
    date_bound: str
    date_source: str
    #: its memory-relevant changes were read (its rules are the rule set in force at it)
    reviewed: bool
    changes: str

    @property
    def date_text(self) -> str:
        if self.date is None:
            return "date unknown"
        return f"by {self.date}" if self.date_bound == "by" else self.date


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected text, got {type(value).__name__}")
    return value[:MAX_TEXT]


def parse_releases(engine: str, table: Any) -> tuple[Release, ...]:
    """The validated ``[releases]`` table, oldest first; a malformed row raises ValueError naming it."""
    if table is None:
        return ()
    if not isinstance(table, dict) or len(table) > MAX_RELEASES:
        raise ValueError(f"{engine}: [releases] must be a table of at most {MAX_RELEASES} releases")
    rows = []
    for version, row in table.items():
        where = f"{engine} release {version!r}"
        if not common.version_key(str(version)) or not isinstance(row, dict):
            raise ValueError(f"{where}: not a version number with a table")
        date = row.get("date")
        if date is not None and (not isinstance(date, str) or not _DATE.match(date)):
            raise ValueError(f"{where}: date must be YYYY-MM-DD")
        bound = _text(row.get("date_bound", ""), where)
        if bound not in ("", "by"):
            raise ValueError(f"{where}: date_bound must be '' or 'by'")
        reviewed = row.get("reviewed", False)
        if not isinstance(reviewed, bool):
            raise ValueError(f"{where}: reviewed must be true or false")
        rows.append(
            Release(
                version=str(version),
                date=date,
                date_bound=bound,
                date_source=_text(row.get("date_source", ""), where),
                reviewed=reviewed,
                changes=_text(row.get("changes", ""), where),
            )
        )
    return tuple(sorted(rows, key=lambda release: common.version_key(release.version)))


@cache
def releases(engine: str) -> tuple[Release, ...]:
    """The engine's releases as its data file lists them, oldest first (empty when it lists none)."""
    return parse_releases(engine, common.load_engine_data(engine).get("releases"))


def newest_reviewed(engine: str) -> Release | None:
    reviewed = [release for release in releases(engine) if release.reviewed]
    return reviewed[-1] if reviewed else None


def newest_known(engine: str) -> Release | None:
    listed = releases(engine)
    return listed[-1] if listed else None


def unread_release(engine: str, requested: str) -> Release | None:
    """The unreviewed row that stands for ``requested`` below the newest reviewed release: the first listed release
    at or above it, when that row is ``reviewed = false`` (a span of releases whose changes were not read, e.g.
    "0.5.11 – 0.5.17", is listed as its last release); None when the release was reviewed or is above them all."""
    want = common.version_key(requested)
    for release in releases(engine):
        if common.version_key(release.version) >= want:
            return None if release.reviewed else release
    return None


def release_for_rule_set(engine: str, rule_version: str) -> Release | None:
    """The release a rule set was filed under (``0.26`` -> 0.26.0, ``0.25.1`` -> 0.25.1): the oldest listed
    release whose version starts with the rule set's numbers."""
    want = common.version_key(rule_version)
    for release in releases(engine):
        key = common.version_key(release.version)
        if key[: len(want)] == want and all(part == 0 for part in key[len(want) :]):
            return release
    for release in releases(engine):
        if common.version_key(release.version)[: len(want)] == want:
            return release
    return None


def covered(engine: str, requested: str) -> bool:
    """True when ``requested`` is at or below the newest reviewed release: its rules are known, not assumed."""
    newest = newest_reviewed(engine)
    return newest is not None and common.version_key(requested) <= common.version_key(newest.version)


def _release_dict(release: Release | None) -> dict[str, Any] | None:
    if release is None:
        return None
    return {
        "version": release.version,
        "date": release.date,
        "date_bound": release.date_bound or None,
        "date_source": release.date_source,
        "reviewed": release.reviewed,
        "changes": release.changes,
    }


def engines_document() -> dict[str, Any]:
    """Every engine with its rule-set versions (each with the release it was filed under and that release's date),
    the newest release whose changes were reviewed and the newest known to exist (schema hfvram.engine_list/1)."""
    from hfvram.engines import engine_names, get_profile

    rows = []
    for name in engine_names():
        profile = get_profile(name)
        rule_sets = []
        for version in profile.rule_versions:
            release = release_for_rule_set(name, version)
            rule_sets.append(
                {
                    "version": version,
                    "release": release.version if release else None,
                    "date": release.date if release else None,
                    "date_bound": (release.date_bound or None) if release else None,
                    "changes": release.changes if release else None,
                }
            )
        rows.append(
            {
                "engine": name,
                "rule_sets": rule_sets,
                "newest_reviewed": _release_dict(newest_reviewed(name)),
                "newest_known": _release_dict(newest_known(name)),
                "releases_listed": len(releases(name)),
            }
        )
    return {"schema": "hfvram.engine_list/1", "engines": rows}
