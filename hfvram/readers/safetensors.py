"""safetensors headers: the 8-byte length, the JSON tensor table, shards, and the exact weights they describe.

Format (huggingface/safetensors README): ``u64 little-endian N`` + ``N`` bytes of UTF-8 JSON
``{"name": {"dtype": "BF16", "shape": [..], "data_offsets": [start, end]}, "__metadata__": {str: str}}`` + data.
Every malformed input raises ``MalformedFileError`` naming the file and the field or tensor.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from hfvram.errors import MalformedFileError
from hfvram.readers.bounds import bound
from hfvram.readers.tensors import (
    TensorInfo,
    dtype_bits,
    hf_component,
    params_active,
    weights_from_tensor_list,
)
from hfvram.spec import Quantization, Weights

__all__ = [
    "MAX_HEADER_BYTES",
    "SafetensorsHeader",
    "TensorInfo",
    "file_reader",
    "header_from_json",
    "header_json",
    "header_length",
    "header_text",
    "merge_shards",
    "params_active",
    "parse_header",
    "parse_header_full",
    "read_safetensors_header",
    "read_safetensors_header_full",
    "read_sharded_headers",
    "shard_files",
    "weights_from_tensors",
]

#: The safetensors reference implementation refuses headers above 100 MB (``MAX_HEADER_SIZE``).
MAX_HEADER_BYTES = 100_000_000
#: No real tensor has more dimensions than this; a longer shape is a corrupt header.
MAX_RANK = 16
#: Larger than any storage that exists (2**60 bytes = 1 EiB): an overflowing shape, not a tensor.
MAX_TENSOR_BYTES = 1 << 60

Reader = Callable[[int, int], bytes]


@dataclass(frozen=True)
class SafetensorsHeader:
    tensors: Mapping[str, TensorInfo]
    metadata: Mapping[str, str] = field(default_factory=dict)
    header_length: int = 0

    @property
    def data_bytes(self) -> int:
        return max((t.offsets[1] for t in self.tensors.values() if t.offsets), default=0)

    @property
    def file_size(self) -> int:
        """Exact size of the whole file: 8 + header + data."""
        return 8 + self.header_length + self.data_bytes


def header_length(first8: bytes, *, filename: str, available: int | None = None) -> int:
    """The JSON header's length from the file's first 8 bytes; checks the 100 MB limit and the bytes available."""
    if len(first8) < 8:
        raise MalformedFileError(
            f"file too short for a safetensors header ({len(first8)} bytes)", file=filename, field="header length"
        )
    length = int.from_bytes(first8[:8], "little")
    if length < 2:
        raise MalformedFileError(
            f"header length {length} is too small for a JSON object", file=filename, field="header length"
        )
    if length > MAX_HEADER_BYTES:
        raise MalformedFileError(
            f"header length {length} exceeds the 100 MB safetensors limit", file=filename, field="header length"
        )
    # below the format's limit, hfvram's own: what it parses within its memory bound (bounds.toml says why)
    cap = bound("safetensors", "maximum_header_bytes")
    if length > cap:
        raise MalformedFileError(
            f"header length {length} exceeds hfvram's {cap // 2**20} MiB cap on a safetensors header (the most it "
            "parses within its memory bound; real headers are well under 1 MiB a shard)",
            file=filename,
            field="header length",
        )
    if available is not None and 8 + length > available:
        raise MalformedFileError(
            f"header length {length} exceeds the {available} bytes available", file=filename, field="header length"
        )
    return length


class _Entry(tuple):
    """A tensor entry already checked while the JSON was parsed: ``(dtype, shape, nbytes, offsets, keys)``, the
    tuples :class:`TensorInfo` keeps (a 262,144-tensor header's per-entry dicts and lists cost ~110 MB more). It
    prints as the dict it was (``keys``: their order), so an error that quotes one reads as before."""

    __slots__ = ()

    def as_dict(self) -> dict[str, object]:
        values = {"dtype": self[0], "shape": list(self[1]), "data_offsets": list(self[3])}
        return {key: values[key] for key in self[4]}

    def __repr__(self) -> str:
        return repr(self.as_dict())

    __str__ = __repr__


#: the six orders of an entry's keys, shared by every entry
_KEY_ORDERS: dict[tuple[str, ...], tuple[str, ...]] = {}


def _checked_entry(pairs: list[tuple[str, object]]) -> _Entry | None:
    """``pairs`` as an :class:`_Entry` when they are a valid tensor entry (the checks of :func:`_tensor_info`, which
    reports whatever fails them with the tensor's name); None for anything else."""
    keys = (pairs[0][0], pairs[1][0], pairs[2][0])
    if frozenset(keys) != _ENTRY_KEYS:
        return None
    entry = dict(pairs)
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    bits = dtype_bits(dtype) if type(dtype) is str else None
    if bits is None or type(shape) is not list or type(offsets) is not list or len(offsets) != 2:
        return None
    if not all(type(v) is int for v in shape) or type(offsets[0]) is not int or type(offsets[1]) is not int:
        return None
    if len(shape) > MAX_RANK or (shape and min(shape) < 0) or offsets[0] < 0 or offsets[1] < offsets[0]:
        return None
    elements = math.prod(shape)
    nbytes = (elements * bits + 7) // 8
    if elements * bits > MAX_TENSOR_BYTES * 8 or offsets[1] - offsets[0] != nbytes:
        return None
    return _Entry((dtype, tuple(shape), nbytes, (offsets[0], offsets[1]), _KEY_ORDERS.setdefault(keys, keys)))


def _no_duplicates(filename: str):
    def hook(pairs: list[tuple[str, object]]) -> dict[str, object] | _Entry:
        if len(pairs) == 3 and (entry := _checked_entry(pairs)) is not None:
            return entry
        result = dict(pairs)  # (in C: a header's 262,144 tensors cost a Python loop 3 s)
        if len(result) != len(pairs):
            seen: set[str] = set()
            key = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
            raise MalformedFileError(f"duplicate key {key[:80]!r}", file=filename, field=key[:80])
        return result

    return hook


def header_text(raw_json: bytes | bytearray | memoryview | str, filename: str) -> str:
    """A header's JSON text: its tensor count checked against the bound before anything is built (each tensor costs
    ~0.5 KB parsed: 1M tensors would be 0.5 GB), then decoded. The caller can drop the bytes once it has the text
    (a 95 MB header held twice, as bytes and as text, while it is parsed: 90 MB of the peak)."""
    counted = bytes(raw_json) if isinstance(raw_json, memoryview) else raw_json
    if isinstance(counted, str):
        tensors_stated = counted.count('"data_offsets"')
    else:
        tensors_stated = counted.count(b'"data_offsets"')
    limit = bound("safetensors", "maximum_tensors_per_file")
    if tensors_stated > limit:
        raise MalformedFileError(
            f"header lists {tensors_stated} tensors, more than any checkpoint file holds ({limit})",
            file=filename,
            field="header",
        )
    if isinstance(counted, str):
        return counted
    try:
        return counted.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedFileError(f"header is not UTF-8 (byte {exc.start})", file=filename, field="header") from None


def header_json(text: str, filename: str) -> dict:
    """The parsed header of :func:`header_text`'s text: every key once, valid tensor entries already checked
    (:class:`_Entry`), for :func:`header_from_json`."""
    try:
        parsed = json.loads(
            text, object_pairs_hook=_no_duplicates(filename), parse_constant=lambda c: _bad_constant(c, filename)
        )
    except MalformedFileError:
        raise
    except RecursionError:
        raise MalformedFileError("header JSON nested too deeply", file=filename, field="header") from None
    except ValueError as exc:  # JSONDecodeError and int-digit limits
        raise MalformedFileError(f"header is not valid JSON ({exc})", file=filename, field="header") from None
    if type(parsed) is _Entry:  # the whole header is one tensor's entry: its first key names a tensor
        raise MalformedFileError("tensor entry is not an object", file=filename, field=parsed[4][0])
    if not isinstance(parsed, dict):
        raise MalformedFileError("header is not a JSON object", file=filename, field="header")
    return parsed


def _bad_constant(constant: str, filename: str):
    raise MalformedFileError(f"non-standard JSON constant {constant}", file=filename, field="header")


def _int_list(value: object, *, filename: str, where: str) -> list[int]:
    # (type() is int: JSON's integers, never a bool; one pass in C per list, a header holds 262,144 tensors)
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise MalformedFileError(f"must be a list of integers, got {str(value)[:80]}", file=filename, field=where)
    return value


_ENTRY_KEYS = frozenset({"dtype", "shape", "data_offsets"})


def _tensor_info(name: str, entry: object, filename: str) -> TensorInfo:
    if not isinstance(entry, dict):
        raise MalformedFileError("tensor entry is not an object", file=filename, field=name)
    if entry.keys() != _ENTRY_KEYS:
        unknown, missing = set(entry) - _ENTRY_KEYS, _ENTRY_KEYS - set(entry)
        raise MalformedFileError(
            f"tensor entry has missing {sorted(missing)} / unknown {sorted(unknown)} keys", file=filename, field=name
        )
    dtype = entry["dtype"]
    bits = dtype_bits(dtype) if isinstance(dtype, str) else None
    if bits is None:
        raise MalformedFileError(f"unknown dtype {str(dtype)[:40]!r}", file=filename, field=f"{name}.dtype")
    shape = _int_list(entry["shape"], filename=filename, where=f"{name}.shape")
    if len(shape) > MAX_RANK or (shape and min(shape) < 0):
        raise MalformedFileError(f"invalid shape {shape[: MAX_RANK + 1]}", file=filename, field=f"{name}.shape")
    elements = math.prod(shape)
    if elements * bits > MAX_TENSOR_BYTES * 8:
        raise MalformedFileError(f"shape {shape} overflows", file=filename, field=f"{name}.shape")
    offsets = _int_list(entry["data_offsets"], filename=filename, where=f"{name}.data_offsets")
    if len(offsets) != 2 or offsets[0] < 0 or offsets[1] < offsets[0]:
        raise MalformedFileError(f"invalid data_offsets {offsets[:3]}", file=filename, field=f"{name}.data_offsets")
    nbytes = (elements * bits + 7) // 8  # = tensor_nbytes(dtype, shape)
    if offsets[1] - offsets[0] != nbytes:
        raise MalformedFileError(
            f"data_offsets span {offsets[1] - offsets[0]} bytes but {dtype} {shape} needs {nbytes}",
            file=filename,
            field=f"{name}.data_offsets",
        )
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape), nbytes=nbytes, offsets=(offsets[0], offsets[1]))


