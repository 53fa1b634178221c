"""How close hfvram's estimates come to published, measured engine start-up logs.

Runs the estimator on every case of ``benchmarks/data/groundtruth_cases.jsonl`` (a copy of the project's
ground-truth collection, source fields kept) whose model we hold facts for: a fixture config of the same
repository or of an identical architecture and weight format (``benchmarks/data/fixture_map.toml`` says which
and why). For each case it prints predicted against measured, as relative errors:

- weights per GPU ("Model loading took X GiB"),
- KV pool per GPU ("Available KV cache memory") and in tokens ("GPU KV cache size", or GPU blocks × 16),
- non-KV overhead per GPU (activation peak + non-torch memory, i.e. vLLM's "total non KV" minus weights),
- the verdict on failure cases (a start-up that failed must not be predicted to fit).

Two runs per case: **end-to-end** (weights from the checkpoint facts we hold: derived from config shapes by
the readers, or a safetensors index's total size) and **given weights** (the measured weights plugged in, so
the engine rules — budget, activations, KV pages — are judged on their own). Cases without weight facts only
have the second.

Usage:  python3 benchmarks/accuracy.py [--cases PATH] [--engine vllm] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hfvram.engines.vllm.settings import dtype_bytes_of  # noqa: E402
from hfvram.errors import HfvramError  # noqa: E402
from hfvram.estimate.core import estimate  # noqa: E402
from hfvram.estimate.hardware import parse_gpu_spec  # noqa: E402
from hfvram.estimate.multimodal import rope_cache  # noqa: E402
from hfvram.estimate.types import GPU, EngineChoice, Estimate, Hardware, Workload  # noqa: E402
from hfvram.readers.config import read_config  # noqa: E402
from hfvram.spec import ModelSpec, Weights  # noqa: E402

DATA = ROOT / "benchmarks" / "data"
CASES = DATA / "groundtruth_cases.jsonl"
FIXTURE_MAP = DATA / "fixture_map.toml"
HUB = ROOT / "fixtures" / "hub"
GiB = 1 << 30
METRICS = ("weights", "kv_pool", "kv_tokens", "non_kv")

#: vLLM settings the cases state, under vLLM's names (the estimator's --set names)
VLLM_SETTINGS = (
    "max_model_len",
    "gpu_memory_utilization",
    "kv_cache_dtype",
    "max_num_batched_tokens",
    "max_num_seqs",
    "enforce_eager",
    "block_size",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "dtype",
    "quantization",
    "VLLM_USE_V1",
)


# ---- reading the cases ---------------------------------------------------------------------------------------


def load_cases(path: Path = CASES) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_fixture_map(path: Path = FIXTURE_MAP) -> dict[str, Mapping[str, Any]]:
    with path.open("rb") as handle:
        return {row["case"]: row for row in tomllib.load(handle)["model"]}


def leading_number(value: object) -> float | None:
    """``"0.90 (stated)"`` -> 0.9, ``"8192 (default)"`` -> 8192, ``"unknown"`` -> None, numbers as is."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    match = re.match(r"\s*([\d][\d,]*(?:\.\d+)?)", str(value))
    return float(match.group(1).replace(",", "")) if match else None


def size_bytes(value: object) -> int | None:
    """``"14.99 GiB"``, ``"14.9888 GB"`` (vLLM's GB are 2^30 bytes, groundtruth README), ``"1952.00 MiB"``."""
    if value is None:
        return None
    match = re.match(r"\s*~?(-?[\d.]+)\s*(GiB|GB|MiB|MB)", str(value))
    if not match:
        return None
    unit = {"GiB": GiB, "GB": GiB, "MiB": 1 << 20, "MB": 1 << 20}[match.group(2)]
    return int(float(match.group(1)) * unit)


def case_model_id(case: Mapping[str, Any]) -> str:
    return str(case["model"]["id"]).split(" ")[0]


