"""The llama.cpp --fit offload plan (hfvram/engines/llamacpp/fit.py, docs/engines/llamacpp.md#llamacpp-offload-plan)
and the host-memory input (hfvram/estimate/host_memory.py): self-consistency of the plan (it keeps the margin, one
more layer / expert block on the GPU would not), llama.cpp's decision rules, the CLI output and its bad inputs.

Models: the DERIVED GGUF headers of fixtures/gguf-derived (Qwen3-30B-A3B and gpt-oss-20b shapes, sources in
fixtures/README.md) and the dense Llama-3.1-8B header of benchmarks/data/llamacpp_headers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_support import FIXTURES, ROOT, run_hfvram, validate

from hfvram.engines.llamacpp import profile as lc
from hfvram.engines.llamacpp.fit import plan_for, plan_offload, uniform_budgets
from hfvram.engines.llamacpp.memory_model import MemoryModel, expert_override, layout
from hfvram.engines.llamacpp.placement import overhead_bytes
from hfvram.engines.ollama.offload import ollama_assign_layers
from hfvram.errors import UsageError
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.host_memory import host_memory_names, parse_host_memory, parse_ram, pcie_bandwidth_gbs
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.readers.gguf import read_gguf_file, spec_from_gguf

QWEN3 = FIXTURES / "gguf-derived" / "qwen3-30b-a3b.gguf"
GPT_OSS = FIXTURES / "gguf-derived" / "gpt-oss-20b.gguf"
LLAMA8B = ROOT / "benchmarks" / "data" / "llamacpp_headers" / "llama-3.1-8b.gguf-header"
HOST = parse_host_memory(None)


def _spec(path: Path):
    return spec_from_gguf([read_gguf_file(path)], filename=path.name)


def _plan(path: Path, gpu: str, context: int | None, **settings: str):
    spec = _spec(path)
    hardware = parse_gpu_spec(gpu)
    choice = EngineChoice("llama.cpp", settings=settings)
    workload = Workload(context=context)
    plan, speed, why = plan_for(spec, hardware, choice, workload, host=HOST)
    _, lc_settings, constants, consts = lc.PROFILE.settings_for(spec, hardware, choice, workload)
    return spec, plan, speed, why, MemoryModel(spec, lc_settings, constants, consts, hardware.count)


CASES = [
    (QWEN3, "rtx4060ti-8g", 32768),
    (QWEN3, "rtx3060", 32768),
    (QWEN3, "rtx4060ti-8g", None),
    (QWEN3, "rtx3060x2", 32768),
    # 262144: at 131072 the newest rule set's reserve (n_outputs_max = slots) lets it fit the three cards whole
    (QWEN3, "rtx3060x3", 262144),
    (GPT_OSS, "rtx4060ti-8g", 32768),
    (GPT_OSS, "rtx3060ti", 8192),
    (LLAMA8B, "rtx4060", 32768),
    (LLAMA8B, "rtx3060", 131072),
]


@pytest.mark.parametrize(("path", "gpu", "context"), CASES, ids=lambda v: getattr(v, "name", str(v)))
def test_the_plan_keeps_the_margin_on_every_gpu(path, gpu, context):
    _, plan, _, _, mm = _plan(path, gpu, context)
    assert plan is not None and plan.status in ("context", "offload")
    for device, budget in enumerate(plan.budgets):
        assert plan.usage.gpu_total(device) <= budget.target, budget.label
    # what the plan reports is what the memory model says of its own layout
    again = mm.usage(list(plan.layers), plan.n_ctx)
    assert again.totals == plan.usage.totals


@pytest.mark.parametrize(("path", "gpu", "context"), CASES, ids=lambda v: getattr(v, "name", str(v)))
def test_one_more_layer_or_expert_block_on_the_gpu_does_not_fit(path, gpu, context):
    """The next placement --fit's search would try on the last device it filled leaves less than the margin."""
    spec, plan, _, _, mm = _plan(path, gpu, context)
    if plan.status == "context":
        pytest.skip("the whole model fits at the reduced context")
    slots = [slot.copy() for slot in plan.slots]
    moe = any(spec.layers[il].moe for il in range(spec.num_layers))
    if not moe:
        dev = next(d for d in range(len(slots)) if slots[d].n_layer > 0)
        assert plan.n_gpu_layers <= spec.num_layers, "a dense model that fits needs no plan"
        slots[dev].n_layer += 1
    else:
        dev = next(d for d in range(len(slots)) if slots[d].n_part > 0)
        kind = slots[dev].overflow
        if kind == "up":
            slots[dev].overflow = "gate"  # gate's third of the experts too
        else:
            slots[dev].n_part -= 1  # the partial layer becomes a full one
            slots[dev].overflow = "moe"
    used = mm.usage(layout(spec.num_layers, slots, plan.overflow_to), plan.n_ctx).totals
    assert used[dev] > plan.budgets[dev].target or (
        dev + 1 < len(used) and used[dev + 1] > plan.budgets[dev + 1].target
    )


