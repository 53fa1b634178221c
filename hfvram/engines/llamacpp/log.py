"""llama.cpp's start-up log: the lines ``hfvram calibrate`` reads (docs/engines/common.md#calibration-logs-llamacpp)
and the reader that turns them into a :class:`~hfvram.calibrate.logs.Measured` (llama.cpp and ik_llama.cpp; Ollama's
runner writes the same lines). The line-matching toolkit is ``hfvram.calibrate.logs``'s; this module is imported only
when a log is read, never by a check (its patterns are compiled at import).
"""

from __future__ import annotations

import re

from hfvram.calibrate.logs import _NUM, MIB, Measured, _all, _any, _last, _Line, _lines, _mib, _Pattern

# ---- llama.cpp; the `xxx:` prefix changes between versions, so match it with \w --------------------------------------
#: the `xxx:` prefix of llama.cpp lines (it changes between versions), then its spacing
_PREFIX = r"(?<!\w)\w{1,64}:\s{1,64}"
#: a llama.cpp buffer name: CUDA0, CUDA_Host, CPU_Mapped …
_BUF = r"(?P<buf>\S{1,64})"

LLAMA_MODEL_BUFFER = _Line(" model buffer size =", rf"{_PREFIX}{_BUF} model buffer size =\s{{1,64}}(?P<mib>{_NUM}) MiB")
#: older spelling (llama.cpp ≤ early 2025, ik_llama.cpp): ``llm_load_tensors:      CUDA0 buffer size = … MiB``
LLAMA_MODEL_BUFFER_OLD = _Line(
    "llm_load_tensors:", rf"llm_load_tensors:\s{{1,64}}{_BUF} buffer size =\s{{1,64}}(?P<mib>{_NUM}) MiB"
)
LLAMA_KV_BUFFER = _Line(" KV buffer size =", rf"{_PREFIX}{_BUF} KV buffer size =\s{{1,64}}(?P<mib>{_NUM}) MiB")
LLAMA_RS_BUFFER = _Line(" RS buffer size =", rf"{_PREFIX}{_BUF} RS buffer size =\s{{1,64}}(?P<mib>{_NUM}) MiB")
LLAMA_COMPUTE_BUFFER = _Line(
    " compute buffer size =", rf"{_PREFIX}{_BUF} compute buffer size =\s{{1,64}}(?P<mib>{_NUM}) MiB"
)
LLAMA_N_CTX = _Line(": n_ctx", r"(?<!\w)\w{1,64}: n_ctx\s{1,64}= (?P<n_ctx>\d{1,15})")
LLAMA_N_UBATCH = _Line(": n_ubatch", r"(?<!\w)\w{1,64}: n_ubatch\s{1,64}= (?P<n>\d{1,15})")
LLAMA_FLASH_ATTN = _Line(": flash_attn", r"(?<!\w)\w{1,64}: flash_attn\s{1,64}= (?P<fa>\w{1,64})")
LLAMA_KV_SIZE = _Line(
    "size",
    rf"(?:llama_kv_cache\w{{0,64}}: size =\s{{1,64}}(?P<mib>{_NUM}) MiB "
    rf"\(\s{{0,64}}(?P<cells>\d{{1,15}}) cells[^)]{{0,512}}\)|"
    rf"KV self size\s{{1,64}}=\s{{1,64}}(?P<self_mib>{_NUM}) MiB), K \((?P<tk>\w{{1,64}})\):",
)
LLAMA_BREAKDOWN = _Line(
    "common_memory_breakdown_print: |",
    r"common_memory_breakdown_print: \|\s{1,64}-\s{1,64}(?P<dev>\S{1,64}) \((?P<desc>[^)]{0,512})\)\s{1,64}\|"
    r"\s{1,64}(?P<total>\d{1,15})\s{1,64}=\s{1,64}(?P<free>\d{1,15})\s{1,64}\+\s{1,64}\(\s{0,64}(?P<self>\d{1,15})"
    r"\s{1,64}=\s{1,64}(?P<model>\d{1,15})\s{1,64}\+\s{1,64}(?P<context>\d{1,15})\s{1,64}\+\s{1,64}"
    r"(?P<compute>\d{1,15})\)\s{1,64}\+\s{1,64}(?P<unacc>-?\d{1,15})\s{1,64}\|",
)
#: llama.cpp buffers that live in host memory, not on the accelerator (matched against a buffer name of ≤ 64 chars)
HOST_BUFFERS = re.compile(r"^(?:CPU|CPU_Mapped|CPU_REPACK|CUDA_Host|ROCm_Host|Metal_Mapped|MTL0_Mapped|\w{0,64}_Host)$")