def case_version(case: Mapping[str, Any]) -> str:
    """The vLLM release whose rules apply: the printed version, else by the log's date (docs/engines/vllm.md#vllm-budget
    table: V0 until early 2025, CUDA graphs in the budget from 2026-04-21)."""
    text = str(case.get("engine_version", ""))
    match = re.search(r"v?(\d+\.\d+(?:\.\d+)?)", text)
    if "V0" in text:
        # a V0 log: its release when the text names one (the V0 rules and non-torch rows are per release)
        return match.group(1) if match and not text.startswith("unknown") else "0.6"
    if match and not text.startswith("unknown") and not text.startswith("main"):
        return match.group(1)
    date = str(case.get("source", {}).get("date", ""))
    if date and date < "2025-02":
        return "0.6"
    if date and date >= "2026-04-21":
        return "0.21"
    return "0.19"


def common_version_key(version: str) -> tuple[int, ...]:
    from hfvram.estimate.common import version_key

    return version_key(version)


V1_MARKERS = ("gpu_model_runner.py", "kv_cache_utils.py", "gpu_worker.py", "EngineCore", "V1 LLM engine")


def v1_log(case: Mapping[str, Any]) -> bool:
    """The log lines (or the version text) are a V1 engine's (``gpu_model_runner.py``, ``EngineCore``, ...)."""
    text = " ".join(str(line) for line in case.get("log_lines", ())) + " " + str(case.get("engine_version", ""))
    return any(marker in text for marker in V1_MARKERS) or bool(
        re.search(r"\bV1\b", str(case.get("engine_version", "")))
    )


def case_settings(case: Mapping[str, Any]) -> dict[str, str]:
    """The case's stated settings under vLLM's names; unknown ones left to the engine's defaults."""
    settings: dict[str, str] = {}
    stated = case.get("settings", {})
    for name in VLLM_SETTINGS:
        if name not in stated:
            continue
        value = stated[name]
        if isinstance(value, bool):
            settings[name.replace("_", "-")] = "true" if value else "false"
        elif name in ("kv_cache_dtype", "dtype", "quantization"):
            text = str(value).split(" ")[0]
            if text and text not in ("unknown", "auto", "none"):
                settings[name.replace("_", "-")] = text
        else:
            number = leading_number(value)
            if number is not None:
                settings[name.replace("_", "-")] = (
                    repr(number) if name == "gpu_memory_utilization" else str(int(number))
                )
    return settings


def case_parallel(case: Mapping[str, Any]) -> tuple[int, int]:
    stated = case.get("settings", {})
    tp = leading_number(stated.get("tensor_parallel_size")) or 1
    pp = leading_number(stated.get("pipeline_parallel_size")) or 1
    return int(tp), int(pp)


def case_hardware(case: Mapping[str, Any], gpus_needed: int) -> Hardware | None:
    """The GPU as logged (``total_memory`` when printed), named from the catalogue when it is known."""
    hardware = case.get("hardware", {})
    name = str(hardware.get("gpu", ""))
    catalogued: GPU | None = None
    words = re.sub(r"\(.*", "", name).replace("NVIDIA", "").strip().lower().split()
    for size in range(len(words), 0, -1):  # "H100 80GB HBM3" -> "h10080gbhbm3", "h10080gb", "h100"
        candidate = "".join(words[:size])
        if candidate.startswith("unknown"):
            break
        try:
            catalogued = parse_gpu_spec(candidate).gpu
            break
        except HfvramError:
            continue
    logged = re.search(r"([\d.]+)\s*GiB", str(hardware.get("memory_per_gpu", "")))
    if logged:
        memory = int(float(logged.group(1)) * GiB)
        base = catalogued or GPU(id="logged", name=name, vendor="nvidia", memory_bytes=memory)
        gpu = replace(base, memory_bytes=memory, addressable_bytes=None, cuda_total_bytes=None)
    elif catalogued is not None:
        gpu = catalogued
    else:
        return None
    return Hardware(gpu=gpu, count=max(1, gpus_needed))