def test_a_moe_keeps_dense_weights_on_the_gpu_and_the_last_layers_experts_in_ram():
    """step 3/4 of common_params_fit_impl: all 49 layers on the GPU, experts of the first layers on it, of the last
    ones in RAM (-ot patterns for the high blocks), one partial layer (UP or GATE) in between."""
    spec, plan, _, _, _ = _plan(QWEN3, "rtx4060ti-8g", 32768)
    assert plan.n_gpu_layers == spec.num_layers + 1
    kinds = [place.kind for place in plan.layers[: spec.num_layers]]
    first_partial = next(il for il, kind in enumerate(kinds) if kind != "full")
    assert kinds[first_partial] in ("up", "gate")
    assert set(kinds[first_partial + 1 :]) == {"moe"}
    assert plan.overrides[-1][1] == "CPU"
    assert f"blk\\.{first_partial}\\.ffn_" in plan.overrides[0][0]
    assert "--fit off" in plan.command and f"-ngl {plan.n_gpu_layers}" in plan.command
    # the plan moved the experts, not layers: RAM holds most of the expert bytes
    assert plan.usage.cpu_weights > 0.6 * spec.weights.bytes_by_component["experts"]


def test_a_dense_model_moves_whole_layers_to_the_cpu():
    spec, plan, _, _, _ = _plan(LLAMA8B, "rtx4060", 32768)
    assert plan.status == "offload" and 0 < plan.n_gpu_layers <= spec.num_layers
    assert not plan.overrides
    assert all(place.device == -1 for place in plan.layers[: spec.num_layers + 1 - plan.n_gpu_layers])
    assert plan.usage.cpu_kv > 0  # the KV of CPU layers lives in RAM


def test_the_context_is_lowered_only_when_it_was_not_set():
    """step 2: -c absent -> n_ctx interpolated down (not below -fitc 4096, a multiple of 256); -c given -> kept."""
    spec, plan, _, _, _ = _plan(LLAMA8B, "rtx3060", None)
    assert plan.status == "context"
    assert 4096 <= plan.n_ctx < spec.max_position_embeddings and plan.n_ctx % 256 == 0
    assert plan.n_gpu_layers == spec.num_layers + 1
    _, kept, _, _, _ = _plan(LLAMA8B, "rtx3060", 131072)
    assert kept.n_ctx == 131072 and kept.status == "offload"


def test_a_user_placement_is_not_replanned_and_its_speed_uses_the_host_bandwidth():
    """-ngl set: --fit aborts ("n_gpu_layers already set by user"); the decode bound adds the RAM reads."""
    _, plan, speed, why, _ = _plan(LLAMA8B, "rtx3060", 32768, ngl="20")
    assert plan is None and "set by the user" in why
    assert speed is not None and speed.host_read_bytes > 0
    gpu_only = parse_gpu_spec("rtx3060").gpu.memory_bandwidth_gbs * 1e9 / (speed.gpu_read_bytes + speed.host_read_bytes)
    assert speed.decode_tokens_per_second < gpu_only / 2
    seconds = speed.gpu_read_bytes / 360e9 + speed.host_read_bytes / (HOST.bandwidth_gbs * 1e9)
    assert speed.decode_tokens_per_second == pytest.approx(1 / seconds)


