"""vLLM's start-up log: the lines ``hfvram calibrate`` reads (docs/engines/common.md#calibration-logs-vllm) and
the reader that turns them into a :class:`~hfvram.calibrate.logs.Measured` (V1, and V0 / early V1). The line-matching
toolkit (``_Line``, ``_Fields``, the bounded figure patterns) is ``hfvram.calibrate.logs``'s; this module is imported
only when a log is read, never by a check (its patterns are compiled at import).
"""

from __future__ import annotations

from typing import Any

from hfvram.calibrate.logs import _COUNT, _NUM, _SNUM, GIB, Measured, _any, _Fields, _gib, _last, _Line, _lines
from hfvram.errors import UsageError

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
    rf"CUDA graph pool memory: (?P<cg_act>{_SNUM}) GiB \(actual\), (?P<cg_est>{_SNUM}) GiB \(estimated\)",
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
#: INFO from about v0.27 (after vllm#49208; docs/engines/common.md#calibration-logs-vllm): weights and non-torch memory in one
#: figure, and a peak activation that holds the CUDA-graph estimate the budget deducts
VLLM_USAGE_CONSUMED = _Line(
    "for consumed memory (weights + non-torch)",
    rf"Actual usage is (?P<consumed>{_NUM}) GiB for consumed memory \(weights \+ non-torch\), (?P<act>{_SNUM}) GiB "
    rf"for peak activation, and (?P<cg>{_SNUM}) GiB for CUDAGraph memory\.",
)
#: the head of the same INFO line (also on the older "Actual usage is W GiB for weight, …" line)
VLLM_DESIRED = _Line(
    "Desired GPU memory utilization is (",
    rf"Free memory on device \((?P<free>{_NUM})/(?P<total>{_NUM}) GiB\) on startup\. Desired GPU memory utilization "
    rf"is \((?P<util>{_NUM}), (?P<req>{_NUM}) GiB\)",
)
VLLM_KV_IN_USE = _Line(
    "Current kv cache memory in use is ",
    rf"Current kv cache memory in use is (?P<kv>{_SNUM}) (?P<unit>GiB|bytes)",
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


def recognises(lines: list[str]) -> bool:
    """Whether the log holds vLLM's start-up lines (hfvram.calibrate.logs.detect_engine asks each engine)."""
    return any(
        _any(p, lines)
        for p in (VLLM_WEIGHTS, VLLM_KV_MEMORY, VLLM_ACTUAL_USAGE, VLLM_USAGE_CONSUMED, VLLM_V0_BLOCKS, VLLM_V0_BUDGET)
    )


def parse_vllm_log(text: str | list[str]) -> Measured:
    """vLLM V1 (and V0 / early-V1) start-up lines -> per-GPU terms. Overhead = non-torch + CUDA graphs.

    Longer than 60 lines: one reading per line kind, in the order in which a later line's figure overrides an
    earlier one's (the V1 profile, the "Actual usage" line, the V0 terms and profile); split up, that precedence
    would be spread over several functions.
    """
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
        # "W GiB for weight" is the model runner's model_memory_usage, the figure of "Model loading took"
        weights = weights if weights is not None else _gib(match["w"])
        details["actual usage line"] = match.group(0)
    if match := _last(VLLM_USAGE_CONSUMED, lines):
        activations, non_torch, notes = _consumed_usage(match, weights, _graph_estimate(lines), details)
        warnings.extend(notes)
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
    elif kv is None and (match := _last(VLLM_KV_IN_USE, lines)):
        kv = _gib(match["kv"]) if match["unit"] == "GiB" else round(float(match["kv"]))
        details["KV cache memory in use"] = f"{match['kv']} {match['unit']}"
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
    desired = _last(VLLM_DESIRED, lines)
    if desired and util is None:
        util = float(desired["util"])
        details["requested memory"] = f"{desired['req']} GiB at util {util:g}"
    if desired and total is None:
        total = _gib(desired["total"])
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
    elif desired:
        requested = _gib(desired["req"])
    elif total is not None and util is not None:
        requested = int(total * util)
    overhead = None
    if non_torch is not None:
        overhead, note = _budget_overhead(requested, weights, activations, non_torch, kv, graphs)
        if (
            note
            and note.startswith("none")
            and "activation peak (derived: printed peak − CUDA-graph estimate)" not in details
            and _any(VLLM_USAGE_CONSUMED, lines)
        ):
            # the newer line's peak holds the estimate; unprinted, it stays in the activations (_consumed_usage)
            details["CUDA graphs inside the budget"] = (
                "in the printed peak activation (the log does not print the estimate)"
            )
        elif note:
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


def _graph_estimate(lines: list[str]) -> int | None:
    """The CUDA-graph estimate the profiler charged ("CUDA graph pool memory: … (estimated)", else "Estimated CUDA graph
    memory: X GiB total"), the figure a v0.21+ budget deducts; None when the log prints neither."""
    if match := _last(VLLM_CG_POOL, lines):
        return _gib(match["cg_est"])
    if match := _last(VLLM_CG_ESTIMATE, lines):
        return _gib(match["cg_est"])
    return None


def _consumed_usage(
    match: Any, weights: int | None, estimate: int | None, details: dict[str, str]
) -> tuple[int, int | None, list[str]]:
    """vLLM's INFO line from about v0.27, "Actual usage is C GiB for consumed memory (weights + non-torch), P GiB for
    peak activation, and G GiB for CUDAGraph memory." -> (activations, non-torch; None without the weights line,
    the warnings it raises).

    P is peak_activation_memory = transient_peak_headroom + cudagraph_memory_estimate_applied (vllm#57936 quotes
    gpu_worker.py after vllm#49208; the printed figures add up to it: requested − C − P = the KV cache in use), and G
    is the pool captured after the KV cache. Read as printed, the graphs would be booked twice: once inside P and
    again as G. They are counted once, as the estimate the budget deducted (the overhead takes it by the budget
    identity), so the activations are P less that estimate.
    """
    peak, consumed = _gib(match["act"]), _gib(match["consumed"])
    details["actual usage line"] = match.group(0)
    details["CUDA graphs captured"] = f"{match['cg']} GiB"
    non_torch = consumed - weights if weights is not None and consumed >= weights else None
    warnings: list[str] = []
    if non_torch is None:
        warnings.append(
            "weights and non-torch memory are printed as one figure and no 'Model loading took' line separates them: "
            "the overhead is not read"
        )
    if estimate is not None and 0 <= estimate <= peak:
        details["activation peak (derived: printed peak − CUDA-graph estimate)"] = f"{(peak - estimate) / GIB:.2f} GiB"
        return peak - estimate, non_torch, warnings
    warnings.append(
        "the log's peak activation includes the CUDA-graph estimate, which the log does not print: the activations "
        "count the graphs, the overhead does not"
    )
    return peak, non_torch, warnings


def _vllm_generation(lines: list[str], v1_banner: bool) -> str | None:
    """ "v1" / "v0" as the log's own lines show (see ``Measured.engine_generation``)."""
    if v1_banner or any(_any(p, lines) for p in (VLLM_KV_MEMORY, VLLM_ACTUAL_USAGE, VLLM_USAGE_CONSUMED)):
        return "v1"
    if any(_any(p, lines) for p in (VLLM_V0_BLOCKS, VLLM_V0_TERMS, VLLM_V0_PROFILE)):
        return "v0"
    return None


#: the reader hfvram.calibrate.logs.parse_log calls for this engine
parse = parse_vllm_log
