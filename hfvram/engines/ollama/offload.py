"""Ollama: its scheduler places what does not fit into RAM (docs/engines/ollama.md#ollama-offload) — the legacy
estimator's own layer count (before 0.13), the whole-layer layout of its allocation dry runs (0.13 - 0.29), and
llama-server's ``--fit`` (0.30 on), the last two on llama.cpp's memory model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hfvram.engines.llamacpp import profile as lc
from hfvram.engines.llamacpp.fit import plan_for
from hfvram.engines.llamacpp.memory_model import MemoryModel, speed_of
from hfvram.engines.llamacpp.offload import offloaded_estimate
from hfvram.engines.llamacpp.offload_plan import DeviceBudget, LayerPlace, OffloadPlan, Slot
from hfvram.engines.llamacpp.placement import is_metal
from hfvram.engines.ollama import profile as ollama
from hfvram.engines.ollama.settings import OllamaConstants, llama_server_settings, minimum_memory, resolve
from hfvram.estimate.common import setting_int
from hfvram.estimate.host_memory import HostMemory, parse_host_memory
from hfvram.estimate.types import VERDICT_DOES_NOT_FIT, VERDICT_OFFLOAD, EngineChoice, Estimate, Hardware, Workload
from hfvram.spec import ModelSpec


def apply_to_estimate(est: Estimate, choice: EngineChoice, workload: Workload) -> Estimate:
    """Ollama on discrete GPUs: the legacy estimator's own layer count (before 0.13), the whole-layer layout of its
    allocation dry runs (0.13 - 0.29, ``llm/server.go`` ``assignLayers``), llama-server's ``--fit`` (0.30 on)."""
    hardware = est.hardware
    if hardware is None or est.refusal or is_metal(hardware) or est.verdict != VERDICT_DOES_NOT_FIT:
        return est
    _, constants = ollama.PROFILE.constants(choice.version)
    if constants.legacy:
        placed, total = est.engine.get("layers_offload"), est.engine.get("layers_model")
        if not isinstance(placed, int) or not isinstance(total, int) or placed >= total:
            return est
        note = f"Ollama's scheduler puts {placed} of {total} layers on the GPU and runs the rest on the CPU"
        return replace(est, verdict=VERDICT_OFFLOAD, decode_tokens_per_second=None, warnings=(*est.warnings, note))
    settings = resolve(est.spec, hardware, choice, workload, constants, ollama.PROFILE.model_type_to_arch)
    if settings.num_parallel <= 0:
        settings = replace(settings, num_parallel=1)
    server = llama_server_settings(choice, settings, constants.llama_server_build)
    if "n-gpu-layers" in server:
        return est  # num_gpu set: Ollama loads as asked
    lc_choice = EngineChoice("llama.cpp", settings=server)
    lc_workload = Workload(kv_dtype=settings.kv_cache_type)
    host = hardware.host or parse_host_memory(None)
    if constants.runner == "llama-server":
        plan, _, _ = plan_for(est.spec, hardware, lc_choice, lc_workload, host=host, ram_bytes=hardware.ram_bytes)
        if plan is None or plan.status != "offload":
            return replace(est, offload=plan) if plan is not None else est
        return offloaded_estimate(est, plan, "Ollama's llama-server --fit")
    plan = ollama_layout_plan(est.spec, hardware, lc_choice, lc_workload, host, constants, choice)
    if plan.status != "offload":
        return replace(est, offload=plan)
    return offloaded_estimate(est, plan, "Ollama's scheduler")


