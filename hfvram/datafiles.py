"""The packaged data tables (``hfvram/data/**/*.toml``: GPU catalogue, reader rules; and each engine's
``hfvram/engines/<engine>/*.toml``), loaded once per process.

Each TOML has a pre-built JSON twin in ``hfvram/data/built/`` (``scripts/build_data_tables.py``), read instead of
parsing the TOML (tomllib is pure Python: ~16 ms for the GPU catalogue); the twin records the CRC-32 and length of
the TOML it was built from and is used only while they match, so an edited TOML is never shadowed by a stale build.
"""

from __future__ import annotations

import json
import zlib
from functools import cache
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent
DATA = PACKAGE / "data"
BUILT = DATA / "built"


def _parse_toml(raw: bytes) -> dict[str, Any]:
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 (pyproject: tomli for python_version < '3.11')
        import tomli as tomllib
    return tomllib.loads(raw.decode("utf-8"))


def _built(path: Path, raw: bytes) -> dict[str, Any] | None:
    try:
        entry = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("source_length") != len(raw):
        return None
    if entry.get("source_crc32") != zlib.crc32(raw) or not isinstance(entry.get("table"), dict):
        return None
    return entry["table"]


@cache
def data_table(name: str) -> dict[str, Any]:
    """``hfvram/data/<name>`` parsed (``name`` may hold a sub-folder: ``engines/vllm.toml``); shared between
    callers, so treat it as read-only."""
    raw = DATA.joinpath(*name.split("/")).read_bytes()
    built = _built(BUILT.joinpath(*name.split("/")).with_suffix(".json"), raw)
    return built if built is not None else _parse_toml(raw)


@cache
def package_table(name: str) -> dict[str, Any]:
    """``hfvram/<name>`` parsed, for a table kept beside the code it belongs to (``engines/vllm/rules.toml``); its
    built twin is ``hfvram/data/built/package/<name>`` with ``.json``. Shared between callers: treat it as
    read-only."""
    raw = PACKAGE.joinpath(*name.split("/")).read_bytes()
    built = _built(BUILT.joinpath("package", *name.split("/")).with_suffix(".json"), raw)
    return built if built is not None else _parse_toml(raw)


@cache
def ggml_types() -> tuple[dict[int, tuple[str, int, int]], dict[int, str]]:
    """ggml type id -> (name, block elements, bytes per block), and llama.cpp file type id -> name, from
    ``hfvram/data/ggml_types.json`` (generated from the gguf package's tables, which import numpy)."""
    entry = json.loads((DATA / "ggml_types.json").read_bytes())
    types = {int(k): (v["name"], int(v["block"]), int(v["bytes"])) for k, v in entry["types"].items()}
    return types, {int(k): str(v) for k, v in entry["file_types"].items()}
