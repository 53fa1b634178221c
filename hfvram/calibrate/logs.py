"""The log reader of ``hfvram calibrate``: what an engine really reserved, read from its start-up log
(docs/engines/common.md#calibration-logs) into a :class:`Measured`.

Log figures printed in ``GiB`` (and vLLM's old ``GB``, which is bytes / 2**30) are converted to bytes; they are
rounded to 0.01 GiB by the engine, so every figure here carries that print rounding. Where calibrations are kept
is ``hfvram.calibrate.files``; how one changes an estimate is ``hfvram.calibrate.apply``. A check imports this module
never: its patterns are compiled at import.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
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
#: the `xxx:` prefix of llama.cpp lines (it changes between versions), then its spacing
_PREFIX = r"(?<!\w)\w{1,64}:\s{1,64}"
#: a llama.cpp buffer name: CUDA0, CUDA_Host, CPU_Mapped …
_BUF = r"(?P<buf>\S{1,64})"


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


# ---- vLLM V1; lines carry a prefix, so every pattern is searched in the line -----------------------------------------
VLLM_WEIGHTS = _Line(
    " took ",
    rf"(?:Model loading took|Loading model weights took) (?P<weights>{_NUM}) (?:GiB|GB)(?: memory)?"
    rf"(?: and (?P<secs>{_NUM}) seconds)?",
)
VLLM_KV_MEMORY = _Line("Available KV cache memory: ", rf"Available KV cache memory: (?P<kv_gib>{_SNUM}) GiB")
VLLM_KV_TOKENS = _Line("GPU KV cache size: ", rf"GPU KV cache size: (?P<tokens>{_COUNT}) tokens")
VLLM_MAX_CONCURRENCY = _Line(
    "Maximum concurrency for ",
    rf"Maximum concurrency for (?P<max_model_len>{_COUNT}) tokens per request: (?P<conc>{_NUM})x",
)
VLLM_CG_ESTIMATE = _Line("Estimated CUDA graph memory: ", rf"Estimated CUDA graph memory: (?P<cg_est>{_NUM}) GiB total")
VLLM_CG_TAKEN = _Line(
    "Graph capturing finished in ", rf"Graph capturing finished in (?P<secs>\d{{1,15}}) secs, took (?P<cg>{_SNUM}) GiB"
)
VLLM_CG_POOL = _Line(
    "CUDA graph pool memory: ",
    rf"CUDA graph pool memory: (?P<cg_act>{_NUM}) GiB \(actual\), (?P<cg_est>{_NUM}) GiB \(estimated\)",
)
VLLM_PROFILE = _Line(
    "Memory profiling takes ",
    rf"Memory profiling takes (?P<secs>{_NUM}) seconds\. Total non KV cache memory: (?P<non_kv>{_NUM})GiB; "
    rf"torch peak memory increase: (?P<act>{_SNUM})GiB; non-torch forward increase memory: (?P<non_torch>{_SNUM})GiB; "
    rf"weights memory: (?P<w>{_NUM})GiB\.",
)
VLLM_REQUESTED = _Line(
    "Initial free memory: ",
    rf"Initial free memory: (?P<free>{_NUM}) GiB; Requested memory: (?P<util>{_NUM}) \(util\), (?P<req>{_NUM}) GiB",
)
VLLM_ACTUAL_USAGE = _Line(
    "Actual usage is ",
    rf"Actual usage is (?P<w>{_NUM}) GiB for weight, (?P<act>{_NUM}) GiB for peak activation, "
    rf"(?P<nt>{_NUM}) GiB for non-torch memory, and (?P<cg>{_NUM}) GiB for CUDAGraph memory\.",
)
VLLM_TOTAL_MEMORY = _Line("total_memory=", rf"total_memory=(?P<total>{_NUM})GiB")
VLLM_VERSION = _Line("V1 LLM engine (v", r"V1 LLM engine \(v(?P<version>[\w.+-]{1,64})\)")
VLLM_UTIL_ARG = _Line("'gpu_memory_utilization': ", rf"'gpu_memory_utilization': (?P<util>{_NUM})")
VLLM_KV_DTYPE_ARG = _Line("'kv_cache_dtype': '", r"'kv_cache_dtype': '(?P<kv>\w{1,64})'")
VLLM_TP = _Line("tensor_parallel_size=", r"tensor_parallel_size=(?P<tp>\d{1,15})")
VLLM_MAX_SEQ = _Line("max_seq_len=", r"max_seq_len=(?P<len>\d{1,15})")
# ---- vLLM V0 / early V1 ------------------------------------------------------------------------------------
VLLM_V0_BLOCKS = _Line(" blocks: ", r"# (?:GPU|cuda) blocks: (?P<gpu>\d{1,15}), # CPU blocks: (?P<cpu>\d{1,15})")
VLLM_V0_BUDGET = _Line(
    "total_gpu_memory (",
    rf"total_gpu_memory \((?P<total>{_NUM})GiB\) x gpu_memory_utilization \((?P<util>{_NUM})\) = (?P<budget>{_NUM})GiB",
)
VLLM_V0_TERMS = _Line(
    "model weights take ",
    rf"model weights take (?P<w>{_NUM})GiB; non_torch_memory takes (?P<nt>{_SNUM})GiB; PyTorch activation peak "
    rf"memory takes (?P<act>{_SNUM})GiB; the rest of the memory reserved for KV Cache is (?P<kv>{_SNUM})GiB",
)
#: ``Memory profiling results: total_gpu_memory=23.69GiB initial_memory_usage=… peak_torch_memory=17.98GiB …``
VLLM_V0_PROFILE = _Fields(
    "Memory profiling results: ",
    total=rf"^total_gpu_memory=(?P<total>{_NUM})GiB",
    peak=rf"(?<!\w)peak_torch_memory=(?P<peak>{_NUM})GiB",
    nt=rf"(?<!\w)non_torch_memory=(?P<nt>{_NUM})GiB",
    kv=rf"(?<!\w)kv_cache_size=(?P<kv>{_SNUM})GiB",
    util=rf"(?<!\w)gpu_memory_utilization=(?P<util>{_NUM})",
)
# ---- llama.cpp; the `xxx:` prefix changes between versions, so match it with \w --------------------------------------
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


def detect_engine(text: str | list[str]) -> str | None:
    """Which engine wrote this log: ``vllm``, ``llama.cpp`` or ``sglang`` (None when nothing is recognised)."""
    lines = _lines(text)
    if any(_any(p, lines) for p in (VLLM_WEIGHTS, VLLM_KV_MEMORY, VLLM_V0_BLOCKS, VLLM_V0_BUDGET)):
        return "vllm"
    if any(_any(p, lines) for p in (LLAMA_MODEL_BUFFER, LLAMA_MODEL_BUFFER_OLD, LLAMA_KV_BUFFER, LLAMA_KV_SIZE)):
        return "llama.cpp"
    if _any(SGLANG_WEIGHTS, lines) or _any(SGLANG_KV, lines):
        return "sglang"
    return None


def parse_vllm_log(text: str | list[str]) -> Measured:
    """vLLM V1 (and V0 / early-V1) start-up lines -> per-GPU terms. Overhead = non-torch + CUDA graphs."""
    lines = _lines(text)
    details: dict[str, str] = {}
    warnings: list[str] = []
    weights = activations = non_torch = graphs = kv = total = None
    util = None
    if match := _last(VLLM_WEIGHTS, lines):
        weights = _gib(match["weights"])
        details["model loading"] = f"{match['weights']} GiB"
    if match := _last(VLLM_PROFILE, lines):
        activations, non_torch = _gib(match["act"]), _gib(match["non_torch"])
        weights = weights if weights is not None else _gib(match["w"])
        details.update(
            {
                "torch peak increase": f"{match['act']} GiB",
                "non-torch increase": f"{match['non_torch']} GiB",
                "total non-KV": f"{match['non_kv']} GiB",
            }
        )
    if match := _last(VLLM_ACTUAL_USAGE, lines):
        activations, non_torch, graphs = _gib(match["act"]), _gib(match["nt"]), _gib(match["cg"])
        details["actual usage line"] = match.group(0)
    if match := _last(VLLM_V0_TERMS, lines):
        activations, non_torch, kv = _gib(match["act"]), _gib(match["nt"]), _gib(match["kv"])
        weights = weights if weights is not None else _gib(match["w"])
        details.update({"activation peak (V0)": f"{match['act']} GiB", "non-torch (V0)": f"{match['nt']} GiB"})
    if match := _last(VLLM_V0_PROFILE, lines):
        total, util, non_torch, kv = _gib(match["total"]), float(match["util"]), _gib(match["nt"]), _gib(match["kv"])
        if weights is not None:
            activations = _gib(match["peak"]) - weights
            details["activation peak (derived: peak_torch_memory − weights)"] = f"{activations / GIB:.2f} GiB"
    if match := _last(VLLM_V0_BUDGET, lines):
        total, util = _gib(match["total"]), float(match["util"])
    if match := _last(VLLM_KV_MEMORY, lines):
        kv = _gib(match["kv_gib"])
        details["available KV cache memory"] = f"{match['kv_gib']} GiB"
    if match := _last(VLLM_CG_POOL, lines):
        graphs = _gib(match["cg_act"])
        details["CUDA graph pool (actual)"] = f"{match['cg_act']} GiB"
    elif graphs is None and (match := _last(VLLM_CG_TAKEN, lines)):
        graphs = _gib(match["cg"])
        details["CUDA graphs captured"] = f"{match['cg']} GiB"
    elif graphs is None and (match := _last(VLLM_CG_ESTIMATE, lines)):
        graphs = _gib(match["cg_est"])
        details["CUDA graphs (estimated)"] = f"{match['cg_est']} GiB"
    if match := _last(VLLM_REQUESTED, lines):
        util = float(match["util"])
        details["requested memory"] = f"{match['req']} GiB at util {util:g}"
    if (match := _last(VLLM_UTIL_ARG, lines)) and not 0 < float(match["util"]) <= 1:
        # the server's own argument line is absurd: the log is not one to calibrate from, whatever else it says
        raise UsageError(f"log file: gpu_memory_utilization {match['util'][:40]}: implausible (expected 0 to 1)")
    if util is None and match:
        util = float(match["util"])
    if total is None and (match := _last(VLLM_TOTAL_MEMORY, lines)):
        total = _gib(match["total"])
    kv_tokens = None
    if match := _last(VLLM_KV_TOKENS, lines):
        kv_tokens = int(match["tokens"].replace(",", ""))
        details["GPU KV cache size"] = f"{kv_tokens:,} tokens"
    elif match := _last(VLLM_V0_BLOCKS, lines):
        # V0 printed blocks; 16 tokens per block was the default block size (docs/engines/vllm.md#vllm-block-size)
        kv_tokens = int(match["gpu"]) * 16
        details["GPU blocks"] = f"{match['gpu']} (× 16 tokens, the default block size)"
        warnings.append("KV tokens derived from '# GPU blocks' × 16 (the default block size)")
    conc = context = None
    if match := _last(VLLM_MAX_CONCURRENCY, lines):
        conc = float(match["conc"])
        context = int(match["max_model_len"].replace(",", ""))
        details["maximum concurrency"] = f"{match['conc']}x for {context:,} tokens"
    if context is None and (match := _last(VLLM_MAX_SEQ, lines)):
        context = int(match["len"])
    requested = None
    if match := _last(VLLM_REQUESTED, lines):
        requested = _gib(match["req"])
    elif total is not None and util is not None:
        requested = int(total * util)
    overhead = None
    if non_torch is not None:
        overhead, note = _budget_overhead(requested, weights, activations, non_torch, kv, graphs)
        if note:
            details["CUDA graphs inside the budget"] = note
        elif graphs is not None:
            warnings.append(
                "the log does not tell whether CUDA graphs were deducted from the budget: overhead counts them"
            )
    if kv is not None and kv < 0:
        # after the budget identity above, which needs the signed figure. V0 printed "the rest of the memory reserved for KV Cache is -1.05GiB": the run had no KV cache at all
        details["rest of the budget for the KV cache"] = f"{kv / GIB:.2f} GiB (negative: no KV cache)"
        warnings.append(
            f"the engine found no memory for the KV cache (the rest of its budget was {kv / GIB:.2f} "
            "GiB): this run could not serve; KV cache counted as 0"
        )
        kv = 0
    tp_match = _last(VLLM_TP, lines)
    version = _last(VLLM_VERSION, lines)
    kv_dtype = _last(VLLM_KV_DTYPE_ARG, lines)
    return Measured(
        engine="vllm",
        weights=weights,
        kv_cache=kv,
        activations=activations,
        overhead=overhead,
        kv_tokens=kv_tokens,
        max_concurrency=conc,
        context=context,
        gpu_util=util,
        total_memory=total,
        tp=int(tp_match["tp"]) if tp_match else None,
        kv_dtype=kv_dtype["kv"] if kv_dtype else None,
        engine_version=version["version"] if version else None,
        engine_generation=_vllm_generation(lines, version is not None),
        details=details,
        warnings=tuple(warnings),
    )


def _budget_overhead(
    requested: int | None,
    weights: int | None,
    activations: int | None,
    non_torch: int,
    kv: int | None,
    graphs: int | None,
) -> tuple[int, str | None]:
    """Overhead the engine deducted from its budget: non-torch memory plus the CUDA graphs *applied*.

    docs/engines/common.md#calibration-logs-vllm identity: requested − weights − activations − non_torch − graphs_applied = KV; the applied
    graph term is what the identity leaves (0 before vLLM #38284, or with the estimate switched off). Below
    the print rounding (0.03 GiB) it is taken as zero.
    """
    if requested is None or weights is None or activations is None or kv is None:
        return non_torch + (graphs or 0), None
    applied = requested - weights - activations - non_torch - kv
    if applied < 0.03 * GIB:
        return non_torch, "none (derived: requested − weights − activations − non-torch − KV ≈ 0)"
    return non_torch + applied, f"{applied / GIB:.2f} GiB (derived: requested − weights − activations − non-torch − KV)"


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


def parse_log(text: str, engine: str | None = None) -> Measured:
    """Parse a start-up log; ``engine`` forces the parser, else it is detected. UsageError when unrecognised."""
    lines = log_lines(text)
    engine = engine or detect_engine(lines)
    parsers = {
        "vllm": parse_vllm_log,
        "llama.cpp": parse_llamacpp_log,
        "ollama": parse_llamacpp_log,
        "sglang": parse_sglang_log,
    }
    if engine not in parsers:
        raise UsageError(
            "no vLLM, llama.cpp or SGLang start-up lines found in the log "
            "(vLLM: 'Model loading took …', llama.cpp: '… model buffer size = …')"
        )
    return plausible(parsers[engine](lines))


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


def _vllm_generation(lines: list[str], v1_banner: bool) -> str | None:
    """ "v1" / "v0" as the log's own lines show (see ``Measured.engine_generation``)."""
    if v1_banner or _any(VLLM_KV_MEMORY, lines):
        return "v1"
    if any(_any(p, lines) for p in (VLLM_V0_BLOCKS, VLLM_V0_TERMS, VLLM_V0_PROFILE)):
        return "v0"
    return None


def read_log(path: str) -> str:
    """The log's text ('-' = stdin); a missing file is a usage error (exit 2)."""
    from hfvram.sources.limits import byte_cap, read_user_file

    # capped (limits.toml [bytes] log), regular files only: /dev/zero or a FIFO is a usage error, not a hang
    return read_user_file(path, byte_cap("log"), what="log file", errors="replace")
