"""Bytes per element of every dtype the estimator meets, each from one table.

- ``hfvram/data/dtypes.toml`` ``[element_bytes]``: float, fp8 and integer dtypes under the names engines and
  users write (``bf16``, ``bfloat16``, ``fp8_e4m3``, ``int4`` …), and ``[kv_cache] ggml_types``: the ggml block
  types a KV cache may be stored in;
- ``hfvram/data/ggml_types.json``: ggml's types with their block sizes (``q8_0`` = 34 bytes per 32 elements …),
  generated from ``gguf.constants.GGML_QUANT_SIZES`` (``python -m hfvram.estimate.dtypes --write``; a test
  compares the two), so reading it needs neither the gguf package nor numpy.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from functools import cache
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from hfvram.datafiles import data_table

GGML_TYPES_FILE = "ggml_types.json"


@cache
def ggml_types() -> Mapping[str, tuple[int, int, int]]:
    """ggml type name (lower case) -> (type id, elements per block, bytes per block)."""
    text = resources.files("hfvram").joinpath("data").joinpath(GGML_TYPES_FILE).read_text(encoding="utf-8")
    table = json.loads(text)["types"]
    return {name: (int(row["id"]), int(row["block"]), int(row["bytes"])) for name, row in table.items()}


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


def generated_ggml_table() -> dict[str, Any]:
    """The content of ggml_types.json, from the gguf package (imports gguf and numpy: not for start-up)."""
    from gguf.constants import GGML_QUANT_SIZES

    types = {
        qtype.name.lower(): {"id": int(qtype), "block": block, "bytes": size}
        for qtype, (block, size) in sorted(GGML_QUANT_SIZES.items(), key=lambda item: int(item[0]))
    }
    return {
        "source": f"gguf.constants.GGML_QUANT_SIZES (gguf {metadata.version('gguf')}); "
        "regenerate with: python -m hfvram.estimate.dtypes --write",
        "types": types,
    }


def main(argv: list[str]) -> int:
    """``--write``: regenerate hfvram/data/ggml_types.json; otherwise print it."""
    table = generated_ggml_table()
    rows = ",\n".join(f"  {json.dumps(name)}: {json.dumps(row)}" for name, row in table["types"].items())
    text = f'{{\n "source": {json.dumps(table["source"])},\n "types": {{\n{rows}\n }}\n}}\n'
    if "--write" in argv:
        Path(__file__).resolve().parent.parent.joinpath("data", GGML_TYPES_FILE).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover - maintenance command
    raise SystemExit(main(sys.argv[1:]))
