"""Ollama's own pre-load estimate, reproduced: hfvram's legacy Ollama rules next to published ``offload`` log lines.

Reads ``benchmarks/data/ollama_logs.jsonl`` (one published Ollama log line per case: source, the Ollama release the
date implies, the model, the GPUs' free memory and the figures as printed: ``layers.offload``,
``memory.required.full`` / ``.partial`` / ``.kv``, ``memory.graph.full`` / ``.partial``, ``memory.weights.total``),
builds the model from a fixture config (plus the config keys the case overrides) with the weight sizes the log
itself prints (``memory.weights.repeating`` spread evenly over the blocks, ``memory.weights.nonrepeating`` as the
output layer), runs ``hfvram.engines.ollama.legacy.legacy_auto_parallel`` with the case's settings at the case's
Ollama rule version and prints predicted vs published per figure.

Every case was added after the legacy rules were written (docs/engines/ollama.md#ollama-legacy-estimator); none
was used to fit anything — the rules are transcriptions of Ollama's Go code.

Run: ``python3 benchmarks/accuracy_ollama.py [--markdown]``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hfvram.engines.ollama import legacy  # noqa: E402
from hfvram.engines.ollama import profile as ollama  # noqa: E402
from hfvram.engines.ollama import settings as ollama_settings  # noqa: E402
from hfvram.readers.config import read_config  # noqa: E402
from hfvram.spec import ModelSpec, Weights  # noqa: E402

LOGS = REPO / "benchmarks" / "data" / "ollama_logs.jsonl"
HUB = REPO / "fixtures" / "hub"
MAX_CASES = 10_000
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
#: figures compared, in log order; layer counts are compared exactly, sizes relative to the printed value
SIZE_FIGURES = ("required_full", "required_partial", "kv", "weights_total", "graph_full", "graph_partial")


def parse_size(text: str) -> int:
    """Ollama's format.HumanBytes2 ("16.9 GiB", "300.0 MiB", "0 B") back to bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(B|KiB|MiB|GiB|TiB)\s*", text)
    if not match:
        raise ValueError(f"not an Ollama size: {text!r}")
    return int(float(match.group(1)) * UNITS[match.group(2)])


def load_cases(path: Path = LOGS) -> list[dict[str, Any]]:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [json.loads(line) for line in lines[:MAX_CASES]]


def spec_for(case: Mapping[str, Any]) -> ModelSpec:
    """The fixture's config (with the case's overrides) and the weight sizes the log prints; before v0.6.1 the
    log's ``memory.weights.repeating`` includes the KV cache (``memoryWeights += layerSize``), so the logged
    ``memory.required.kv`` is taken off to get the tensor bytes."""
    model = case["model"]
    config = json.loads((HUB / model["fixture"] / "config.json").read_text(encoding="utf-8"))
    for key, value in model.get("config_overrides", {}).items():
        config[key] = value
    spec = read_config(config)
    repeating = parse_size(case["weights"]["repeating"])
    _version, constants = ollama.PROFILE.constants(case["rules"])
    if constants.legacy_weights_include_kv:
        repeating -= parse_size(str(case["published"]["kv"]))
    output = parse_size(case["weights"]["nonrepeating"])
    spec = spec.with_weights(
        Weights(
            total_bytes=repeating + output,
            params_total=0,
            bytes_by_component={"lm_head": output, "mlp": repeating},
            exact=False,
        )
    )
    if model.get("gguf_arch"):
        spec = replace(spec, extra={**spec.extra, "gguf_arch": model["gguf_arch"]})
    return spec


def predict(case: Mapping[str, Any]) -> legacy.LegacyBreakdown:
    _version, constants = ollama.PROFILE.constants(case["rules"])
    s = case["settings"]
    flash = bool(s.get("flash_attention")) and case.get("flash_supported", True)
    kv = s.get("kv_cache_type", "f16") if flash else "f16"
    settings = ollama_settings.Settings(
        num_ctx=int(s["num_ctx"]),
        num_parallel=int(s["num_parallel"]) if s.get("num_parallel") else 0,
        num_batch=int(s.get("num_batch", 512)),
        kv_cache_type=kv,
        flash_attention=flash,
    )
    projector = case.get("engine_projector")
    engine_projector = (parse_size(projector["weights"]), parse_size(projector["graph"])) if projector else (0, 0)
    free = [int(gib * (1 << 30)) for gib in case["gpus_free_gib"]]
    spec = spec_for(case)
    return legacy.legacy_auto_parallel(
        spec,
        free,
        constants,
        settings,
        ollama_settings.gguf_arch(spec, ollama.PROFILE.model_type_to_arch),
        num_gpu=int(s.get("num_gpu", -1)),
        engine_projector=engine_projector,
    )


