"""Calibration: read what an engine really reserved from its start-up log (engines.md §12), and keep the measured
activation / overhead terms per (engine, GPU) so that later checks use them instead of the rules.

Log figures printed in ``GiB`` (and vLLM's old ``GB``, which is bytes / 2**30) are converted to bytes; they are
rounded to 0.01 GiB by the engine, so every figure here carries that print rounding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from hfvram.calibration_paths import calibration_dir, calibration_file, calibration_key
from hfvram.errors import MalformedFileError, UsageError
from hfvram.estimate.types import Capacity, Estimate, verdict_for

GIB = 1024**3
MIB = 1024**2
CALIBRATION_SCHEMA = "hfvram.calibration/1"

# ---- vLLM V1 (engines.md §12.1); lines carry a prefix, so every pattern is used with search() --------------
VLLM_WEIGHTS = re.compile(
    r"(?:Model loading took|Loading model weights took) (?P<weights>[\d.]+) (?:GiB|GB)(?: memory)?(?: and (?P<secs>[\d.]+) seconds)?"
)
VLLM_KV_MEMORY = re.compile(r"Available KV cache memory: (?P<kv_gib>-?[\d.]+) GiB")
VLLM_KV_TOKENS = re.compile(r"GPU KV cache size: (?P<tokens>[\d,]+) tokens")
VLLM_MAX_CONCURRENCY = re.compile(
    r"Maximum concurrency for (?P<max_model_len>[\d,]+) tokens per request: (?P<conc>[\d.]+)x"
)
VLLM_CG_ESTIMATE = re.compile(r"Estimated CUDA graph memory: (?P<cg_est>[\d.]+) GiB total")
VLLM_CG_TAKEN = re.compile(r"Graph capturing finished in (?P<secs>\d+) secs, took (?P<cg>-?[\d.]+) GiB")
VLLM_CG_POOL = re.compile(
    r"CUDA graph pool memory: (?P<cg_act>[\d.]+) GiB \(actual\), (?P<cg_est>[\d.]+) GiB \(estimated\)"
)
VLLM_PROFILE = re.compile(
    r"Memory profiling takes (?P<secs>[\d.]+) seconds\. Total non KV cache memory: (?P<non_kv>[\d.]+)GiB; "
    r"torch peak memory increase: (?P<act>-?[\d.]+)GiB; non-torch forward increase memory: (?P<non_torch>-?[\d.]+)GiB; "
    r"weights memory: (?P<w>[\d.]+)GiB\."
)
VLLM_REQUESTED = re.compile(
    r"Initial free memory: (?P<free>[\d.]+) GiB; Requested memory: (?P<util>[\d.]+) \(util\), (?P<req>[\d.]+) GiB"
)
VLLM_ACTUAL_USAGE = re.compile(
    r"Actual usage is (?P<w>[\d.]+) GiB for weight, (?P<act>[\d.]+) GiB for peak activation, "
    r"(?P<nt>[\d.]+) GiB for non-torch memory, and (?P<cg>[\d.]+) GiB for CUDAGraph memory\."
)
VLLM_TOTAL_MEMORY = re.compile(r"total_memory=(?P<total>[\d.]+)GiB")
VLLM_VERSION = re.compile(r"V1 LLM engine \(v(?P<version>[\w.+-]+)\)")
VLLM_UTIL_ARG = re.compile(r"'gpu_memory_utilization': (?P<util>[\d.]+)")
VLLM_KV_DTYPE_ARG = re.compile(r"'kv_cache_dtype': '(?P<kv>[\w]+)'")
VLLM_TP = re.compile(r"tensor_parallel_size=(?P<tp>\d+)")
VLLM_MAX_SEQ = re.compile(r"max_seq_len=(?P<len>\d+)")
# ---- vLLM V0 / early V1 ------------------------------------------------------------------------------------
VLLM_V0_BLOCKS = re.compile(r"# (?:GPU|cuda) blocks: (?P<gpu>\d+), # CPU blocks: (?P<cpu>\d+)")
VLLM_V0_BUDGET = re.compile(
    r"total_gpu_memory \((?P<total>[\d.]+)GiB\) x gpu_memory_utilization \((?P<util>[\d.]+)\) = (?P<budget>[\d.]+)GiB"
)
VLLM_V0_TERMS = re.compile(
    r"model weights take (?P<w>[\d.]+)GiB; non_torch_memory takes (?P<nt>-?[\d.]+)GiB; PyTorch activation peak "
    r"memory takes (?P<act>-?[\d.]+)GiB; the rest of the memory reserved for KV Cache is (?P<kv>-?[\d.]+)GiB"
)
VLLM_V0_PROFILE = re.compile(
    r"Memory profiling results: total_gpu_memory=(?P<total>[\d.]+)GiB .*?peak_torch_memory=(?P<peak>[\d.]+)GiB .*?"
    r"non_torch_memory=(?P<nt>[\d.]+)GiB kv_cache_size=(?P<kv>-?[\d.]+)GiB gpu_memory_utilization=(?P<util>[\d.]+)"
)
# ---- llama.cpp (engines.md §12.2); the `xxx:` prefix changes between versions, so match it with \w+ -----------
LLAMA_MODEL_BUFFER = re.compile(r"\w+:\s+(?P<buf>\S+) model buffer size =\s+(?P<mib>[\d.]+) MiB")
#: older spelling (llama.cpp ≤ early 2025, ik_llama.cpp): ``llm_load_tensors:      CUDA0 buffer size = … MiB``
LLAMA_MODEL_BUFFER_OLD = re.compile(r"llm_load_tensors:\s+(?P<buf>\S+) buffer size =\s+(?P<mib>[\d.]+) MiB")
LLAMA_KV_BUFFER = re.compile(r"\w+:\s+(?P<buf>\S+) KV buffer size =\s+(?P<mib>[\d.]+) MiB")
LLAMA_RS_BUFFER = re.compile(r"\w+:\s+(?P<buf>\S+) RS buffer size =\s+(?P<mib>[\d.]+) MiB")
LLAMA_COMPUTE_BUFFER = re.compile(r"\w+:\s+(?P<buf>\S+) compute buffer size =\s+(?P<mib>[\d.]+) MiB")
LLAMA_N_CTX = re.compile(r"\w+: n_ctx\s+= (?P<n_ctx>\d+)")
LLAMA_N_UBATCH = re.compile(r"\w+: n_ubatch\s+= (?P<n>\d+)")
LLAMA_FLASH_ATTN = re.compile(r"\w+: flash_attn\s+= (?P<fa>\w+)")
LLAMA_KV_SIZE = re.compile(
    r"(?:llama_kv_cache\w*: size =\s+(?P<mib>[\d.]+) MiB \(\s*(?P<cells>\d+) cells[^)]*\)|"
    r"KV self size\s+=\s+(?P<self_mib>[\d.]+) MiB), K \((?P<tk>\w+)\):"
)
LLAMA_BREAKDOWN = re.compile(
    r"common_memory_breakdown_print: \|\s+-\s+(?P<dev>\S+) \((?P<desc>[^)]*)\)\s+\|\s+(?P<total>\d+)\s+=\s+"
    r"(?P<free>\d+)\s+\+\s+\(\s*(?P<self>\d+)\s+=\s+(?P<model>\d+)\s+\+\s+(?P<context>\d+)\s+\+\s+(?P<compute>\d+)\)"
    r"\s+\+\s+(?P<unacc>-?\d+)\s+\|"
)
#: llama.cpp buffers that live in host memory, not on the accelerator
HOST_BUFFERS = re.compile(r"^(?:CPU|CPU_Mapped|CPU_REPACK|CUDA_Host|ROCm_Host|Metal_Mapped|MTL0_Mapped|\w*_Host)$")
# ---- SGLang (engines.md §12.3) -------------------------------------------------------------------------------
SGLANG_WEIGHTS = re.compile(r"Load weight end\. .*avail mem=(?P<avail>[\d.]+) GB, mem usage=(?P<w>[\d.]+) GB\.")
SGLANG_KV = re.compile(
    r"KV Cache is allocated\. (?:dtype: (?P<dt>\S+), )?#tokens: (?P<tok>\d+), (?:K size: (?P<k>[\d.]+) GB, "
    r"V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)"
)


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
    #: every figure read, as printed (for display and provenance)
    details: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def _gib(text: str) -> int:
    return int(round(float(text) * GIB))


def _mib(text: str) -> int:
    return int(round(float(text) * MIB))


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    match = None
    for match in pattern.finditer(text):
        pass
    return match


def detect_engine(text: str) -> str | None:
    """Which engine wrote this log: ``vllm``, ``llama.cpp`` or ``sglang`` (None when nothing is recognised)."""
    if (
        VLLM_WEIGHTS.search(text)
        or VLLM_KV_MEMORY.search(text)
        or VLLM_V0_BLOCKS.search(text)
        or VLLM_V0_BUDGET.search(text)
    ):
        return "vllm"
    if (
        LLAMA_MODEL_BUFFER.search(text)
        or LLAMA_MODEL_BUFFER_OLD.search(text)
        or LLAMA_KV_BUFFER.search(text)
        or LLAMA_KV_SIZE.search(text)
    ):
        return "llama.cpp"
    if SGLANG_WEIGHTS.search(text) or SGLANG_KV.search(text):
        return "sglang"
    return None


def parse_vllm_log(text: str) -> Measured:
    """vLLM V1 (and V0 / early-V1) start-up lines -> per-GPU terms. Overhead = non-torch + CUDA graphs."""
    details: dict[str, str] = {}
    warnings: list[str] = []
    weights = activations = non_torch = graphs = kv = total = None
    util = None
    if match := _last(VLLM_WEIGHTS, text):
        weights = _gib(match["weights"])
        details["model loading"] = f"{match['weights']} GiB"
    if match := _last(VLLM_PROFILE, text):
        activations, non_torch = _gib(match["act"]), _gib(match["non_torch"])
        weights = weights if weights is not None else _gib(match["w"])
        details.update(
            {
                "torch peak increase": f"{match['act']} GiB",
                "non-torch increase": f"{match['non_torch']} GiB",
                "total non-KV": f"{match['non_kv']} GiB",
            }
        )
    if match := _last(VLLM_ACTUAL_USAGE, text):
        activations, non_torch, graphs = _gib(match["act"]), _gib(match["nt"]), _gib(match["cg"])
        details["actual usage line"] = match.group(0)
    if match := _last(VLLM_V0_TERMS, text):
        activations, non_torch, kv = _gib(match["act"]), _gib(match["nt"]), _gib(match["kv"])
        weights = weights if weights is not None else _gib(match["w"])
        details.update({"activation peak (V0)": f"{match['act']} GiB", "non-torch (V0)": f"{match['nt']} GiB"})
    if match := _last(VLLM_V0_PROFILE, text):
        total, util, non_torch, kv = _gib(match["total"]), float(match["util"]), _gib(match["nt"]), _gib(match["kv"])
        if weights is not None:
            activations = _gib(match["peak"]) - weights
            details["activation peak (derived: peak_torch_memory − weights)"] = f"{activations / GIB:.2f} GiB"
    if match := _last(VLLM_V0_BUDGET, text):
        total, util = _gib(match["total"]), float(match["util"])
    if match := _last(VLLM_KV_MEMORY, text):
        kv = _gib(match["kv_gib"])
        details["available KV cache memory"] = f"{match['kv_gib']} GiB"
    if match := _last(VLLM_CG_POOL, text):
        graphs = _gib(match["cg_act"])
        details["CUDA graph pool (actual)"] = f"{match['cg_act']} GiB"
    elif graphs is None and (match := _last(VLLM_CG_TAKEN, text)):
        graphs = _gib(match["cg"])
        details["CUDA graphs captured"] = f"{match['cg']} GiB"
    elif graphs is None and (match := _last(VLLM_CG_ESTIMATE, text)):
        graphs = _gib(match["cg_est"])
        details["CUDA graphs (estimated)"] = f"{match['cg_est']} GiB"
    if match := _last(VLLM_REQUESTED, text):
        util = float(match["util"])
        details["requested memory"] = f"{match['req']} GiB at util {util:g}"
    if util is None and (match := _last(VLLM_UTIL_ARG, text)):
        util = float(match["util"])
    if total is None and (match := _last(VLLM_TOTAL_MEMORY, text)):
        total = _gib(match["total"])
    kv_tokens = None
    if match := _last(VLLM_KV_TOKENS, text):
        kv_tokens = int(match["tokens"].replace(",", ""))
        details["GPU KV cache size"] = f"{kv_tokens:,} tokens"
    elif match := _last(VLLM_V0_BLOCKS, text):
        # V0 printed blocks; 16 tokens per block was the default block size (engines.md §2.7)
        kv_tokens = int(match["gpu"]) * 16
        details["GPU blocks"] = f"{match['gpu']} (× 16 tokens, the default block size)"
        warnings.append("KV tokens derived from '# GPU blocks' × 16 (the default block size)")
    conc = context = None
    if match := _last(VLLM_MAX_CONCURRENCY, text):
        conc = float(match["conc"])
        context = int(match["max_model_len"].replace(",", ""))
        details["maximum concurrency"] = f"{match['conc']}x for {context:,} tokens"
    if context is None and (match := _last(VLLM_MAX_SEQ, text)):
        context = int(match["len"])
    requested = None
    if match := _last(VLLM_REQUESTED, text):
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
    tp_match = _last(VLLM_TP, text)
    version = _last(VLLM_VERSION, text)
    kv_dtype = _last(VLLM_KV_DTYPE_ARG, text)
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

    engines.md §12.1 identity: requested − weights − activations − non_torch − graphs_applied = KV; the applied
    graph term is what the identity leaves (0 before vLLM #38284, or with the estimate switched off). Below
    the print rounding (0.03 GiB) it is taken as zero.
    """
    if requested is None or weights is None or activations is None or kv is None:
        return non_torch + (graphs or 0), None
    applied = requested - weights - activations - non_torch - kv
    if applied < 0.03 * GIB:
        return non_torch, "none (derived: requested − weights − activations − non-torch − KV ≈ 0)"
    return non_torch + applied, f"{applied / GIB:.2f} GiB (derived: requested − weights − activations − non-torch − KV)"