def ollama_layout_plan(
    spec: ModelSpec,
    hardware: Hardware,
    lc_choice: EngineChoice,
    lc_workload: Workload,
    host: HostMemory,
    constants: OllamaConstants,
    choice: EngineChoice,
) -> OffloadPlan:
    """Ollama 0.13 - 0.29's layout (``llm/server.go`` ``buildLayout`` / ``assignLayers`` / ``findBestFit`` /
    ``greedyFit``): each layer's weights + cache as one block, the output layer last; GPUs free memory less
    Ollama's minimum, ``OLLAMA_GPU_OVERHEAD`` and the graph; greedy from the last layer backwards, spilling to the
    next GPU, a capacity factor balanced by bisection; when not every block fits, once more without the output
    layer (it then stays on the CPU). Whole layers: no expert tensors apart.

    Longer than 60 lines: it follows Ollama's steps in their order, so that it reads against the Go source."""
    _, settings, lc_constants, consts = lc.PROFILE.settings_for(spec, hardware, lc_choice, lc_workload)
    nd = hardware.count
    mm = MemoryModel(spec, settings, lc_constants, consts, nd)
    n_layer = mm.n_layer
    st = mm.at_ctx(settings.n_ctx)
    kv = mm.kv(st)
    blocks = [
        mm.dense[il] + mm.experts[il] + (kv.per_layer[il] if il < len(kv.per_layer) else 0) for il in range(n_layer)
    ]
    blocks.append(mm.output)
    gpu_overhead = setting_int(choice, "gpu_overhead", "OLLAMA_GPU_OVERHEAD", default=constants.gpu_overhead_bytes)
    minimum = minimum_memory(hardware, constants) + (gpu_overhead or 0)
    graph = mm.compute(st, True, True, False, 0)
    free = [max(0, gpu.gpu_memory_bytes - minimum - graph) for gpu in hardware.gpus]
    assignment = ollama_assign_layers(blocks, free)
    places = [LayerPlace(-1)] * (n_layer + 1)
    for device, layer_ids in assignment.items():
        for il in layer_ids:
            places[il] = LayerPlace(device)
    usage = mm.usage(places, settings.n_ctx)
    on_gpu = sum(len(ids) for ids in assignment.values())
    budgets = [
        DeviceBudget(f"CUDA{d} ({gpu.id})", gpu.gpu_memory_bytes - minimum, 0, gpu.memory_bandwidth_gbs)
        for d, gpu in enumerate(hardware.gpus)
    ]
    slots = tuple(Slot(len(assignment.get(d, ()))) for d in range(nd))
    speed = speed_of(usage, budgets, host, settings)
    status = "fits" if on_gpu == n_layer + 1 else "offload"
    return OffloadPlan(
        status=status,
        n_ctx=usage.settings.n_ctx,
        n_ctx_asked=usage.settings.n_ctx,
        n_gpu_layers=on_gpu,
        n_layer=n_layer,
        slots=slots,
        overflow_to=tuple([-1] * nd),
        layers=tuple(places),
        usage=usage,
        budgets=tuple(budgets),
        speed=speed,
        tensor_split=tuple(slot.n_layer for slot in slots) if nd > 1 else (),
        steps=(f"Ollama's layout: {on_gpu} of {n_layer + 1} layers on the GPUs (whole layers, from the last back)",),
        ram_bytes=hardware.ram_bytes,
        command=f"ollama run MODEL  # num_gpu {on_gpu} (the layer count Ollama's scheduler picks)",
        planner="ollama",
    )


def ollama_assign_layers(blocks: Sequence[int], free: Sequence[int]) -> dict[int, list[int]]:
    """``assignLayers`` on GPUs of one library: devices by free memory (largest first), packed into as few as
    possible; when not every block fits, once more without the last block (the output layer). Device -> layers."""
    order = sorted(range(len(free)), key=lambda d: -free[d])
    layers = list(range(len(blocks)))
    best: dict[int, list[int]] = {}
    for _ in range(2):
        for count in range(1, len(order) + 1):
            best = _find_best_fit([blocks[i] for i in layers], [free[d] for d in order[:count]])
            best = {order[d]: ids for d, ids in best.items()}
            if sum(len(ids) for ids in best.values()) == len(layers):
                break
        if sum(len(ids) for ids in best.values()) == len(layers):
            return best
        layers = layers[:-1]
    return best


def _find_best_fit(blocks: Sequence[int], free: Sequence[float]) -> dict[int, list[int]]:
    """``findBestFit``: the smallest capacity factor (bisection to 1e-6) that still places the most blocks."""
    best = _greedy_fit(blocks, free, 1.0)
    most = sum(len(ids) for ids in best.values())
    low, high = 0.0, 1.0
    while high - low > 1e-6:
        mid = (low + high) / 2
        trial = _greedy_fit(blocks, free, mid)
        if sum(len(ids) for ids in trial.values()) == most:
            high, best = mid, trial
        else:
            low = mid
    return best


def _greedy_fit(blocks: Sequence[int], free: Sequence[float], capacity: float) -> dict[int, list[int]]:
    """``greedyFit``: from the last block backwards onto the last device, spilling to the one before it."""
    device = len(free) - 1
    out: dict[int, list[int]] = {device: []}
    space = free[device] * capacity
    for i in range(len(blocks) - 1, -1, -1):
        while blocks[i] > space:
            device -= 1
            if device < 0:
                return out
            out[device] = []
            space = free[device] * capacity
        out[device].insert(0, i)
        space -= blocks[i]
    return out
