#!/usr/bin/env python3
"""Bytes against round trips for GGUF headers read over HTTP Range: the window rules of
``hfvram.sources.rangestream`` over every corpus header, next to blind doubling windows.

For each header prefix (fixtures/headers/*.gguf, and the tokenizer-less headers of benchmarks/data/llamacpp_headers)
and each first window, the bytes fetched as a multiple of the header (up to the end of the tensor infos) and the
number of Range requests. Served from the files themselves (no network): the figures are exact, not timed.

    python3 benchmarks/gguf_windows.py [--margin 0.04] [--slack 16384]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hfvram.readers.gguf import read_gguf_header  # noqa: E402
from hfvram.sources import rangestream  # noqa: E402
from hfvram.sources.rangestream import RangeStream  # noqa: E402

KIB = 1024
CORPUS = sorted((ROOT / "fixtures/headers").glob("*.gguf"))
NO_VOCAB = sorted((ROOT / "benchmarks/data/llamacpp_headers").glob("*.gguf-header"))


class Blind:
    """A stream view that hides ``set_end_estimate``: the windows double blindly (the rule before sizing)."""

    def __init__(self, stream: RangeStream) -> None:
        self.read = stream.read


def cost(path: Path, first: int, *, sized: bool, margin: float, slack: int) -> tuple[float, int]:
    data = path.read_bytes()
    stream = RangeStream(
        lambda offset, length: data[offset : offset + length] + bytes(max(0, offset + length - len(data))),
        filename=path.name,
        cap=64 << 20,
        first_window=first,
        margin=margin,
        slack=slack,
    )
    header = read_gguf_header(stream if sized else Blind(stream), filename=path.name)  # type: ignore[arg-type]
    return stream.bytes_fetched / header.header_end, stream.requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--margin", type=float, default=rangestream.ESTIMATE_MARGIN)
    parser.add_argument("--slack", type=int, default=rangestream.ESTIMATE_SLACK)
    args = parser.parse_args()
    firsts = [16 * KIB, 32 * KIB, 64 * KIB, 128 * KIB, 256 * KIB, 1024 * KIB]
    print(f"bytes fetched / header bytes (requests); margin {args.margin}, slack {args.slack} B")
    print(f"{'header':44} {'bytes':>9}  {'blind 1 MiB':>12}" + "".join(f"{f // KIB:>10} KiB" for f in firsts))
    worst = {f: 0.0 for f in firsts}
    extra = {f: 0 for f in firsts}
    for path in CORPUS + NO_VOCAB:
        blind, blind_requests = cost(path, 1024 * KIB, sized=False, margin=args.margin, slack=args.slack)
        cells = []
        for first in firsts:
            ratio, requests = cost(path, first, sized=True, margin=args.margin, slack=args.slack)
            cells.append(f"{ratio:9.3f} ({requests})")
            if path in CORPUS:
                worst[first] = max(worst[first], ratio)
                extra[first] = max(extra[first], requests - blind_requests)
        size = read_gguf_header(path.open("rb"), filename=path.name).header_end
        print(f"{path.name[:44]:44} {size:>9}  {blind:8.3f} ({blind_requests})" + "".join(cells))
    print(
        f"{'corpus worst ratio (most extra requests)':56}" + "".join(f"{worst[f]:9.3f} (+{extra[f]})" for f in firsts)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
