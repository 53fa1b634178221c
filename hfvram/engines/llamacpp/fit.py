"""The offload plan llama.cpp's ``--fit`` makes when the whole model does not fit (docs/engines/llamacpp.md#llamacpp-offload-plan):
its decisions, the ``-ot`` overrides and command line of the result, and the plan for an estimate's own settings.

``plan_offload`` replays ``common_params_fit_impl`` (llama.cpp ``common/fit.cpp``) step by step on hfvram's buffer
model of the llama.cpp profile (``memory_model.MemoryModel``): where llama.cpp measures each candidate placement
with a dry run (``no_alloc``), this module asks the memory model — weights, KV and compute buffer per device from
the profile's own functions. The decisions are llama.cpp's:

1. everything on the GPUs at the asked context: no change when every device keeps its margin (``-fitt``);
2. only when the context was not set (``-c`` absent): lower it by linear interpolation between ``n_ctx_train`` and
   ``-fitc`` (rounded down to 256 × streams); one device: done when that fits, else keep ``-fitc`` and go on;
3. fill devices back to front with layers (a MoE: "dense-only" layers, every expert tensor in RAM), by false
   position on the layer count;
4. a MoE whose dense part fits: turn dense-only layers into full ones front to back, then try part of one more
   layer (``ffn_up`` kept: UP, then up + gate: GATE; else attention only: ATTN).

Devices are an ordered list of budgets (``DeviceBudget``: free memory, margin, bandwidth), so a mixed set plugs in
as a longer list. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from hfvram.engines.llamacpp.memory_model import (
    MemoryModel,
    default_slots,
    expert_override,
    layout,
    speed_of,
    speed_of_settings,
)
from hfvram.engines.llamacpp.offload_plan import (
    FRACTION_NAMES,
    OVERFLOW_PATTERNS,
    DeviceBudget,
    LayerPlace,
    OffloadPlan,
    Slot,
    Speed,
)
from hfvram.engines.llamacpp.placement import is_metal, overhead_bytes
from hfvram.engines.llamacpp.profile import PROFILE
from hfvram.engines.llamacpp.settings import USER_PLACEMENT, LlamaCppConstants, Settings
from hfvram.estimate.common import GiB, MiB
from hfvram.estimate.host_memory import HostMemory
from hfvram.estimate.types import Hardware
from hfvram.spec import ModelSpec

UINT32 = 2**32


# ---------------------------------------------------------------------------------------------------------
# The decisions of common_params_fit_impl
# ---------------------------------------------------------------------------------------------------------


def _step(delta: int, target: int, low: int, high: int) -> int:
    """False-position step on the layer count, with the C++ uint32 arithmetic (a negative guess wraps, then
    clamps to delta − 1)."""
    headroom = high - low
    if headroom > 0:
        raw = int(delta * (target - low) / headroom)
        step = raw % UINT32
    else:
        step = delta - 1
    return min(max(step, 1), delta - 1)


def plan_offload(
    spec: ModelSpec,
    settings: Settings,
    constants: LlamaCppConstants,
    consts: Mapping[str, float],
    budgets: Sequence[DeviceBudget],
    *,
    n_ctx_auto: bool,
    n_ctx_min: int | None = None,
    host: HostMemory | None = None,
    ram_bytes: int | None = None,
    model_path: str = "MODEL.gguf",
) -> OffloadPlan:
    """The placement llama.cpp's --fit chooses for ``settings`` on ``budgets`` (ordered devices).

    Longer than 60 lines: it follows common_params_fit_impl branch by branch (steps 1-4, the false-position searches
    and the extra-layer tries) so that each can be read against the C++."""
    nd = len(budgets)
    if nd < 1:
        raise ValueError("plan_offload needs at least one device")
    mm = MemoryModel(spec, settings, constants, consts, nd)
    n_layer = mm.n_layer
    hp_ngl = n_layer
    targets = [b.target for b in budgets]
    moe = mm.moe
    steps: list[str] = []
    n_streams = 1 if settings.kv_unified else max(1, settings.n_seq_max)
    fitc = int(n_ctx_min if n_ctx_min is not None else constants.fit_ctx_min)
    n_ctx = settings.n_ctx
    n_ctx_asked = settings.n_ctx
    no_overflow = [-1] * nd

    def mem(slots: Sequence[Slot], overflow_to: Sequence[int] = no_overflow) -> list[int]:
        return mm.totals(slots, overflow_to, n_ctx)

    def finish(
        status: str, slots: Sequence[Slot], overflow_to: Sequence[int], reason: str | None = None
    ) -> OffloadPlan:
        return _finish(
            spec, mm, settings, status, n_ctx, n_ctx_asked, slots, overflow_to, budgets, steps, host, ram_bytes,
            model_path, reason,
        )  # fmt: skip

    # step 1: the initial parameters
    full = default_slots(n_layer, budgets)
    used = mem(full)
    if all(u <= t for u, t in zip(used, targets)):
        steps.append("everything fits on the GPUs with the margin: no change")
        return finish("fits", full, no_overflow)
    steps.append(
        "initial parameters: "
        + ", ".join(
            f"{b.label} {u / MiB:.0f} MiB used vs {b.target / MiB:.0f} MiB target" for b, u in zip(budgets, used)
        )
    )

    # step 2: the context, only when the user left it unset
    n_ctx_max = n_ctx
    n_ctx_min_total = fitc * n_streams
    if n_ctx_auto and n_ctx_max > n_ctx_min_total:
        sum_target = sum(targets)
        if nd > 1:
            model_per_layer = sum(mm.usage(layout(n_layer, full, no_overflow), n_ctx).gpu_weights) // max(1, hp_ngl)
            sum_target -= (nd + 1) * model_per_layer // (6 if moe else 2)
        n_ctx = n_ctx_min_total
        used_min = sum(mem(full))
        used_max = sum(used)
        if sum_target > used_min and used_max > used_min:
            n_ctx = n_ctx_min_total + (n_ctx_max - n_ctx_min_total) * (sum_target - used_min) // (used_max - used_min)
            align = 256 * n_streams
            n_ctx = max(n_ctx - n_ctx % align, n_ctx_min_total)
            steps.append(f"context reduced from {n_ctx_max} to {n_ctx}")
            if nd == 1:
                return finish("context", full, no_overflow)
        else:
            steps.append(f"context reduced from {n_ctx_max} to {n_ctx} (-fitc), not enough: moving weights to RAM")
    elif not n_ctx_auto:
        steps.append(f"context set by the user ({n_ctx_max}): kept")

    # step 3: fill the devices back to front with (dense-only) layers
    surplus_cpu_moe = 0
    if moe:
        all_moe = [
            LayerPlace(place.device, "moe" if place.device >= 0 else "full")
            for place in layout(n_layer, full, no_overflow)
        ]
        cpu_moe_used = mm.usage(all_moe, n_ctx).totals
        surplus_cpu_moe = sum(t - u for t, u in zip(targets, cpu_moe_used))
        steps.append(
            f"with only dense weights on the GPUs: {'surplus' if surplus_cpu_moe > 0 else 'deficit'} "
            f"{abs(surplus_cpu_moe) / MiB:.0f} MiB"
        )
    slots, overflow_to, search_steps = fit_search(
        nd, hp_ngl, moe, targets, mem, surplus_cpu_moe, [b.label for b in budgets]
    )
    steps.extend(search_steps)
    return _verdict(finish("offload", slots, overflow_to), targets)


MemoryFunction = Callable[[Sequence[Slot], Sequence[int]], list[int]]


def fit_search(
    nd: int,
    hp_ngl: int,
    moe: bool,
    targets: Sequence[int],
    mem: MemoryFunction,
    surplus_cpu_moe: int,
    labels: Sequence[str],
) -> tuple[list[Slot], list[int], list[str]]:
    """Steps 3 and 4 of common_params_fit_impl over any memory function ``mem(slots, overflow_to)`` (bytes per
    device): back-to-front filling with (dense-only) layers, then — for a MoE with a dense surplus — front-to-back
    conversion to full layers and the one-extra-layer tries (UP, GATE, else ATTN). Returns (slots, overflow_to,
    the steps taken, one line per device and pass).

    Longer than 60 lines: it follows the C++ loop by loop so that each branch can be read against it."""
    steps: list[str] = []
    no_overflow = [-1] * nd
    slots = [Slot() for _ in range(nd)]
    overflow_to = list(no_overflow)
    current = mem(slots, no_overflow)
    for dev in reversed(range(nd)):
        n_unassigned = hp_ngl + 1 - sum(slots[jd].n_layer for jd in range(dev + 1, nd))
        high = [slot.copy() for slot in slots]
        high[dev].n_layer = n_unassigned
        if moe:
            high[dev].n_part = high[dev].n_layer if dev < nd - 1 else high[dev].n_layer - 1
        if high[dev].n_layer <= 0:
            continue
        mem_high = mem(high, no_overflow)
        if mem_high[dev] > targets[dev]:
            delta = high[dev].n_layer - slots[dev].n_layer
            while delta > 1:
                step = _step(delta, targets[dev], current[dev], mem_high[dev])
                test = [slot.copy() for slot in slots]
                test[dev].n_layer += step
                if moe:
                    test[dev].n_part += step - 1 if dev == nd - 1 and test[dev].n_part == 0 else step
                mem_test = mem(test, no_overflow)
                if mem_test[dev] <= targets[dev]:
                    slots, current = test, mem_test
                else:
                    high, mem_high = test, mem_test
                delta = high[dev].n_layer - slots[dev].n_layer
        else:
            slots, current = high, mem_high
        steps.append(f"{labels[dev]}: {slots[dev].n_layer} {'dense-only ' if moe else ''}layers")
    if not moe or surplus_cpu_moe <= 0:
        return slots, overflow_to, steps

    # step 4: a MoE whose dense part fits: dense-only layers become full layers, front to back
    id_dense_start = nd
    for dev in reversed(range(nd)):
        if slots[dev].n_layer > 0:
            id_dense_start = dev
            continue
        break
    dev = 0
    while dev <= id_dense_start and id_dense_start < nd:
        high = [slot.copy() for slot in slots]
        for jd in range(id_dense_start, nd):
            n_move = high[jd].n_layer if jd < nd - 1 else high[jd].n_layer - 1
            high[dev].n_layer += n_move
            high[jd].n_layer -= n_move
            high[jd].n_part = 0
        id_dense_start_high = nd - 1
        mem_high = mem(high, overflow_to)
        if mem_high[dev] > targets[dev]:
            delta = high[dev].n_full - slots[dev].n_full
            while delta > 1:
                step = _step(delta, targets[dev], current[dev], mem_high[dev])
                test = [slot.copy() for slot in slots]
                start_test, converted = id_dense_start, 0
                while start_test < nd:
                    n_convert = min(step - converted, test[start_test].n_part)
                    test[start_test].n_layer -= n_convert
                    test[start_test].n_part -= n_convert
                    test[dev].n_layer += n_convert
                    converted += n_convert
                    if test[start_test].n_part > 0:
                        break
                    start_test += 1
                mem_test = mem(test, overflow_to)
                if mem_test[dev] <= targets[dev]:
                    slots, current, id_dense_start = test, mem_test, start_test
                else:
                    high, mem_high, id_dense_start_high = test, mem_test, start_test
                delta = high[dev].n_full - slots[dev].n_full
        else:
            slots, current, id_dense_start = high, mem_high, id_dense_start_high
        # try to fit part of one more layer
        # (the C++ also tries when that device holds only full layers, where n_part-- wraps a uint32: not replayed)
        if (
            id_dense_start < nd
            and slots[id_dense_start].n_layer > (0 if dev < nd - 1 else 1)
            and slots[id_dense_start].n_part > 0
        ):
            test = [slot.copy() for slot in slots]
            start_test = id_dense_start
            test[start_test].n_layer -= 1
            test[start_test].n_part -= 1
            test[dev].n_layer += 1
            test[dev].n_part += 1
            if test[start_test].n_part == 0:
                start_test += 1
            test[dev].overflow = "up"
            overflow_test = list(overflow_to)
            if dev < nd - 1:
                overflow_test[dev] = dev + 1

            def fits(trial: list[int], d: int = dev) -> bool:
                return trial[d] < targets[d] and (d + 1 == nd or trial[d + 1] < targets[d + 1])

            mem_test = mem(test, overflow_test)
            if fits(mem_test):
                slots, overflow_to, current, id_dense_start = test, overflow_test, mem_test, start_test
                test = [slot.copy() for slot in test]
                test[dev].overflow = "gate"
                mem_test = mem(test, overflow_test)
                if fits(mem_test):
                    slots, current = test, mem_test
            else:
                test[dev].overflow = "attn"
                mem_test = mem(test, overflow_test)
                if fits(mem_test):
                    slots, overflow_to, current, id_dense_start = test, overflow_test, mem_test, start_test
        steps.append(
            f"{labels[dev]}: {slots[dev].n_layer} layers ({slots[dev].n_part} with experts elsewhere, first "
            f"partial {FRACTION_NAMES[slots[dev].overflow]})"
        )
        dev += 1
    return slots, overflow_to, steps


def _verdict(plan: OffloadPlan, targets: Sequence[int]) -> OffloadPlan:
    """``none`` when even the chosen (possibly empty) placement leaves a GPU over its target, or RAM is short."""
    totals = plan.usage.totals
    over = [plan.budgets[d].label for d, (u, t) in enumerate(zip(totals, targets)) if u > t]
    if over:
        worst = max(range(len(totals)), key=lambda d: totals[d] - targets[d])
        return replace(
            plan,
            status="none",
            reason=(
                f"does not fit even with every layer on the CPU: {plan.budgets[worst].label} still needs "
                f"{totals[worst] / MiB:.0f} MiB (its compute buffer) with {max(0, targets[worst]) / MiB:.0f} MiB to "
                f"spare after the {plan.budgets[worst].margin_bytes / MiB:.0f} MiB margin; the CPU would need "
                f"{plan.usage.host_total / GiB:.2f} GiB of RAM"
            ),
        )
    if plan.ram_bytes is not None and plan.usage.host_total > plan.ram_bytes:
        return replace(
            plan,
            status="none",
            reason=(
                f"does not fit: the plan needs {plan.usage.host_total / GiB:.2f} GiB of RAM, "
                f"{plan.ram_bytes / GiB:.2f} GiB given (--ram)"
            ),
        )
    return plan


def _finish(
    spec: ModelSpec,
    mm: MemoryModel,
    settings: Settings,
    status: str,
    n_ctx: int,
    n_ctx_asked: int,
    slots: Sequence[Slot],
    overflow_to: Sequence[int],
    budgets: Sequence[DeviceBudget],
    steps: Sequence[str],
    host: HostMemory | None,
    ram_bytes: int | None,
    model_path: str,
    reason: str | None,
) -> OffloadPlan:
    places = layout(mm.n_layer, slots, overflow_to)
    usage = mm.usage(places, n_ctx)
    ngl = sum(slot.n_layer for slot in slots)
    overrides = plan_overrides(places, mm.n_layer, mm.experts)
    tensor_split = tuple(slot.n_layer for slot in slots) if len(slots) > 1 else ()
    speed = speed_of(usage, budgets, host, settings) if host is not None else None
    ctx = usage.settings.n_ctx
    plan = OffloadPlan(
        status=status,
        n_ctx=ctx,
        n_ctx_asked=n_ctx_asked,
        n_gpu_layers=ngl,
        n_layer=mm.n_layer,
        slots=tuple(slot.copy() for slot in slots),
        overflow_to=tuple(overflow_to),
        layers=tuple(places),
        usage=usage,
        budgets=tuple(budgets),
        speed=speed,
        overrides=overrides,
        tensor_split=tensor_split,
        steps=tuple(steps),
        reason=reason,
        ram_bytes=ram_bytes,
    )
    return replace(plan, command=command_line(plan, settings, model_path))


def plan_overrides(places: Sequence[LayerPlace], n_layer: int, experts: Sequence[int]) -> tuple[tuple[str, str], ...]:
    """The ``-ot`` pairs of a layout: one for every GPU layer whose experts all go to the CPU, one per partial
    layer of another kind (its own pattern and buffer). CPU layers need none (``-ngl`` covers them)."""
    out: list[tuple[str, str]] = []
    moe_layers = [il for il in range(n_layer) if places[il].device >= 0 and places[il].kind == "moe" and experts[il]]
    for il in range(n_layer):
        place = places[il]
        if place.device >= 0 and place.kind in ("up", "gate", "attn"):
            buft = "CPU" if place.overflow_to < 0 else f"CUDA{place.overflow_to}"
            out.append((OVERFLOW_PATTERNS[place.kind].format(il=il), buft))
    if moe_layers:
        out.append(expert_override(moe_layers))
    return tuple(out)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'" if re.search(r"[^\w@%+=:,./-]", text) else text


def command_line(plan: OffloadPlan, settings: Settings, model_path: str) -> str:
    """The llama-server command that loads this placement without --fit (explicit -ngl / -ot / -ts)."""
    if model_path.startswith("-hf "):  # "-hf REPO -hff FILE": each word quoted on its own
        repo, _, file = model_path[len("-hf ") :].partition(" -hff ")
        model = ["-hf", _quote(repo)] + (["-hff", _quote(file)] if file else [])
    else:
        model = ["-m", _quote(model_path)]
    parts = ["llama-server", *model, "-c", str(plan.n_ctx), "-ngl", str(plan.n_gpu_layers)]
    if plan.tensor_split:
        parts += ["-ts", ",".join(str(n) for n in plan.tensor_split)]
    for pattern, buft in plan.overrides:
        parts += ["-ot", _quote(f"{pattern}={buft}")]
    if settings.n_ubatch != 512:
        parts += ["-ub", str(settings.n_ubatch)]
    if settings.type_k != "f16" or settings.type_v != "f16":
        parts += ["-ctk", settings.type_k, "-ctv", settings.type_v]
    parts += ["-fa", "on" if settings.flash_attn else "off", "--fit", "off"]
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------------------
# Budgets from the hardware, and the plan for an estimate's own settings
# ---------------------------------------------------------------------------------------------------------


def uniform_budgets(hardware: Hardware, settings: Settings, constants: LlamaCppConstants) -> list[DeviceBudget]:
    """Every device of the set, in order (``count`` identical devices, or each card of a mixed set): free = the
    device's memory − the CUDA context and pool (llama.cpp.toml ``cuda_overhead_mib``, what CUDA does not report
    free), margin = ``-fitt``."""
    overhead, _ = overhead_bytes(hardware, constants)
    return [
        DeviceBudget(
            f"CUDA{index} ({gpu.id})",
            gpu.gpu_memory_bytes - overhead,
            settings.fit_target_bytes,
            gpu.memory_bandwidth_gbs,
        )
        for index, gpu in enumerate(hardware.gpus)
    ]


def plan_for(
    spec: ModelSpec,
    hardware: Hardware,
    choice: Any,
    workload: Any,
    *,
    host: HostMemory,
    ram_bytes: int | None = None,
    model_path: str = "MODEL.gguf",
) -> tuple[OffloadPlan | None, Speed | None, str | None]:
    """(plan, speed of the user's own placement, why there is no plan) for a llama.cpp estimate on ``hardware``.

    No plan when the user placed layers themselves (``-ngl``, ``-ot``, ``-ts``, ``--n-cpu-moe``: --fit aborts and
    llama.cpp loads as asked; their placement is timed instead), with ``--fit off``, ``--split-mode row`` on several
    GPUs, or on unified memory (nothing to offload to)."""
    from hfvram.estimate.common import setting

    _, settings, constants, consts = PROFILE.settings_for(spec, hardware, choice, workload)
    budgets = uniform_budgets(hardware, settings, constants)
    if settings.draft_spec is not None:
        # llama-server adds the draft context's bytes on each device to --fit's margin before it fits the main
        # model (PR #23485; docs/engines/llamacpp.md#llamacpp-draft-model)
        from dataclasses import replace

        from hfvram.engines.llamacpp.draft import draft_device_bytes

        extra = draft_device_bytes(settings, hardware, constants, consts)
        budgets = [replace(b, margin_bytes=b.margin_bytes + extra[i]) for i, b in enumerate(budgets)]
    if is_metal(hardware):
        return None, None, "unified memory: the GPU and the CPU share RAM, there is nothing to offload to"
    if any(setting(choice, name) for name in USER_PLACEMENT):
        return (
            None,
            speed_of_settings(spec, settings, constants, consts, budgets, host),
            ("placement set by the user (-ngl / -ot / -ts / --n-cpu-moe): --fit aborts and llama.cpp loads as asked"),
        )
    if not settings.fit:
        return None, speed_of_settings(spec, settings, constants, consts, budgets, host), "--fit off"
    if settings.split_mode == "row" and hardware.count > 1:
        return None, None, "--fit does not change the weight allocation with --split-mode row"
    n_ctx_auto = workload.context is None and not setting(choice, "ctx-size", "c", "n-ctx", "num-ctx")
    plan = plan_offload(
        spec, settings, constants, consts, budgets, n_ctx_auto=n_ctx_auto, host=host, ram_bytes=ram_bytes,
        model_path=model_path,
    )  # fmt: skip
    return plan, None, None
