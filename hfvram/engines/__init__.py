"""The engines: one package per engine under ``hfvram/engines/<package>/``, the registry built from those folders.

Each folder holds everything about one engine: ``engine.toml`` (its name, aliases, where it is listed, its note
page), ``rules.toml`` (its constants and ``[versions]`` rule sets), ``profile.py`` (the arithmetic, exposing
``PROFILE``, an :class:`EngineProfile`), and where the engine has one ``launch.py`` (its command-line writer).
Adding an engine is adding a folder (and its page under ``docs/engines/``); ``tests/test_engine_contract.py`` names
whatever a folder lacks. Only ``engine.toml`` is read to build the registry; an engine's code is imported when it
is first asked for, so that start-up stays fast.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from hfvram.datafiles import package_table
from hfvram.errors import UsageError
from hfvram.estimate.types import EngineChoice, Estimate, Hardware, Workload
from hfvram.spec import ModelSpec

FOLDER = Path(__file__).resolve().parent

#: the keys an ``engine.toml`` holds; any other key is refused when the registry loads
_IDENTITY_KEYS = frozenset({"name", "aliases", "rank", "docs"})
#: the keys it may hold (``command_line = false``: a library, no launch line; true when absent)
_OPTIONAL_KEYS = frozenset({"command_line"})


@dataclass(frozen=True)
class EngineEntry:
    """One engine as its folder declares it (``hfvram/engines/<package>/engine.toml``)."""

    #: the engine's name as users type it and documents print it ("llama.cpp")
    name: str
    #: the Python package holding it ("hfvram.engines.llamacpp")
    package: str
    #: other names accepted for it, lower case
    aliases: tuple[str, ...]
    #: where lists of engines place it (smaller first)
    rank: int
    #: its note page, relative to ``docs/engines/``
    docs: str
    #: whether it is started from a command line (then its folder has ``launch.py``); false for a library
    command_line: bool = True

    @property
    def folder(self) -> Path:
        return FOLDER / self.package.rpartition(".")[2]

    @property
    def profile_module(self) -> str:
        return f"{self.package}.profile"

    @property
    def launch_module(self) -> str | None:
        """The module holding its launch-line writer, None for an engine with no command line."""
        return f"{self.package}.launch" if (self.folder / "launch.py").is_file() else None

    def rules_data(self) -> Mapping[str, Any]:
        """The parsed ``rules.toml`` (shared: treat it as read-only)."""
        return package_table(f"engines/{self.folder.name}/rules.toml")


def _entry(folder: Path) -> EngineEntry:
    table = package_table(f"engines/{folder.name}/engine.toml")
    unknown = set(table) - _IDENTITY_KEYS - _OPTIONAL_KEYS
    missing = _IDENTITY_KEYS - set(table)
    if unknown or missing:
        raise ValueError(
            f"hfvram/engines/{folder.name}/engine.toml: unknown keys {sorted(unknown)}, missing {sorted(missing)}"
        )
    aliases = table["aliases"]
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a == a.lower() for a in aliases):
        raise ValueError(f"hfvram/engines/{folder.name}/engine.toml: aliases must be a list of lower-case names")
    if not isinstance(table["name"], str) or not isinstance(table["rank"], int) or not isinstance(table["docs"], str):
        raise ValueError(f"hfvram/engines/{folder.name}/engine.toml: name and docs are text, rank a whole number")
    if not isinstance(table.get("command_line", True), bool):
        raise ValueError(f"hfvram/engines/{folder.name}/engine.toml: command_line is true or false")
    return EngineEntry(
        name=table["name"],
        package=f"{__name__}.{folder.name}",
        aliases=tuple(aliases),
        rank=table["rank"],
        docs=table["docs"],
        command_line=table.get("command_line", True),
    )


@cache
def registry() -> dict[str, EngineEntry]:
    """Engine name -> its entry, in rank order: one entry per folder of ``hfvram/engines/`` with an
    ``engine.toml``."""
    entries = [_entry(path.parent) for path in FOLDER.glob("*/engine.toml")]
    entries.sort(key=lambda entry: (entry.rank, entry.name))
    names = [entry.name for entry in entries]
    if len(set(names)) != len(names):
        raise ValueError(f"two engine folders declare the same name: {names}")
    return {entry.name: entry for entry in entries}


@cache
def aliases() -> dict[str, str]:
    """Every accepted other name -> the engine's name."""
    table: dict[str, str] = {}
    for entry in registry().values():
        for alias in entry.aliases:
            if alias in table or alias in registry():
                raise ValueError(f"engine alias {alias!r} is declared twice")
            table[alias] = entry.name
    return table


def engine_names() -> tuple[str, ...]:
    """The engines' names, in the order lists show them."""
    return tuple(registry())


@runtime_checkable
class EngineProfile(Protocol):
    name: str
    #: versions whose accounting rules differ, oldest first ("0.19", "0.21"); the newest is the default
    rule_versions: tuple[str, ...]

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        """The four terms on the worst GPU, the usable memory, verdict and capacity."""
        ...


#: an engine release as typed after ``@``: a version (``0.19``, ``0.6.4.post1``, ``0.12.x``) or a commit / build id
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")


def canonical_name(text: str) -> str:
    """An engine name or alias, any case -> the engine's name (unchanged when it is neither)."""
    key = text.strip().lower()
    return aliases().get(key, key)


def parse_engine_name(text: str) -> tuple[str, str | None]:
    """``vllm@0.19`` -> ("vllm", "0.19"); aliases resolved; unknown names raise UsageError."""
    name, _, version = text.strip().partition("@")
    key = canonical_name(name)
    if key not in registry():
        known = ", ".join(sorted(registry()))
        raise UsageError(f"unknown engine {name[:80]!r}; known engines: {known}")
    if version and not _VERSION.fullmatch(version.strip()):
        raise UsageError(f"engine version {version[:80]!r}: expected a release such as 0.19 or 0.6.4.post1")
    return key, (version.strip() or None) if version else None


def get_profile(name: str) -> EngineProfile:
    key, _ = parse_engine_name(name)
    module = importlib.import_module(registry()[key].profile_module)
    profile: EngineProfile = module.PROFILE
    return profile


def load_engine_data(name: str) -> Mapping[str, Any]:
    """The parsed ``rules.toml`` of engine ``name`` (shared: treat it as read-only)."""
    return registry()[canonical_name(name)].rules_data()
