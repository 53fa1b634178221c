"""One validation pass over the counts and sizes a config.json states, with the bounds of hfvram/data/bounds.toml.

It runs before anything iterates over the config — transformers' config classes build per-layer lists from
``num_hidden_layers``, the shape builder loops over layers, MTP blocks, experts and vision layers — so a hostile
``num_hidden_layers: 1e12`` ends in one MalformedFileError naming the field instead of unbounded time and memory.
The walk itself is iterative (no recursion) and visits each JSON node once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from hfvram.datafiles import data_table
from hfvram.errors import MalformedFileError

#: a string a config class could turn into a number ("1e12", " 42", "-1", "inf")
_NUMERIC = re.compile(r"^\s{0,64}[-+]?(?:\d|\.\d|inf|nan)", re.IGNORECASE)

__all__ = ["bound", "check_count", "config_bounds", "gguf_bounds", "validate_config"]


def bounds_table() -> dict[str, Any]:
    return data_table("bounds.toml")


def bound(section: str, key: str) -> int:
    """A scalar bound of bounds.toml: ``bound("hardware", "maximum_gpu_count")``."""
    return int(bounds_table()[section][key])


@cache
def config_bounds() -> dict[str, tuple[str, int]]:
    """config.json key -> (fact, maximum) from the [config.*] tables."""
    table: dict[str, tuple[str, int]] = {}
    for fact, entry in bounds_table()["config"].items():
        for key in entry["keys"]:
            table[key] = (fact, int(entry["maximum"]))
    return table


@cache
def gguf_bounds() -> dict[str, int]:
    """GGUF metadata key suffix (after ``{arch}.``) -> maximum, from the ``gguf`` lists of the [config.*] tables."""
    return {key: int(entry["maximum"]) for entry in bounds_table()["config"].values() for key in entry.get("gguf", ())}


@cache
def _list_keys() -> frozenset[str]:
    return frozenset(bounds_table()["lists"]["keys"])


def _show(value: Any) -> str:
    """A number as the file states it, short (a 400-digit integer is not echoed whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"a {len(str(abs(value)))}-digit integer"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_count(value: Any, maximum: int, *, file: str, field: str, minimum: int = 0) -> int:
    """``value`` as an int in [minimum, maximum]: finite, whole, not a boolean; else MalformedFileError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MalformedFileError(f"expected a whole number, got {type(value).__name__}", file=file, field=field)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise MalformedFileError(f"expected a finite whole number, got {_show(value)}", file=file, field=field)
        if not value.is_integer():
            raise MalformedFileError(f"expected a whole number, got {_show(value)}", file=file, field=field)
        if abs(value) > maximum:  # not converted: int(1e300) is a 301-digit integer
            raise MalformedFileError(
                f"implausible value {_show(value)} (hfvram's bound: at most {maximum:,})", file=file, field=field
            )
        value = int(value)
    if value < minimum:
        raise MalformedFileError(f"expected a number >= {minimum}, got {_show(value)}", file=file, field=field)
    if value > maximum:
        raise MalformedFileError(
            f"implausible value {_show(value)} (hfvram's bound: at most {maximum:,})", file=file, field=field
        )
    return value


#: JSON values that hold nothing nested
_SCALARS = (str, int, float)


def validate_config(config: Mapping[str, Any], *, filename: str = "config.json") -> None:
    """Check every bounded key of ``config`` at any depth (see the module docstring); MalformedFileError naming
    the first offending field (its dotted path) otherwise."""
    counts = config_bounds()
    list_keys = _list_keys()
    list_max = bound("lists", "maximum")
    stack: list[tuple[str, Any]] = [("", config)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, (dict, Mapping)):  # dict first: JSON objects are dicts, the ABC check is slow
            for key, value in node.items():
                if value is None:
                    continue
                if isinstance(value, _SCALARS) and key not in counts and key not in list_keys:
                    continue  # the common case: nothing to check, nothing nested
                # the dotted path is spelled out only where it is used (an error, a nested value)
                if key in counts and isinstance(value, (int, float)) and not isinstance(value, bool):
                    check_count(value, counts[key][1], file=filename, field=f"{path}.{key}" if path else str(key))
                elif key in counts and isinstance(value, str) and _NUMERIC.match(value):
                    # a config class might convert it: a count is a JSON number
                    raise MalformedFileError(
                        f"expected a number, got the string {_show(value)}",
                        file=filename,
                        field=f"{path}.{key}" if path else str(key),
                    )
                elif key in list_keys and isinstance(value, (list, str)) and len(value) > list_max:
                    raise MalformedFileError(
                        f"implausible length {len(value):,} (hfvram's bound: at most {list_max:,} entries)",
                        file=filename,
                        field=f"{path}.{key}" if path else str(key),
                    )
                if isinstance(value, (Mapping, list)):
                    stack.append((f"{path}.{key}" if path else str(key), value))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                if not isinstance(value, _SCALARS) and isinstance(value, (Mapping, list)):
                    stack.append((f"{path}[{index}]", value))