def measured_figures(case: Mapping[str, Any]) -> dict[str, float | None]:
    """Per-GPU bytes and engine-wide tokens as the log printed them (groundtruth README mapping)."""
    measured = case.get("measured", {})
    weights = size_bytes(
        measured.get("model_loading") or measured.get("model_weights") or measured.get("weights_memory")
    )
    kv_pool = size_bytes(
        measured.get("available_kv_cache_memory") or measured.get("kv_cache_size") or measured.get("kv_cache")
    )
    tokens = measured.get("gpu_kv_cache_size_tokens")
    if tokens is None:
        blocks = measured.get("gpu_blocks") or measured.get("gpu_blocks_after_fix") or measured.get("cuda_blocks")
        tokens = blocks * 16 if isinstance(blocks, int) else None  # V0 block size 16 (README)
    non_kv = None
    total_non_kv = size_bytes(measured.get("total_non_kv_cache_memory") or measured.get("total_non_kv_memory"))
    if total_non_kv is not None and weights is not None:
        non_kv = total_non_kv - weights
    elif measured.get("activation_peak") and measured.get("non_torch_memory"):
        non_kv = size_bytes(measured["activation_peak"]) + size_bytes(measured["non_torch_memory"])
    elif measured.get("peak_torch_memory") and measured.get("non_torch_memory") and weights is not None:
        non_kv = size_bytes(measured["peak_torch_memory"]) - weights + size_bytes(measured["non_torch_memory"])
    return {"weights": weights, "kv_pool": kv_pool, "kv_tokens": tokens, "non_kv": non_kv}


def is_failure(case: Mapping[str, Any]) -> bool | None:
    """True for a start-up that failed, False for one that started, None when the log does not say."""
    outcome = str(case.get("outcome", "")).lower()
    if outcome.startswith("started"):
        return False
    if outcome.startswith("failed") or outcome.startswith("startup"):
        return True
    return None


# ---- model facts ------------------------------------------------------------------------------------------------


def fixture_spec(row: Mapping[str, Any]) -> ModelSpec:
    folder = HUB / row["fixture"]
    spec = read_config(json.loads((folder / "config.json").read_text(encoding="utf-8")))
    overrides = dict(row.get("overrides", {}))
    return replace(spec, **overrides) if overrides else spec


