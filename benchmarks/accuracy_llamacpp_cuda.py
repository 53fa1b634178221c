"""llama.cpp on CUDA: hfvram's compute buffers next to published CUDA start-up logs (issue 11, item 1).

Reads ``benchmarks/data/llamacpp_cuda_logs.jsonl`` (one published log per line: source, build, GPU, model, settings
and every ``compute buffer size`` line as printed), builds each model's ``ModelSpec`` (a GGUF header of
``benchmarks/data/llamacpp_headers`` or a fixture config of ``fixtures/hub`` plus the weight facts the case states),
runs the llama.cpp profile's own functions with the case's settings on the CUDA backend and prints, per buffer,
predicted vs measured MiB — the fit half and the held-out half apart.

Fit / held-out is decided by the parity of ``sha1(case id)``, fixed before any error was looked at: constants may
be fitted on the fit half only; the held-out half says how well the rules carry over. Cases marked
``"later_added": true`` were collected after the rules were written and form a third group of their own (never
fitted on; reported before and after any rule change they prompted).

Run: ``python3 benchmarks/accuracy_llamacpp_cuda.py [--markdown]``. The CPU-backend table is
``benchmarks/accuracy_llamacpp.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import statistics
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hfvram.engines.llamacpp import profile as llamacpp  # noqa: E402
from hfvram.engines.llamacpp.compute import compute_buffer_bytes, host_compute_buffer_bytes  # noqa: E402
from hfvram.engines.llamacpp.settings import resolve_settings, row_size  # noqa: E402
from hfvram.estimate.types import EngineChoice, Workload  # noqa: E402
from hfvram.readers.config import read_config  # noqa: E402
from hfvram.readers.gguf import read_gguf_file, spec_from_gguf  # noqa: E402
from hfvram.spec import ModelSpec, Weights  # noqa: E402

LOGS = REPO / "benchmarks" / "data" / "llamacpp_cuda_logs.jsonl"
HUB = REPO / "fixtures" / "hub"
MiB, GiB = 1 << 20, 1 << 30
MAX_CASES = 10_000


def load_cases(path: Path = LOGS) -> list[dict[str, Any]]:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [json.loads(line) for line in lines[:MAX_CASES]]


def is_held_out(case_id: str) -> bool:
    """The split, fixed before errors were looked at: odd sha1 of the id -> held out."""
    return int(hashlib.sha1(case_id.encode("utf-8")).hexdigest(), 16) % 2 == 1


def spec_for(case: Mapping[str, Any]) -> ModelSpec:
    """The case's model: a GGUF header read by hfvram's GGUF reader, or a fixture config (with the config keys the
    case overrides) plus the weight facts the case states (output type, expert bytes per layer)."""
    facts = case["spec"]
    if "header" in facts:
        path = REPO / facts["header"]
        return spec_from_gguf([read_gguf_file(path)], filename=path.name)
    config = json.loads((HUB / facts["fixture"] / "config.json").read_text(encoding="utf-8"))
    for key, value in facts.get("config_overrides", {}).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    spec = read_config(config)
    vocab_rows = (spec.vocab_size or 0) * (spec.hidden_size or 0)
    components: dict[str, int] = {}
    if facts.get("output_type"):
        components["embeddings"] = row_size("q4_k", vocab_rows)
        components["lm_head"] = row_size(str(facts["output_type"]).lower(), vocab_rows)
    if facts.get("expert_bytes_per_layer_mib"):
        moe_layers = sum(1 for layer in spec.layers if layer.moe) or spec.num_layers
        components["experts"] = int(float(facts["expert_bytes_per_layer_mib"]) * MiB) * moe_layers
    if not components:
        return spec
    return spec.with_weights(
        Weights(total_bytes=sum(components.values()), params_total=0, bytes_by_component=components, exact=False)
    )


def choice_for(case: Mapping[str, Any]) -> EngineChoice:
    s = case["settings"]
    values = {
        "binary": case.get("binary", "llama-cli"),
        "ctx-size": str(s["n_ctx"]),
        "batch-size": str(s["n_batch"]),
        "ubatch-size": str(s["n_ubatch"]),
        "flash-attn": s["flash_attn"],
        "cache-type-k": s["type_k"],
        "cache-type-v": s["type_v"],
        "parallel": str(s.get("n_parallel", 1)),
        "n-gpu-layers": str(s["n_gpu_layers"]),
    }
    if s.get("kv_unified"):
        values["kv-unified"] = "true"
    build = str(case.get("build", "")).split(" ", 1)[0]
    if build.isdigit():
        values["build"] = build
    else:
        # every log here is dated before build 9460 (2026-06-01, the llama-server n_outputs_max cap): its reserve
        # holds one logits row per ubatch token, not the newest rule set's slots
        values["reserve-outputs"] = "ubatch"
    if s.get("override_tensor"):
        values["override-tensor"] = s["override_tensor"]
    if s.get("n_cpu_moe"):
        values["n-cpu-moe"] = str(s["n_cpu_moe"])
    return EngineChoice(name="llama.cpp", settings=values)


@dataclass(frozen=True)
class Comparison:
    case_id: str
    buffer: str
    predicted_mib: float | None
    measured_mib: float
    held_out: bool
    later_added: bool = False

    @property
    def group(self) -> str:
        return "later-added" if self.later_added else ("held-out" if self.held_out else "fit")

    @property
    def relative(self) -> float | None:
        if self.predicted_mib is None or not self.measured_mib:
            return None
        return (self.predicted_mib - self.measured_mib) / self.measured_mib


def compare_case(case: Mapping[str, Any]) -> list[Comparison]:
    spec = spec_for(case)
    _, constants, consts = llamacpp.constants_for(EngineChoice(name="llama.cpp"))
    settings = replace(resolve_settings(spec, choice_for(case), Workload(), constants), cuda=True)
    pad = constants.n_ctx_pad
    n_gpus = int(case["settings"].get("n_gpus", 1))
    held = is_held_out(case["id"])
    later = bool(case.get("later_added"))
    kwargs_ok = "first_device" in inspect.signature(compute_buffer_bytes).parameters
    out = []
    for name, measured in case["buffers_mib"].items():
        device, kind = name.split(" ", 1)
        if kind != "compute":
            continue
        predicted: float | None
        if device.startswith("CUDA") and device[4:].isdigit():
            index = int(device[4:])
            extra = {"first_device": index == 0} if kwargs_ok else {}
            size, _ = compute_buffer_bytes(spec, settings, consts, with_output=index == n_gpus - 1, pad=pad, **extra)
            predicted = size / MiB
        elif device == "CUDA_Host":
            size, _ = host_compute_buffer_bytes(spec, settings, consts, pad=pad)
            predicted = size / MiB
        else:
            predicted = None  # no rule for this buffer in this version of hfvram
        out.append(Comparison(case["id"], name, predicted, float(measured), held, later))
    return out


def all_comparisons(cases: list[dict[str, Any]] | None = None) -> list[Comparison]:
    return [c for case in (cases if cases is not None else load_cases()) for c in compare_case(case)]


def stats(items: list[Comparison]) -> dict[str, float]:
    errors = [abs(r) for c in items if (r := c.relative) is not None]
    if not errors:
        return {"n": 0.0, "median": float("nan"), "worst": float("nan")}
    return {"n": float(len(errors)), "median": statistics.median(errors), "worst": max(errors)}


def groups(comparisons: list[Comparison]) -> dict[str, list[Comparison]]:
    out: dict[str, list[Comparison]] = {}
    for group in ("fit", "held-out", "later-added"):
        for kind in ("GPU", "CUDA_Host"):
            items = [
                c
                for c in comparisons
                if c.group == group and (c.buffer.startswith("CUDA_Host") == (kind == "CUDA_Host"))
            ]
            out[f"{group} {kind}"] = items
    return out


def markdown(comparisons: list[Comparison]) -> str:
    lines = [
        "| case | group | buffer | predicted MiB | measured MiB | error |",
        "|---|---|---|---|---|---|",
    ]
    for c in comparisons:
        predicted = "no rule" if c.predicted_mib is None else f"{c.predicted_mib:.2f}"
        error = "—" if c.relative is None else f"{100 * c.relative:+.1f} %"
        lines.append(f"| {c.case_id} | {c.group} | {c.buffer} | {predicted} | {c.measured_mib:.2f} | {error} |")
    lines += ["", "| group, buffer | compared | median abs error | worst abs error |", "|---|---|---|---|"]
    for label, items in groups(comparisons).items():
        st = stats(items)
        if st["n"]:
            lines.append(f"| {label} | {st['n']:.0f} | {100 * st['median']:.1f} % | {100 * st['worst']:.1f} % |")
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
        predicted = "   no rule" if c.predicted_mib is None else f"{c.predicted_mib:10.2f}"
        error = "" if c.relative is None else f"{100 * c.relative:+7.1f}%"
        print(f"{c.group:11s} {c.case_id:40s} {c.buffer:18s} pred {predicted} meas {c.measured_mib:10.2f} {error}")
    for label, items in groups(comparisons).items():
        st = stats(items)
        if st["n"]:
            print(
                f"{label:21s} n={st['n']:.0f} median|rel|={100 * st['median']:5.1f}% worst|rel|={100 * st['worst']:5.1f}%"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
