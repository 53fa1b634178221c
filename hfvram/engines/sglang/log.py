"""SGLang's start-up log: the lines ``hfvram calibrate`` reads (docs/engines/common.md#calibration-logs-others)
and the reader that turns them into a :class:`~hfvram.calibrate.logs.Measured`. The line-matching toolkit is
``hfvram.calibrate.logs``'s; this module is imported only when a log is read, never by a check (its patterns are
compiled at import).
"""

from __future__ import annotations

from hfvram.calibrate.logs import _NUM, Measured, _any, _Fields, _gib, _last, _Line, _lines

# ---- SGLang (docs/engines/common.md#calibration-logs-others) -------------------------------------------------------------------------------
#: ``Load weight end. type=…, dtype=…, avail mem=63.21 GB, mem usage=14.99 GB.``
SGLANG_WEIGHTS = _Fields(
    "Load weight end. ",
    figures=rf"avail mem=(?P<avail>{_NUM}) GB, mem usage=(?P<w>{_NUM}) GB\.",
)
SGLANG_KV = _Line(
    "KV Cache is allocated. ",
    rf"KV Cache is allocated\. (?:dtype: (?P<dt>\S{{1,64}}), )?#tokens: (?P<tok>\d{{1,15}}), "
    rf"(?:K size: (?P<k>{_NUM}) GB, "
    rf"V size: (?P<v>{_NUM}) GB|KV size: (?P<kv>{_NUM}) GB)",
)


def recognises(lines: list[str]) -> bool:
    """Whether the log holds SGLang's start-up lines (hfvram.calibrate.logs.detect_engine asks each engine)."""
    return _any(SGLANG_WEIGHTS, lines) or _any(SGLANG_KV, lines)


def parse_sglang_log(text: str | list[str]) -> Measured:
    """SGLang start-up lines -> weights and KV cache (SGLang does not print activations or overhead)."""
    lines = _lines(text)
    details: dict[str, str] = {}
    weights = kv = tokens = None
    if match := _last(SGLANG_WEIGHTS, lines):
        weights = _gib(match["w"])  # SGLang's "GB" is bytes / 2**30 (groundtruth README)
        details["weights (mem usage)"] = f"{match['w']} GB"
    if match := _last(SGLANG_KV, lines):
        tokens = int(match["tok"])
        kv = _gib(match["kv"]) if match["kv"] else _gib(match["k"]) + _gib(match["v"])
        details["KV cache"] = match.group(0)
    return Measured(
        engine="sglang",
        weights=weights,
        kv_cache=kv,
        kv_tokens=tokens,
        details=details,
        warnings=("SGLang logs do not split activations from overhead",),
    )


#: the reader hfvram.calibrate.logs.parse_log calls for this engine
parse = parse_sglang_log
