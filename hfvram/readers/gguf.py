"""GGUF headers: a bounded streaming parser (metadata + tensor infos, no tensor data) and the ModelSpec they give.

Layout (ggml docs/gguf.md, versions 2 and 3, little-endian): magic ``GGUF``, u32 version, u64 tensor_count,
u64 kv_count, kv pairs (string key, u32 value type, value), tensor infos (string name, u32 n_dims, u64 dims[n],
u32 ggml type, u64 offset), padding to ``general.alignment``, data. The parser reads only what it needs from
``stream.read(n)`` so it works on a header-only prefix and on a growing HTTP Range stream; every count and
length is checked before anything is allocated, and large arrays (tokenizer vocabularies) are skipped, keeping
only their length and item type (the reading itself: hfvram.readers.gguf_reader).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from hfvram.datafiles import data_table, ggml_types
from hfvram.errors import MalformedFileError
from hfvram.readers.bounds import check_count, gguf_bounds
from hfvram.readers.gguf_reader import (
    DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    MAX_DIMS,
    MAX_KEPT_STRING,
    MAX_KV,
    MAX_TENSORS,
    SUPPORTED_VERSIONS,
    SkippedArray,
    Stream,
    _Reader,
)
from hfvram.readers.gguf_reader import SkippedString as SkippedString  # read back from the facts cache
from hfvram.readers.tensors import TensorInfo, gguf_component, spec_with_weights, weights_from_tensor_list
from hfvram.spec import Layer, LayerKind, ModelSpec, Quantization, Weights


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    ggml_type: int
    type_name: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: Mapping[str, object]
    tensors: tuple[GGUFTensor, ...]
    #: byte offset just past the last tensor info
    header_end: int
    alignment: int
    #: byte offset of the data section (header_end rounded up to alignment)
    data_start: int
    filename: str = ""


# ---- the header ---------------------------------------------------------------------------------


def _ggml_types() -> dict[int, tuple[str, int, int]]:
    """ggml type id -> (name, block elements, bytes per block): ``hfvram/data/ggml_types.json``, generated from
    ``gguf.constants.GGML_QUANT_SIZES`` (importing gguf.constants would pull in numpy)."""
    return ggml_types()[0]


def _ggml_type(type_id: int, tensor: str, filename: str) -> tuple[str, int, int]:
    found = _ggml_types().get(type_id)
    if found is None:
        raise MalformedFileError(f"unknown ggml type {type_id}", file=filename, field=tensor)
    return found


#: the largest general.alignment read: llama.cpp writes 32 (GGUF_DEFAULT_ALIGNMENT); a file aligned to 2^63 would
#: place its data past any disk, so what it says about its size is not believed
MAX_ALIGNMENT = 1 << 20


def _align(offset: int, alignment: int) -> int:
    return offset + (-offset) % alignment


def _read_metadata(reader: _Reader, kv_count: int) -> dict[str, object]:
    """The ``kv_count`` metadata pairs (``kv_count`` already bounded by MAX_KV)."""
    metadata: dict[str, object] = {}
    for index in range(kv_count):
        key = reader.string(f"metadata[{index}].key", hard_limit=MAX_KEPT_STRING)
        if not isinstance(key, str) or not key:
            raise reader.fail("empty or over-long key", f"metadata[{index}].key")
        if key in metadata:
            raise reader.fail("duplicate key", key)
        value_type = reader.u32(key)
        reader.seen_keys.add(key)
        metadata[key] = reader.value(value_type, key)
        reader.kv_left -= 1
        if key == "tokenizer.ggml.model":
            reader.tokenizer_model = metadata[key]
    return metadata


def _read_tensor_infos(reader: _Reader, tensor_count: int, alignment: int) -> list[GGUFTensor]:
    """The ``tensor_count`` tensor infos (already bounded by MAX_TENSORS), each checked: a unique name, at most
    MAX_DIMS dimensions, no overflow, whole blocks, and offsets that follow one another at ``alignment``."""
    filename = reader.filename
    tensors: list[GGUFTensor] = []
    names: set[str] = set()
    expected_offset = 0
    reader.tensor_infos_start = reader.pos
    for index in range(tensor_count):
        reader.tensors_done, reader.tensors_left = index, tensor_count - index
        name = reader.string(f"tensor[{index}].name", hard_limit=MAX_KEPT_STRING)
        if not isinstance(name, str) or not name or name in names:
            raise reader.fail(f"empty, over-long or duplicate tensor name {name!r}", f"tensor[{index}].name")
        names.add(name)
        n_dims = reader.u32(name)
        if n_dims > MAX_DIMS:
            raise reader.fail(f"{n_dims} dimensions (at most {MAX_DIMS})", name)
        shape = tuple(reader.u64(name) for _ in range(n_dims))
        if any(d >= 1 << 63 for d in shape) or math.prod(shape) >= 1 << 63:
            raise reader.fail(f"shape {shape} overflows", name)
        type_id = reader.u32(name)
        type_name, block, type_size = _ggml_type(type_id, name, filename)
        offset = reader.u64(name)
        numel = math.prod(shape)
        if shape and shape[0] % block:
            raise reader.fail(f"first dimension {shape[0]} is not a multiple of the {type_name} block {block}", name)
        nbytes = numel // block * type_size
        if offset != expected_offset:
            raise reader.fail(f"offset {offset}, expected {expected_offset}", name)
        expected_offset = _align(offset + nbytes, alignment)
        tensors.append(
            GGUFTensor(name=name, ggml_type=type_id, type_name=type_name, shape=shape, offset=offset, nbytes=nbytes)
        )
    return tensors


def read_gguf_header(stream: Stream, *, filename: str) -> GGUFHeader:
    """Parse a GGUF file's metadata and tensor infos from ``stream`` (reads no tensor data)."""
    reader = _Reader(stream, filename)
    magic = reader.exact(4, "magic")
    if magic != GGUF_MAGIC:
        raise MalformedFileError(f"bad magic {magic!r}, not a GGUF file", file=filename, field="magic")
    version = reader.u32("version")
    if version not in SUPPORTED_VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        if swapped in (1, 2, 3):
            raise MalformedFileError("big-endian GGUF is not supported", file=filename, field="version")
        raise MalformedFileError(
            f"unsupported GGUF version {version} (supported: 2, 3)", file=filename, field="version"
        )
    tensor_count = reader.u64("tensor_count")
    kv_count = reader.u64("kv_count")
    reader.kv_left, reader.tensors_left = min(kv_count, MAX_KV), min(tensor_count, MAX_TENSORS)
    hint = getattr(stream, "set_end_estimate", None)
    if callable(hint):  # a Range stream sizes its windows from the parse (see _Reader.header_end_estimate)
        hint(reader.header_end_estimate)
    if tensor_count > MAX_TENSORS:
        raise MalformedFileError(
            f"tensor_count {tensor_count} exceeds {MAX_TENSORS}", file=filename, field="tensor_count"
        )
    if kv_count > MAX_KV:
        raise MalformedFileError(f"kv_count {kv_count} exceeds {MAX_KV}", file=filename, field="kv_count")

    metadata = _read_metadata(reader, kv_count)
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if (
        isinstance(alignment, bool)
        or not isinstance(alignment, int)
        or not 0 < alignment <= MAX_ALIGNMENT
        or alignment & (alignment - 1)
    ):
        raise MalformedFileError(
            f"alignment {str(alignment)[:40]} is not a power of two up to {MAX_ALIGNMENT:,}",
            file=filename,
            field="general.alignment",
        )

    tensors = _read_tensor_infos(reader, tensor_count, alignment)
    header_end = reader.pos
    return GGUFHeader(
        version=version,
        metadata=metadata,
        tensors=tuple(tensors),
        header_end=header_end,
        alignment=alignment,
        data_start=_align(header_end, alignment),
        filename=filename,
    )


