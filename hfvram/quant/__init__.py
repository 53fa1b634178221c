"""The ``--quant Q`` what-if: size a model as if its weights were stored in another format.

Each format family is a module of this package named in ``_FAMILIES`` (``hub_formats``: the Hugging Face Hub
formats). A family implements ``NAMES``, ``parse(name) -> Choice | None``, ``apply(spec, choice) -> ModelSpec`` and
``engine_rule(choice, engine, hardware) -> (refusal reason | None, warnings)``.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from hfvram.errors import UsageError

_FAMILIES: tuple[str, ...] = ("hub_formats",)


def families() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{name}") for name in _FAMILIES]


def parse(name: str) -> Any:
    """The choice ``name`` spells; a usage error (exit 2) listing every known name otherwise."""
    for module in families():
        choice = module.parse(name)
        if choice is not None:
            return choice
    known = ", ".join(n for module in families() for n in module.NAMES)
    raise UsageError(f"unknown quant {name!r}; known: {known}")
