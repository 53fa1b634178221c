"""What every engine profile shares: its name, its constants (``hfvram/engines/<engine>/rules.toml``), the
release versions whose accounting differs, and the rules in force for the release a user asked for.

A profile is built from the packaged TOML by default; a caller may hand it another table of the same shape
(a test that changes one constant and checks that both the figure and its explanation follow).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from hfvram.estimate import common, releases
from hfvram.estimate.types import EngineChoice


def rule_versions_of(data: Mapping[str, Any], fallback: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The versions whose rules differ, oldest first: the TOML's ``rule_versions`` list, else the keys of its
    ``[versions]`` tables, else ``fallback`` (an engine whose rules hfvram does not version)."""
    listed = data.get("rule_versions") or data.get("versions", {})
    return tuple(sorted(listed, key=common.version_key)) or fallback


class ProfileBase:
    """The profile boilerplate: subclasses set ``name`` and implement ``estimate``."""

    name: ClassVar[str]
    #: versions reported when the TOML lists none (its rules are then the ``[defaults]`` table alone)
    fallback_versions: ClassVar[tuple[str, ...]] = ()

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self.data: Mapping[str, Any] = common.load_engine_data(self.name) if data is None else data
        self.rule_versions: tuple[str, ...] = rule_versions_of(self.data, self.fallback_versions)
        #: rule version -> the constants in force at it, merged once (every estimate asks)
        self._merged: dict[str, dict[str, Any]] = {}

    def rules(self, requested: str | None) -> tuple[str, dict[str, Any]]:
        """The rule version ``requested`` maps to and the constants in force at it (defaults merged with every
        ``[versions]`` table up to it); a copy, which the caller may add its own entries to."""
        if requested is not None:
            # an engine numbered by builds maps its semantic-version tags onto them (llama.cpp v0.4.1 -> b10964)
            requested = releases.as_build(self.name, requested)[0]
        version = common.pick_rule_version(requested, self.rule_versions)
        merged = self._merged.get(version)
        if merged is None:
            merged = self._merged[version] = common.rules_for_version(self.data, version)
        return version, dict(merged)

    def first_version_with(self, key: str, value: object) -> str | None:
        """The oldest rule version whose ``[versions]`` table sets ``key`` to ``value`` (None if none does): the
        release a narrated rule change dates from, read from the same table the figure uses."""
        for version in sorted(self.data.get("versions", {}), key=common.version_key):
            if self.data["versions"][version].get(key) == value:
                return version
        return None


def unmodelled_flag_notes(choice: EngineChoice, flags: Mapping[str, str]) -> list[str]:
    """One warning per flag of ``flags`` (an engine TOML's ``unmodelled_flags``: flag -> what hfvram does not account
    for) that the command line sets and does not switch off."""
    notes = []
    for flag, left_out in flags.items():
        raw = common.setting(choice, flag)
        if raw is None or raw.strip().lower() in ("false", "0", "no", "off"):
            continue
        shown = f"--{flag}" if raw.strip().lower() in ("", "true") else f"--{flag} {raw[:60]}"
        notes.append(f"{shown}: hfvram does not account for {left_out}")
    return notes