def read_gguf_file(path) -> GGUFHeader:
    with open(path, "rb") as handle:
        return read_gguf_header(handle, filename=str(path))


def gguf_file_size(header: GGUFHeader) -> int:
    """Exact size of the whole file from its tensor infos: data start + end of the last tensor, aligned.

    Writers (ggml ``gguf_write_out``, gguf-py ``GGUFWriter.write_tensors_to_file``) pad after every tensor,
    the last one included; a file without tensors ends with its tensor infos."""
    if not header.tensors:
        return header.header_end
    last = max(header.tensors, key=lambda t: t.offset)
    return header.data_start + _align(last.offset + last.nbytes, header.alignment)


# ---- split files --------------------------------------------------------------------------------

_SPLIT = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def split_gguf_names(filename: str) -> list[str]:
    """All part names of a split GGUF (``name-00001-of-00003.gguf`` → the three parts); a single file → itself."""
    match = _SPLIT.match(filename)
    if not match:
        return [filename]
    count = int(match.group("count"))
    if count < 1 or int(match.group("no")) > count or int(match.group("no")) < 1:
        raise MalformedFileError(
            f"invalid split name (part {match.group('no')} of {count})", file=filename, field="file name"
        )
    prefix = match.group("prefix")
    return [f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


# ---- ModelSpec from the header ------------------------------------------------------------------


def _arch_table() -> dict:
    return data_table("gguf_arch.toml")


def _file_type_name(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    name = ggml_types()[1].get(value)  # gguf.constants.LlamaFileType, generated
    if name is None:
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _per_layer(value: object, n_layers: int, key: str, filename: str) -> list[int] | None:
    """A scalar hparam broadcast to every layer, or a per-layer array checked for length."""
    if value is None:
        return None
    maximum = gguf_bounds().get(key.split(".", 1)[-1])
    if isinstance(value, bool):
        return [int(value)] * n_layers
    if _finite_number(value):
        number = cast("int | float", value)
        count = check_count(number, maximum, file=filename, field=key) if maximum is not None else int(number)
        return [count] * n_layers
    if isinstance(value, list) and len(value) == n_layers and all(_finite_number(v) for v in value):
        if maximum is not None:
            return [check_count(v, maximum, file=filename, field=f"{key}[{i}]") for i, v in enumerate(value)]
        return [int(v) for v in value]
    raise MalformedFileError(
        f"expected a number or {n_layers} numbers, got {str(value)[:80]}", file=filename, field=key
    )


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class _Facts:
    """Reads ``{arch}.…`` keys and records where each fact came from."""

    def __init__(self, metadata: Mapping[str, object], arch: str, filename: str) -> None:
        self.metadata, self.arch, self.filename = metadata, arch, filename
        self.provenance: dict[str, str] = {}

    def get(self, suffix: str, fact: str | None = None):
        key = f"{self.arch}.{suffix}"
        value = self.metadata.get(key)
        if value is not None and fact:
            self.provenance[fact] = f"{self.filename}: {key}"
        return value

    def int(self, suffix: str, fact: str | None = None) -> int | None:
        value = self.get(suffix, fact)
        if value is None:
            return None
        if not _finite_number(value):
            raise MalformedFileError(
                f"expected a number, got {str(value)[:80]}", file=self.filename, field=f"{self.arch}.{suffix}"
            )
        maximum = gguf_bounds().get(suffix)
        if maximum is not None:
            return check_count(value, maximum, file=self.filename, field=f"{self.arch}.{suffix}")
        return int(value)


def _swa_layers(facts: _Facts, n_layers: int) -> tuple[list[bool], int | None, LayerKind, list[str]]:
    """Which layers are windowed, the window, whether windows are sliding or chunked, and the warnings."""
    table = _arch_table()
    window = facts.int("attention.sliding_window", "sliding_window")
    chunked = table["chunked"].get(facts.arch)
    if chunked and window != 0:
        period = int(chunked["period"])
        facts.provenance["layers"] = f"llama.cpp {facts.arch}: chunked attention period {period}"
        facts.provenance["attention_chunk_size"] = f"llama.cpp {facts.arch}: n_chunk {chunked['window']}"
        return [il % period < period - 1 for il in range(n_layers)], int(chunked["window"]), LayerKind.CHUNKED, []
    if not window:
        return [False] * n_layers, None, LayerKind.SLIDING, []
    pattern = facts.get("attention.sliding_window_pattern", "layers")
    if isinstance(pattern, list):
        if len(pattern) != n_layers:
            raise MalformedFileError(
                f"{len(pattern)} entries for {n_layers} layers",
                file=facts.filename,
                field=f"{facts.arch}.attention.sliding_window_pattern",
            )
        return [bool(v) for v in pattern], window, LayerKind.SLIDING, []
    if isinstance(pattern, int) and not isinstance(pattern, bool):
        period = pattern
    elif facts.arch in table["swa_pattern"]:
        period = int(table["swa_pattern"][facts.arch])
        facts.provenance["layers"] = f"llama.cpp {facts.arch}: set_swa_pattern({period})"
    else:
        # llama.cpp applies the window to every layer when no pattern is known (set_swa_pattern default 1 → all)
        warning = f"{facts.arch}: sliding_window {window} with no layer pattern; applied to every layer"
        facts.provenance["layers"] = (
            "derived: no sliding_window_pattern; the window applies to every layer (llama.cpp set_swa_pattern default)"
        )
        return [True] * n_layers, window, LayerKind.SLIDING, [warning]
    if period <= 0:
        return [True] * n_layers, window, LayerKind.SLIDING, []
    return [il % period < period - 1 for il in range(n_layers)], window, LayerKind.SLIDING, []


def _recurrent_layer(facts: _Facts, kind: LayerKind, moe: bool) -> Layer:
    d_conv = facts.int("ssm.conv_kernel", "ssm_conv_kernel") or 0
    d_inner = facts.int("ssm.inner_size", "ssm_inner_size") or 0
    d_state = facts.int("ssm.state_size", "ssm_state_size") or 0
    n_group = facts.int("ssm.group_count", "ssm_group_count") or 0
    n_heads = facts.int("ssm.time_step_rank", "ssm_time_step_rank") or 0
    # llama.cpp src/llama-hparams.cpp n_embd_r / n_embd_s (docs/engines/llamacpp.md#llamacpp-recurrent-state); state kept in F32
    conv = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
    facts.provenance["recurrent_state"] = (
        "derived: conv (ssm.conv_kernel − 1) × (ssm.inner_size + 2 × "
        "ssm.group_count × ssm.state_size) + ssm ssm.state_size × ssm.inner_size "
        "(llama.cpp n_embd_r / n_embd_s)"
    )
    facts.provenance["state_dtype_bytes"] = "derived: llama.cpp keeps the recurrent state in F32"
    return Layer(
        kind=kind,
        conv_state_elems=conv,
        ssm_state_elems=d_state * d_inner,
        state_dtype_bytes=4.0,
        state_heads=n_heads,
        moe=moe,
    )


@dataclass(frozen=True)
class _HeadDims:
    """The attention head sizes a GGUF states (None where it does not)."""

    key: int | None
    value: int | None
    key_swa: int | None
    value_swa: int | None
    kv_lora_rank: int | None
    #: the file has MLA metadata (``attention.key_length_mla``): converted for llama.cpp's MLA cache
    mla: bool
    rope: int | None


def _head_dims(facts: _Facts) -> _HeadDims:
    key, value = facts.int("attention.key_length", "head_dim"), facts.int("attention.value_length", "head_dim_v")
    key_swa = facts.int("attention.key_length_swa", "head_dim_swa")
    value_swa = facts.int("attention.value_length_swa", "head_dim_v_swa")
    kv_lora_rank = facts.int("attention.kv_lora_rank", "kv_lora_rank")
    mla = f"{facts.arch}.attention.key_length_mla" in facts.metadata
    rope = facts.int("rope.dimension_count", "qk_rope_head_dim") if kv_lora_rank else None
    return _HeadDims(key, value, key_swa, value_swa, kv_lora_rank, mla, rope)


def _layers(facts: _Facts, n_layers: int, moe_layers: set[int]) -> tuple[tuple[Layer, ...], list[str]]:
    """The blocks' layers and the warnings reading them gave."""
    arch, filename = facts.arch, facts.filename
    n_embd = facts.int("embedding_length", "hidden_size")
    if n_embd is not None and n_embd < 1:  # config.json refuses a width of 0: so does a GGUF
        raise MalformedFileError("a width of 0", file=filename, field=f"{arch}.embedding_length")
    heads = _per_layer(
        facts.get("attention.head_count", "num_attention_heads"), n_layers, f"{arch}.attention.head_count", filename
    )
    if heads is not None and not any(heads) and not _recurrent_plan(facts)[0]:
        raise MalformedFileError(
            "0 attention heads in every block of a model without recurrent layers",
            file=filename,
            field=f"{arch}.attention.head_count",
        )
    kv_heads = _per_layer(
        facts.get("attention.head_count_kv", "num_kv_heads"), n_layers, f"{arch}.attention.head_count_kv", filename
    )
    if kv_heads is None:
        kv_heads = heads
        facts.provenance["num_kv_heads"] = (
            f"derived: no {arch}.attention.head_count_kv → multi-head attention (= {arch}.attention.head_count)"
        )
    dims = _head_dims(facts)
    facts.provenance["layers"] = f"derived: {arch}.attention.head_count_kv per block (0 = no attention cache)"
    swa, window, windowed_kind, warnings = _swa_layers(facts, n_layers)
    has_ssm, recurrent_kind, interval = _recurrent_plan(facts)
    ffn = _per_layer(facts.get("feed_forward_length"), n_layers, f"{arch}.feed_forward_length", filename)

    layers: list[Layer] = []
    for il in range(n_layers):
        moe = il in moe_layers
        n_head = heads[il] if heads else 0
        n_kv = kv_heads[il] if kv_heads else 0
        recurrent = has_ssm and (n_kv == 0 or (interval is not None and (il + 1) % interval != 0))
        if recurrent:
            if arch == "nemotron_h" and ffn and ffn[il] > 0:
                layers.append(Layer(kind=LayerKind.NONE, moe=moe))  # an MLP-only block: no cache
            else:
                layers.append(_recurrent_layer(facts, recurrent_kind, moe))
            continue
        if n_kv == 0:
            layers.append(Layer(kind=LayerKind.NONE, moe=moe))
            continue
        default_head = (n_embd // n_head) if n_embd and n_head else 0
        windowed = (windowed_kind, window) if swa[il] else None
        layers.append(_attention_block(dims, n_kv, default_head, windowed, moe))
    if dims.key is None and any(layer.head_dim_k for layer in layers):
        facts.provenance["head_dim"] = f"derived: {arch}.embedding_length / {arch}.attention.head_count"
    if dims.value is None and any(layer.head_dim_v for layer in layers):
        facts.provenance["head_dim_v"] = f"derived: no {arch}.attention.value_length → = head_dim"
    if dims.kv_lora_rank and not dims.mla:
        warnings.append(f"{arch}: GGUF converted without MLA metadata; llama.cpp caches full per-head K/V")
    return tuple(layers), warnings


def _attention_block(
    dims: _HeadDims, n_kv: int, default_head: int, windowed: tuple[LayerKind, int | None] | None, moe: bool
) -> Layer:
    """One attention block's cache: MLA's latent where the file was converted for it, else K/V per head, windowed
    (``windowed``: the kind, sliding or chunked, and the window) or full (``windowed`` None)."""
    if dims.kv_lora_rank and dims.mla:
        # MLA-converted GGUF: llama.cpp caches one latent of kv_lora_rank + rope dims per token (no V)
        return Layer(
            kind=LayerKind.MLA,
            num_kv_heads=n_kv,
            head_dim_k=dims.key or default_head,
            head_dim_v=dims.value or 0,
            kv_lora_rank=dims.kv_lora_rank,
            qk_rope_head_dim=dims.rope or 0,
            moe=moe,
        )
    head_k = dims.key or default_head
    head_v = dims.value or head_k
    if windowed is not None:
        kind, window = windowed
        return Layer(
            kind=kind,
            num_kv_heads=n_kv,
            head_dim_k=dims.key_swa or head_k,
            head_dim_v=dims.value_swa or head_v,
            window=window,
            moe=moe,
        )
    return Layer(kind=LayerKind.FULL, num_kv_heads=n_kv, head_dim_k=head_k, head_dim_v=head_v, moe=moe)


def _recurrent_plan(facts: _Facts) -> tuple[bool, LayerKind, int | None]:
    """Whether the model has recurrent (SSM / linear-attention) blocks, their kind, and the period of its full
    attention blocks (``full_attention_interval``, else gguf_arch.toml's default for the architecture)."""
    arch = facts.arch
    has_ssm = f"{arch}.ssm.state_size" in facts.metadata or f"{arch}.ssm.inner_size" in facts.metadata
    table = _arch_table()["recurrent"]
    recurrent_kind = LayerKind.LINEAR if arch in table["linear_attention"] else LayerKind.MAMBA
    interval = facts.int("full_attention_interval", "full_attention_interval")
    if interval is None:
        interval = table["full_attention_interval_default"].get(arch)
    if has_ssm:
        facts.provenance["layers"] = f"derived: recurrent where {arch}.attention.head_count_kv is 0" + (
            f" or outside every {interval}th block" if interval else ""
        )
    return has_ssm, recurrent_kind, interval


def _vocab_size(facts: _Facts, tensors: Sequence[GGUFTensor]) -> int | None:
    size = facts.int("vocab_size", "vocab_size")
    if size is not None:
        return size
    tokens = facts.metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, (list, SkippedArray)):
        facts.provenance["vocab_size"] = f"{facts.filename}: length of tokenizer.ggml.tokens"
        return len(tokens) if isinstance(tokens, list) else tokens.length
    for tensor in tensors:
        if tensor.name == "token_embd.weight" and len(tensor.shape) == 2:
            facts.provenance["vocab_size"] = f"{facts.filename}: token_embd.weight shape"
            return tensor.shape[1]
    return None


def _rope_scaling(facts: _Facts) -> dict[str, object] | None:
    kind = facts.get("rope.scaling.type")
    if not kind or kind == "none":
        return None
    scaling: dict[str, object] = {"rope_type": kind}
    for suffix, name in (
        ("rope.scaling.factor", "factor"),
        ("rope.scaling.original_context_length", "original_max_position_embeddings"),
    ):
        value = facts.get(suffix)
        if value is not None:
            scaling[name] = value
    facts.provenance["rope_scaling"] = f"{facts.filename}: {facts.arch}.rope.scaling.*"
    return scaling


def _primary(headers: Sequence[GGUFHeader], filename: str) -> GGUFHeader:
    if not headers:
        raise MalformedFileError("no GGUF header given", file=filename)
    for header in headers:
        if header.metadata.get("split.no", 0) == 0:
            return header
    return headers[0]


def _check_split(headers: Sequence[GGUFHeader], tensors: Sequence[GGUFTensor], filename: str) -> list[str]:
    """MalformedFileError for split parts that do not add up; the warning when fewer parts were read than stated."""
    primary = _primary(headers, filename)
    count = primary.metadata.get("split.count")
    warnings: list[str] = []
    if count is not None and count != len(headers):
        warnings.append(f"split.count says {count} parts, {len(headers)} were read")
    expected = primary.metadata.get("split.tensors.count")
    if isinstance(expected, int) and expected != len(tensors):
        raise MalformedFileError(
            f"split.tensors.count {expected} but the parts hold {len(tensors)} tensors",
            file=filename,
            field="split.tensors.count",
        )
    seen: set[str] = set()
    for tensor in tensors:
        if tensor.name in seen:
            raise MalformedFileError("tensor in two split parts", file=filename, field=tensor.name)
        seen.add(tensor.name)
    return warnings


def gguf_weights(tensors: Sequence[GGUFTensor], *, num_layers: int | None, source: str) -> Weights:
    infos = [TensorInfo(name=t.name, dtype=t.type_name, shape=t.shape, nbytes=t.nbytes) for t in tensors]
    return weights_from_tensor_list(
        infos, component_of=lambda n: gguf_component(n, num_layers=num_layers), source=source, exact=True
    )


def _weights_or_none(tensors: Sequence[GGUFTensor], num_layers: int, filename: str) -> tuple[Weights | None, list[str]]:
    """The summed tensors; None (with a warning) for a GGUF without tensors, such as llama.cpp's
    ``ggml-vocab-*.gguf`` tokenizer files: hyper-parameters and a vocabulary, but not a model to serve."""
    if not tensors:
        warning = (
            f"weights unknown: {filename} has no tensors: this GGUF holds only a vocabulary and "
            "metadata, not a model checkpoint"
        )
        return None, [warning]
    return gguf_weights(tensors, num_layers=num_layers, source=f"{filename}: GGUF tensor infos (exact)"), []


def _tied_embeddings(tensors: Sequence[GGUFTensor], provenance: dict[str, str]) -> tuple[bool | None, list[str]]:
    """llama.cpp reuses token_embd.weight as the output matrix when the file has no output.weight (with the
    warning when there are no tensors to tell)."""
    if not tensors:
        return None, ["tie_word_embeddings unknown: no tensors to tell whether output.weight exists"]
    tied = not any(t.name == "output.weight" for t in tensors)
    provenance["tie_word_embeddings"] = f"derived: {'no' if tied else 'an'} output.weight tensor"
    return tied, []


def spec_from_gguf(headers: Sequence[GGUFHeader], *, filename: str) -> ModelSpec:
    """The ModelSpec of a GGUF model: metadata from the first part, tensors from every part.

    Longer than 60 lines: one linear pass that reads each ModelSpec field once from the metadata (split up, the
    half-read facts would travel between the pieces as arguments)."""
    primary = _primary(headers, filename)
    metadata = primary.metadata
    tensors = [t for header in headers for t in header.tensors]
    warnings = _check_split(headers, tensors, filename)
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise MalformedFileError("missing general.architecture", file=filename, field="general.architecture")
    facts = _Facts(metadata, arch, filename)
    facts.provenance["architecture"] = f"{filename}: general.architecture"
    n_layers = facts.int("block_count", "num_layers")
    if n_layers is None or n_layers < 0 or n_layers > 100_000:
        raise MalformedFileError(
            f"missing or invalid block_count {n_layers}", file=filename, field=f"{arch}.block_count"
        )

    # llama.cpp counts next-token-prediction blocks in block_count and puts them last
    num_mtp = facts.int("nextn_predict_layers", "num_mtp_layers") or 0
    if not 0 <= num_mtp <= n_layers:
        raise MalformedFileError(
            f"nextn_predict_layers {num_mtp} for {n_layers} blocks", file=filename, field=f"{arch}.nextn_predict_layers"
        )
    n_layers -= num_mtp
    if n_layers < 1:  # as config.json: a model without a block is not a model (the same sanity bounds)
        raise MalformedFileError(f"{n_layers} blocks besides the MTP ones", file=filename, field=f"{arch}.block_count")
    moe_layers = {int(m.group(1)) for t in tensors if (m := re.match(r"^blk\.(\d+)\.ffn_\w+_exps\.", t.name))}
    if moe_layers:
        facts.provenance["moe_layers"] = "derived: blocks with blk.N.ffn_*_exps tensors"
    all_layers, layer_warnings = _layers(facts, n_layers + num_mtp, moe_layers)
    layers = all_layers[:n_layers]
    weights, weight_warnings = _weights_or_none(tensors, n_layers, filename)
    warnings.extend([*layer_warnings, *weight_warnings])

    file_type_id = metadata.get("general.file_type")
    file_type = _file_type_name(file_type_id)
    if file_type is None:
        warnings.append(f"general.file_type {file_type_id!r} is absent or unknown")
    else:
        facts.provenance["quantization"] = f"{filename}: general.file_type"
    bits_per_weight = (weights.total_bytes * 8 / weights.params_total) if weights and weights.params_total else None
    num_experts = facts.int("expert_count", "num_experts")
    experts_used = facts.int("expert_used_count", "experts_per_token")
    if num_experts is not None and experts_used is not None and experts_used > max(num_experts, 1):
        raise MalformedFileError(
            f"{experts_used:,} experts per token but only {num_experts:,} experts",
            file=filename,
            field=f"{arch}.expert_used_count",
        )
    head_k = facts.int("attention.key_length") or next((layer.head_dim_k for layer in layers if layer.head_dim_k), None)
    head_v = facts.int("attention.value_length") or head_k
    ffn = _per_layer(
        facts.get("feed_forward_length", "intermediate_size"),
        n_layers + num_mtp,
        f"{arch}.feed_forward_length",
        filename,
    )
    heads = _per_layer(facts.get("attention.head_count"), n_layers + num_mtp, f"{arch}.attention.head_count", filename)
    tied, tied_warnings = _tied_embeddings(tensors, facts.provenance)
    warnings.extend(tied_warnings)
    warnings.append("GGUF states no compute dtype")

    extra: dict[str, object] = {
        "file_type": file_type,
        "alignment": primary.alignment,
        "bits_per_weight": bits_per_weight,
        "gguf_arch": arch,
        "gguf_version": primary.version,
        "n_embd_head_k": head_k,
        "n_embd_head_v": head_v,
        "file_size": sum(gguf_file_size(h) for h in headers),
        "split_count": len(headers),
        "token_embd_bytes": weights.bytes_by_component.get("embeddings", 0) if weights else None,
    }
    if "general.name" in metadata:
        extra["name"] = metadata["general.name"]

    spec = ModelSpec(
        architecture=arch,
        model_type=arch,
        dtype=None,
        num_layers=n_layers,
        layers=layers,
        hidden_size=facts.int("embedding_length"),
        intermediate_size=max(ffn) if ffn else None,
        num_attention_heads=max(heads) if heads else None,
        vocab_size=_vocab_size(facts, tensors),
        max_position_embeddings=facts.int("context_length", "max_position_embeddings"),
        tie_word_embeddings=tied,
        num_experts=num_experts,
        num_shared_experts=facts.int("expert_shared_count", "num_shared_experts"),
        experts_per_token=experts_used,
        moe_intermediate_size=facts.int("expert_feed_forward_length", "moe_intermediate_size"),
        num_mtp_layers=num_mtp,
        rope_scaling=_rope_scaling(facts),
        quantization=Quantization(
            method="gguf",
            bits=bits_per_weight,
            details={"file_type": file_type, "ggml_types": dict(weights.bytes_by_dtype) if weights else {}},
            source=f"{filename}: general.file_type",
        ),
        weights=weights,
        provenance=facts.provenance,
        warnings=tuple(warnings),
        decided_by="hfvram rules",
        extra=extra,
    )
    return spec_with_weights(spec, weights) if weights else spec
