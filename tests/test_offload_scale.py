"""The llama.cpp offload planner and profile stay linear in the layer count and in the GPU count (issue 27): a
10,000-layer model and a 4,096-GPU set. Asserted on work counts (compute buffers computed), not on time.

Model: the DERIVED Qwen3-30B-A3B header of fixtures/gguf-derived (sources in fixtures/README.md), its 48 layers
repeated to 9,600 (the per-layer figures are the file's own)."""

from __future__ import annotations

from dataclasses import replace

from cli_support import FIXTURES

from hfvram.engines.llamacpp import profile as lc
from hfvram.engines.llamacpp.breakdown import breakdown
from hfvram.engines.llamacpp.fit import plan_for, uniform_budgets
from hfvram.engines.llamacpp.memory_model import MemoryModel, default_slots, layout
from hfvram.engines.llamacpp.offload_plan import Slot
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.host_memory import parse_host_memory
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.readers.gguf import read_gguf_file, spec_from_gguf

QWEN3 = FIXTURES / "gguf-derived" / "qwen3-30b-a3b.gguf"


def _spec(repeat: int = 1):
    spec = spec_from_gguf([read_gguf_file(QWEN3)], filename=QWEN3.name)
    if repeat == 1:
        return spec
    return replace(spec, num_layers=spec.num_layers * repeat, layers=tuple(spec.layers) * repeat)


def _memory_model(spec, gpu: str):
    hardware = parse_gpu_spec(gpu)
    _, settings, constants, consts = lc.PROFILE.settings_for(spec, hardware, EngineChoice("llama.cpp"), Workload(4096))
    return MemoryModel(spec, settings, constants, consts, hardware.count)


def test_a_10000_layer_plan_computes_a_handful_of_compute_buffers_and_agrees_with_the_full_usage():
    spec = _spec(200)  # 9,600 layers
    hardware = parse_gpu_spec("rtx4060ti-8g")
    plan, _, _ = plan_for(spec, hardware, EngineChoice("llama.cpp"), Workload(4096), host=parse_host_memory(None))
    assert plan is not None and plan.status == "offload" and 0 < plan.n_gpu_layers < spec.num_layers
    mm = _memory_model(spec, "rtx4060ti-8g")
    # the range-sum totals are the per-layer usage's, on the plan's own layout
    assert mm.totals(plan.slots, plan.overflow_to, plan.n_ctx) == list(plan.usage.totals)
    # one compute buffer per (output, first device, largest CPU expert) kind: a constant, not one per layer or step
    assert mm.work <= 4


def test_range_totals_equal_the_per_layer_usage_on_many_layouts():
    spec = _spec()
    mm = _memory_model(spec, "rtx3060x3")
    n = spec.num_layers
    layouts = [
        ([Slot(0), Slot(0), Slot(n + 1, n, "up")], [-1, -1, -1]),
        ([Slot(10, 4, "gate"), Slot(20, 3, "attn"), Slot(19, 19)], [1, 2, -1]),
        ([Slot(5), Slot(0), Slot(1, 1, "moe")], [-1, -1, -1]),
        ([Slot(0), Slot(0), Slot(0)], [-1, -1, -1]),
    ]
    for slots, overflow in layouts:
        assert mm.totals(slots, overflow, 4096) == mm.usage(layout(n, slots, overflow), 4096).totals


def test_the_llamacpp_breakdown_on_4096_gpus_computes_each_kind_of_compute_buffer_once():
    spec = _spec()
    hardware = parse_gpu_spec("rtx4060ti-8gx4096")
    _, settings, constants, consts = lc.PROFILE.settings_for(spec, hardware, EngineChoice("llama.cpp"), Workload(4096))
    parts = breakdown(spec, hardware, settings, constants, consts)
    assert len(parts.gpu_compute) == 4096
    # at most three distinct buffers: the first device, the one holding the output, every other device
    assert len({size for size in parts.gpu_compute if size}) <= 3
    mm = MemoryModel(spec, settings, constants, consts, 4096)
    mm.usage(
        layout(
            spec.num_layers,
            default_slots(spec.num_layers, uniform_budgets(hardware, settings, constants)),
            [-1] * 4096,
        ),
        4096,
    )
    assert mm.work <= 3