def _check_contiguous(tensors: Iterable[TensorInfo], filename: str) -> None:
    """The format requires the data section to be covered exactly, without gaps or overlaps."""
    expected = 0
    for tensor in sorted(tensors, key=lambda t: t.offsets or (0, 0)):
        assert tensor.offsets is not None
        if tensor.offsets[0] != expected:
            raise MalformedFileError(
                f"data_offsets start at {tensor.offsets[0]}, expected {expected} (gap or overlap)",
                file=filename,
                field=f"{tensor.name}.data_offsets",
            )
        expected = tensor.offsets[1]


def check_data_end(tensors: Iterable[TensorInfo], data_bytes: int, *, filename: str, past_only: bool = False) -> None:
    """A file's tensors must end where its data section ends (safetensors' own check,
    ``MetadataIncompleteBuffer``): offsets that run past the file's end describe bytes the file does not hold (a
    truncated download, or a hostile header). A file of the header alone (no data bytes at all: how hfvram's
    header fixtures and header-only copies are made) is sized from its header. ``past_only``: only offsets past
    the end are refused (a Hub file, whose size is the one its answer states)."""
    end = max((tensor.offsets[1] for tensor in tensors if tensor.offsets is not None), default=0)
    if end > data_bytes if past_only else (data_bytes and end != data_bytes):
        where = "past the end of the file" if end > data_bytes else "short of the end of the file"
        raise MalformedFileError(
            f"tensor data ends at byte {end} of the data section, {where} ({data_bytes} bytes after the header)",
            file=filename,
            field="data_offsets",
        )