def _device_sums(pattern: re.Pattern[str], text: str, *more: re.Pattern[str]) -> dict[str, int]:
    sums: dict[str, int] = {}
    matches = [match for each in (pattern, *more) for match in each.finditer(text)]
    for match in matches:
        buffer = match["buf"]
        if HOST_BUFFERS.match(buffer):
            continue
        sums[buffer] = sums.get(buffer, 0) + _mib(match["mib"])
    return sums


def parse_llamacpp_log(text: str) -> Measured:
    """llama.cpp / ik_llama.cpp start-up lines -> the terms on the device with the most memory in use."""
    details: dict[str, str] = {}
    warnings: list[str] = []
    model = _device_sums(LLAMA_MODEL_BUFFER, text, LLAMA_MODEL_BUFFER_OLD)
    kv = _device_sums(LLAMA_KV_BUFFER, text)
    recurrent = _device_sums(LLAMA_RS_BUFFER, text)
    compute = _device_sums(LLAMA_COMPUTE_BUFFER, text)
    devices = sorted(set(model) | set(kv) | set(compute) | set(recurrent))
    for name, table in (("model", model), ("KV", kv), ("RS", recurrent), ("compute", compute)):
        for device, size in table.items():
            details[f"{device} {name} buffer"] = f"{size / MIB:.2f} MiB"
    overhead = None
    breakdowns = {m["dev"]: m for m in LLAMA_BREAKDOWN.finditer(text)}
    worst = max(
        devices, key=lambda d: model.get(d, 0) + kv.get(d, 0) + recurrent.get(d, 0) + compute.get(d, 0), default=None
    )
    if worst is not None:
        for dev, match in breakdowns.items():
            if dev.startswith(worst) or worst.startswith(dev):
                overhead = int(match["unacc"]) * MIB
                details[f"{dev} unaccounted"] = f"{match['unacc']} MiB"
    if worst is None and (match := _last(LLAMA_KV_SIZE, text)):
        size = match["mib"] or match["self_mib"]
        details["KV total"] = f"{size} MiB"
        warnings.append("the log names no device buffers: figures are totals over all devices")
    if len(devices) > 1:
        details["worst device"] = str(worst)
    if overhead is None:
        warnings.append("no memory-breakdown table in the log: the CUDA context / pool overhead is not measured")
    n_ctx = _last(LLAMA_N_CTX, text)
    kv_size = _last(LLAMA_KV_SIZE, text)
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


