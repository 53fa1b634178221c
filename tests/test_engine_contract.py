"""The engine contract (issue 22): an engine is one folder, ``hfvram/engines/<package>/``, plus its note page, and
this test names whatever a folder lacks.

For each engine of the registry, :func:`contract_problems` checks that its folder is complete and consistent:
``engine.toml`` is one the registry reads (hfvram.engines.identity) and says what it holds; ``rules.toml`` is there
and every key in it is read by code (the engine's own folder or the shared estimator); ``profile.PROFILE`` is an
``EngineProfile`` under the registry's name whose rule versions are those its ``rules.toml`` declares; the note page
``docs/engines/<docs>`` exists and every ``docs/engines/…#anchor`` the folder cites is a heading there; an engine
started from a command line has a launch writer ``launch(est, choice, ref)`` and its flags in ``settings.toml`` (one
declared ``command_line = false`` in its ``engine.toml`` has neither); a start-up-log reader (``log.py``), where
there is one, has ``parse``; and the engine has its row in the tables keyed by engine that live outside the folders
(quant/gguf.toml's GGUF what-if policy). The checks are plain functions of an entry, so that the stub test below can
run them on a folder built in ``tmp_path`` and show that each missing piece is named.
"""

from __future__ import annotations

import importlib
import inspect
import re
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomllib
from test_repo_hygiene import anchors_of

from hfvram.engines import EngineEntry, EngineProfile, identity, registry

ROOT = Path(__file__).resolve().parent.parent
ENGINES = ROOT / "hfvram" / "engines"
NOTES = ROOT / "docs" / "engines"
#: the code shared by every engine, which may read any engine's constants: the estimator and the modules of
#: hfvram/engines/ itself (the registry, the profile base)
SHARED_SOURCES = (ROOT / "hfvram" / "estimate", ENGINES)
#: tables whose keys are data (release versions, semantic-version tags, GPU names, model types, vendors, policy numbers, the engine flags
#: named in a warning, KV dtype names), not settings read by name
DATA_KEYED_TABLES = frozenset(
    {
        "versions",
        "releases",
        "semver",
        "max_batch_size_by_gpu_name",
        "cudagraph_max_capture_size_by_architecture",
        "model_type_to_arch",
        "refused_vendors",
        "quant_policy_kv",
        "unmodelled_flags",
        "legacy_kv_bytes",
    }
)
#: a citation of an engine note from code or data: docs/engines/<page>.md, with or without #anchor
CITATION = re.compile(r"docs/engines/(?P<page>[\w-]+)\.md(?:#(?P<anchor>[\w-]+))?")
#: the parameters of a launch writer, in order
LAUNCH_PARAMETERS = ["est", "choice", "ref"]


# ---- the tables keyed by engine outside its folder ------------------------------------------------------------


def gguf_policy() -> Mapping[str, Any]:
    """hfvram/data/quant/gguf.toml [engines]: which engines run a GGUF what-if (``runs``), with a warning
    (``warned``) or refuse it with their own reason (``refused``), read through the quant package's loader."""
    from hfvram.quant.gguf_tensors import gguf_table

    table: Mapping[str, Any] = gguf_table()["engines"]
    return table


def gguf_policy_engines() -> set[str]:
    table = gguf_policy()
    return {*table["runs"], *table.get("warned", {}), *table.get("refused", {})}


# ---- the checks ----------------------------------------------------------------------------------------------


def _toml(path: Path, problems: list[str]) -> Mapping[str, Any] | None:
    if not path.is_file():
        problems.append(f"no {path.name} in its folder")
        return None
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        problems.append(f"{path.name} does not parse: {error}")
        return None


def _import(module: str, problems: list[str]) -> Any:
    try:
        return importlib.import_module(module)
    except Exception as error:  # any failure to import is a problem to name, not a crash of the check
        problems.append(f"{module} does not import: {type(error).__name__}: {error}")
        return None


