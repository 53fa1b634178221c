#!/usr/bin/env python3
"""Write header-only ``.safetensors`` files (8-byte length + JSON header, no tensor data) for a few corpus
models, derived from their real config.json through ``hfvram.readers.shapes``, into ``fixtures/hub/<org>/<name>/``.

Shards follow the real ``model.safetensors.index.json`` when the corpus has one (gemma-2-9b-it); otherwise the
tensors are cut greedily at the shard size the repo publishes and a DERIVED index is written beside them.
Every folder gets a ``DERIVED.md`` note: these files are NOT upstream bytes.

    python3 scripts/make_safetensors_fixtures.py [--out fixtures/hub]
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hfvram.readers.config import read_config  # noqa: E402
from hfvram.readers.shapes import DERIVED_SOURCE, tensors_from_spec  # noqa: E402
from hfvram.readers.tensors import TensorInfo  # noqa: E402

#: repo -> (shard count as upstream publishes it or None for a single model.safetensors, file name override)
PICKS: dict[str, dict] = {
    "meta-llama/Llama-3.1-8B-Instruct": {"shards": 4},
    "google/gemma-2-9b-it": {"shards": "index"},
    "Qwen/Qwen3-30B-A3B": {"shards": 16},
    "openai/gpt-oss-20b": {"shards": 3},
    "TheBloke/Llama-2-13B-chat-GPTQ": {"shards": None},
}
COMPANIONS = ("quantize_config.json", "hf_quant_config.json")


def header_file(tensors: list[TensorInfo]) -> bytes:
    """8-byte little-endian length + JSON header padded with spaces to a multiple of 8 (as safetensors does)."""
    table: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for tensor in sorted(tensors, key=lambda t: t.name):
        table[tensor.name] = {
            "dtype": tensor.dtype,
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + tensor.nbytes],
        }
        offset += tensor.nbytes
    raw = json.dumps(table, separators=(",", ":")).encode()
    raw += b" " * ((-len(raw)) % 8)
    return struct.pack("<Q", len(raw)) + raw


def split_evenly(tensors: list[TensorInfo], shards: int) -> list[list[TensorInfo]]:
    """Cut the tensor list, in order, into ``shards`` parts of about equal bytes."""
    total = sum(t.nbytes for t in tensors)
    target = total / shards
    parts: list[list[TensorInfo]] = [[]]
    filled = 0
    for tensor in tensors:
        if filled >= target * len(parts) and len(parts) < shards:
            parts.append([])
        parts[-1].append(tensor)
        filled += tensor.nbytes
    return parts


def write_repo(repo: str, out: Path, hub: Path) -> list[str]:
    folder = hub / repo
    config = json.loads((folder / "config.json").read_text())
    companions = {n: json.loads((folder / n).read_text()) for n in COMPANIONS if (folder / n).exists()}
    spec = read_config(config, companions=companions, use_transformers=False)
    tensors = tensors_from_spec(spec, config)
    target = out / repo
    target.mkdir(parents=True, exist_ok=True)
    shards = PICKS[repo]["shards"]
    written: list[str] = []
    if shards is None:
        (target / "model.safetensors").write_bytes(header_file(tensors))
        written.append("model.safetensors")
    elif shards == "index":
        weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
        by_shard: dict[str, list[TensorInfo]] = {}
        for tensor in tensors:
            by_shard.setdefault(weight_map[tensor.name], []).append(tensor)
        for shard, part in sorted(by_shard.items()):
            (target / shard).write_bytes(header_file(part))
            written.append(shard)
    else:
        weight_map = {}
        for number, part in enumerate(split_evenly(tensors, shards), start=1):
            shard = f"model-{number:05d}-of-{shards:05d}.safetensors"
            (target / shard).write_bytes(header_file(part))
            written.append(shard)
            weight_map.update({t.name: shard for t in part})
        index = {
            "metadata": {"total_size": sum(t.nbytes for t in tensors), "note": "DERIVED by hfvram"},
            "weight_map": dict(sorted(weight_map.items())),
        }
        (target / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        written.append("model.safetensors.index.json")
    note = (
        f"# DERIVED fixture files\n\n{', '.join(written)}: header-only safetensors (no tensor data) written by "
        f"`scripts/make_safetensors_fixtures.py` from this folder's real config.json ({DERIVED_SOURCE}).\n"
        "They are NOT upstream bytes; only config.json (and any real index / quantize config listed in "
        "fixtures/README.md) came from the corpus.\n"
    )
    (target / "DERIVED.md").write_text(note)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "fixtures" / "hub")
    parser.add_argument("--hub", type=Path, default=ROOT / "fixtures" / "hub", help="where the real configs are")
    args = parser.parse_args(argv)
    for repo in PICKS:
        files = write_repo(repo, args.out, args.hub)
        size = sum((args.out / repo / f).stat().st_size for f in files)
        print(f"{repo}: {len(files)} files, {size:,} bytes of headers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