def parse_sglang_log(text: str) -> Measured:
    details: dict[str, str] = {}
    weights = kv = tokens = None
    if match := _last(SGLANG_WEIGHTS, text):
        weights = _gib(match["w"])  # SGLang's "GB" is bytes / 2**30 (groundtruth README)
        details["weights (mem usage)"] = f"{match['w']} GB"
    if match := _last(SGLANG_KV, text):
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
    engine = engine or detect_engine(text)
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
    return parsers[engine](text)


# ---- calibration files -------------------------------------------------------------------------------------------


def calibration_record(measured: Measured, gpu_id: str, log_name: str) -> dict[str, object]:
    if measured.activations is None and measured.overhead is None:
        raise UsageError("the log has neither an activation nor an overhead figure: nothing to calibrate with")
    return {
        "schema": CALIBRATION_SCHEMA,
        "engine": measured.engine,
        "engine_version": measured.engine_version,
        "gpu": gpu_id,
        "activations": measured.activations,
        "overhead": measured.overhead,
        "measured": {k: v for k, v in asdict(measured).items() if k not in ("details", "warnings")},
        "log": log_name,
    }


def save_calibration(record: Mapping[str, object], directory: Path | None = None) -> Path:
    directory = directory or calibration_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{calibration_key(str(record['engine']), str(record['gpu']))}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load_calibration_file(path: Path) -> dict[str, object]:
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"calibration file not found: {path}") from None
    except (OSError, ValueError) as error:
        raise MalformedFileError(f"not a calibration file ({error})", file=str(path)) from None
    if not isinstance(record, dict) or record.get("schema") != CALIBRATION_SCHEMA:
        raise MalformedFileError(f"schema is not {CALIBRATION_SCHEMA}", file=str(path), field="schema")
    for key in ("activations", "overhead"):
        value = record.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise MalformedFileError("must be a non-negative integer (bytes) or null", file=str(path), field=key)
    return record


