"""How many bytes to ask for first when reading a safetensors header over HTTP.

A header is JSON: one entry per tensor (name, dtype, shape, data offsets). The config shapes predict the
tensor list (``hfvram.readers.shapes``), so the header's length can be predicted before any byte of it is
read; asking for that much (plus a margin) in the first Range saves the continuation round trip that a
fixed small first Range costs on large (MoE) shards. A prediction that falls short only costs that one
continuation; nothing here decides a fact of the model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from hfvram.readers.tensors import TensorInfo

KIB = 1024
#: what every entry spends besides its name, dtype, shape and offsets: `"":{"dtype":"","shape":[],"data_offsets":[,]},`
ENTRY_OVERHEAD = len('"":{"dtype":"","shape":[],"data_offsets":[,]},')
#: the 8-byte length prefix and the metadata entry transformers writes
HEADER_OVERHEAD = 8 + len('{"__metadata__":{"format":"pt"}}')
#: safety over the prediction (shards hold tensors in checkpoint order, which the shapes only approximate)
MARGIN = 1.05
MARGIN_BYTES = 4 * KIB


def header_bytes(tensors: Sequence[TensorInfo], shard_data_bytes: int) -> int:
    """Predicted length of a safetensors file's header (length prefix included) holding ``tensors``; data
    offsets are written with as many digits as the shard's data size has."""
    digits = len(str(max(1, shard_data_bytes)))
    entries = sum(
        len(t.name) + len(t.dtype) + len(",".join(map(str, t.shape))) + ENTRY_OVERHEAD + 2 * digits for t in tensors
    )
    return HEADER_OVERHEAD + entries


def tensors_by_shard(tensors: Sequence[TensorInfo], shard_count: int) -> list[list[TensorInfo]]:
    """The tensors spread over ``shard_count`` shards in order, each shard filled to an equal share of the
    bytes (how ``save_pretrained`` fills shards up to ``max_shard_size``)."""
    shards: list[list[TensorInfo]] = [[] for _ in range(max(1, shard_count))]
    total = sum(t.nbytes for t in tensors)
    if total <= 0:
        return shards
    before = 0
    for tensor in tensors:
        index = min(len(shards) - 1, int((before + tensor.nbytes / 2) * len(shards) / total))
        shards[index].append(tensor)
        before += tensor.nbytes
    return shards


#: the least first Range sized from a prediction (the 8-byte length and the start of the JSON)
MIN_FIRST_RANGE = 1 * KIB


def first_ranges(tensors: Sequence[TensorInfo], shards: Sequence[str], fallback: int) -> dict[str, int]:
    """Bytes of the first Range per shard (sorted shard names, in checkpoint order): the predicted header
    plus a margin, rounded up to a KiB, with no fixed floor (a 16.8 kB header is not read as 32 KiB); a
    prediction that falls short costs one exact Range for the rest, sized from the 8-byte length. ``fallback``
    serves every shard when the shapes predict no tensor (models outside the shape rules, e.g. encoders)."""
    if not tensors or not shards:
        return {name: fallback for name in shards}
    total = sum(t.nbytes for t in tensors)
    per_shard = tensors_by_shard(tensors, len(shards))
    ranges = {}
    for name, held in zip(sorted(shards), per_shard):
        predicted = header_bytes(held, total // len(shards)) * MARGIN + MARGIN_BYTES
        ranges[name] = max(MIN_FIRST_RANGE, -(-int(predicted) // KIB) * KIB)
    return ranges


def predicted_tensors(config_text: str) -> list[TensorInfo]:
    """The tensor list config.json's shapes give (hfvram's own rules, no transformers); empty when the config
    cannot be read that way (the caller then falls back to a fixed first Range)."""
    from hfvram.errors import HfvramError
    from hfvram.readers.config import read_config
    from hfvram.readers.shapes import tensors_from_spec

    try:
        config = json.loads(config_text)
        if not isinstance(config, dict):
            return []
        return list(tensors_from_spec(read_config(config, use_transformers=False)))
    except (HfvramError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return []