def header_table(tensors: Mapping[str, TensorInfo]) -> list[list]:
    """A header's tensors as rows ``[name, dtype, shape, start, end]``: the facts the readers need of a header
    (what the facts cache stores in place of its text, whose ``__metadata__`` and padding they never read)."""
    return [[t.name, t.dtype, list(t.shape), *(t.offsets or (0, 0))] for t in tensors.values()]


def tensors_from_table(rows: object, *, filename: str) -> dict[str, TensorInfo]:
    """The rows of :func:`header_table` as tensors again, each checked as a header's entry is (so a reader's fix
    applies to stored facts too); anything else is a :class:`MalformedFileError`."""
    limit = bound("safetensors", "maximum_tensors_per_file")
    if not isinstance(rows, list) or len(rows) > limit:
        raise MalformedFileError(f"stored tensor table is not a list of at most {limit} rows", file=filename)
    tensors: dict[str, TensorInfo] = {}
    for row in rows:
        if not (isinstance(row, list) and len(row) == 5 and isinstance(row[0], str)) or row[0] in tensors:
            raise MalformedFileError("stored tensor table has a malformed row", file=filename)
        name, dtype, shape, start, end = row
        tensors[name] = _tensor_info(name, {"dtype": dtype, "shape": shape, "data_offsets": [start, end]}, filename)
    _check_contiguous(tensors.values(), filename)
    return tensors


def header_from_json(parsed: dict, *, filename: str, length: int) -> SafetensorsHeader:
    """The header of :func:`header_json`'s result, which it empties as it goes (its entries are not needed twice)."""
    metadata = parsed.pop("__metadata__", {})
    if not isinstance(metadata, dict) or any(not isinstance(v, str) for v in metadata.values()):
        raise MalformedFileError("__metadata__ must map strings to strings", file=filename, field="__metadata__")
    tensors = {
        name: TensorInfo(name, entry[0], entry[1], entry[2], entry[3])
        if type(entry) is _Entry
        else _tensor_info(name, entry, filename)
        for name, entry in parsed.items()
    }
    parsed.clear()
    _check_contiguous(tensors.values(), filename)
    return SafetensorsHeader(tensors=tensors, metadata=metadata, header_length=length)