def _toml_keys(table: Mapping[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key path the code is expected to look up (the keys of data-keyed tables are skipped)."""
    for key, value in table.items():
        here = (*path, key)
        if not (path and path[-1] in DATA_KEYED_TABLES):
            yield here
        if isinstance(value, dict):
            yield from _toml_keys(value, here)
        elif isinstance(value, list) and value and all(isinstance(row, dict) for row in value):
            for row in value:
                yield from _toml_keys(row, (*here, "[]"))


def _names_in_code(folder: Path) -> set[str]:
    """Every string literal of the engine's own code and of the shared estimator code, and every attribute read
    of its typed constants."""
    paths = sorted(folder.rglob("*.py"))
    paths += sorted(SHARED_SOURCES[0].rglob("*.py")) + sorted(SHARED_SOURCES[1].glob("*.py"))
    source = "\n".join(path.read_text(encoding="utf-8") for path in paths)
    named = set(re.findall(r"""["']([A-Za-z0-9_.\-]+)["']""", source))
    # an engine on the staged contract reads its constants as attributes of its typed Constants (constants.x)
    return named | set(re.findall(r"\bconstants\.([A-Za-z_]\w*)", source))


def identity_problems(entry: EngineEntry) -> list[str]:
    """engine.toml is what the registry reads (hfvram.engines.identity.engine_facts: every key known, typed) and
    says what the entry holds."""
    problems: list[str] = []
    if not (entry.folder / "__init__.py").is_file():
        problems.append("no __init__.py: the folder is not a package")
    table = _toml(entry.folder / "engine.toml", problems)
    if table is None:
        return problems
    try:
        facts = identity.engine_facts(table, "engine.toml")
    except (ValueError, KeyError, TypeError) as error:
        return [*problems, f"the registry refuses it: {error}"]
    for key in ("name", "docs", "rank", "command_line"):
        if facts[key] != getattr(entry, key):
            problems.append(f"engine.toml {key} {facts[key]!r} is not the registry's {getattr(entry, key)!r}")
    return problems


def rules_problems(entry: EngineEntry) -> list[str]:
    problems: list[str] = []
    rules = _toml(entry.folder / "rules.toml", problems)
    if rules is not None:
        named = _names_in_code(entry.folder)
        unread = sorted("/".join(path) for path in _toml_keys(rules) if path[-1] not in named)
        if unread:
            problems.append(f"rules.toml keys no code reads (its folder or hfvram/estimate): {unread}")
    return problems


def profile_problems(entry: EngineEntry) -> list[str]:
    problems: list[str] = []
    if not (entry.folder / "profile.py").is_file():
        return ["no profile.py in its folder"]
    module = _import(entry.profile_module, problems)
    profile = getattr(module, "PROFILE", None)
    if module is not None and not isinstance(profile, EngineProfile):
        problems.append("profile.PROFILE is missing or is not an EngineProfile (name, rule_versions, estimate)")
    if not isinstance(profile, EngineProfile):
        return problems
    if profile.name != entry.name:
        problems.append(f"profile.PROFILE.name {profile.name!r} is not the registry name {entry.name!r}")
    rules = _toml(entry.folder / "rules.toml", []) or {}  # a missing or broken rules.toml is rules_problems'
    declared = tuple(rules.get("rule_versions") or rules.get("versions", {}))
    if not profile.rule_versions:
        problems.append("profile.PROFILE.rule_versions is empty")
    elif declared and tuple(profile.rule_versions) != declared:
        problems.append(f"profile.PROFILE.rule_versions {profile.rule_versions} are not rules.toml's {declared}")
    never = sorted(set(rules.get("versions", {})) - set(profile.rule_versions))
    if never:
        problems.append(f"rules.toml [versions] tables no rule version selects: {never}")
    return problems


def notes_problems(entry: EngineEntry) -> list[str]:
    problems: list[str] = []
    if not (NOTES / entry.docs).is_file():
        problems.append(f"no note page docs/engines/{entry.docs}")
    anchors: dict[str, set[str]] = {}
    for path in sorted([*entry.folder.rglob("*.py"), *entry.folder.rglob("*.toml")]):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in CITATION.finditer(line):
                page, anchor = match["page"], match["anchor"]
                where = f"{path.name}:{lineno}"
                if not (NOTES / f"{page}.md").is_file():
                    problems.append(f"{where} cites docs/engines/{page}.md, which does not exist")
                    continue
                if page not in anchors:
                    anchors[page] = anchors_of(NOTES / f"{page}.md")
                if anchor is not None and anchor not in anchors[page]:
                    problems.append(f"{where} cites docs/engines/{page}.md#{anchor}, no such heading")
    return problems


def launch_problems(entry: EngineEntry) -> list[str]:
    has_file = (entry.folder / "launch.py").is_file()
    if not entry.command_line:
        return ["engine.toml says command_line = false, yet the folder has launch.py"] if has_file else []
    if not has_file:
        return ["no launch.py (a launch writer launch(est, choice, ref); a library says command_line = false)"]
    problems: list[str] = []
    module = _import(f"{entry.package}.launch", problems)
    writer = getattr(module, "launch", None)
    if module is not None and not callable(writer):
        problems.append("launch.py has no launch(est, choice, ref)")
    elif callable(writer) and list(inspect.signature(writer).parameters) != LAUNCH_PARAMETERS:
        problems.append(f"launch{inspect.signature(writer)} is not launch(est, choice, ref)")
    return problems


def log_problems(entry: EngineEntry) -> list[str]:
    """A start-up-log reader is optional; where the folder has one, calibrate can call it."""
    if not (entry.folder / "log.py").is_file():
        return []
    problems: list[str] = []
    module = _import(f"{entry.package}.log", problems)
    if module is not None and not callable(getattr(module, "parse", None)):
        problems.append("log.py has no parse(lines) for hfvram.calibrate.logs.parse_log")
    if module is not None and not callable(getattr(module, "recognises", lambda lines: False)):
        problems.append("log.py's recognises is not a function of the log's lines")
    return problems


def table_problems(entry: EngineEntry) -> list[str]:
    """Its flags (settings.toml [command_line], for an engine with a command line) and its row in the tables kept
    outside engine folders."""
    problems: list[str] = []
    if entry.command_line:
        settings = _toml(entry.folder / "settings.toml", problems)
        if settings is not None:
            try:
                identity.command_line(settings, "settings.toml")
            except (ValueError, KeyError, TypeError) as error:
                problems.append(f"settings.toml [command_line] is refused: {error}")
    if entry.name not in gguf_policy_engines():
        problems.append(
            f"hfvram/data/quant/gguf.toml [engines] does not say whether {entry.name!r} runs a GGUF what-if"
        )
    return problems


def contract_problems(entry: EngineEntry) -> list[str]:
    """Everything the engine's folder lacks or contradicts; empty for a complete engine."""
    return [
        *identity_problems(entry),
        *rules_problems(entry),
        *profile_problems(entry),
        *notes_problems(entry),
        *launch_problems(entry),
        *log_problems(entry),
        *table_problems(entry),
    ]


# ---- the registry's engines ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(registry()))
def test_every_engine_keeps_the_contract(name):
    entry = registry()[name]
    assert contract_problems(entry) == [], f"hfvram/engines/{entry.folder.name}/"


def test_every_engine_folder_is_registered():
    """A folder of code under hfvram/engines/ without an engine.toml is invisible to the registry."""
    folders = {path.parent for path in ENGINES.glob("*/*.py")}
    assert {entry.folder for entry in registry().values()} == folders


def test_the_engine_tables_name_only_registered_engines():
    """A row for a misspelt engine ("trtllm" for "tensorrt-llm") is a rule that never applies."""
    assert sorted(gguf_policy_engines() - set(registry())) == []


def test_the_log_readers_are_the_folders_log_modules():
    """calibrate dispatches to every engine folder's log.py, found by its file, and to no other module."""
    from hfvram.calibrate.logs import log_readers

    assert log_readers() == {
        name: f"{entry.package}.log" for name, entry in registry().items() if (entry.folder / "log.py").is_file()
    }
    assert {"vllm", "llama.cpp", "sglang", "ollama"} <= set(log_readers())


# ---- a stub engine: the contract names what it lacks ----------------------------------------------------------


#: a heading the MLX note does not have (spelt apart: tests/test_repo_hygiene.py reads this file's citations too)
STALE = "no-such-" + "heading"


@dataclass(frozen=True)
class StubEntry(EngineEntry):
    """An entry for an engine folder outside hfvram/engines/ (importable from ``root``)."""

    root: Path = Path()

    @property
    def folder(self) -> Path:
        return self.root / self.package


def _stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package: str, name: str, docs: str) -> StubEntry:
    """A copy of the MLX folder (a small, complete engine) as package ``package``, importable from ``tmp_path``."""
    shutil.copytree(ENGINES / "mlx", tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    engine_toml = tmp_path / package / "engine.toml"
    text = engine_toml.read_text(encoding="utf-8").replace('name = "mlx"', f'name = "{name}"')
    engine_toml.write_text(text.replace('docs = "mlx.md"', f'docs = "{docs}"'), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    facts = identity.engine_facts(tomllib.loads(engine_toml.read_text(encoding="utf-8")), str(engine_toml))
    return StubEntry(package=package, root=tmp_path, **facts)


def test_a_complete_copy_keeps_the_contract(tmp_path, monkeypatch):
    """The MLX folder copied whole, under MLX's name: nothing is missing (the stub below is not failed by default)."""
    entry = _stub(tmp_path, monkeypatch, "hfvram_contract_stub_whole", "mlx", "mlx.md")
    assert entry.folder == tmp_path / "hfvram_contract_stub_whole"
    assert contract_problems(entry) == []


def test_a_stub_engine_is_told_what_it_lacks(tmp_path, monkeypatch):
    """A new engine "stub" made from a copy of the MLX folder, not yet finished: no note page, no launch writer nor
    flags (settings.toml), a constant nobody reads, a stale citation, a profile still named mlx, no GGUF policy."""
    entry = _stub(tmp_path, monkeypatch, "hfvram_contract_stub_new", "stub", "stub.md")
    (entry.folder / "launch.py").unlink()
    (entry.folder / "settings.toml").unlink()
    with (entry.folder / "rules.toml").open("a", encoding="utf-8") as rules:
        rules.write("\n[stub_only]\nunread_knob = 1\n")
    with (entry.folder / "profile.py").open("a", encoding="utf-8") as profile:
        profile.write(f"# see docs/engines/mlx.md#{STALE} and docs/engines/stub.md#stub-kv\n")
    problems = contract_problems(entry)
    expected = [
        "rules.toml keys no code reads (its folder or hfvram/estimate): ['stub_only', 'stub_only/unread_knob']",
        "profile.PROFILE.name 'mlx' is not the registry name 'stub'",
        "no note page docs/engines/stub.md",
        f"cites docs/engines/mlx.md#{STALE}, no such heading",
        "cites docs/engines/stub.md, which does not exist",
        "no launch.py (a launch writer launch(est, choice, ref); a library says command_line = false)",
        "no settings.toml in its folder",
        "hfvram/data/quant/gguf.toml [engines] does not say whether 'stub' runs a GGUF what-if",
    ]
    assert len(problems) == len(expected), problems
    for want, got in zip(expected, problems):
        assert want in got


def test_a_library_engine_needs_no_launch_writer_and_may_not_have_one(tmp_path, monkeypatch):
    """``command_line = false`` (transformers): no launch.py is no problem, and no engine_args table is needed; a
    launch.py beside that declaration contradicts it."""
    entry = _stub(tmp_path, monkeypatch, "hfvram_contract_stub_library", "mlx", "mlx.md")
    library = StubEntry(**{**entry.__dict__, "command_line": False})
    assert launch_problems(library) == ["engine.toml says command_line = false, yet the folder has launch.py"]
    (entry.folder / "launch.py").unlink()
    assert launch_problems(library) == [] and table_problems(library) == []
    assert launch_problems(entry) == [
        "no launch.py (a launch writer launch(est, choice, ref); a library says command_line = false)"
    ]


def test_a_folder_that_does_not_import_is_named(tmp_path, monkeypatch):
    """An engine.toml the registry would refuse, a rules.toml that does not parse, a profile that does not import:
    each is named, none stops the check."""
    entry = _stub(tmp_path, monkeypatch, "hfvram_contract_stub_broken", "mlx", "mlx.md")
    (entry.folder / "profile.py").write_text("import hfvram_no_such_module\n", encoding="utf-8")
    (entry.folder / "rules.toml").write_text("this is = not [toml\n", encoding="utf-8")
    with (entry.folder / "engine.toml").open("a", encoding="utf-8") as engine_toml:
        engine_toml.write('\npool_kind = "memory"\n')
    problems = contract_problems(entry)
    assert any(p.startswith("the registry refuses it: engine.toml") and "pool_kind" in p for p in problems), problems
    assert any(p.startswith("rules.toml does not parse") for p in problems), problems
    assert any("hfvram_contract_stub_broken.profile does not import: ModuleNotFoundError" in p for p in problems)
