"""The low-level GGUF reader: bounded little-endian scalars, strings and arrays from ``stream.read(n)``, every
count and length checked before anything is allocated, large arrays (tokenizer vocabularies) and long strings
skipped with their length and item type kept (hfvram.readers.gguf parses the header and the ModelSpec with it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Protocol

from hfvram.errors import MalformedFileError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
#: keys, tensor names and kept string values; longer metadata strings are skipped (length kept)
MAX_KEPT_STRING = 64 * 1024
#: no metadata string may be longer than this (a chat template is ~10–50 KiB)
MAX_STRING = 16 * 1024 * 1024
#: arrays up to this length are kept (per-layer hparams); longer ones (vocabularies) are skipped
MAX_KEPT_ARRAY = 4096
MAX_ARRAY = 1 << 28
MAX_TENSORS = 1 << 20
MAX_KV = 1 << 20
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NESTING = 4
DEFAULT_ALIGNMENT = 32
_READ_CHUNK = 1 << 20
#: bytes read ahead at most while skipping a string array
_SKIP_AHEAD = 64 * 1024


class Stream(Protocol):
    def read(self, n: int, /) -> bytes: ...


#: window-hint priors (a Range stream's window size only; no fact of the model comes from them), measured on the
#: corpus headers (fixtures/headers): a tensor info is 8 + name (20–23 chars) + 4 + 8 × dims (1.5–1.8) + 4 + 8 bytes
TENSOR_INFO_PRIOR = 58
#: a small metadata pair (key ~25 chars, type, scalar or short string)
SMALL_KV_PRIOR = 40
#: bytes per vocabulary string assumed before one is read (corpus means 14.6–17.0)
STRING_ITEM_PRIOR = 16
#: tokenizer models whose vocabulary arrays come with float32 scores (llama.cpp's SentencePiece-style vocabularies)
_SCORED_MODELS = frozenset({"llama", "t5", "ugm", "plamo2"})


@dataclass(frozen=True)
class SkippedArray:
    """A large array (e.g. ``tokenizer.ggml.tokens``) not kept in memory: its length and item type only."""

    length: int
    item_type: str


@dataclass(frozen=True)
class SkippedString:
    length: int


# value type id -> (name, struct format or None for string/array)
_SCALARS: dict[int, tuple[str, str]] = {
    0: ("uint8", "<B"),
    1: ("int8", "<b"),
    2: ("uint16", "<H"),
    3: ("int16", "<h"),
    4: ("uint32", "<I"),
    5: ("int32", "<i"),
    6: ("float32", "<f"),
    7: ("bool", "<B"),
    10: ("uint64", "<Q"),
    11: ("int64", "<q"),
    12: ("float64", "<d"),
}
_STRING, _ARRAY = 8, 9
_TYPE_NAMES = {**{k: v[0] for k, v in _SCALARS.items()}, _STRING: "string", _ARRAY: "array"}


class _Reader:
    def __init__(self, stream: Stream, filename: str) -> None:
        self.stream = stream
        self.filename = filename
        self.pos = 0
        #: bytes read from the stream ahead of the parse (only inside a skipped string array), consumed first
        self.pending = b""
        # what has been parsed so far, for :meth:`header_end_estimate` (a Range stream's window hint)
        self.kv_left = 0
        self.tensors_left = 0
        self.tensor_infos_start: int | None = None
        self.tensors_done = 0
        self.vocabulary: tuple[int, float] | None = None  # (tokens, bytes per token) once tokens are read
        self.array_progress: tuple[str, int, int, int, int] | None = None  # (key, start, items, done, parse point)
        self.seen_keys: set[str] = set()
        self.tokenizer_model: object = None
        self.skipping_to = 0  # end of a scalar array being skipped

    def header_end_estimate(self) -> int:
        """Where the header (the end of the tensor infos) is expected to end, from what has been parsed: the
        string array being skipped (items left × their running mean), the vocabulary arrays known to follow the
        tokens (token types, scores for SentencePiece models, BPE merges about as many as tokens and one byte
        longer), the metadata pairs left and the tensor infos (running mean once they start). Only a window hint."""
        end = max(self.pos, self.skipping_to)
        tokens, token_bytes = self.vocabulary or (0, 0.0)
        if self.array_progress is not None:
            key, start, items, done, point = self.array_progress
            mean = (point - start) / done if done else STRING_ITEM_PRIOR
            end = point + int((items - done) * mean)
            if key == "tokenizer.ggml.tokens":
                tokens, token_bytes = items, mean
        kv_left = self.kv_left
        follow = ["tokenizer.ggml.token_type"] if tokens else []
        if tokens and self.tokenizer_model in _SCORED_MODELS:
            follow.append("tokenizer.ggml.scores")
        if tokens and self.tokenizer_model == "gpt2":
            follow.append("tokenizer.ggml.merges")
        for key in follow:
            if key not in self.seen_keys:
                end += 40 + (int(tokens * (token_bytes + 1)) if key.endswith("merges") else 4 * tokens)
                kv_left -= 1
        end += max(0, kv_left) * SMALL_KV_PRIOR
        if self.tensor_infos_start is not None and self.tensors_done:
            per_tensor = (self.pos - self.tensor_infos_start) / self.tensors_done
        else:
            per_tensor = TENSOR_INFO_PRIOR
        return end + int(self.tensors_left * per_tensor)

    def fail(self, message: str, where: str) -> MalformedFileError:
        return MalformedFileError(f"{message} (at byte {self.pos})", file=self.filename, field=where)

    def exact(self, n: int, where: str) -> bytes:
        """Exactly ``n`` bytes; a stream may return fewer per call (network), so read until EOF."""
        if self.pending:
            head, self.pending = self.pending[:n], self.pending[n:]
            if len(head) == n:
                self.pos += n
                return head
            self.pos += len(head)
            try:
                return head + self.exact(n - len(head), where)
            except MalformedFileError:
                self.pos -= len(head)
                raise
        data = self.stream.read(n) if n else b""
        if data is not None and len(data) < n:
            parts = [bytes(data)]
            got = len(data)
            while got < n:
                more = self.stream.read(n - got)
                if not more:
                    break
                parts.append(bytes(more))
                got += len(more)
            data = b"".join(parts)
        if data is None or len(data) < n:
            got = 0 if data is None else len(data)
            raise self.fail(f"truncated: needed {n} bytes, got {got}", where)
        self.pos += n
        return bytes(data)

    def skip(self, n: int, where: str) -> None:
        while n > 0:
            step = min(n, _READ_CHUNK)
            self.exact(step, where)
            n -= step

    def unpack(self, fmt: str, where: str):
        return struct.unpack(fmt, self.exact(struct.calcsize(fmt), where))[0]

    def u32(self, where: str) -> int:
        return self.unpack("<I", where)

    def u64(self, where: str) -> int:
        return self.unpack("<Q", where)

    def string(self, where: str, *, keep_limit: int = MAX_KEPT_STRING, hard_limit: int = MAX_STRING):
        length = self.u64(where)
        if length > hard_limit:
            raise self.fail(f"string length {length} exceeds {hard_limit}", where)
        if length > keep_limit:
            self.skip(length, where)
            return SkippedString(length)
        raw = self.exact(length, where)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("string is not UTF-8", where) from None

    def value(self, value_type: int, where: str, depth: int = 0):
        if value_type in _SCALARS:
            name, fmt = _SCALARS[value_type]
            value = self.unpack(fmt, where)
            if name == "bool":
                if value > 1:
                    raise self.fail(f"bool value {value}", where)
                return bool(value)
            return value
        if value_type == _STRING:
            return self.string(where)
        if value_type == _ARRAY:
            return self.array(where, depth + 1)
        raise self.fail(f"unknown value type {value_type}", where)

    def array(self, where: str, depth: int):
        if depth > MAX_NESTING:
            raise self.fail(f"arrays nested deeper than {MAX_NESTING}", where)
        item_type = self.u32(where)
        if item_type not in _TYPE_NAMES:
            raise self.fail(f"unknown array item type {item_type}", where)
        length = self.u64(where)
        if length > MAX_ARRAY:
            raise self.fail(f"array length {length} exceeds {MAX_ARRAY}", where)
        if length <= MAX_KEPT_ARRAY:
            return [self.value(item_type, f"{where}[{i}]", depth) for i in range(length)]
        if item_type in _SCALARS:
            size = length * struct.calcsize(_SCALARS[item_type][1])
            self.skipping_to = self.pos + size
            self.skip(size, where)
        elif item_type == _STRING:
            self.skip_strings(length, where)
        else:
            for i in range(length):
                self.array(f"{where}[{i}]", depth + 1)
        return SkippedArray(length=length, item_type=_TYPE_NAMES[item_type])

    def _ahead(self, limit: int) -> int:
        """Read-ahead of at most ``limit`` bytes, kept within what the stream holds already when it says so
        (``available()``): the vocabulary is then parsed up to the last buffered byte before the stream is asked
        for more, and sizes its next window from the most strings seen."""
        available = getattr(self.stream, "available", None)
        if callable(available):
            room = available()
            if isinstance(room, int) and room >= 64:
                return min(limit, room - 16)
        return limit

    def skip_strings(self, count: int, where: str) -> None:
        """Skip ``count`` strings (a tokenizer's vocabulary: ~10^5 short strings) in bulk. Each string takes at
        least its 8-byte length, so reading up to ``8 × strings left`` bytes ahead never passes the array's end:
        no byte beyond what the header holds is asked of the stream, and what is read ahead is parsed next."""
        buf, off = b"", 0
        start = self.pos
        for left in range(count - 1, -1, -1):
            if len(buf) - off < 8:
                self.array_progress = (where, start, count, count - 1 - left, self.pos - len(buf) + off)
                buf, off = buf[off:], 0
                buf += self.exact(
                    8 - len(buf) + self._ahead(min(_SKIP_AHEAD, 8 * left)), f"{where}[{count - 1 - left}]"
                )
            (length,) = struct.unpack_from("<Q", buf, off)
            off += 8
            if length > MAX_STRING:
                raise self.fail(f"string length {length} exceeds {MAX_STRING}", f"{where}[{count - 1 - left}]")
            if length <= len(buf) - off:
                off += length
                continue
            missing = length - (len(buf) - off)
            self.array_progress = (where, start, count, count - 1 - left, self.pos - len(buf) + off)
            self.skip(missing, f"{where}[{count - 1 - left}]")
            self.array_progress = (where, start, count, count - left, self.pos)
            buf, off = self.exact(self._ahead(min(_SKIP_AHEAD, 8 * left)), where) if left else b"", 0
        self.array_progress = None
        unread = buf[off:]
        if where == "tokenizer.ggml.tokens" and count:
            self.vocabulary = (count, (self.pos - len(unread) - start) / count)
        self.pos -= len(unread)
        self.pending = unread + self.pending
