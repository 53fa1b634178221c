"""The packaged data tables (``hfvram/data/**/*.toml``: GPU catalogue, engine constants, reader rules), parsed
once per process."""

from __future__ import annotations

import sys
from functools import cache
from importlib import resources
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (pyproject: tomli for python_version < '3.11')
    import tomli as tomllib


@cache
def data_table(name: str) -> dict[str, Any]:
    """``hfvram/data/<name>`` parsed (``name`` may hold a sub-folder: ``engines/vllm.toml``); shared between
    callers, so treat it as read-only."""
    path = resources.files("hfvram").joinpath("data", *name.split("/"))
    return tomllib.loads(path.read_text(encoding="utf-8"))
