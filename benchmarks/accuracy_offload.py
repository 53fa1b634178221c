"""llama.cpp with layers in RAM: hfvram's --fit plan against published ``--fit`` logs, and its decode bound against
published tokens/s of partly offloaded runs (issue 11, items 3 and 4; docs/accuracy.md "Layers in RAM").

1. ``benchmarks/data/llamacpp_fit_logs.jsonl``: verbose ``common_params_fit_impl`` lines from issues and PRs
   (permalinks in each case). The margin lines (``target``, ``need to reduce device memory by``) are recomputed from
   the logged free memory; where the log shows at least two measured placements, an affine memory model is fitted to
   them (per layer, per expert block: the derivation is in the case) and hfvram's search
   (``hfvram.engines.llamacpp.fit.fit_search``) is replayed on it: every logged probe must come out, in the logged
   order, with the logged accept / reject decision.
2. ``benchmarks/data/llamacpp_offload_speed.jsonl``: published generation speeds with ``-ngl`` / ``--n-cpu-moe`` on
   a known GPU and host memory; hfvram's bound (bytes read on the GPU / its bandwidth + bytes read in RAM / the host
   bandwidth) for the same placement, from the GGUF header of the same architecture
   (``benchmarks/data/llamacpp_headers``: our Q4_K / Q6_K mix, not the published file's exact bytes).

Run: ``python3 benchmarks/accuracy_offload.py``. Prints ratios; it asserts nothing (tests/test_offload_logs.py does).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hfvram.engines.llamacpp import profile as llamacpp  # noqa: E402
from hfvram.engines.llamacpp.fit import fit_search, plan_offload  # noqa: E402
from hfvram.engines.llamacpp.memory_model import MemoryModel, default_slots, layout, placement_of_settings, speed_of  # noqa: E402
from hfvram.engines.llamacpp.offload_plan import EXPERT_SHARE_ON_DEVICE, DeviceBudget, LayerPlace, Slot  # noqa: E402
from hfvram.estimate.host_memory import parse_host_memory  # noqa: E402
from hfvram.estimate.types import EngineChoice, Workload  # noqa: E402
from hfvram.readers.gguf import read_gguf_file, spec_from_gguf  # noqa: E402

FIT_LOGS = REPO / "benchmarks" / "data" / "llamacpp_fit_logs.jsonl"
SPEEDS = REPO / "benchmarks" / "data" / "llamacpp_offload_speed.jsonl"
MIB = 2**20
OVERFLOW_TYPE = {"attn": 1, "up": 2, "gate": 3, "moe": 4}


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ---- 1. --fit logs -------------------------------------------------------------------------------------------


def affine_memory(case: Mapping[str, Any]):
    """mem(slots, overflow_to) in bytes per device from the case's fitted memory model."""
    model = case["memory_model"]
    hp_ngl = int(case["hp_ngl"])
    nd = len(case["free_mib"])

    def mem(slots: Sequence[Slot], overflow_to: Sequence[int]) -> list[int]:
        places = layout(hp_ngl, slots, overflow_to)
        out = [float(model["base_mib"][d]) for d in range(nd)]
        for il, place in enumerate(places):
            if place.device < 0:
                continue
            out[place.device] += model["layer_mib"]
            if il < hp_ngl:
                share = EXPERT_SHARE_ON_DEVICE[place.kind]
                out[place.device] += model["expert_mib"] * share
                if place.overflow_to >= 0:
                    out[place.overflow_to] += model["expert_mib"] * (1 - share)
        if model.get("first_device_extra_mib") and any(slot.n_layer for slot in slots[1:]):
            out[0] += model["first_device_extra_mib"]
        return [round(value * MIB) for value in out]

    return mem


