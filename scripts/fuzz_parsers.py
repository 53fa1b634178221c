#!/usr/bin/env python3
"""atheris (libFuzzer) target for the safetensors and GGUF header parsers.

The property: any input either parses or raises ``MalformedFileError``; anything else is a finding.
Install the optional extra first (``pip install 'hfvram[fuzz]'`` or ``pip install atheris``), then:

    python3 scripts/fuzz_parsers.py -runs=100000 [-max_len=65536] [corpus_dir ...]

The real headers in ``fixtures/headers/`` seed the corpus when no directory is given. At the end the script
prints how many inputs ran.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import atheris  # noqa: E402

with atheris.instrument_imports():
    from hfvram.errors import MalformedFileError
    from hfvram.readers.gguf import read_gguf_header, spec_from_gguf
    from hfvram.readers.safetensors import read_safetensors_header, weights_from_tensors

#: seeds are cut to this many bytes so each run stays fast (the parsers stop at the cut cleanly)
SEED_BYTES = 16 * 1024
RUNS = 0
#: -runs=N from the command line; libFuzzer exits the process from C at the end, so the count is printed when
#: the N-th input has run (and every 10,000 inputs), not from an exit handler
TARGET_RUNS: int | None = None


def fuzz_one(data: bytes) -> None:
    global RUNS
    RUNS += 1
    try:
        _check(data)
    finally:
        if RUNS == TARGET_RUNS or RUNS % 10_000 == 0:
            print(f"fuzz_parsers: {RUNS} inputs ran without an unexpected exception", flush=True)


def _check(data: bytes) -> None:
    if data[:1] == b"G" or data[:4] == b"GGUF":
        try:
            header = read_gguf_header(io.BytesIO(data), filename="fuzz.gguf")
            if "general.architecture" in header.metadata:
                spec_from_gguf([header], filename="fuzz.gguf")
        except MalformedFileError:
            pass
        return
    try:
        tensors = read_safetensors_header(
            lambda offset, length: data[offset : offset + length], filename="fuzz.safetensors"
        )
        weights_from_tensors(tensors.values())
    except MalformedFileError:
        pass


def seed_corpus() -> str:
    folder = tempfile.mkdtemp(prefix="hfvram-fuzz-")
    for path in sorted((ROOT / "fixtures" / "headers").iterdir()):
        with open(path, "rb") as handle:
            (Path(folder) / path.name).write_bytes(handle.read(SEED_BYTES))
    return folder


def main() -> None:
    global TARGET_RUNS
    args = list(sys.argv)
    for arg in args:
        if arg.startswith("-runs="):
            TARGET_RUNS = int(arg.split("=", 1)[1])
    if not any(not a.startswith("-") for a in args[1:]):
        args.append(seed_corpus())
    if not any(a.startswith("-max_len") for a in args):
        args.append(f"-max_len={SEED_BYTES}")
    atheris.Setup(args, fuzz_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
