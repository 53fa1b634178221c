"""hfvram next to published measurements for the engines without start-up-log judges yet: TensorRT-LLM,
LMDeploy, ExLlamaV2 / V3, MLX and transformers.

Reads ``benchmarks/data/engine_measurements.jsonl`` (one published case a line: engine, version, model, GPU,
settings, every figure as printed, the exact lines and the source URL). For every case whose model hfvram can
read offline (embedded catalogue or ``fixtures/hub``) and whose ``compare`` list names terms, it runs
``hfvram.check`` with the case's settings and prints measured against predicted per term, with the error in %.
Terms (each derived only from figures the source printed):

- ``kv_bytes_per_token``: TensorRT-LLM's "Allocated X GiB for max tokens in paged KV cache (N)" as X / N,
  against the profile's KV bytes per token;
- ``kv_pool_from_available``: the same X against the profile's fraction of the logged "available" memory
  (the rule ``pool = free_gpu_memory_fraction × free after the peak``, judged on the engine's own free figure);
- ``kv_tokens``: tokens in the paged KV pool, end to end (weights, peak and fraction all hfvram's);
- ``kv_slope``: MiB per token between two context lengths of one ExLlama load (what grows with the context),
  against the difference of hfvram's totals at the same two lengths;
- ``cache_mode_delta``: MiB saved by a quantized cache mode at one context, against hfvram's difference;
- ``block_bytes``: LMDeploy TurboMind's "[BlockManager] block_size = X MB" (block_size / 2^20, so MiB) against
  the profile's block of ``block_size`` tokens × KV bytes per token;
- ``kv_per_session``: MiB a TurboMind load adds per concurrent session (two batch sizes of one table), against the
  difference of the profile's KV term at the same batch sizes;
- ``kv_quant_block_gain``: LMDeploy's documented "int4/int8 kv can be increased by 4 times and 2 times" blocks, against
  the profile's fp16 block over its int8 / int4 block (``quant_policy`` 8 / 4, scales and zeros included);
- ``stated_kv_per_token``: the ExLlamaV2 developer's per-token cache figures ("240 kB per token", "~0.56" bytes per
  element at Q4, a Q4 / FP16 ratio), against the growth of the profile's cache term between 4096 and 8192 tokens;
- ``cache_mode_ratio``: (MiB saved by the 8-bit cache) / (MiB saved by the 4-bit cache) of one ExLlamaV2 load at an
  unstated context, against the same ratio of hfvram's totals (the context cancels);
- ``peak_total``: mlx-lm's peak memory (``mx.get_peak_memory() / 1e9``: MLX allocations only, no Metal / CUDA
  context) against the profile's weights + KV + activations (its Metal-context overhead is left out, as MLX's
  counter leaves it out);
- ``peak_batch_delta``: ``mlx_lm.benchmark``'s peak at two batch sizes (``-b``) of one model and prompt, difference per
  added sequence, against the difference of hfvram's weights + KV + activations at the same two concurrencies (the
  weights cancel);
- ``peak_slope``: mlx-lm's peak at two prompt lengths of one model, difference per token, against the difference of
  hfvram's weights + KV + activations at the same two lengths (the weights cancel, so quantized checkpoints whose
  bf16 config hfvram reads are judged on what grows with the prompt).

Held-out split, fixed before any error was looked at: cases whose id number is even are held out, odd ones are
in-sample. Cases marked ``"added": "issue 13"`` (em-16 on) were found after the profiles were written; the report
keeps them apart from the first fifteen; ``"added": "issue 13, round 2"`` marks the second round (em-23 on, and em-15,
first computed then through a KV-geometry stand-in), whose documentation and developer figures name their ``kind``;
``"added": "issue 13, round 3"`` the third (em-30 on, MLX). No engine constant was tuned; rules were corrected on in-sample cases only,
each read in the engine's code: em-05 (the ExLlama cache is allocated for attention layers only, so Nemotron-NAS no-op
layers hold none) and em-21 (MLX materialises one layer's attention scores per prefill chunk for head dims without a
fused kernel) and em-31 (mlx-lm keeps the gated-delta recurrent state in float32); held-out errors are untouched,
with one exception said here and in ``REFITTED``: em-30 (held out by its number) showed a 94 % MLA miss that was
then read in mlx-lm's code and fixed (docs/engines/mlx.md#mlx-mla-prefill), so it is reported in-sample.

transformers has no published figure for a model hfvram holds: ``benchmarks/data/transformers_truth.jsonl``
(written by ``benchmarks/transformers_truth.py``, measured here on the CPU) gives ``tt-NN`` rows instead: the weights
(parameter + buffer bytes of ``from_config`` models) and the cache bytes after ``generate``, against the profile's
weights and KV terms (one rule corrected on them: a DynamicCache sliding layer keeps ``window - 1`` tokens).

Usage:  python3 benchmarks/accuracy_engines.py [--cases PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hfvram import check  # noqa: E402

CASES = ROOT / "benchmarks" / "data" / "engine_measurements.jsonl"
#: transformers measured here (benchmarks/transformers_truth.py): weights and cache bytes of from_config models
TRUTH = ROOT / "benchmarks" / "data" / "transformers_truth.jsonl"
GiB = 1 << 30
MiB = 1 << 20
#: the five engines this benchmark judges, under hfvram's engine names
ENGINES = ("tensorrt-llm", "lmdeploy", "exllamav2", "mlx", "transformers")
#: the case's engine field -> hfvram's profile (ExLlamaV3 runs are judged against the ExLlamaV2 profile: the
#: same static cache classes, FP16 / Q8 / Q6 / Q4, allocated at max_seq_len)
PROFILE = {"exllamav3": "exllamav2"}
#: hfvram GPU ids for the GPUs the cases name
GPU_IDS = {
    "RTX 5090": "rtx5090",
    "A10": "a10",
    "RTX 4090 (24564 MiB)": "rtx4090",
    "H100": "h100",
    # the TensorRT-LLM memory guide's log names no card; its 79.10 GiB total is an 80 GB one (the pool rule judged on
    # it reads the logged free memory, not the card)
    "unknown 80 GB (79.10 GiB total)": "h100",
    # the tensorrtllm_backend multimodal guide's log (93.10 GiB total, an H100 NVL-class card); likewise card-independent
    "unknown 94 GB (93.10 GiB total)": "h100",
    "B200": "b200",
    # the M5 Max is not in the catalogue; the slope terms it is used for do not depend on the device
    "M5 Max 128 GB": "m4-max-128",
    "unknown Apple Silicon": "m4-max-128",
}
#: ExLlama cache-mode spellings of the sources -> the profile's cache modes
CACHE_MODES = {"default (FP16)": "FP16", "FP16": "FP16", "q4": "Q4", "Q4": "Q4", "Q6": "Q6", "Q8": "Q8"}
REQUIRED = ("id", "engine", "engine_version", "model", "gpu", "settings", "measured", "source_url", "quote")
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(GiB|MiB|GB|MB)\s*$")
_K = re.compile(r"^([0-9]+)k$")


@dataclass
class Term:
    name: str
    measured: float
    predicted: float
    unit: str
    note: str = ""

    @property
    def error_pct(self) -> float:
        return (self.predicted - self.measured) / self.measured * 100.0


@dataclass
class CaseResult:
    id: str
    engine: str
    model: str
    source_url: str
    held_out: bool
    added: bool = False
    terms: list[Term] = field(default_factory=list)
    skipped: str | None = None


def load_cases(path: Path = CASES) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


#: held-out cases on which a rule was corrected after their error was seen: reported in-sample from then on
REFITTED = frozenset({"em-30"})


def held_out(case_id: str) -> bool:
    """Even id numbers are held out (fixed before looking at any error), except the ``REFITTED`` ones."""
    digits = re.findall(r"[0-9]+", case_id)
    return bool(digits) and int(digits[-1]) % 2 == 0 and case_id not in REFITTED


def size_bytes(text: str, binary_mb: bool = False) -> float:
    """``"16.05 GiB"`` / ``"19162MiB"`` -> bytes. "MB" is read as MiB only where the printing code divides by
    2^20 (``binary_mb``, TurboMind's BlockManager); otherwise decimal units are refused, not guessed."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r}")
    value, unit = float(match.group(1)), match.group(2)
    if unit == "MB" and binary_mb:
        unit = "MiB"
    if unit in ("GB", "MB"):
        raise ValueError(f"decimal unit {unit} in {text!r}: not compared")
    return value * (GiB if unit == "GiB" else MiB)


def k_tokens(text: str) -> int:
    """``"12k"`` -> 12288 (the case's context_unit_note says k is read as 1024 tokens)."""
    match = _K.match(text)
    if match is None:
        raise ValueError(f"not a context point: {text!r}")
    return int(match.group(1)) * 1024


def _doc(model: str, engine: str, **kwargs: Any) -> Mapping[str, Any]:
    return check(model, engine=engine, offline=True, **kwargs).document


def _trt_kwargs(case: Mapping[str, Any]) -> dict[str, Any]:
    s = case["settings"]
    settings: dict[str, Any] = {}
    for src, dst in (
        ("max_batch_size", "max-batch-size"),
        ("max_num_tokens", "max-num-tokens"),
        ("max_seq_len", "max-seq-len"),
        ("tokens_per_block", "tokens-per-block"),
    ):
        if isinstance(s.get(src), int):
            settings[dst] = s[src]
    kwargs: dict[str, Any] = {"gpu": GPU_IDS[case["gpu"]], "settings": settings}
    if isinstance(s.get("kv_cache_free_gpu_mem_fraction"), float):
        kwargs["gpu_util"] = s["kv_cache_free_gpu_mem_fraction"]
    if s.get("kv_cache_dtype") in ("fp8", "fp16"):
        kwargs["kv_dtype"] = s["kv_cache_dtype"]
    if isinstance(s.get("max_tokens"), int):
        settings["max-tokens"] = s["max_tokens"]
    if "max_output_len" in s and "max_seq_len" not in s:
        kwargs["context"] = s["max_output_len"]
    return kwargs


def trt_terms(case: Mapping[str, Any]) -> list[Term]:
    m = case["measured"]
    doc = _doc(case["model"], "tensorrt-llm", **_trt_kwargs(case))
    engine = doc["engine"]
    terms = []
    for name in case["compare"]:
        if name == "kv_bytes_per_token":
            terms.append(
                Term(
                    name,
                    size_bytes(m["kv_pool"]) / int(m["kv_tokens"]),
                    float(engine["kv_bytes_per_token"]),
                    "B/token",
                    "Allocated GiB / tokens in the paged KV cache",
                )
            )
        elif name == "kv_pool_from_available":
            fraction = float(engine["free_gpu_memory_fraction"])
            terms.append(
                Term(
                    name,
                    size_bytes(m["kv_pool"]) / GiB,
                    fraction * size_bytes(m["available_memory"]) / GiB,
                    "GiB",
                    f"profile rule: {fraction:g} x the logged available memory",
                )
            )
        elif name == "kv_tokens":
            terms.append(Term(name, float(m["kv_tokens"]), float(doc["capacity"]["kv_tokens"]), "tokens", "end to end"))
    return terms


def _stated_kib(text: str) -> float:
    """``"240 kB"`` as the ExLlama developer writes it: KiB (the stated products, e.g. 128 x 8 x 60 x 2 x 2 =
    245760 B, are 240 only in KiB)."""
    match = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*kB\s*$", text)
    if match is None:
        raise ValueError(f"not a per-token size: {text!r}")
    return float(match.group(1))


def _exl_total(model: str, gpu: str, context: int, mode: str) -> float:
    doc = _doc(model, "exllamav2", gpu=gpu, context=context, settings={"cache-mode": mode})
    return float(doc["per_gpu"]["total"])


def exllama_terms(case: Mapping[str, Any]) -> list[Term]:
    s, m = case["settings"], case["measured"]
    gpu = GPU_IDS.get(case["gpu"], "rtx4090")
    terms = []
    for name in case["compare"]:
        if name == "kv_slope":
            mode = CACHE_MODES[s["cache_mode"]]
            points = [(label, k_tokens(label)) for label in s["context_points"]]
            for (la, ca), (lb, cb) in pairwise(points):
                measured = (size_bytes(m[f"vram_{lb}"]) - size_bytes(m[f"vram_{la}"])) / (cb - ca)
                predicted = (_exl_total(case["model"], gpu, cb, mode) - _exl_total(case["model"], gpu, ca, mode)) / (
                    cb - ca
                )
                terms.append(Term(f"kv_slope {la}->{lb}", measured / 1024, predicted / 1024, "KiB/token", mode))
        elif name == "cache_mode_delta":
            context = int(s["context_length"])
            measured = (size_bytes(m["vram_fp16"]) - size_bytes(m["vram_q4"])) / MiB
            predicted = (
                _exl_total(case["model"], gpu, context, "FP16") - _exl_total(case["model"], gpu, context, "Q4")
            ) / MiB
            terms.append(Term("cache_mode_delta FP16-Q4", measured, predicted, "MiB", f"at {context} tokens"))
        elif name == "cache_mode_ratio":
            # the context is not stated: the ratio of the savings does not depend on it (hfvram's at 4096 tokens)
            measured = (size_bytes(m["vram_fp16"]) - size_bytes(m["vram_8bit"])) / (
                size_bytes(m["vram_fp16"]) - size_bytes(m["vram_4bit"])
            )
            fp16, fp8, q4 = (_exl_total(case["model"], gpu, 4096, mode) for mode in ("FP16", "FP8", "Q4"))
            terms.append(
                Term("cache_mode_ratio 8bit/4bit", measured, (fp16 - fp8) / (fp16 - q4), "ratio", "FP16-FP8 / FP16-Q4")
            )
        elif name == "stated_kv_per_token":
            # the developer's per-token cache figure against the growth of hfvram's cache term (not the total:
            # the statement counts the cache alone) between 4096 and 8192 tokens
            def kv_slope(mode: str) -> float:
                low, high = (
                    _doc(case["model"], "exllamav2", gpu=gpu, context=c, settings={"cache-mode": mode})["per_gpu"][
                        "kv_cache"
                    ]
                    for c in (4096, 8192)
                )
                return (float(high) - float(low)) / 4096

            fp16 = kv_slope("FP16")
            if "kv_per_token_fp16" in m:
                measured = _stated_kib(m["kv_per_token_fp16"])
                if "kv_per_token_q4" in m:
                    ratio = _stated_kib(m["kv_per_token_q4"]) / measured
                    terms.append(
                        Term("q4_over_fp16 per token", ratio, kv_slope("Q4") / fp16, "ratio", "Q4 / FP16 cache")
                    )
                else:
                    terms.append(Term("kv_per_token FP16", measured, fp16 / 1024, "KiB/token", "cache term slope"))
            if "q4_bytes_per_element" in m:
                stated = float(str(m["q4_bytes_per_element"]).lstrip("~"))
                # FP16 stores 2 bytes per element, so Q4 bytes per element = 2 x (Q4 slope / FP16 slope)
                terms.append(
                    Term("q4_bytes_per_element", stated, 2 * kv_slope("Q4") / fp16, "B/elem", "Q4 data + scales")
                )
    return terms


def _mlx_peak(
    model: str, gpu: str, context: int, settings: Mapping[str, Any], concurrency: int = 1
) -> tuple[float, Mapping[str, Any]]:
    """hfvram's MLX weights + KV + activations (bytes) at ``context`` tokens: what mx.get_peak_memory() counts."""
    extra = {"prefill-step-size": settings["prefill_step_size"]} if "prefill_step_size" in settings else {}
    doc = _doc(model, "mlx", gpu=gpu, context=context, settings=extra, concurrency=concurrency)
    per_gpu = doc["per_gpu"]
    return float(per_gpu["weights"]) + float(per_gpu["kv_cache"]) + float(per_gpu["activations"]), doc


def _decimal_gb(text: str) -> float:
    return float(text) * 1e9


def mlx_terms(case: Mapping[str, Any]) -> list[Term]:
    s, m = case["settings"], case["measured"]
    gpu = GPU_IDS.get(case["gpu"], "m4-max-128")
    terms = []
    for name in case["compare"]:
        if name == "peak_total":
            context = int(s["prompt_tokens"]) + int(s["generation_tokens"])
            predicted, _ = _mlx_peak(case["model"], gpu, context, s)
            terms.append(
                Term(
                    "peak_total",
                    _decimal_gb(m["peak_memory_pre"]) / GiB,
                    predicted / GiB,
                    "GiB",
                    f"weights + KV + activations at {context} tokens",
                )
            )
        elif name == "peak_slope":
            generated = int(s.get("generation_tokens", 0))
            points = []
            for label in s["context_points"]:
                tokens = k_tokens(label) if isinstance(label, str) else int(label)
                key = f"peak_{label}"
                points.append((str(label), tokens + generated, _decimal_gb(m[key])))
            for (la, ca, pa), (lb, cb, pb) in pairwise(points):
                predicted = (_mlx_peak(case["model"], gpu, cb, s)[0] - _mlx_peak(case["model"], gpu, ca, s)[0]) / (
                    cb - ca
                )
                terms.append(
                    Term(f"peak_slope {la}->{lb}", (pb - pa) / (cb - ca) / 1024, predicted / 1024, "KiB/token")
                )
        elif name == "peak_batch_delta":
            # mlx_lm.benchmark -b N: the peak at two batch sizes of one model and prompt (the weights cancel), per
            # added sequence, against the difference of hfvram's weights + KV + activations at the same concurrency
            context = int(s["prompt_tokens"]) + int(s["generation_tokens"])
            (ba, bb) = (int(b) for b in s["batch_sizes"])
            measured = (_decimal_gb(m[f"peak_b{bb}"]) - _decimal_gb(m[f"peak_b{ba}"])) / (bb - ba)
            predicted = (
                _mlx_peak(case["model"], gpu, context, s, bb)[0] - _mlx_peak(case["model"], gpu, context, s, ba)[0]
            ) / (bb - ba)
            terms.append(
                Term(
                    f"peak_batch_delta b{ba}->b{bb}",
                    measured / MiB,
                    predicted / MiB,
                    "MiB/seq",
                    f"KV + activations per added sequence of {context} tokens",
                )
            )
    return terms


def _lmdeploy_doc(model: str, settings: Mapping[str, Any], concurrency: int = 1, **extra: Any) -> Mapping[str, Any]:
    """hfvram's LMDeploy estimate with the settings a case states (an unstated one keeps the profile default). The
    terms judged here (block bytes) do not depend on the device; an 80 GB card gives the pool that they are read
    from room to exist whatever the weights."""
    kwargs: dict[str, Any] = {
        "context": int(settings.get("session_len", 4096)),
        "gpu": "a100-80g-sxm",
        "concurrency": concurrency,
    }
    if isinstance(settings.get("cache_max_entry_count"), float):
        kwargs["gpu_util"] = float(settings["cache_max_entry_count"])
    chosen: dict[str, Any] = dict(extra)
    if isinstance(settings.get("max_batch_size"), int):
        chosen["max-batch-size"] = int(settings["max_batch_size"])
    if isinstance(settings.get("cache_block_seq_len"), int):
        chosen["cache-block-seq-len"] = int(settings["cache_block_seq_len"])
    return _doc(model, "lmdeploy", settings=chosen, **kwargs)


def _lmdeploy_block_bytes(doc: Mapping[str, Any]) -> float:
    """The profile's KV block: its KV term's bytes per token (scales and zeros included) × its block size. The KV
    term holds ``ceil(context / block) × block`` tokens per sequence, so the per-token figure is exact when the context
    is a whole number of blocks (every case's is)."""
    block = int(doc["engine"]["block_size"])
    workload = doc["workload"]
    tokens = -(-int(workload["context"]) // block) * block * int(workload["concurrency"])
    return float(doc["per_gpu"]["kv_cache"]) / tokens * block


def lmdeploy_terms(case: Mapping[str, Any]) -> list[Term]:
    s, m = case["settings"], case["measured"]
    terms = []
    for name in case["compare"]:
        if name == "block_bytes":
            doc = _lmdeploy_doc(case["model"], s)
            terms.append(
                Term(
                    name,
                    size_bytes(m["block_size"], binary_mb=True) / MiB,
                    _lmdeploy_block_bytes(doc) / MiB,
                    "MiB",
                    f"{doc['engine']['block_size']} tokens x KV bytes per token",
                )
            )
        elif name == "kv_per_session":
            # MiB added per concurrent session between two batch sizes of one table (the weights cancel), against the
            # difference of the profile's KV term at the same batch sizes (fp16: quant_policy 0, int8: 8)
            for label, policy in (("fp16", 0), ("int8", 8)):
                extra = {"quant-policy": policy} if policy else {}
                for low, high in pairwise(int(b) for b in s["batch_sizes"]):
                    kv = [
                        float(_lmdeploy_doc(case["model"], s, concurrency=n, **extra)["per_gpu"]["kv_cache"])
                        for n in (low, high)
                    ]
                    measured = (float(m[f"{label}_{high}"]) - float(m[f"{label}_{low}"])) / (high - low)
                    terms.append(
                        Term(
                            f"{name} {label} {low}->{high}",
                            measured,
                            (kv[1] - kv[0]) / (high - low) / MiB,
                            "MiB",
                            f"{s['session_len']} tokens per session",
                        )
                    )
        elif name == "kv_quant_block_gain":
            # kv_quant.md: how many more blocks an int8 / int4 cache holds than fp16 in the same memory, i.e. the
            # fp16 block over the quantized block (TurboMind quant_policy 8 = int8, 4 = int4)
            fp16 = _lmdeploy_block_bytes(_lmdeploy_doc(case["model"], s))
            for label, policy in (("int8", 8), ("int4", 4)):
                quantized = _lmdeploy_block_bytes(_lmdeploy_doc(case["model"], s, **{"quant-policy": policy}))
                terms.append(
                    Term(
                        f"{name} {label}",
                        float(m[f"{label}_block_gain"]),
                        fp16 / quantized,
                        "x",
                        f"fp16 block / {label} block (quant_policy {policy}, scale + zero per token and head)",
                    )
                )
    return terms


def evaluate(case: Mapping[str, Any]) -> CaseResult:
    engine = PROFILE.get(case["engine"], case["engine"])
    result = CaseResult(
        case["id"], case["engine"], case["model"], case["source_url"], held_out(case["id"]), bool(case.get("added"))
    )
    if not case.get("compare"):
        result.skipped = str(case.get("offline") or "no comparable term")
        return result
    if engine == "tensorrt-llm":
        result.terms = trt_terms(case)
    elif engine == "exllamav2":
        result.terms = exllama_terms(case)
    elif engine == "lmdeploy":
        result.terms = lmdeploy_terms(case)
    elif engine == "mlx":
        result.terms = mlx_terms(case)
    else:
        result.skipped = f"no comparison defined for {engine}"
    return result


def _derived_config(repo: str, overrides: Mapping[str, Any]) -> Path:
    """A folder holding ``repo``'s fixture config.json with ``overrides`` applied (what transformers_truth.py built)."""
    import hashlib
    import tempfile

    config = json.loads((ROOT / "fixtures" / "hub" / repo / "config.json").read_text(encoding="utf-8"))
    config.update(overrides)
    text = json.dumps(config, indent=1, sort_keys=True)
    folder = Path(tempfile.gettempdir()) / f"hfvram-derived-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(text, encoding="utf-8")
    return folder


def transformers_results(path: Path = TRUTH) -> list[CaseResult]:
    """hfvram's transformers profile against transformers measured here: the weights (parameters + buffers of a
    ``from_config`` model) and the KV cache (``nbytes`` of the cache after ``generate``) at the cache's own length
    (DynamicCache: the tokens it holds; StaticCache: the positions it allocated) and batch."""
    if not path.exists():
        return []
    results = []
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    for number, row in enumerate(rows, start=1):
        source = f"benchmarks/transformers_truth.py (torch {row['torch']}, transformers {row['transformers']}, CPU)"
        result = CaseResult(f"tt-{number:02d}", "transformers", row["model"], source, held_out=False, added=True)
        if row["kind"] == "weights":
            doc = _doc(row["model"], "transformers", context=1024)
            measured = float(row["parameter_bytes"] + row["buffer_bytes"])
            note = f"parameters + buffers, built on {row['build']}"
            result.terms = [Term("weights", measured / GiB, float(doc["per_gpu"]["weights"]) / GiB, "GiB", note)]
        else:
            static = row["cache_class"] == "StaticCache"
            tokens = max(row["allocated_positions"]) if static else int(row["cache_seq_len"])
            source_model = row["model"]
            if row.get("config_overrides"):
                source_model = str(_derived_config(row["model"], row["config_overrides"]))
                result.model = f"{row['model']} with {row['config_overrides']}"
            doc = _doc(source_model, "transformers", context=tokens, concurrency=int(row["batch"]))
            label = f"kv {row['cache_class']} {tokens} tok x {row['batch']}"
            note = f"prompt {row['prompt_tokens']} + {row['new_tokens']} new"
            result.terms = [Term(label, row["cache_bytes"] / MiB, float(doc["per_gpu"]["kv_cache"]) / MiB, "MiB", note)]
        results.append(result)
    return results


def run_benchmark(path: Path = CASES, truth: Path = TRUTH) -> list[CaseResult]:
    return [evaluate(case) for case in load_cases(path)] + transformers_results(truth)


def profile_of(result: CaseResult) -> str:
    return PROFILE.get(result.engine, result.engine)


def summary(errors: list[float]) -> str:
    if not errors:
        return "no computed case"
    absolute = [abs(e) for e in errors]
    return f"{len(errors)} terms, median |error| {statistics.median(absolute):.1f} %, worst {max(absolute):.1f} %"


def report(results: list[CaseResult]) -> str:
    lines = []
    for engine in ENGINES:
        rows = [r for r in results if profile_of(r) == engine]
        lines.append(f"== {engine}")
        if not rows:
            lines.append("   no published measurement found")
            continue
        for r in rows:
            split = ("held-out" if r.held_out else "in-sample") + (", added in issue 13" if r.added else "")
            if r.id.startswith("tt-"):
                split = "measured here"
            if r.skipped:
                lines.append(f"   {r.id} {r.model} [{split}] not computed: {r.skipped}")
                continue
            lines.append(f"   {r.id} {r.model} [{split}] ({r.engine}) {r.source_url}")
            for t in r.terms:
                lines.append(
                    f"      {t.name:<26} measured {t.measured:12.2f} {t.unit:<9} predicted {t.predicted:12.2f}"
                    f"  error {t.error_pct:+7.1f} %  {t.note}"
                )
        for label, want in (("in-sample", False), ("held-out", True)):
            errs = [t.error_pct for r in rows if r.held_out is want and not r.skipped and not r.added for t in r.terms]
            lines.append(f"   first fifteen, {label}: {summary(errs)}")
        added = [t.error_pct for r in rows if r.added and not r.skipped for t in r.terms]
        lines.append(f"   added in issue 13{' (measured here)' if engine == 'transformers' else ''}: {summary(added)}")
        lines.append(f"   all: {summary([t.error_pct for r in rows if not r.skipped for t in r.terms])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    results = run_benchmark(args.cases)
    if args.json:
        payload = [dict(asdict(r), terms=[dict(asdict(t), error_pct=t.error_pct) for t in r.terms]) for r in results]
        print(json.dumps(payload, indent=2))
    else:
        print(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
