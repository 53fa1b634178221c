"""RangeStream: windows that continue where the last stopped (sized from the GGUF reader's estimate of the
header's end, else doubling), forgetting consumed bytes, with a cap. Reads real GGUF header prefixes
(fixtures/headers; SmolLM2-135M-Instruct Q4_1: tensor infos end at 1,785,664)."""

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


class Blind:
    """A stream view without ``set_end_estimate`` / ``available``: the reader cannot size the windows."""

    def __init__(self, stream: RangeStream) -> None:
        self.read = stream.read


def test_without_an_estimate_windows_double_and_never_overlap():
    ranges = FileRanges(SMOL)
    stream = RangeStream(ranges, filename=SMOL.name, cap=64 << 20, first_window=256 << 10)
    header = read_gguf_header(Blind(stream), filename=SMOL.name)  # type: ignore[arg-type]
    assert header.header_end == 1_785_664
    starts = [offset for offset, _ in ranges.asked]
    lengths = [length for _, length in ranges.asked]
    assert starts == [sum(lengths[:i]) for i in range(len(lengths))]
    assert lengths[:3] == [256 << 10, 512 << 10, 1 << 20]
    assert stream.bytes_fetched - header.header_end < lengths[-1]


# header -> Ranges the blind doubling from 1 MiB took (benchmarks/gguf_windows.py, "blind 1 MiB")
BLIND_REQUESTS = {
    "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf-header.gguf": 3,
    "SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf": 2,
    "hugginllam--gemma-3-270m-Q4_K_M-GGUF--gemma-3-270m-q4_k_m.gguf-header.gguf": 3,
    "llama.cpp-ggml-vocab-llama-spm.gguf": 1,
    "llama.cpp-ggml-vocab-phi-3.gguf": 1,
}


@pytest.mark.parametrize("name", sorted(BLIND_REQUESTS))
def test_windows_sized_from_the_parsed_counts_read_each_corpus_header_once(name):
    """Every corpus header within 10 % of its length, with at most one Range more than blind doubling, no
    byte asked twice (the file is padded with zeros past the header, as on the Hub)."""
    path = SMOL.parent / name
    ranges = FileRanges(path)
    size = len(ranges.data)
    ranges.data += bytes(8 << 20)
    stream = RangeStream(ranges, filename=name, cap=64 << 20)
    header = read_gguf_header(stream, filename=name)
    assert header.header_end == size
    starts = [offset for offset, _ in ranges.asked]
    lengths = [length for _, length in ranges.asked]
    assert starts == [sum(lengths[:i]) for i in range(len(lengths))]
    assert size <= stream.bytes_fetched <= 1.10 * size
    assert len(ranges.asked) <= BLIND_REQUESTS[name] + 1
    assert stream.requests == len(ranges.asked)


def test_an_estimate_past_the_cap_is_cut_at_the_cap():
    """Crafted counts that predict a huge header ask for no byte past the cap."""
    ranges = FileRanges(SMOL)
    stream = RangeStream(ranges, filename=SMOL.name, cap=1 << 20)
    stream.set_end_estimate(lambda: 1 << 40)
    assert stream.read(4) == b"GGUF"
    assert ranges.asked == [(0, 64 << 10)]  # the first window is never sized from an estimate
    stream.read(100_000)
    assert ranges.asked[1] == (64 << 10, (1 << 20) - (64 << 10))
    with pytest.raises(MalformedFileError, match="cap"):
        stream.read(1 << 20)
    assert sum(length for _, length in ranges.asked) <= 1 << 20


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
