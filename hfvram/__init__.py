"""hfvram: will this Hugging Face model fit this hardware? Reads the model's real facts and says where every
gigabyte goes.

As a library: ``from hfvram import check, inspect, fit`` (see :mod:`hfvram.api`). They are loaded on first use,
so that ``import hfvram`` and the command line's start-up stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: what ``from hfvram import …`` offers, all from hfvram.api
_API_NAMES = (
    "check",
    "inspect",
    "fit",
    "CheckResult",
    "FitResult",
    "FitRow",
    "InspectResult",
    "MemoryTerms",
    "Capacity",
)
__all__ = [
    "Capacity",
    "CheckResult",
    "FitResult",
    "FitRow",
    "InspectResult",
    "MemoryTerms",
    "__version__",
    "check",
    "fit",
    "inspect",
]

if TYPE_CHECKING:
    from hfvram.api import Capacity, CheckResult, FitResult, FitRow, InspectResult, MemoryTerms, check, fit, inspect


def __getattr__(name: str) -> Any:
    if name in _API_NAMES:
        from hfvram import api

        return getattr(api, name)
    raise AttributeError(f"module 'hfvram' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API_NAMES])
