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
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from hfvram.datafiles import package_table
from hfvram.engines import identity
from hfvram.engines.identity import CommandLine, DefaultRule, HubQuant, PlatformRefusal
from hfvram.errors import UsageError
from hfvram.estimate.types import EngineChoice, Estimate, Hardware, Workload
from hfvram.spec import ModelSpec

FOLDER = Path(__file__).resolve().parent


@dataclass(frozen=True)
class EngineEntry:
    """One engine as its folder declares it (``hfvram/engines/<package>/engine.toml``); the facts and the values
    they take are described in :mod:`hfvram.engines.identity`."""

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
    #: what it sizes its KV cache pool by: "memory", "context" or "none"
    kv_pool_sized_by: str
    #: how it runs on a mixed GPU set: "layer_split", "equal_shards", "even_split" or "one_gpu"
    mixed_set: str
    #: whether it is started from a command line of its own (its flags: ``settings.toml``, :meth:`command_line_table`;
    #: its launch line: ``launch.py``); false for a library (transformers)
    command_line: bool
    #: its ``[hub_quant]`` table as parsed (read through :attr:`hub_quant`)
    hub_quant_table: Mapping[str, Any] = field(repr=False, compare=False, hash=False)
    #: the accelerators it does not run on
    refused_on: tuple[PlatformRefusal, ...] = ()
    #: when a check without --engine assumes it
    default_when: tuple[DefaultRule, ...] = ()
    #: ``[weights_on_gpu] unless``: the settings without which every weight is on its GPUs (None: it may use RAM)
    weights_on_gpu_unless: tuple[str, ...] | None = None

    @cached_property
    def hub_quant(self) -> HubQuant:
        """The Hugging Face quantization formats it loads, on which GPUs: its ``[hub_quant]`` table, read and checked
        when first asked for (tests/test_engine_identity.py reads every engine's)."""
        return identity.hub_quant(self.hub_quant_table, f"hfvram/engines/{self.folder.name}/engine.toml [hub_quant]")

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

    def command_line_table(self) -> CommandLine | None:
        """Its command-line flags (``settings.toml`` [command_line], read and checked when first asked for); None
        for an engine with no command line."""
        return _command_line(self.folder.name) if self.command_line else None


@cache
def _command_line(folder: str) -> CommandLine:
    where = f"hfvram/engines/{folder}/settings.toml"
    if not (FOLDER / folder / "settings.toml").is_file():
        raise ValueError(f"hfvram/engines/{folder}/engine.toml: command_line = true, but {where} is missing")
    return identity.command_line(package_table(f"engines/{folder}/settings.toml"), where)


def _entry(folder: Path) -> EngineEntry:
    where = f"hfvram/engines/{folder.name}/engine.toml"
    facts = identity.engine_facts(package_table(f"engines/{folder.name}/engine.toml"), where)
    return EngineEntry(package=f"{__name__}.{folder.name}", **facts)


def _check_defaults(entries: list[EngineEntry]) -> None:
    """The default-engine rules of all folders: distinct orders, one fallback (a rule without conditions), last."""
    rules = sorted(
        ((rule.order, entry.name, rule) for entry in entries for rule in entry.default_when), key=lambda r: r[:2]
    )
    orders = [order for order, _, _ in rules]
    fallbacks = [name for _, name, rule in rules if not rule.conditional]
    if len(set(orders)) != len(orders) or len(fallbacks) != 1 or rules[-1][2].conditional:
        raise ValueError(
            "hfvram/engines/*/engine.toml [[default_when]]: each rule needs its own order, and exactly one rule "
            f"without conditions (the fallback) must come last; got orders {orders}, fallbacks {fallbacks}"
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
    _check_defaults(entries)
    return {entry.name: entry for entry in entries}


def default_rules() -> tuple[tuple[str, DefaultRule], ...]:
    """(engine, rule) of every ``[[default_when]]`` row, in the order they are tried (the fallback last)."""
    rules = [(rule.order, entry.name, rule) for entry in registry().values() for rule in entry.default_when]
    return tuple((name, rule) for _, name, rule in sorted(rules, key=lambda r: r[:2]))


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