def parse_header_full(raw_json: bytes, *, filename: str, length: int | None = None) -> SafetensorsHeader:
    parsed = header_json(header_text(raw_json, filename), filename)
    return header_from_json(parsed, filename=filename, length=length if length is not None else len(raw_json))


def parse_header(raw_json: bytes, *, filename: str) -> dict[str, TensorInfo]:
    """Tensors of a safetensors JSON header (``__metadata__`` is kept by ``parse_header_full``)."""
    return dict(parse_header_full(raw_json, filename=filename).tensors)


def read_safetensors_header_full(read: Reader, *, filename: str, available: int | None = None) -> SafetensorsHeader:
    length = header_length(read(0, 8), filename=filename, available=available)
    raw = read(8, length)
    if len(raw) < length:
        raise MalformedFileError(
            f"truncated: header needs {length} bytes, only {len(raw)} available", file=filename, field="header"
        )
    return parse_header_full(raw[:length], filename=filename, length=length)


def read_safetensors_header(read: Reader, *, filename: str) -> dict[str, TensorInfo]:
    """Read a header through ``read(offset, length)`` (a local file or HTTP Range requests)."""
    return dict(read_safetensors_header_full(read, filename=filename).tensors)


def file_reader(path) -> Reader:
    """``read(offset, length)`` over a local file (opened per call, so nothing stays open)."""

    def read(offset: int, length: int) -> bytes:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)

    return read


# ---- sharded checkpoints ------------------------------------------------------------------------


def shard_files(index: Mapping[str, object], *, filename: str = "model.safetensors.index.json") -> list[str]:
    """The shard file names an index's ``weight_map`` points at, in first-seen order."""
    weight_map = index.get("weight_map") if isinstance(index, Mapping) else None
    if not isinstance(weight_map, Mapping) or not weight_map:
        raise MalformedFileError("missing or empty weight_map", file=filename, field="weight_map")
    files: dict[str, None] = {}
    for tensor, shard in weight_map.items():
        if (
            not isinstance(shard, str)
            or not shard
            or shard.startswith("/")
            or ".." in shard.replace("\\", "/").split("/")
        ):
            raise MalformedFileError(f"invalid shard name {shard!r}", file=filename, field=f"weight_map.{tensor}")
        files[shard] = None
    return list(files)


def merge_shards(
    headers: Mapping[str, Mapping[str, TensorInfo]],
    *,
    index: Mapping[str, object] | None = None,
    filename: str = "model.safetensors.index.json",
) -> dict[str, TensorInfo]:
    """One tensor table from every shard's header; a tensor in two shards, or in a shard the index
    does not name for it, is malformed."""
    merged: dict[str, TensorInfo] = {}
    owner: dict[str, str] = {}
    stated = index.get("weight_map") if index else None
    weight_map: Mapping[str, object] = stated if isinstance(stated, Mapping) else {}
    for shard, tensors in headers.items():
        for name, info in tensors.items():
            if name in merged:
                raise MalformedFileError(f"tensor in both {owner[name]} and {shard}", file=filename, field=name)
            if weight_map and name in weight_map and weight_map[name] != shard:
                raise MalformedFileError(
                    f"index maps it to {weight_map[name]} but it is in {shard}", file=filename, field=name
                )
            merged[name] = info
            owner[name] = shard
    return merged


def read_sharded_headers(
    index: Mapping[str, object], open_shard: Callable[[str], Reader], *, filename: str = "model.safetensors.index.json"
) -> dict[str, TensorInfo]:
    """Read every shard's header (``open_shard(name)`` gives its ``read(offset, length)``) and merge them."""
    headers = {
        shard: read_safetensors_header(open_shard(shard), filename=shard)
        for shard in shard_files(index, filename=filename)
    }
    return merge_shards(headers, index=index, filename=filename)


# ---- weights ------------------------------------------------------------------------------------


def weights_from_tensors(
    tensors: Iterable[TensorInfo],
    *,
    quantization: Quantization | None = None,
    source: str = "",
    num_layers: int | None = None,
) -> Weights:
    """Exact bytes (per component and dtype) and unpacked parameter counts of a safetensors tensor table.

    ``num_layers`` (the config's num_hidden_layers) lets layers past it count as MTP.
    """
    return weights_from_tensor_list(
        tensors,
        component_of=lambda name: hf_component(name, num_layers=num_layers),
        quantization=quantization,
        source=source,
        exact=True,
    )