def find_calibration(engine: str, gpu_id: str, directory: Path | None = None) -> tuple[Path, dict[str, object]] | None:
    path = calibration_file(engine, gpu_id, directory)
    if path is None:
        return None
    return path, load_calibration_file(path)


def apply_calibration(est: Estimate, record: Mapping[str, object], origin: str) -> Estimate:
    """Replace the activation / overhead terms by the measured ones; verdict and capacity follow.

    Capacity is scaled by the change of the memory left for the KV cache (tokens are proportional to the pool
    for paged engines); this is stated in the estimate's explanation.
    """
    old = est.per_gpu
    activations = record.get("activations")
    overhead = record.get("overhead")
    new = replace(
        old,
        activations=old.activations if activations is None else int(activations),  # type: ignore[arg-type]
        overhead=old.overhead if overhead is None else int(overhead),  # type: ignore[arg-type]
    )
    explain = dict(est.explain)
    note = f"calibrated from {origin}"
    explain["activations"] = (
        f"{note} (was {old.activations / GIB:.2f} GiB by the rules)"
        if activations is not None
        else explain.get("activations", "")
    )
    explain["overhead"] = (
        f"{note} (was {old.overhead / GIB:.2f} GiB by the rules)"
        if overhead is not None
        else explain.get("overhead", "")
    )
    capacity = est.capacity
    old_pool = old.usable - old.weights - old.activations - old.overhead
    new_pool = new.usable - new.weights - new.activations - new.overhead
    if est.hardware is not None and old_pool > 0:
        ratio = max(0.0, new_pool) / old_pool
        capacity = Capacity(
            kv_tokens=None if capacity.kv_tokens is None else int(capacity.kv_tokens * ratio),
            max_concurrency=None if capacity.max_concurrency is None else capacity.max_concurrency * ratio,
            max_context=None if capacity.max_context is None else int(capacity.max_context * ratio),
        )
        explain["capacity"] = f"derived: scaled by the KV pool change after calibration (× {ratio:.3f})"
    verdict = verdict_for(new.total, new.usable) if est.hardware is not None else None
    utilization = new.total / new.usable if est.hardware is not None and new.usable else est.utilization
    return replace(
        est,
        per_gpu=new,
        verdict=verdict,
        utilization=utilization,
        capacity=capacity,
        explain=explain,
        warnings=est.warnings + (f"activations / overhead measured: {note}",) + calibration_mismatches(est, record),
    )


