"""The log reader of ``hfvram calibrate``: what an engine really reserved, read from its start-up log
(docs/engines/common.md#calibration-logs) into a :class:`Measured`.

This module is the shared toolkit and the dispatch; each engine's own lines and reader live in its folder, as
``hfvram/engines/<engine>/log.py`` (``recognises(lines)``: whether a log is that engine's, left out by an engine
that is never told from its lines alone; ``parse(lines)``: the :class:`Measured`). An engine without that file has
no log reader. The toolkit the readers share: :class:`_Line` and :class:`_Fields` (bounded, line-at-a-time
patterns), the figure patterns ``_NUM`` / ``_SNUM`` / ``_COUNT``, ``_last`` / ``_all`` / ``_any`` and the byte
conversions.

Log figures printed in ``GiB`` (and vLLM's old ``GB``, which is bytes / 2**30) are converted to bytes; they are
rounded to 0.01 GiB by the engine, so every figure here carries that print rounding. Where calibrations are kept
is ``hfvram.calibrate.files``; how one changes an estimate is ``hfvram.calibrate.apply``. A check imports this module
never, nor the engines' log modules: their patterns are compiled at import.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any

from hfvram.errors import UsageError

GIB = 1024**3
MIB = 1024**2

# ---- start-up log patterns --------------------------------------------------------------------------------------
# Logs are untrusted text: every pattern runs on ONE line at a time (lines cut at MAX_LINE characters), only on
# lines holding its literal ``needle``, and is linear in the line's length: a leading word is anchored at a word
# start ((?<!\w)), every quantifier is bounded, and there are no nested or lazy wildcards (lines whose fields may
# come in any order are read field by field, see _Fields).

#: log lines are cut to this many characters before parsing (real start-up lines are under 2 KiB)
MAX_LINE = 16 * 1024
#: a figure as engines print it: 14.99, 0.95, 1478, -1.05
_NUM = r"\d{1,15}(?:\.\d{1,15})?"
_SNUM = r"-?" + _NUM
#: a token count with thousands separators: 952,032
_COUNT = r"\d{1,15}(?:,\d{3}){0,6}"


class _Line:
    """One compiled pattern, applied line by line to lines that contain ``needle``."""

    def __init__(self, needle: str, regex: str) -> None:
        self.needle = needle
        self.regex = re.compile(regex)

    def finditer(self, line: str) -> Iterator[Any]:
        if self.needle in line:
            yield from self.regex.finditer(line)


class _Fields:
    """A line introduced by ``needle`` whose ``name=value`` fields are each found by their own pattern after it;
    one match per line (a dict of every field) when all are there."""

    def __init__(self, needle: str, **fields: str) -> None:
        self.needle = needle
        self.fields = [re.compile(regex) for regex in fields.values()]

    def finditer(self, line: str) -> Iterator[Any]:
        at = line.find(self.needle)
        if at < 0:
            return
        rest = line[at + len(self.needle) :]
        found: dict[str, str | None] = {}
        for regex in self.fields:
            match = regex.search(rest)
            if match is None:
                return
            found.update(match.groupdict())
        yield found


_Pattern = _Line | _Fields


def log_lines(text: str) -> list[str]:
    """The log's lines, each cut to MAX_LINE characters (what the patterns run on)."""
    return [line[:MAX_LINE] for line in text.splitlines()]


def _lines(log: str | list[str]) -> list[str]:
    return log_lines(log) if isinstance(log, str) else log


def _all(pattern: _Pattern, lines: list[str]) -> Iterator[Any]:
    for line in lines:
        yield from pattern.finditer(line)


def _last(pattern: _Pattern, lines: list[str]) -> Any:
    """The last match in the log (None when there is none)."""
    for line in reversed(lines):
        last = deque(pattern.finditer(line), maxlen=1)
        if last:
            return last[0]
    return None


def _any(pattern: _Pattern, lines: list[str]) -> bool:
    return any(True for _ in _all(pattern, lines))


@dataclass(frozen=True)
class Measured:
    """What one start-up log says the engine reserved on its GPU (bytes; None when the log does not say)."""

    engine: str
    weights: int | None = None
    kv_cache: int | None = None
    activations: int | None = None
    overhead: int | None = None
    kv_tokens: int | None = None
    max_concurrency: float | None = None
    context: int | None = None
    gpu_util: float | None = None
    total_memory: int | None = None
    tp: int | None = None
    kv_dtype: str | None = None
    engine_version: str | None = None
    #: vLLM's engine generation the log's own lines show ("v1": the "V1 LLM engine" banner or V1's "Available KV
    #: cache memory"; "v0": V0's "# GPU blocks" / profile lines and no V1 line); None when the lines do not say
    engine_generation: str | None = None
    #: every figure read, as printed (for display and provenance)
    details: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def _gib(text: str) -> int:
    return round(float(text) * GIB)