def predicted_figures(parts: legacy.LegacyBreakdown) -> dict[str, int]:
    return {
        "layers_offload": parts.layers_offload,
        "num_parallel": parts.num_parallel,
        "required_full": parts.required_full,
        "required_partial": parts.required_partial,
        "kv": parts.kv_total,
        "weights_total": parts.weights_repeating + parts.output,
        "graph_full": parts.graph_full,
        "graph_partial": parts.graph_partial,
    }


@dataclass(frozen=True)
class Comparison:
    case_id: str
    figure: str
    predicted: int
    published: int

    @property
    def relative(self) -> float | None:
        if self.figure in ("layers_offload", "num_parallel"):
            return None
        if not self.published:
            return 0.0 if not self.predicted else float("inf")
        return (self.predicted - self.published) / self.published

    @property
    def ok(self) -> bool:
        """Within 10 % (sizes; 'x.y GiB' is printed to 0.05 GiB, so small figures get that much slack) or exact
        (layer and slot counts)."""
        if self.relative is None:
            return self.predicted == self.published
        return abs(self.predicted - self.published) <= max(0.10 * self.published, 0.05 * (1 << 30))


def compare_case(case: Mapping[str, Any]) -> list[Comparison]:
    figures = predicted_figures(predict(case))
    out = []
    for name, value in case["published"].items():
        if name not in figures:
            continue
        published = int(value) if isinstance(value, int) else parse_size(str(value))
        out.append(Comparison(case["id"], name, figures[name], published))
    return out


def all_comparisons(cases: list[dict[str, Any]] | None = None) -> list[Comparison]:
    return [c for case in (cases if cases is not None else load_cases()) for c in compare_case(case)]


def fmt(figure: str, value: int) -> str:
    return str(value) if figure in ("layers_offload", "num_parallel") else f"{value / (1 << 20):.1f} MiB"


def summary(comparisons: list[Comparison]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for figure in ("layers_offload", "num_parallel", *SIZE_FIGURES):
        items = [c for c in comparisons if c.figure == figure]
        if not items:
            continue
        errors = [abs(r) for c in items if (r := c.relative) is not None and r != float("inf")]
        out[figure] = {
            "n": float(len(items)),
            "ok": float(sum(c.ok for c in items)),
            "median": statistics.median(errors) if errors else 0.0,
            "worst": max(errors) if errors else 0.0,
        }
    return out


def markdown(comparisons: list[Comparison]) -> str:
    lines = ["| case | figure | hfvram | Ollama's log | error |", "|---|---|---|---|---|"]
    for c in comparisons:
        error = ("exact" if c.ok else "differs") if c.relative is None else f"{100 * c.relative:+.1f} %"
        lines.append(
            f"| {c.case_id} | {c.figure} | {fmt(c.figure, c.predicted)} | {fmt(c.figure, c.published)} | {error} |"
        )
    lines += [
        "",
        "| figure | cases | within 10 % / exact | median abs error | worst abs error |",
        "|---|---|---|---|---|",
    ]
    for figure, st in summary(comparisons).items():
        lines.append(
            f"| {figure} | {st['n']:.0f} | {st['ok']:.0f} | {100 * st['median']:.1f} % | {100 * st['worst']:.1f} % |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--logs", type=Path, default=LOGS)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    comparisons = all_comparisons(load_cases(args.logs))
    if args.markdown:
        print(markdown(comparisons))
        return 0
    for c in comparisons:
        error = "" if c.relative is None else f"{100 * c.relative:+7.1f}%"
        flag = "" if c.ok else "  <-- off"
        print(
            f"{c.case_id:38s} {c.figure:17s} pred {fmt(c.figure, c.predicted):>14s} log {fmt(c.figure, c.published):>14s} {error}{flag}"
        )
    for figure, st in summary(comparisons).items():
        print(
            f"{figure:17s} n={st['n']:.0f} ok={st['ok']:.0f} median|rel|={100 * st['median']:5.1f}% worst|rel|={100 * st['worst']:5.1f}%"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
