#!/usr/bin/env python3
"""Pre-build the packaged TOML tables (hfvram/data/**/*.toml) as JSON, and the ggml type table from gguf.

TOML is parsed in pure Python (gpus.toml alone takes ~16 ms per run); the same table as JSON loads in well
under a millisecond. Each built file records the CRC-32 and length of the TOML it was built from, and
``hfvram.datafiles`` falls back to parsing the TOML when they differ, so a stale build can never be read;
tests/test_data_tables.py checks every built table against its TOML.

hfvram/data/ggml_types.json: ggml type id -> name, block size, bytes per block (gguf.GGML_QUANT_SIZES /
GGMLQuantizationType) and the llama.cpp file types (gguf.LlamaFileType), so that reading a GGUF header does not
import gguf.constants (which pulls in numpy). Needs the gguf package (a dependency of hfvram).

    python3 scripts/build_data_tables.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "hfvram" / "data"
BUILT = DATA / "built"
GGML_TYPES = DATA / "ggml_types.json"


PACKAGE = ROOT / "hfvram"
#: tables kept beside the code they belong to (each engine's folder), built under BUILT / "package"
PACKAGE_TABLES = "engines/*/*.toml"


def source_name(toml: Path) -> str:
    return toml.relative_to(DATA if DATA in toml.parents else PACKAGE).as_posix()


def built_path(toml: Path) -> Path:
    if DATA in toml.parents:
        return BUILT / toml.relative_to(DATA).with_suffix(".json")
    return BUILT / "package" / toml.relative_to(PACKAGE).with_suffix(".json")


def built_table(toml: Path) -> str:
    raw = toml.read_bytes()
    entry = {
        "source": source_name(toml),
        "source_crc32": zlib.crc32(raw),
        "source_length": len(raw),
        "table": tomllib.loads(raw.decode("utf-8")),
    }
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"


def ggml_types() -> str:
    from importlib.metadata import version

    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

    entry = {
        "source": f"gguf {version('gguf')}: gguf.constants.GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType",
        "types": {
            str(int(qtype)): {"name": qtype.name, "block": block, "bytes": size}
            for qtype, (block, size) in sorted(GGML_QUANT_SIZES.items(), key=lambda item: int(item[0]))
        },
        "file_types": {str(int(ftype)): ftype.name for ftype in sorted(LlamaFileType, key=int)},
    }
    assert set(entry["types"]) == {str(int(t)) for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}
    lines = [f"{json.dumps(key)}: {json.dumps(value, separators=(',', ':'))}" for key, value in entry.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def outputs() -> dict[Path, str]:
    tomls = [toml for toml in sorted(DATA.rglob("*.toml")) if BUILT not in toml.parents]
    tomls += sorted(PACKAGE.glob(PACKAGE_TABLES))
    built = {built_path(toml): built_table(toml) for toml in tomls}
    return {**built, GGML_TYPES: ggml_types()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the built files are up to date")
    args = parser.parse_args()
    stale = []
    for path, text in outputs().items():
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'stale' if args.check else 'wrote'} {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
