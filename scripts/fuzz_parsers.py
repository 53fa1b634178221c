#!/usr/bin/env python3
"""atheris (libFuzzer) target for hfvram's parsers of untrusted input: safetensors and GGUF headers, config.json
(the config reader and the derived tensor list) and engine start-up logs (``calibrate``'s parsers).

The property: any input either parses or raises hfvram's own clean error (``MalformedFileError``; for logs also
``UsageError``, "no start-up lines found"); anything else is a finding. The first byte picks the target: ``G``
GGUF, ``{`` config.json, ``L`` a start-up log (the rest of the input), anything else a safetensors file.
Install the optional extra first (``pip install 'hfvram[fuzz]'`` or ``pip install atheris``), then:

    python3 scripts/fuzz_parsers.py -runs=100000 [-max_len=65536] [corpus_dir ...]

The real headers in ``fixtures/headers/``, the configs of ``fixtures/hub/`` and the logs of ``fixtures/logs/``
seed the corpus when no directory is given. At the end the script prints how many inputs ran. Without atheris,
``--smoke N`` runs N mutated seeds (random byte edits and cuts, no coverage guidance) through the same checks.
"""

from __future__ import annotations

import contextlib
import io
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

try:
    import atheris
except ImportError:  # --smoke still runs without it
    atheris = None

with atheris.instrument_imports() if atheris is not None else contextlib.nullcontext():
    from hfvram.calibrate import parse_log
    from hfvram.errors import MalformedFileError, UsageError
    from hfvram.readers.config import load_json_tolerant, read_config
    from hfvram.readers.gguf import read_gguf_header, spec_from_gguf
    from hfvram.readers.safetensors import read_safetensors_header, weights_from_tensors
    from hfvram.readers.shapes import derived_weights

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
    if data[:1] == b"{":
        try:
            spec = read_config(load_json_tolerant(data, "fuzz.json"), filename="fuzz.json", use_transformers=False)
        except MalformedFileError:
            return
        with contextlib.suppress(ValueError, KeyError, TypeError, ZeroDivisionError):  # as the sources do
            derived_weights(spec)
        return
    if data[:1] == b"L":
        with contextlib.suppress(UsageError):
            parse_log(data[1:].decode("utf-8", errors="replace"))
        return
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


def seeds() -> dict[str, bytes]:
    """Seed inputs by name: real headers (cut to SEED_BYTES), real configs, real logs (behind their ``L``)."""
    found: dict[str, bytes] = {}
    for path in sorted((ROOT / "fixtures" / "headers").iterdir()):
        with open(path, "rb") as handle:
            found[path.name] = handle.read(SEED_BYTES)
    for path in sorted((ROOT / "fixtures" / "hub").glob("*/*/config.json")):
        found[f"{path.parent.parent.name}--{path.parent.name}--config.json"] = path.read_bytes()[:SEED_BYTES]
    for path in sorted((ROOT / "fixtures" / "logs").glob("*.log")):
        found[path.name] = b"L" + path.read_bytes()[: SEED_BYTES - 1]
    return found


def seed_corpus() -> str:
    folder = tempfile.mkdtemp(prefix="hfvram-fuzz-")
    for name, data in seeds().items():
        (Path(folder) / name).write_bytes(data)
    return folder


def smoke(runs: int, seed: int = 0) -> None:
    """``runs`` mutated seeds through the checks, without atheris (no coverage guidance)."""
    rng = random.Random(seed)
    corpus = list(seeds().values())
    for _ in range(runs):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 8)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3 and len(data) > 1:
            del data[rng.randrange(1, len(data)) :]
        fuzz_one(bytes(data))
    print(f"fuzz_parsers: {RUNS} inputs ran without an unexpected exception", flush=True)


def main() -> None:
    global TARGET_RUNS
    args = list(sys.argv)
    if "--smoke" in args:
        smoke(int(args[args.index("--smoke") + 1]))
        return
    if atheris is None:
        sys.exit("fuzz_parsers: atheris is not installed (pip install atheris), or run with --smoke N")
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