def checkpoint_weights(spec: ModelSpec, row: Mapping[str, Any]) -> tuple[ModelSpec, str | None]:
    """Weights from the facts we hold, and where they came from; (spec, None) when we hold none."""
    try:
        from hfvram.readers.safetensors import weights_from_tensors
        from hfvram.readers.shapes import tensors_from_spec
    except ImportError:
        tensors_from_spec = None
    if tensors_from_spec is not None:
        try:
            tensors = tensors_from_spec(spec)
            weights = weights_from_tensors(tensors, quantization=spec.quantization, num_layers=spec.num_layers)
            return spec.with_weights(replace(weights, exact=False)), "derived from config shapes"
        except (ValueError, KeyError, TypeError):
            pass
    index = HUB / row["fixture"] / "model.safetensors.index.json"
    if index.exists():
        total = json.loads(index.read_text(encoding="utf-8")).get("metadata", {}).get("total_size")
        if total:
            vocab = 2 * (spec.vocab_size or 0) * (spec.hidden_size or 0) * int(spec.dtype_bytes())
            embeddings = vocab // (2 if spec.tie_word_embeddings is False else 1) if vocab else 0
            components = {"embeddings": embeddings} if embeddings else {}
            if not spec.tie_word_embeddings and embeddings:
                components["lm_head"] = embeddings
            components["other"] = int(total) - sum(components.values())
            weights = Weights(
                total_bytes=int(total),
                params_total=int(total // spec.dtype_bytes()),
                bytes_by_component=components,
                exact=False,
                source="safetensors index total_size",
            )
            return spec.with_weights(weights), "safetensors index total_size"
    return spec, None


def with_measured_weights(spec: ModelSpec, per_gpu: int, ranks: int) -> ModelSpec:
    """The spec with weights such that every rank loads exactly the measured bytes (split evenly)."""
    total = per_gpu * ranks
    weights = Weights(
        total_bytes=total,
        params_total=0,
        bytes_by_component={"mlp": total},
        exact=False,
        source="measured: Model loading took",
    )
    return spec.with_weights(weights)


# ---- running -----------------------------------------------------------------------------------------------------


@dataclass
class CaseResult:
    case_id: str
    model: str
    family: str
    engine: str
    fixture: str | None
    measured: dict[str, float | None]
    predicted: dict[str, float | None] = field(default_factory=dict)  # end-to-end
    given_weights: dict[str, float | None] = field(default_factory=dict)  # measured weights plugged in
    weights_source: str | None = None
    failure: bool | None = None
    verdict: str | None = None
    verdict_given_weights: str | None = None
    skipped: str | None = None
    warnings: tuple[str, ...] = ()
    #: "fitted" (the cases the constants were fitted on, the file's first 76) or "later" (added afterwards)
    group: str = "fitted"
    #: the vLLM engine whose rules judged the case ("v1" / "v0"), as the estimate reports it
    generation: str = ""

    def errors(self, which: str = "predicted") -> dict[str, float]:
        """Relative errors (predicted − measured) / measured for the metrics both sides have."""
        predicted = getattr(self, which)
        errors = {}
        for metric in METRICS:
            got, want = predicted.get(metric), self.measured.get(metric)
            # a negative logged pool ("kv_cache: -1.05GiB", a failed start) has no relative error to judge
            if got is not None and want and want > 0:
                errors[metric] = (got - want) / abs(want)
        return errors

    @property
    def verdict_flipped(self) -> bool:
        if not self.failure:
            return False
        verdicts = [v for v in (self.verdict, self.verdict_given_weights) if v is not None]
        return any(v != "does_not_fit" for v in verdicts)


def predicted_figures(result: Estimate) -> dict[str, float | None]:
    pool = result.engine.get("kv_pool_bytes")
    return {
        "weights": result.per_gpu.weights,
        "kv_pool": pool,
        "kv_tokens": result.capacity.kv_tokens,
        "non_kv": result.per_gpu.activations + result.per_gpu.overhead,
    }


def run_case(case: Mapping[str, Any], fixtures: Mapping[str, Mapping[str, Any]]) -> CaseResult:
    model = case_model_id(case)
    result = CaseResult(
        case_id=case["id"],
        model=model,
        family=str(case["model"].get("family")),
        engine=str(case["engine"]),
        fixture=None,
        measured=measured_figures(case),
        failure=is_failure(case),
        group=str(case.get("group", "fitted")),
    )
    row = fixtures.get(model)
    if row is None:
        result.skipped = "no fixture config of this checkpoint"
        return result
    result.fixture = row["fixture"]
    tp, pp = case_parallel(case)
    hardware = case_hardware(case, tp * pp)
    settings = case_settings(case)
    if hardware is None:
        pool = result.measured.get("kv_pool")
        if not pool:
            result.skipped = "GPU memory unknown"
            return result
        # GPU unknown: only the pool -> tokens relation can be checked, with the logged pool as the KV budget
        settings["kv-cache-memory-bytes"] = str(int(pool))
    context = leading_number(case.get("settings", {}).get("max_model_len"))
    if context is None and row.get("overrides", {}).get("max_position_embeddings"):
        context = row["overrides"]["max_position_embeddings"]
    version = case_version(case)
    if common_version_key(version) < (0, 10) and v1_log(case) and "VLLM_USE_V1" not in settings:
        settings["VLLM_USE_V1"] = "1"  # a V1 engine's lines on a release hfvram runs as V0 by default
    choice = EngineChoice("vllm", version, settings, tp=tp, pp=pp)
    workload = Workload(context=int(context) if context else None)
    spec = fixture_spec(row)

    # a checkpoint whose architecture we hold but whose weight format differs (AWQ, bitsandbytes): only the
    # measured-weights run judges it (fixture_map.toml given_weights_only)
    full, result.weights_source = (spec, None) if row.get("given_weights_only") else checkpoint_weights(spec, row)
    if result.weights_source is not None:
        estimate_full = estimate(full, hardware, choice, workload)
        result.predicted = predicted_figures(estimate_full)
        result.verdict = estimate_full.verdict
        result.generation = str(estimate_full.engine.get("engine_generation", ""))
        result.warnings = tuple(estimate_full.warnings)
        if hardware is None:
            result.predicted["kv_pool"] = None  # given, not predicted
    weights = result.measured.get("weights")
    if weights:
        # the measured bytes already carry --dtype and --quantization: load them as they are
        loaded_dtype = settings.get("dtype", spec.dtype)
        plain = replace(choice, settings={k: v for k, v in settings.items() if k != "quantization"})
        # "Model loading took" includes the buffers built with the model (the rotary cache the engine rules add
        # per rank, hfvram/estimate/multimodal.py): the checkpoint's share is the rest
        rope, _ = rope_cache(spec, dtype_bytes_of(str(loaded_dtype or "bfloat16")))
        measured_spec = with_measured_weights(replace(spec, dtype=loaded_dtype), int(weights) - rope, tp * pp)
        given = estimate(measured_spec, hardware, plain, workload)
        result.given_weights = predicted_figures(given)
        result.given_weights["weights"] = None  # plugged in, not predicted
        result.verdict_given_weights = given.verdict
        result.generation = str(given.engine.get("engine_generation", ""))
        result.warnings = tuple(dict.fromkeys(result.warnings + tuple(given.warnings)))
    elif result.weights_source is None:
        result.skipped = "no weight facts and no measured weights"
    return result


def run_benchmark(cases: Iterable[Mapping[str, Any]] | None = None, engine: str = "vllm") -> list[CaseResult]:
    fixtures = load_fixture_map()
    selected = [c for c in (cases if cases is not None else load_cases()) if engine in str(c.get("engine", "")).lower()]
    return [run_case(case, fixtures) for case in selected]


# ---- summarising -----------------------------------------------------------------------------------------------


def summarize(
    results: Iterable[CaseResult], which: str = "predicted", key: str = "engine"
) -> dict[str, dict[str, dict[str, float]]]:
    """group -> metric -> {n, median, worst} of |relative error| (``which``: predicted | given_weights)."""
    groups: dict[str, dict[str, list[float]]] = {}
    for result in results:
        if result.skipped:
            continue
        group = groups.setdefault(getattr(result, key), {})
        for metric, error in result.errors(which).items():
            group.setdefault(metric, []).append(error)
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for group, metrics in sorted(groups.items()):
        summary[group] = {
            metric: {
                "n": len(errors),
                "median": statistics.median(abs(e) for e in errors),
                "worst": max(errors, key=abs),
            }
            for metric, errors in sorted(metrics.items())
        }
    return summary


def verdict_score(results: Iterable[CaseResult]) -> tuple[int, int, list[str]]:
    """(right, judged, wrong case ids): a start must not be called "does not fit", a failure must be; each case by
    its end-to-end verdict, else the one with the logged weights given."""
    right, judged, wrong = 0, 0, []
    for r in results:
        verdict = r.verdict or r.verdict_given_weights
        if r.skipped or r.failure is None or verdict is None:
            continue
        judged += 1
        if (verdict == "does_not_fit") == r.failure:
            right += 1
        else:
            wrong.append(r.case_id)
    return right, judged, wrong


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f}%"


