"""The releases of each engine hfvram knows: when each came out, whether its memory-relevant changes were
reviewed, and which rule set it runs under.

The facts are data: the ``[releases."X"]`` tables of ``hfvram/engines/<engine>/rules.toml`` (docs/engines/README.md
says how to add one). A release is ``reviewed`` when its changes were read (its rules are then the rule set in
force at it, possibly an older one: "none found"); ``reviewed = false`` marks a release known to exist whose
changes were not read. Dates are exact, or ``date_bound = "by"`` (the release existed on that date).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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


def _date(row: Mapping[str, Any], where: str) -> str | None:
    date = row.get("date")
    if date is not None and (not isinstance(date, str) or not _DATE.match(date)):
        raise ValueError(f"{where}: date must be YYYY-MM-DD")
    return date


def _bounded_table(engine: str, table: Any, name: str, rows: str) -> dict[str, Any]:
    """A data file's ``[name]`` table of at most MAX_RELEASES rows, checked before it is iterated."""
    if not isinstance(table, dict) or len(table) > MAX_RELEASES:
        raise ValueError(f"{engine}: [{name}] must be a table of at most {MAX_RELEASES} {rows}")
    return table


def parse_releases(engine: str, table: Any) -> tuple[Release, ...]:
    """The validated ``[releases]`` table, oldest first; a malformed row raises ValueError naming it."""
    if table is None:
        return ()
    rows = []
    for version, row in _bounded_table(engine, table, "releases", "releases").items():
        where = f"{engine} release {version!r}"
        if not common.version_key(str(version)) or not isinstance(row, dict):
            raise ValueError(f"{where}: not a version number with a table")
        date = _date(row, where)
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


# ---- engines whose releases are build numbers, with semantic-version tags mapped onto them (llama.cpp) ---------

_SEMVER = re.compile(r"^v?(\d{1,4})\.(\d{1,4})\.(\d{1,4})$")
_BUILD = re.compile(r"^b?(\d{1,7})$")


@dataclass(frozen=True)
class SemverTag:
    """One semantic-version tag of a build-numbered engine: the build (and commit) it was cut from, and where that
    was read."""

    version: str
    build: int
    commit: str
    date: str | None
    source: str


@cache
def semver_tags(engine: str) -> tuple[SemverTag, ...]:
    """The ``[semver]`` table of the engine's data file (tag -> build), oldest first; empty when it has none."""
    table = common.load_engine_data(engine).get("semver")
    if table is None:
        return ()
    tags = []
    for version, row in _bounded_table(engine, table, "semver", "tags").items():
        where = f"{engine} semver tag {version!r}"
        build = row.get("build") if isinstance(row, dict) else None
        if not _SEMVER.match(str(version)) or not isinstance(build, int) or not 0 < build < 10**7:
            raise ValueError(f"{where}: expected X.Y.Z with a build number")
        commit, source = _text(row.get("commit", ""), where), _text(row.get("source", ""), where)
        tags.append(SemverTag(str(version), build, commit, _date(row, where), source))
    return tuple(sorted(tags, key=lambda tag: common.version_key(tag.version)))


def as_build(engine: str, version: str) -> tuple[str, str | None]:
    """``version`` as the engine's rule sets compare it, with a note when the mapping is not exact. For an engine
    with a ``[semver]`` table: ``v0.4.1`` -> ``b10964`` (the tag's build), ``b9460`` / ``9460`` unchanged; a tag the
    table lacks takes the build of the newest listed tag below it (a lower bound, said in the note). Any other
    engine, or a version of neither form: unchanged."""
    tags = semver_tags(engine)
    text = version.strip()
    build = _BUILD.match(text)
    if not tags:
        return version, None
    if build:
        return f"b{build.group(1)}", None
    if not _SEMVER.match(text):
        return version, None
    want = common.version_key(text)
    for tag in tags:
        if common.version_key(tag.version) == want:
            return f"b{tag.build}", None
    below = [tag for tag in tags if common.version_key(tag.version) < want]
    if not below:
        oldest = tags[0]
        return f"b{oldest.build}", (
            f"{engine} {text} is older than v{oldest.version}, the oldest semantic-version tag hfvram maps "
            f"(b{oldest.build}); its rules are taken from that build"
        )
    near = below[-1]
    return f"b{near.build}", (
        f"{engine} {text} is not in hfvram's tag table (newest listed: v{tags[-1].version} = b{tags[-1].build}); it is "
        f"taken as at least b{near.build} (v{near.version})"
    )


def tag_of_build(engine: str, build: int) -> SemverTag | None:
    """The semantic-version tag cut from exactly this build, if the table lists one."""
    return next((tag for tag in semver_tags(engine) if tag.build == build), None)


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
                "semver_tags": [
                    {"version": t.version, "build": t.build, "commit": t.commit, "date": t.date, "source": t.source}
                    for t in semver_tags(name)
                ],
            }
        )
    return {"schema": "hfvram.engine_list/1", "engines": rows}
