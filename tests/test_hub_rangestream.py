"""RangeStream: growing windows that continue where the last stopped, forgetting consumed bytes, with a cap.
Reads a real GGUF header prefix (fixtures/headers, SmolLM2-135M-Instruct Q4_1: tensor infos end at 1,785,664)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hfvram.errors import MalformedFileError
from hfvram.readers.gguf import read_gguf_header
from hfvram.sources.rangestream import RangeStream

SMOL = Path(__file__).resolve().parent.parent / "fixtures/headers/SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf"


class FileRanges:
    """Serves ranges of a real file and remembers what was asked."""

    def __init__(self, path: Path) -> None:
        self.data = path.read_bytes()
        self.asked: list[tuple[int, int]] = []

    def __call__(self, offset: int, length: int) -> bytes:
        self.asked.append((offset, length))
        return self.data[offset : offset + length]


def test_windows_double_and_never_overlap():
    ranges = FileRanges(SMOL)
    stream = RangeStream(ranges, filename=SMOL.name, cap=64 << 20, first_window=256 << 10)
    header = read_gguf_header(stream, filename=SMOL.name)
    assert header.header_end == 1_785_664
    starts = [offset for offset, _ in ranges.asked]
    lengths = [length for _, length in ranges.asked]
    assert starts == [sum(lengths[:i]) for i in range(len(lengths))]
    assert lengths[:3] == [256 << 10, 512 << 10, 1 << 20]
    assert stream.bytes_fetched - header.header_end < lengths[-1]


def test_cap_stops_reading():
    ranges = FileRanges(SMOL)
    stream = RangeStream(ranges, filename=SMOL.name, cap=1 << 20, first_window=256 << 10)
    with pytest.raises(MalformedFileError, match="cap"):
        read_gguf_header(stream, filename=SMOL.name)
    assert stream.bytes_fetched <= 1 << 20


def test_end_of_file_inside_the_header_is_malformed():
    ranges = FileRanges(SMOL)
    ranges.data = ranges.data[:100_000]
    stream = RangeStream(ranges, filename=SMOL.name, cap=64 << 20)
    with pytest.raises(MalformedFileError):
        read_gguf_header(stream, filename=SMOL.name)


def test_read_needs_a_size():
    stream = RangeStream(FileRanges(SMOL), filename=SMOL.name, cap=1 << 20)
    assert stream.read(4) == b"GGUF"
    with pytest.raises(ValueError):
        stream.read()
