"""The estimator is pure (issue 22): no function of hfvram/estimate, hfvram/engines, hfvram/quant or hfvram/readers
takes a ``list[str]`` (warnings, notes, steps) and appends to it; each returns its notes and its caller collects
them in order."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "hfvram"
CHECKED = ("estimate", "engines", "quant", "readers")
MUTATORS = {"append", "extend", "insert"}
#: (path under hfvram/, function name) -> why it may mutate a list[str] parameter; empty: none needs to
ALLOWED: dict[tuple[str, str], str] = {}


def _list_str_params(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return {
        arg.arg
        for arg in every
        if arg.annotation is not None and ast.unparse(arg.annotation).replace(" ", "") in ("list[str]", "List[str]")
    }


def _mutated(function: ast.FunctionDef | ast.AsyncFunctionDef, names: set[str]) -> str | None:
    """The first of ``names`` that ``function`` appends, extends, inserts into or ``+=``s, None when none."""
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in names
        ):
            return node.func.value.id
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id in names:
            return node.target.id
    return None


def mutating_functions(source: str, path: str) -> list[str]:
    """``path:line name(parameter)`` for each function in ``source`` that mutates a ``list[str]`` parameter."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = _list_str_params(node)
        hit = _mutated(node, names) if names else None
        if hit is not None and (path, node.name) not in ALLOWED:
            found.append(f"{path}:{node.lineno} {node.name}({hit})")
    return found


def test_no_estimator_function_mutates_a_list_of_strings_it_is_given():
    offenders = []
    for folder in CHECKED:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            offenders += mutating_functions(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE)))
    assert offenders == [], "return the notes instead of appending to a list handed in:\n" + "\n".join(offenders)


def test_the_check_sees_append_extend_and_augmented_assignment():
    source = """
def appends(x: int, warnings: list[str]) -> int:
    warnings.append("a")
    return x

def extends(*, notes: list[str]) -> None:
    notes.extend(["b"])

def adds(steps: list[str]) -> None:
    steps += ["c"]

def returns(x: int) -> tuple[int, list[str]]:
    warnings: list[str] = []
    warnings.append("a")
    return x, warnings

def reads(names: list[str]) -> int:
    return len(names)
"""
    assert mutating_functions(source, "m.py") == [
        "m.py:2 appends(warnings)",
        "m.py:6 extends(notes)",
        "m.py:9 adds(steps)",
    ]