def test_uniform_budgets_are_an_ordered_list_that_a_mixed_set_can_extend():
    spec = _spec(QWEN3)
    _, settings, constants, consts = lc.PROFILE.settings_for(
        spec, parse_gpu_spec("rtx3060"), EngineChoice("llama.cpp"), Workload(context=32768)
    )
    small = uniform_budgets(parse_gpu_spec("rtx3060"), settings, constants)[0]
    big = uniform_budgets(parse_gpu_spec("rtx4060ti-8g"), settings, constants)[0]
    plan = plan_offload(
        spec, settings, constants, consts, [small, replace(big, label="CUDA1 (rtx4060ti-8g)")], n_ctx_auto=False
    )
    assert plan.status == "offload" and [b.label for b in plan.budgets] == ["CUDA0 (rtx3060)", "CUDA1 (rtx4060ti-8g)"]
    assert all(plan.usage.gpu_total(d) <= b.target for d, b in enumerate(plan.budgets))
    assert plan.tensor_split and sum(plan.tensor_split) == plan.n_gpu_layers


def test_host_memory_inputs():
    assert parse_host_memory("ddr5-6000x2").bandwidth_gbs == pytest.approx(96.0)
    assert parse_host_memory("ddr4-3200x4").bandwidth_gbs == pytest.approx(102.4)
    assert parse_host_memory("90GB/s").bandwidth_gbs == 90.0
    assert parse_host_memory("epyc-9004").bandwidth_gbs == pytest.approx(460.8)
    default = parse_host_memory(None)
    assert default.assumed and "default" in default.describe()
    with pytest.raises(UsageError, match="did you mean 'ddr5-6000x2'"):
        parse_host_memory("ddr5-6000-x2")
    with pytest.raises(UsageError):
        parse_host_memory("ddr5-6000x99")
    assert parse_ram("64GiB") == parse_ram("64GB") == 64 * 2**30
    assert pcie_bandwidth_gbs()[0] == pytest.approx(31.5)


def test_every_ddr_row_of_the_catalogue_is_its_formula_and_cites_a_source():
    """theoretical bandwidth = MT/s × 8 bytes × channels (JEDEC 64-bit channels)."""
    from hfvram.datafiles import data_table

    table = data_table("host_memory.toml")
    assert table["default"] in host_memory_names()
    for row in table["system"]:
        assert row["source"], row["id"]
        if "transfer_rate" in row:
            assert row["bandwidth_gbs"] == pytest.approx(row["transfer_rate"] * 8 * row["channels"] / 1000), row["id"]
        assert parse_host_memory(row["id"]).source.startswith(("JEDEC", "AMD", "Intel", "Apple", "PCI"))


# ---- the CLI ------------------------------------------------------------------------------------------------


def test_check_says_offload_with_the_placement_the_ram_and_the_speed_and_exits_0():
    """Offload is an answer (README, exit codes): llama.cpp's --fit runs a MoE that does not fit an 8 GB card with
    experts in RAM, so the verdict is OFFLOAD, exit 0; ``--fail-on offload`` and ``--fail-on tight`` make it 1."""
    table = run_hfvram("check", str(QWEN3), "--gpu", "rtx4060ti-8g", "--context", "32k")
    assert table.returncode == 0, table.stderr
    assert "Verdict: OFFLOAD" in table.stdout and "layers in RAM" in table.stdout
    assert "--fit plan: 49 of 49 layers on the GPU" in table.stdout
    assert "Decode:" in table.stdout
    for gate in ("offload", "tight"):
        strict = run_hfvram("check", str(QWEN3), "--gpu", "rtx4060ti-8g", "--context", "32k", "--fail-on", gate)
        assert strict.returncode == 1, (gate, strict.stderr)
    document = json.loads(run_hfvram("check", str(QWEN3), "--gpu", "rtx4060ti-8g", "--context", "32k", "--json").stdout)
    validate(document)
    plan = document["offload_plan"]
    assert document["verdict"] == "offload" and document["verdict_reason"].startswith("offload: ")
    # the engine's effective placement is the plan's
    engine = document["engine"]
    assert engine["n-gpu-layers"] == plan["n_gpu_layers"] and engine["n-cpu-moe"] == 0
    assert engine["override-tensor"] == ",".join(plan["override_tensor"])
    # the worst GPU's terms are those the plan places there, within the GPU's usable memory
    assert document["per_gpu"]["weights"] == plan["devices"][0]["weights_bytes"]
    assert document["per_gpu"]["total"] <= document["per_gpu"]["usable"]
    assert document["decode_tokens_per_second"] == plan["speed"]["decode_tokens_per_second"]
    assert plan["ram"]["total_bytes"] > 10 * 2**30


