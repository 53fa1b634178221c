"""The packaged data tables the readers use (``hfvram/data/*.toml``), parsed once per process."""

from __future__ import annotations

import sys
from functools import lru_cache
from importlib import resources
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (pyproject: tomli for python_version < '3.11')
    import tomli as tomllib


@lru_cache(maxsize=None)
def data_table(name: str) -> dict[str, Any]:
    """``hfvram/data/<name>`` parsed; shared between callers, so treat it as read-only."""
    return tomllib.loads(resources.files("hfvram.data").joinpath(name).read_text(encoding="utf-8"))
