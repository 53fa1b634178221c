"""llama.cpp: hfvram's prediction next to what llama.cpp really sized, term by term (issue 6).

Reads ``benchmarks/data/llamacpp_truth.jsonl`` (written by ``benchmarks/llamacpp_truth.py`` from real llama.cpp
loads), reads each model's ``ModelSpec`` from its GGUF header with hfvram's GGUF reader, runs the llama.cpp
profile's own functions with the row's settings, and compares:

- KV cache: K and V MiB of every ``llama_kv_cache: size`` line (target: exact to the printed 0.01 MiB);
- recurrent state: R + S MiB of ``llama_memory_recurrent: size`` (exact);
- compute buffer: the CPU ``compute buffer size`` (target: within 10 %);
- model buffer (real-allocation rows): the mapped model buffer (target: within 1 %);
- output buffer: host logits buffer (exact).

Run: ``python3 benchmarks/accuracy_llamacpp.py [--markdown]``. The vLLM table lives in benchmarks/accuracy.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hfvram.engines.llamacpp import profile as llamacpp  # noqa: E402
from hfvram.engines.llamacpp.compute import compute_buffer_bytes, output_buffer_bytes  # noqa: E402
from hfvram.engines.llamacpp.kv import kv_bytes  # noqa: E402
from hfvram.engines.llamacpp.placement import place  # noqa: E402
from hfvram.engines.llamacpp.settings import resolve_settings  # noqa: E402
from hfvram.estimate.types import EngineChoice, Workload  # noqa: E402
from hfvram.readers.gguf import read_gguf_file, spec_from_gguf  # noqa: E402
from hfvram.spec import ModelSpec  # noqa: E402

TRUTH = REPO / "benchmarks" / "data" / "llamacpp_truth.jsonl"
MiB = 1 << 20

#: tolerances the tests hold the estimator to (docs/accuracy.md)
KV_TOLERANCE_MIB = 0.01  # llama.cpp prints two decimals
COMPUTE_TOLERANCE = 0.10
MODEL_TOLERANCE = 0.01


@cache
def spec_of_header(relative_path: str) -> ModelSpec:
    path = REPO / relative_path
    return spec_from_gguf([read_gguf_file(path)], filename=path.name)


def spec_for_row(row: Mapping[str, Any]) -> ModelSpec:
    """The model of a truth row, read from its GGUF header (metadata + tensor infos) with hfvram's own reader —
    the same path ``hfvram check model.gguf`` takes."""
    return spec_of_header(row["header"])


def choice_for(settings: Mapping[str, Any]) -> EngineChoice:
    """The row's llama.cpp settings under llama.cpp's option names (the library path = llama-cli rules)."""
    values = {
        "binary": "llama-cli",
        "ctx-size": str(settings["n_ctx"]),
        "batch-size": str(settings["n_batch"]),
        "ubatch-size": str(settings["n_ubatch"]),
        "flash-attn": settings["flash_attn"],
        "cache-type-k": settings["type_k"],
        "cache-type-v": settings["type_v"],
        "parallel": str(settings["n_seq_max"]),
        "kv-unified": str(settings["kv_unified"]).lower(),
        "swa-full": str(settings["swa_full"]).lower(),
    }
    if settings.get("n_outputs_max"):
        values["n-outputs-max"] = str(settings["n_outputs_max"])
    return EngineChoice(name="llama.cpp", settings=values)


@dataclass(frozen=True)
class Comparison:
    model: str
    setting: str
    term: str
    predicted_mib: float
    measured_mib: float

    @property
    def error_mib(self) -> float:
        return self.predicted_mib - self.measured_mib

    @property
    def relative(self) -> float:
        return self.error_mib / self.measured_mib if self.measured_mib else 0.0

    def within(self) -> bool:
        if self.term in ("kv_k", "kv_v", "recurrent", "output"):
            return abs(self.error_mib) <= KV_TOLERANCE_MIB + 1e-9
        if self.term == "compute":
            return abs(self.relative) <= COMPUTE_TOLERANCE
        if self.term == "model":
            return abs(self.relative) <= MODEL_TOLERANCE
        return True


def describe(s: Mapping[str, Any]) -> str:
    parts = [f"c={s['n_ctx']}", f"ub={s['n_ubatch']}", f"fa={s['flash_attn']}", f"k/v={s['type_k']}/{s['type_v']}"]
    if s["n_seq_max"] > 1:
        parts.append(f"np={s['n_seq_max']}{' unified' if s['kv_unified'] else ''}")
    if s["swa_full"]:
        parts.append("swa-full")
    if s.get("n_outputs_max"):
        parts.append(f"outputs={s['n_outputs_max']}")
    if not s["no_alloc"]:
        parts.append("real alloc")
    return " ".join(parts)


def load_rows(path: Path = TRUTH) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compare_row(row: Mapping[str, Any]) -> Iterator[Comparison]:
    """Every term of one measured load next to the profile's prediction."""
    if row["rc"] != 0:
        return
    spec = spec_for_row(row)
    _, constants, consts = llamacpp.constants_for(EngineChoice(name="llama.cpp"))
    # the truth runs are CPU-only: no CUDA row padding
    s = replace(resolve_settings(spec, choice_for(row["settings"]), Workload(), constants), cuda=False)
    measured = row["measured"]
    name, label = row["model"], describe(row["settings"])
    pad = constants.n_ctx_pad
    kv = kv_bytes(spec, s, pad)
    caches = measured["kv_caches"]
    if caches:
        yield Comparison(name, label, "kv_k", kv.k / MiB, sum(c["k_mib"] for c in caches))
        yield Comparison(name, label, "kv_v", kv.v / MiB, sum(c["v_mib"] for c in caches))
    for rs in measured.get("rs_caches", []):
        yield Comparison(name, label, "recurrent", kv.state / MiB, rs["r_mib"] + rs["s_mib"])
    compute = measured["compute_buffer_mib"].get("CPU")
    if compute:
        predicted, _ = compute_buffer_bytes(spec, s, consts, pad=pad)
        yield Comparison(name, label, "compute", predicted / MiB, compute)
    model = sum(measured["model_buffer_mib"].values())
    if model:
        placement = place(spec, s, kv, 1)
        duplicated = (
            spec.weights.bytes_by_component.get("embeddings", 0)
            if not spec.weights.bytes_by_component.get("lm_head")
            else 0
        )
        predicted = sum(placement.gpu_weights) + placement.cpu_weights - duplicated  # one mapping on the CPU
        yield Comparison(name, label, "model", predicted / MiB, model)
    if measured.get("output_buffer_mib") is not None:
        yield Comparison(name, label, "output", output_buffer_bytes(spec, s) / MiB, measured["output_buffer_mib"])


