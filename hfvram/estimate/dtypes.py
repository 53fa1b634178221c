"""Bytes per element of every dtype the estimator meets, each from one table.

- ``hfvram/data/dtypes.toml`` ``[element_bytes]``: float, fp8 and integer dtypes under the names engines and
  users write (``bf16``, ``bfloat16``, ``fp8_e4m3``, ``int4`` …), and ``[kv_cache] ggml_types``: the ggml block
  types a KV cache may be stored in;
- ``hfvram/data/ggml_types.json``: ggml's types with their block sizes (``q8_0`` = 34 bytes per 32 elements …),
  generated from the gguf package by ``scripts/build_data_tables.py`` (a test compares the two), read through
  :func:`hfvram.datafiles.ggml_types` so that neither the gguf package nor numpy is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from hfvram.datafiles import data_table
from hfvram.datafiles import ggml_types as ggml_type_table


@cache
def ggml_types() -> Mapping[str, tuple[int, int, int]]:
    """ggml type name (lower case) -> (type id, elements per block, bytes per block)."""
    by_id, _ = ggml_type_table()
    return {name.lower(): (type_id, block, size) for type_id, (name, block, size) in by_id.items()}


def ggml_blocks() -> dict[str, tuple[int, int]]:
    """ggml type name -> (elements per block, bytes per block)."""
    return {name: (block, size) for name, (_, block, size) in ggml_types().items()}


@cache
def element_bytes() -> Mapping[str, float]:
    """Dtype name -> bytes per element: the float / fp8 / integer names of dtypes.toml plus the ggml block
    types a KV cache may use, at their block size (``q8_0`` -> 34 / 32)."""
    data = data_table("dtypes.toml")
    sizes: dict[str, float] = {name: float(size) for name, size in data["element_bytes"].items()}
    blocks = ggml_types()
    for name in data["kv_cache"]["ggml_types"]:
        _, block, size = blocks[name]
        sizes[name] = size / block
    return sizes
