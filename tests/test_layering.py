"""The one-way flow of imports (docs/architecture.md, "The flow"), read from the source: every ``import`` of every
module of hfvram, those inside functions and under ``TYPE_CHECKING`` included, parsed with ``ast``.

The tiers, bottom up, and what each may import (its own tier always):

- base: ``errors``, ``redaction``, ``datafiles``, ``memo`` (and ``hfvram.__version__``) import no other tier;
- spec: ``hfvram.spec``, the ModelSpec and its parts;
- readers: parse file texts and headers into a ModelSpec; they never fetch (no sources), never estimate;
- sources: fetch bytes (Hub, folders, cache, catalogue) and hand them to the readers; never estimate or report;
- estimator: ``estimate``, ``engines``, ``quant`` (and the ``prices`` table): pure arithmetic on a spec; never
  reads files or the network (no sources), never reports, never wires;
- calibrate: start-up logs and calibration files (read through the sources' capped reads), applied to estimates
  (an engine's own log reader, ``engines/<engine>/log.py``, builds on its toolkit ``calibrate.logs``);
- report: renders documents; of the estimator it may import the typed results (``hfvram.estimate.types``) only;
- top: ``pipeline`` (wiring), ``api``, ``compare``, ``compare_engines``, ``pack``, ``scan``, ``settings``,
  ``completion``, and the command line (``cli``, ``commands``, ``__main__``), which nothing below it imports:
  the pipeline and the API never import click's modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "hfvram"

TIER_OF = {
    "hfvram.errors": "base",
    "hfvram.redaction": "base",
    "hfvram.datafiles": "base",
    "hfvram.memo": "base",
    "hfvram.__version__": "base",
    "hfvram.spec": "spec",
    "hfvram.readers": "readers",
    "hfvram.sources": "sources",
    "hfvram.estimate": "estimator",
    "hfvram.engines": "estimator",
    "hfvram.quant": "estimator",
    "hfvram.prices": "estimator",
    "hfvram.calibrate": "calibrate",
    "hfvram.report": "report",
}
MAY_IMPORT = {
    "base": {"base"},
    "spec": {"base", "spec"},
    "readers": {"base", "spec", "readers"},
    "sources": {"base", "spec", "readers", "sources"},
    "estimator": {"base", "spec", "readers", "estimator"},
    "calibrate": {"base", "spec", "sources", "estimator", "calibrate"},
    "report": {"base", "spec", "report"},
    "top": {"base", "spec", "readers", "sources", "estimator", "calibrate", "report", "top"},
}
#: the estimator's typed results: what a report may read of the estimator
REPORT_MAY_READ = ("hfvram.estimate.types",)
#: an engine's start-up-log reader (hfvram/engines/<engine>/log.py, imported only when a log is read) builds on the
#: log toolkit of the calibrate tier
LOG_READER, LOG_TOOLKIT = "log", "hfvram.calibrate.logs"
#: the command line (click): imported only by itself
COMMAND_LINE = ("hfvram.cli", "hfvram.commands", "hfvram.__main__")

#: deliberate exceptions, each with its reason: (importing module, imported module)
ALLOWED = {
    # inspect has no estimate: its KV figures use the KV type's element size and name (estimate.common's dtype
    # table) at render time; to go when inspect's figures become a typed result of the pipeline
    ("hfvram.report.jsonout", "hfvram.estimate.common"),
    # plan_lines is llama.cpp's own narration of its --fit plan (text only, no figure computed), kept in the engine's
    # folder ("one engine, one place"); the reports print its lines
    ("hfvram.report.markdown", "hfvram.engines.llamacpp.offload_plan"),
    ("hfvram.report.table", "hfvram.engines.llamacpp.offload_plan"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def tier(module: str) -> str:
    for prefix, name in TIER_OF.items():
        if module == prefix or module.startswith(prefix + "."):
            return name
    return "top"


def imports_in(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, hfvram module) for every import in a module's source; ``from X import name`` names the submodule when
    ``X.name`` is one, and ``from hfvram import name`` the API (the package's lazy names) unless it is the version."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "hfvram"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            if base.split(".")[0] != "hfvram":
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in MODULES:
                    found.append((node.lineno, full))
                elif base == "hfvram":
                    found.append((node.lineno, "hfvram.__version__" if alias.name == "__version__" else "hfvram.api"))
                else:
                    found.append((node.lineno, base))
    return found


def imports_of(module: str) -> list[tuple[int, str]]:
    path = MODULES[module]
    return imports_in(path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py")


def violations(module: str, found: list[tuple[int, str]], where: str) -> list[str]:
    """One line per import against the flow: file and line, who imports what, and the rule it breaks."""
    mine = tier(module)
    out = []
    for line, target in found:
        theirs = tier(target)
        if (module, target) in ALLOWED:
            continue
        if module.startswith("hfvram.engines.") and module.rpartition(".")[2] == LOG_READER and target == LOG_TOOLKIT:
            continue
        if target.startswith(COMMAND_LINE) and not module.startswith(COMMAND_LINE):
            why = "the command line is imported only by itself"
        elif theirs not in MAY_IMPORT[mine] and not (mine == "report" and target.startswith(REPORT_MAY_READ)):
            why = f"{mine} may import {', '.join(sorted(MAY_IMPORT[mine]))}" + (
                " and the estimator's typed results (hfvram.estimate.types)" if mine == "report" else ""
            )
        else:
            continue
        out.append(f"{where}:{line}: {module} ({mine}) imports {target} ({theirs}): {why}")
    return out


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    where = str(MODULES[module].relative_to(PACKAGE.parent))
    found = violations(module, imports_of(module), where)
    assert not found, "imports against the flow:\n" + "\n".join(found)


def test_every_exception_is_still_needed():
    """An allowed import that is gone is taken off the list (the list only shrinks)."""
    present = {(module, target) for module in MODULES for _, target in imports_of(module)}
    assert present >= ALLOWED, f"no longer imported, drop from ALLOWED: {sorted(ALLOWED - present)}"


def test_the_checker_names_imports_against_the_flow():
    """Imports inside functions, relative ones and those under TYPE_CHECKING are all seen, each named with its line."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from hfvram.pipeline import Request\n"
        "def f():\n"
        "    from ..report import table\n"
        "    import hfvram.estimate.core\n"
        "    from hfvram.spec import ModelSpec\n"
    )
    module = "hfvram.readers.probe"
    found = violations(module, imports_in(source, module), "hfvram/readers/probe.py")
    assert [line.split(": ", 1)[0] for line in found] == [
        "hfvram/readers/probe.py:3",
        "hfvram/readers/probe.py:5",
        "hfvram/readers/probe.py:6",
    ]
    assert "imports hfvram.pipeline (top): readers may import base, readers, spec" in found[0]
    assert "imports hfvram.report.table (report)" in found[1]
    assert "imports hfvram.estimate.core (estimator)" in found[2]
    assert violations("hfvram.api", [(1, "hfvram.commands.check")], "hfvram/api.py") == [
        "hfvram/api.py:1: hfvram.api (top) imports hfvram.commands.check (top): the command line is imported only by "
        "itself"
    ]