def replay(case: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """hfvram's search on the case's memory model: every probe (device, n_layer, n_part, overflow type, MiB) in
    order, plus the search's own step lines."""
    nd = len(case["free_mib"])
    targets = [int((free - case["margin_mib"]) * MIB) for free in case["free_mib"]]
    inner = affine_memory(case)
    probes: list[dict[str, Any]] = []

    def mem(slots: Sequence[Slot], overflow_to: Sequence[int]) -> list[int]:
        used = inner(slots, overflow_to)
        for d, slot in enumerate(slots):
            probes.append(
                {
                    "id": d,
                    "n_layer": slot.n_layer,
                    "n_part": slot.n_part,
                    "overflow_type": OVERFLOW_TYPE[slot.overflow],
                    "mem_mib": used[d] / MIB,
                    "fits": used[d] <= targets[d],
                }
            )
        return used

    full = [Slot(case["hp_ngl"] + 1 if d == nd - 1 else 0) for d in range(nd)]
    surplus = 1
    if case["memory_model"].get("replay_until_step") == 3:
        surplus = 0  # the excerpt shows step 3 only (and the model folds the experts into the layers)
    elif case["moe"]:
        dense_only = [Slot(s.n_layer, s.n_layer - 1 if s.n_layer else 0) for s in full]
        surplus = sum(t - u for t, u in zip(targets, inner(dense_only, [-1] * nd)))
    _, _, steps = fit_search(nd, case["hp_ngl"], case["moe"], targets, mem, surplus, [f"dev{d}" for d in range(nd)])
    return probes, steps


def check_fit_case(case: Mapping[str, Any]) -> dict[str, Any]:
    """Margin lines recomputed; logged probes found in the replay in order with the logged decision."""
    result: dict[str, Any] = {
        "id": case["id"],
        "margin_errors_mib": [],
        "probes": [],
        "in_order": None,
        "found_with_decisions": None,
    }
    targets = [free - case["margin_mib"] for free in case["free_mib"] or ()]
    initial = next((line for line in case["logged"] if line["kind"] == "initial"), None)
    for line in case["logged"]:
        if line["kind"] == "target":
            result["margin_errors_mib"].append(targets[line["id"]] - line["mib"])
        if line["kind"] == "deficit" and initial is not None:
            # llama.cpp prints bytes / MiB truncated: the recomputed deficit may be 1 MiB above the printed one
            result["margin_errors_mib"].append((initial["used_mib"] - targets[0]) - line["mib"])
    if "memory_model" not in case:
        return result
    probes, _ = replay(case)
    position = 0
    in_order = True
    found_all = True
    for line in case["logged"]:
        if line["kind"] not in ("probe", "accept", "reject"):
            continue
        key = (line["id"], line["n_layer"], line["n_part"])
        matches = [
            index
            for index, probe in enumerate(probes)
            if (probe["id"], probe["n_layer"], probe["n_part"]) == key
            and (line["kind"] != "probe" or probe["overflow_type"] == line["overflow_type"])
        ]
        if not matches:
            found_all = False
            result["probes"].append({"line": line["line"], "found": False})
            continue
        later = [index for index in matches if index >= position]
        found = later[0] if later else matches[0]
        in_order &= bool(later)
        probe = probes[found]
        entry: dict[str, Any] = {"line": line["line"], "found": True, "fits": probe["fits"]}
        if line["kind"] == "probe":
            entry["mem_error_mib"] = probe["mem_mib"] - line["mem_mib"]
        if line["kind"] in ("accept", "reject"):
            entry["decision_ok"] = probe["fits"] == (line["kind"] == "accept")
            found_all &= entry["decision_ok"]
        result["probes"].append(entry)
        position = found
    result["found_with_decisions"] = found_all
    result["in_order"] = in_order
    return result


def byte_model_case(case: Mapping[str, Any]) -> dict[str, Any]:
    """hfvram's own buffer model on a logged model it can build (``byte_model.spec``): the initial projection, the
    context step, the dense-only surplus, the plan, and the memory of the log's own final placement."""
    from hfvram.pipeline import RunOptions, load, resolve_request

    facts = case["byte_model"]
    options = RunOptions(engine="llama.cpp", offline=True)
    folder = facts["spec"].split(" ")[0]
    spec = load(resolve_request(options, str(REPO / folder)), options).spec
    choice = EngineChoice("llama.cpp", settings={"binary": facts["binary"]})
    _, settings, constants, consts = llamacpp.PROFILE.settings_for(spec, None, choice, Workload())
    budget = DeviceBudget(case["gpu"], case["free_mib"][0] * MIB, case["margin_mib"] * MIB, None)
    mm = MemoryModel(spec, settings, constants, consts, 1)
    n = spec.num_layers
    full = default_slots(n, [budget])
    initial = mm.usage(layout(n, full, [-1]), settings.n_ctx).totals[0]
    logged = facts["logged"]
    at_min = mm.usage(layout(n, full, [-1]), logged["ctx_to"]).totals[0]
    dense_only = [LayerPlace(p.device, "moe") for p in layout(n, full, [-1])]
    surplus = budget.target - mm.usage(dense_only, logged["ctx_to"]).totals[0]
    plan = plan_offload(spec, settings, constants, consts, [budget], n_ctx_auto=True)
    first_ram = logged["final_expert_layers_in_ram_from"]
    own = [LayerPlace(-1)] + [LayerPlace(0, "full" if il < first_ram else "moe") for il in range(1, n)]
    logged_placement = mm.usage([*own, LayerPlace(0)], logged["ctx_to"])
    return {
        "id": case["id"],
        "initial_mib": initial / MIB,
        "ctx_reduction_mib": (initial - at_min) / MIB,
        "dense_only_surplus_mib": surplus / MIB,
        "plan_ctx": plan.n_ctx,
        "plan_ngl": plan.n_gpu_layers,
        "plan_full_expert_layers": plan.expert_layers_on_gpu,
        "plan_first_ram_block": next(il for il, p in enumerate(plan.layers[:n]) if p.kind in ("moe", "attn")),
        "plan_partial": next(
            (f"{il} {p.kind.upper()}" for il, p in enumerate(plan.layers[:n]) if p.kind not in ("full", "moe")), None
        ),
        "plan_used_mib": plan.usage.totals[0] / MIB,
        "logged_placement_mib": logged_placement.totals[0] / MIB,
        "logged_placement_compute_mib": logged_placement.gpu_compute[0] / MIB,
        "logged": logged,
    }


# ---- 2. decode speed with layers in RAM --------------------------------------------------------------------------


def speed_case(case: Mapping[str, Any]) -> dict[str, Any]:
    header = REPO / case["model"]["header"]
    spec = spec_from_gguf([read_gguf_file(header)], filename=header.name)
    choice = EngineChoice("llama.cpp", settings=dict(case["settings"]))
    _, settings, constants, consts = llamacpp.PROFILE.settings_for(
        spec, None, choice, Workload(context=case["context"])
    )
    host = parse_host_memory(case["host_memory"])
    budget = DeviceBudget(case["gpu"], 0, 0, float(case["gpu_bandwidth_gbs"]))
    mm = MemoryModel(spec, settings, constants, consts, 1)
    usage = mm.usage(placement_of_settings(spec, settings, 1), settings.n_ctx)
    speed = speed_of(usage, [budget], host, settings)
    bound = speed.decode_tokens_per_second or 0.0
    return {
        "id": case["id"],
        "bound": bound,
        "measured": case["measured_tokens_per_second"],
        "ratio": case["measured_tokens_per_second"] / bound if bound else None,
        "gpu_gib": speed.gpu_read_bytes / 2**30,
        "ram_gib": speed.host_read_bytes / 2**30,
        "host": speed.host_memory,
    }


def main() -> int:
    print("--fit logs: margin lines recomputed, logged probes replayed on a memory model fitted to the log")
    for case in load(FIT_LOGS):
        result = check_fit_case(case)
        margins = ", ".join(f"{e:+d}" for e in result["margin_errors_mib"]) or "—"
        if "byte_model" in case:
            row = byte_model_case(case)
            logged = row["logged"]
            print(
                f"  {row['id']}: initial {row['initial_mib']:.0f} vs {logged['initial_mib']} MiB; context "
                f"{logged['ctx_from']} -> {row['plan_ctx']} ({logged['ctx_to']}), {row['ctx_reduction_mib']:.0f} vs "
                f"{logged['ctx_reduction_mib']} MiB less; dense-only surplus {row['dense_only_surplus_mib']:.0f} vs "
                f"{logged['dense_only_surplus_mib']} MiB"
            )
            print(
                f"      the log's placement (-ngl {logged['final_ngl']}, experts of {logged['final_expert_layers_in_ram_from']}+ "
                f"in RAM): {row['logged_placement_mib']:.0f} vs {logged['final_used_mib']} MiB used; hfvram's plan: "
                f"-ngl {row['plan_ngl']}, experts of blocks {row['plan_first_ram_block']}+ in RAM (partial layer "
                f"{row['plan_partial']}), {row['plan_used_mib']:.0f} MiB"
            )
            continue
        if "result" in case:
            shape = case["result"]
            print(
                f"  {result['id']}: final -ngl {shape['ngl']} of {case['hp_ngl'] + 1}, layer {shape['first_partial_layer']} "
                f"{shape['first_partial_kind']}, experts in RAM from layer {shape['moe_layers_from']} (the plan's shape)"
            )
            continue
        found = {None: "—", True: "yes", False: "NO"}[result["found_with_decisions"]]
        order = {None: "—", True: "yes", False: "no"}[result["in_order"]]
        print(
            f"  {result['id']}: margin errors MiB [{margins}]; every logged probe replayed with its decision: {found}; "
            f"in the logged order: {order}"
        )
        for probe in result["probes"]:
            extra = f", model {probe['mem_error_mib']:+.0f} MiB" if "mem_error_mib" in probe else ""
            print(f"      {'ok ' if probe['found'] else 'MISSING '}{probe['line'][:96]}{extra}")
    print()
    print("decode with layers in RAM: measured / hfvram's bound (an upper bound: the ratio should stay <= 1)")
    ratios = []
    for case in load(SPEEDS):
        row = speed_case(case)
        ratios.append(row["ratio"])
        print(
            f"  {row['id']}: bound {row['bound']:.1f} tok/s (GPU {row['gpu_gib']:.2f} GiB + RAM {row['ram_gib']:.2f} "
            f"GiB per token, host {row['host']}), measured {row['measured']:.1f} -> ratio {row['ratio']:.2f}"
        )
    print(f"  median ratio {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