def _minor(version: object) -> str | None:
    """``0.19.0`` / ``v0.19`` -> ``0.19``: releases that share their memory rules."""
    match = re.match(r"v?(\d+)\.(\d+)", str(version or ""))
    return f"{match[1]}.{match[2]}" if match else None


def calibration_mismatches(est: Estimate, record: Mapping[str, object]) -> tuple[str, ...]:
    """A calibration measured with another engine, release or GPU than the estimate's: said, not refused."""
    notes = []
    engine = est.engine.get("name")
    if record.get("engine") and engine and record["engine"] != engine:
        notes.append(
            f"the calibration was measured with {record['engine']}, this estimate is for {engine}: "
            "its activation / overhead terms may not carry over"
        )
    measured, used = _minor(record.get("engine_version")), _minor(est.engine.get("version"))
    if measured and used and measured != used and record.get("engine") == engine:
        notes.append(
            f"the calibration was measured on {engine} {record.get('engine_version')}; this estimate "
            f"follows the {used} rules (pass --engine {engine}@{measured} to compare like with like)"
        )
    if est.hardware is not None and record.get("gpu") and record["gpu"] != est.hardware.gpu.id:
        notes.append(f"the calibration was measured on {record['gpu']}, this estimate is for {est.hardware.gpu.id}")
    return tuple(notes)