def recognises(lines: list[str]) -> bool:
    """Whether the log holds llama.cpp's start-up lines (hfvram.calibrate.logs.detect_engine asks each engine)."""
    return any(_any(p, lines) for p in (LLAMA_MODEL_BUFFER, LLAMA_MODEL_BUFFER_OLD, LLAMA_KV_BUFFER, LLAMA_KV_SIZE))


def _device_sums(lines: list[str], *patterns: _Pattern) -> dict[str, int]:
    sums: dict[str, int] = {}
    matches = [match for each in patterns for match in _all(each, lines)]
    for match in matches:
        buffer = match["buf"]
        if HOST_BUFFERS.match(buffer):
            continue
        sums[buffer] = sums.get(buffer, 0) + _mib(match["mib"])
    return sums


def parse_llamacpp_log(text: str | list[str]) -> Measured:
    """llama.cpp / ik_llama.cpp start-up lines -> the terms on the device with the most memory in use."""
    lines = _lines(text)
    details: dict[str, str] = {}
    warnings: list[str] = []
    model = _device_sums(lines, LLAMA_MODEL_BUFFER, LLAMA_MODEL_BUFFER_OLD)
    kv = _device_sums(lines, LLAMA_KV_BUFFER)
    recurrent = _device_sums(lines, LLAMA_RS_BUFFER)
    compute = _device_sums(lines, LLAMA_COMPUTE_BUFFER)
    devices = sorted(set(model) | set(kv) | set(compute) | set(recurrent))
    for name, table in (("model", model), ("KV", kv), ("RS", recurrent), ("compute", compute)):
        for device, size in table.items():
            details[f"{device} {name} buffer"] = f"{size / MIB:.2f} MiB"
    overhead = None
    breakdowns = {m["dev"]: m for m in _all(LLAMA_BREAKDOWN, lines)}
    worst = max(
        devices, key=lambda d: model.get(d, 0) + kv.get(d, 0) + recurrent.get(d, 0) + compute.get(d, 0), default=None
    )
    if worst is not None:
        for dev, match in breakdowns.items():
            if dev.startswith(worst) or worst.startswith(dev):
                overhead = int(match["unacc"]) * MIB
                details[f"{dev} unaccounted"] = f"{match['unacc']} MiB"
    if worst is None and (match := _last(LLAMA_KV_SIZE, lines)):
        size = match["mib"] or match["self_mib"]
        details["KV total"] = f"{size} MiB"
        warnings.append("the log names no device buffers: figures are totals over all devices")
    if len(devices) > 1:
        details["worst device"] = str(worst)
    if overhead is None:
        warnings.append("no memory-breakdown table in the log: the CUDA context / pool overhead is not measured")
    n_ctx = _last(LLAMA_N_CTX, lines)
    kv_size = _last(LLAMA_KV_SIZE, lines)
    kv_bytes = kv.get(worst, 0) + recurrent.get(worst, 0) if worst else None
    if worst is None and kv_size is not None:
        kv_bytes = _mib(kv_size["mib"] or kv_size["self_mib"])
    return Measured(
        engine="llama.cpp",
        weights=model.get(worst) if worst else None,
        kv_cache=kv_bytes,
        activations=compute.get(worst) if worst else None,
        overhead=overhead,
        kv_tokens=int(kv_size["cells"]) if kv_size is not None and kv_size["cells"] else None,
        context=int(n_ctx["n_ctx"]) if n_ctx else None,
        kv_dtype=kv_size["tk"] if kv_size is not None else None,
        details=details,
        warnings=tuple(warnings),
    )


#: the reader hfvram.calibrate.logs.parse_log calls for this engine
parse = parse_llamacpp_log