def print_report(results: list[CaseResult], out=sys.stdout) -> None:
    print("per case (relative error, predicted vs measured; e2e = end-to-end, gw = measured weights given)", file=out)
    header = f"{'case':9} {'model':38} {'w e2e':>7} {'pool e2e':>8} {'tok e2e':>8} {'nonkv e2e':>9} | {'pool gw':>8} {'tok gw':>8} {'nonkv gw':>8} | verdict"
    print(header, file=out)
    for r in results:
        if r.skipped:
            print(f"{r.case_id:9} {r.model[:38]:38} skipped: {r.skipped}", file=out)
            continue
        e, g = r.errors("predicted"), r.errors("given_weights")
        verdict = ""
        if r.failure is not None:
            verdict = f"{'FAILED' if r.failure else 'started'} -> {r.verdict or '-'} / {r.verdict_given_weights or '-'}"
            verdict += "  FLIP" if r.verdict_flipped else ""
        print(
            f"{r.case_id:9} {r.model[:38]:38} {_pct(e.get('weights')):>7} {_pct(e.get('kv_pool')):>8} "
            f"{_pct(e.get('kv_tokens')):>8} {_pct(e.get('non_kv')):>9} | {_pct(g.get('kv_pool')):>8} "
            f"{_pct(g.get('kv_tokens')):>8} {_pct(g.get('non_kv')):>8} | {verdict}",
            file=out,
        )
    for which, label in (("predicted", "end-to-end"), ("given_weights", "measured weights given")):
        for key in ("engine", "group", "generation", "family"):
            print(f"\nsummary ({label}) by {key}: median |error| / worst error (n)", file=out)
            for group, metrics in summarize(results, which, key).items():
                cells = "  ".join(
                    f"{m} {v['median'] * 100:.1f}%/{v['worst'] * 100:+.1f}% ({v['n']})" for m, v in metrics.items()
                )
                print(f"  {group:28} {cells}", file=out)
    flips = [r.case_id for r in results if r.verdict_flipped]
    failures = [r.case_id for r in results if r.failure and not r.skipped]
    print(f"\nfailure cases evaluated: {len(failures)} {failures}; verdict flips: {len(flips)} {flips}", file=out)
    skipped = sum(1 for r in results if r.skipped)
    print(f"cases: {len(results)} vLLM, {len(results) - skipped} evaluated, {skipped} skipped", file=out)