def predicted_terms(est: Estimate) -> dict[str, int | None]:
    """The estimate's figures in the shape of :class:`Measured` (KV as the pool the engine would allocate)."""
    per_gpu = est.per_gpu
    pool = est.engine.get("kv_pool_bytes")
    if not isinstance(pool, int) and est.hardware is not None:
        pool = per_gpu.usable - per_gpu.weights - per_gpu.activations - per_gpu.overhead
    if isinstance(pool, int) and pool <= 0:
        pool = 0  # the engine would find no memory for its KV cache, as a failed start-up log shows
    return {
        "weights": per_gpu.weights,
        "kv_cache": pool if pool is not None else per_gpu.kv_cache,
        "activations": per_gpu.activations,
        "overhead": per_gpu.overhead,
        "kv_tokens": est.capacity.kv_tokens,
    }


#: measured and predicted weights further apart than this share point at a different checkpoint or offload
WEIGHTS_MISMATCH = 0.2


def comparison_warnings(measured: Measured, predicted: Mapping[str, int | None]) -> list[str]:
    """What to check when the prediction is far from the log: usually not hfvram's rules but the inputs."""
    weights = predicted.get("weights")
    if measured.weights is None or not weights:
        return []
    if abs(measured.weights - weights) <= WEIGHTS_MISMATCH * max(measured.weights, weights):
        return []
    return [
        f"the log's weights ({measured.weights / GIB:.2f} GiB per GPU) are far from --model's "
        f"({weights / GIB:.2f} GiB): is --model the checkpoint that ran (same quantization / GGUF file), "
        "and do --set / --engine match the run (tensor parallel, -ngl, -ot / --n-cpu-moe offload)? "
        "The other differences follow from that one"
    ]


def measured_dict(measured: Measured) -> dict[str, object]:
    out = asdict(measured)
    out["details"] = dict(measured.details)
    out["warnings"] = list(measured.warnings)
    return out


def read_log(path: str) -> str:
    """The log's text ('-' = stdin); a missing file is a usage error (exit 2)."""
    import sys

    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise UsageError(f"log file not found: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a folder, not a log file") from None


def iter_lines(texts: Iterable[str]) -> str:
    return "\n".join(texts)