def test_check_prints_the_plan_and_the_json_carries_it():
    table = run_hfvram("check", str(QWEN3), "--gpu", "rtx4060ti-8g", "--context", "32k")
    assert "--fit plan: 49 of 49 layers on the GPU" in table.stdout
    assert "RAM needed:" in table.stdout and "tokens/s" in table.stdout and "llama-server -m" in table.stdout
    assert "89.6 GB/s (ddr5-5600x2, default)" in table.stdout
    result = run_hfvram(
        "check", str(QWEN3), "--gpu", "rtx4060ti-8g", "--context", "32k", "--json", "--host-memory", "ddr5-6000x2"
    )
    document = json.loads(result.stdout)
    validate(document)
    plan = document["offload_plan"]
    assert plan["status"] == "offload" and plan["moe"] is True
    assert plan["speed"]["host_bandwidth_gbs"] == 96.0
    assert plan["devices"][0]["used_bytes"] <= plan["devices"][0]["free_bytes"] - plan["devices"][0]["margin_bytes"]


def test_fit_json_carries_the_plan():
    result = run_hfvram("fit", str(QWEN3), "--gpu", "rtx3060x2", "--context", "32k", "--json")
    document = json.loads(result.stdout)
    validate(document, "fit")
    assert document["offload_plan"]["tensor_split"] and len(document["offload_plan"]["devices"]) == 2


def test_unknown_host_memory_is_a_usage_error_with_a_suggestion():
    result = run_hfvram("check", str(QWEN3), "--gpu", "rtx4060ti-8g", "--host-memory", "ddr5-600x2x")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown --host-memory" in lines[0] and "did you mean" in lines[0]


def test_a_plan_that_cannot_fit_even_on_the_cpu_says_so_with_the_ram():
    result = run_hfvram("check", str(QWEN3), "--gpu", "rtx4060ti-8g", "--context", "32k", "--ram", "8GiB")
    assert result.returncode == 1
    lines = [line for line in result.stdout.splitlines() if line.startswith("Offload plan: none")]
    assert len(lines) == 1 and "GiB of RAM, 8.00 GiB given" in lines[0]
    tiny = run_hfvram("check", str(QWEN3), "--gpu", "1GiB", "--context", "32k", "--json")
    plan = json.loads(tiny.stdout)["offload_plan"]
    assert tiny.returncode == 1 and plan["status"] == "none" and "even with every layer on the CPU" in plan["reason"]


@pytest.mark.parametrize("gpu", ["rtx9999x2", "rtx3060+rtx9999"])
def test_a_gpu_list_with_an_unknown_card_is_a_usage_error(gpu):
    result = run_hfvram("check", str(QWEN3), "--gpu", gpu)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_expert_override_matches_exactly_the_planned_layers():
    """-ot patterns are matched with regex_search on tensor names: the compact alternation of
    memory_model.number_alternation must select exactly the planned blocks (random sets and runs up to 999)."""
    import random
    import re

    rng = random.Random(11)
    for trial in range(300):
        if trial % 2:
            layers = set(rng.sample(range(1000), rng.randint(1, 40)))
        else:
            start = rng.randint(0, 500)
            layers = set(range(start, rng.randint(start, 999) + 1))
        pattern = re.compile(expert_override(sorted(layers))[0])
        for il in range(1000):
            assert bool(pattern.search(f"blk.{il}.ffn_up_exps.weight")) == (il in layers), (sorted(layers)[:5], il)
            assert not pattern.search(f"blk.{il}.attn_q.weight")