def all_comparisons(rows: list[dict[str, Any]] | None = None) -> list[Comparison]:
    return [c for row in (rows if rows is not None else load_rows()) for c in compare_row(row)]


def summary(comparisons: list[Comparison]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for term in sorted({c.term for c in comparisons}):
        items = [c for c in comparisons if c.term == term]
        out[term] = {
            "n": len(items),
            "within": sum(c.within() for c in items),
            "max_abs_error_mib": max(abs(c.error_mib) for c in items),
            "max_abs_relative": max(abs(c.relative) for c in items),
            "mean_abs_relative": sum(abs(c.relative) for c in items) / len(items),
        }
    return out


def markdown(comparisons: list[Comparison], rows: list[dict[str, Any]], *, all_rows: bool = False) -> str:
    ok = [r for r in rows if r["rc"] == 0]
    version = next((r["measured"].get("llama_cpp_python") for r in ok), "?")
    commit = rows[0].get("llama_cpp_commit", "?") if rows else "?"
    lines = [
        f"llama.cpp {commit}, vendored by llama-cpp-python {version}, CPU backend: {len(ok)} loads "
        f"({len(rows) - len(ok)} refused by llama.cpp) of {len({r['model'] for r in rows})} GGUFs, "
        f"{len(comparisons)} term comparisons.",
        "",
        "| term | compared | within target | max abs error (MiB) | max abs rel. error | mean abs rel. error |",
        "|---|---|---|---|---|---|",
    ]
    for term, st in summary(comparisons).items():
        lines.append(
            f"| {term} | {st['n']:.0f} | {st['within']:.0f} | {st['max_abs_error_mib']:.2f} | "
            f"{100 * st['max_abs_relative']:.2f} % | {100 * st['mean_abs_relative']:.2f} % |"
        )
    lines += [
        "",
        "Compute buffer per model:",
        "",
        "| model | settings | max abs rel. error | mean abs rel. error |",
        "|---|---|---|---|",
    ]
    for model in dict.fromkeys(c.model for c in comparisons):
        items = [c for c in comparisons if c.model == model and c.term == "compute"]
        if items:
            lines.append(
                f"| {model} | {len(items)} | {100 * max(abs(c.relative) for c in items):.1f} % | "
                f"{100 * sum(abs(c.relative) for c in items) / len(items):.1f} % |"
            )
    lines += [
        "",
        "Worst compute-buffer cases:",
        "",
        "| model | setting | predicted MiB | measured MiB | error |",
        "|---|---|---|---|---|",
    ]
    for c in sorted((c for c in comparisons if c.term == "compute"), key=lambda c: -abs(c.relative))[:10]:
        lines.append(
            f"| {c.model} | {c.setting} | {c.predicted_mib:.2f} | {c.measured_mib:.2f} | {100 * c.relative:+.1f} % |"
        )
    if all_rows:
        lines += ["", "| model | setting | term | predicted MiB | measured MiB | error |", "|---|---|---|---|---|---|"]
        for c in comparisons:
            lines.append(
                f"| {c.model} | {c.setting} | {c.term} | {c.predicted_mib:.2f} | {c.measured_mib:.2f} | {100 * c.relative:+.2f} % |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truth", type=Path, default=TRUTH)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--all", action="store_true", help="with --markdown: every comparison, not only the summary")
    args = parser.parse_args(argv)
    rows = load_rows(args.truth)
    comparisons = all_comparisons(rows)
    if args.markdown:
        print(markdown(comparisons, rows, all_rows=args.all))
        return 0
    for term, st in summary(comparisons).items():
        print(
            f"{term:10s} n={st['n']:4.0f} within={st['within']:4.0f} max|err|={st['max_abs_error_mib']:9.2f} MiB "
            f"max|rel|={100 * st['max_abs_relative']:6.2f}% mean|rel|={100 * st['mean_abs_relative']:6.2f}%"
        )
    bad = [c for c in comparisons if not c.within()]
    for c in sorted(bad, key=lambda c: -abs(c.relative))[:25]:
        print(
            f"  OUT {c.model:24s} {c.setting:45s} {c.term:8s} pred {c.predicted_mib:10.2f} meas {c.measured_mib:10.2f} {100 * c.relative:+7.2f}%"
        )
    return 0 if not bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