def print_markdown(results: list[CaseResult], out=sys.stdout) -> None:
    """The summaries as Markdown tables: the vLLM section of docs/accuracy.md is this output."""
    for which, label in (("predicted", "end-to-end"), ("given_weights", "measured weights given")):
        for key in ("engine", "group", "generation", "family"):
            groups = summarize(results, which, key)
            metrics = sorted({m for values in groups.values() for m in values})
            print(f"\n**{label}, by {key}**: median \\|error\\| / worst error (n)\n", file=out)
            print(f"| {key} | " + " | ".join(metrics) + " |", file=out)
            print("|---|" + "---|" * len(metrics), file=out)
            for group, values in groups.items():
                cells = [
                    f"{values[m]['median'] * 100:.1f} % / {values[m]['worst'] * 100:+.1f} % ({values[m]['n']})"
                    if m in values
                    else "—"
                    for m in metrics
                ]
                print(f"| {group} | " + " | ".join(cells) + " |", file=out)
    flips = [r.case_id for r in results if r.verdict_flipped]
    failures = [r.case_id for r in results if r.failure and not r.skipped]
    skipped = sum(1 for r in results if r.skipped)
    for group in ("fitted", "later"):
        right, judged, wrong = verdict_score(r for r in results if r.group == group)
        print(
            f"\nVerdicts right ({group}): {right} of {judged} published starts and failures"
            + (f" (wrong: {', '.join(wrong)})" if wrong else ""),
            file=out,
        )
    print(
        f"\nCases: {len(results)}, {len(results) - skipped} evaluated, {skipped} skipped (no fixture config of "
        f"that checkpoint). Failure cases evaluated: {', '.join(failures) or 'none'}; verdicts flipped: "
        f"{', '.join(flips) or 'none'}.",
        file=out,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--engine", default="vllm")
    parser.add_argument("--json", action="store_true", help="one JSON object per case")
    parser.add_argument("--markdown", action="store_true", help="the summaries as Markdown (docs/accuracy.md)")
    args = parser.parse_args(argv)
    results = run_benchmark(load_cases(args.cases), args.engine)
    if args.json:
        for r in results:
            print(json.dumps({**r.__dict__, "errors": r.errors(), "errors_given_weights": r.errors("given_weights")}))
    elif args.markdown:
        print_markdown(results)
    else:
        print_report(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