def _mib(text: str) -> int:
    return round(float(text) * MIB)


@cache
def log_readers() -> dict[str, str]:
    """Engine name -> the module reading its start-up logs (``<package>.log``), in the registry's order, for the
    engines whose folder has a ``log.py`` (found by the file; nothing is imported here)."""
    from hfvram.engines import registry

    return {name: f"{entry.package}.log" for name, entry in registry().items() if (entry.folder / "log.py").is_file()}


def _reader(engine: str) -> Any:
    # the import statement's machinery, not importlib.import_module: ``-X importtime`` (tests/test_startup_imports.py)
    # reports only imports made through it
    return __import__(log_readers()[engine], fromlist=["parse"])


def detect_engine(text: str | list[str]) -> str | None:
    """Which engine wrote this log: the first engine, in the registry's order, whose log module recognises its
    lines (``vllm``, ``sglang``, ``llama.cpp``; None when nothing is recognised). The order matters only for a log
    holding two engines' lines, which no real start-up writes."""
    lines = _lines(text)
    for engine in log_readers():
        recognises = getattr(_reader(engine), "recognises", None)
        if recognises is not None and recognises(lines):
            return engine
    return None


def parse_log(text: str, engine: str | None = None) -> Measured:
    """Parse a start-up log; ``engine`` forces the parser, else it is detected. UsageError when unrecognised."""
    lines = log_lines(text)
    engine = engine or detect_engine(lines)
    if engine not in log_readers():
        raise UsageError(
            "no vLLM, llama.cpp or SGLang start-up lines found in the log "
            "(vLLM: 'Model loading took …', llama.cpp: '… model buffer size = …')"
        )
    measured: Measured = _reader(engine).parse(lines)
    return plausible(measured)


def plausible(measured: Measured) -> Measured:
    """``measured`` when every figure is one a real start-up prints; else a usage error naming the figure (a log
    that says ``tensor_parallel_size=0`` or ``gpu_memory_utilization 99999.5`` is not calibrated from). The bounds
    are hfvram/data/bounds.toml's: a GPU's memory, a GPU count, a context."""
    from hfvram.datafiles import data_table

    bounds = data_table("bounds.toml")
    most_bytes = int(bounds["hardware"]["maximum_memory_bytes"]) * int(bounds["hardware"]["maximum_gpu_count"])
    most_tokens = int(bounds["config"]["positions"]["maximum"])
    checks: list[tuple[str, float | int | None, float, float]] = [
        ("tensor_parallel_size", measured.tp, 1, int(bounds["hardware"]["maximum_gpu_count"])),
        ("gpu_memory_utilization", measured.gpu_util, 1e-9, 1.0),
        ("context", measured.context, 1, most_tokens),
        ("KV cache tokens", measured.kv_tokens, 0, most_tokens * 1_000_000),
        ("maximum concurrency", measured.max_concurrency, 0, 1e12),
        *((name, getattr(measured, name), 0, most_bytes) for name in BYTE_FIELDS),
    ]
    for name, value, least, most in checks:
        if value is not None and not least <= value <= most:
            raise UsageError(f"log file: {name} {str(value)[:40]}: implausible (expected {least:g} to {most:g})")
    return measured


#: the Measured fields that are bytes
BYTE_FIELDS = ("weights", "kv_cache", "activations", "overhead", "total_memory")


def measured_dict(measured: Measured) -> dict[str, object]:
    out = asdict(measured)
    out["details"] = dict(measured.details)
    out["warnings"] = list(measured.warnings)
    return out


def read_log(path: str) -> str:
    """The log's text ('-' = stdin); a missing file is a usage error (exit 2)."""
    from hfvram.sources.limits import byte_cap, read_user_file

    # capped (limits.toml [bytes] log), regular files only: /dev/zero or a FIFO is a usage error, not a hang
    return read_user_file(path, byte_cap("log"), what="log file", errors="replace")


def __getattr__(name: str) -> Any:
    """An engine's reader under the name it had when it lived here (``parse_vllm_log``, ``parse_llamacpp_log``,
    ``parse_sglang_log``): found in the engines' log modules on first use (PEP 562)."""
    if name.startswith("parse_") and name.endswith("_log"):
        for module in log_readers().values():
            value = getattr(__import__(module, fromlist=[name]), name, None)
            if value is not None:
                globals()[name] = value
                return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