def test_a_mixed_set_plan_budgets_each_card_by_its_own_memory():
    """rtx3060 (12 GB) + rtx4060 (8 GB): each device's free memory is its own card's (the catalogue's memory less
    the CUDA context), the plan keeps the -fitt margin on both, and the larger card takes more of the weights."""
    spec, plan, _, _, _ = _plan(QWEN3, "rtx3060+rtx4060", 32768)
    assert plan is not None and plan.status == "offload"
    hardware = parse_gpu_spec("rtx3060+rtx4060")
    overhead, _ = overhead_bytes(
        hardware, lc.PROFILE.settings_for(spec, hardware, EngineChoice("llama.cpp"), Workload(context=32768))[2]
    )
    doc = plan.as_dict(moe=True)
    frees = [device["free_bytes"] for device in doc["devices"]]
    assert frees == [gpu.gpu_memory_bytes - overhead for gpu in hardware.gpus]
    assert frees[0] > frees[1]
    for device in doc["devices"]:
        assert device["used_bytes"] + device["margin_bytes"] <= device["free_bytes"]
    assert doc["devices"][0]["weights_bytes"] > doc["devices"][1]["weights_bytes"]


@pytest.mark.parametrize(
    ("version", "planner"),
    [("0.5", None), ("0.12", None), ("0.13", "ollama"), ("0.20", "ollama"), ("0.30", "llama.cpp")],
)
def test_ollama_runs_what_does_not_fit_with_layers_in_ram(version, planner):
    """Ollama places what does not fit into RAM (docs/engines/ollama.md#ollama-offload): the legacy estimator's
    layer count, the 0.13 - 0.2x whole-layer layout, llama-server's --fit from 0.30: verdict offload, exit 0."""
    result = run_hfvram("check", str(QWEN3), "--gpu", "rtx4060ti-8g", "--engine", f"ollama@{version}", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    validate(document)
    assert document["verdict"] == "offload" and document["verdict_reason"].startswith("offload: runs with ")
    plan = document.get("offload_plan")
    assert (plan or {}).get("planner") == planner
    if planner is not None:
        assert plan["status"] == "offload" and 0 < plan["n_gpu_layers"] <= plan["n_layer"] + 1
        assert document["per_gpu"]["total"] <= document["per_gpu"]["usable"]


def test_ollama_layout_is_greedy_from_the_last_layer_and_drops_the_output_layer_when_short():
    """llm/server.go greedyFit / assignLayers (v0.13.0): blocks from the last one backwards while they fit; when not
    every block fits, the output layer (the last block) is left out and the rest placed again."""
    blocks = [4, 4, 4, 4, 6]  # four layers of 4 and an output block of 6
    assert ollama_assign_layers(blocks, [100]) == {0: [0, 1, 2, 3, 4]}
    # 13 free: with the output (6) only the output + one layer fit; without it three layers fit
    assert ollama_assign_layers(blocks, [13]) == {0: [1, 2, 3]}
    # two GPUs: packed into as few as possible, the capacity factor balancing them
    two = ollama_assign_layers(blocks, [13, 13])
    assert sorted(i for ids in two.values() for i in ids) == [0, 1, 2, 3, 4]


def test_vllm_cpu_offload_gb_is_offload_and_slows_decode_by_the_bytes_crossing_pcie():
    """vLLM --cpu-offload-gb (docs/engines/vllm.md#vllm-features): the weights kept in host memory cross PCIe every
    step, so the run is verdict offload (exit 0, --fail-on offload exits 1) and each token costs 4 GiB / 31.5 GB/s
    (PCIe 4.0 x16, hfvram/data/host_memory.toml) more than on the GPU alone."""
    base = ("check", "Qwen/Qwen3-8B", "--offline", "--gpu", "rtx4090", "--context", "8k", "--json")
    alone = json.loads(run_hfvram(*base).stdout)
    result = run_hfvram(*base, "--set", "cpu-offload-gb=4")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    validate(document)
    assert alone["verdict"] == "fits" and document["verdict"] == "offload"
    step = 4 * 2**30 / 31.5e9
    expected = 1 / (1 / alone["decode_tokens_per_second"] + step)
    # the GPU part reads less with weights moved off it, so the offloaded run is at least this fast
    assert expected <= document["decode_tokens_per_second"] <= 1 / step
    assert run_hfvram(*base, "--set", "cpu-offload-gb=4", "--fail-on", "offload").returncode == 1
