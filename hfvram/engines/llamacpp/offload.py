"""The verdict: an engine's own placement into RAM is an answer (docs/engines/llamacpp.md#llamacpp-offload-verdict).
llama.cpp's --fit plan (``fit``) or the user's own placement applied to an estimate. Ollama's placement is
``hfvram.engines.ollama.offload``; vLLM / SGLang's ``--cpu-offload-gb`` is ``hfvram.estimate.cpu_offload``."""

from __future__ import annotations

from dataclasses import replace

from hfvram.engines.llamacpp.fit import plan_for
from hfvram.engines.llamacpp.offload_plan import OffloadPlan
from hfvram.engines.llamacpp.placement import layer_weight_bytes
from hfvram.estimate.common import GiB
from hfvram.estimate.host_memory import parse_host_memory
from hfvram.estimate.types import (
    VERDICT_DOES_NOT_FIT,
    VERDICT_FITS,
    VERDICT_OFFLOAD,
    VERDICT_TIGHT,
    Capacity,
    EngineChoice,
    Estimate,
    PerGpu,
    Workload,
)
from hfvram.spec import ModelSpec


def apply_to_estimate(est: Estimate, choice: EngineChoice, workload: Workload) -> Estimate:
    """``est`` with the engine's placement into RAM applied: llama.cpp's --fit plan (or the user's own
    ``-ngl`` / ``-ot`` / ``--n-cpu-moe`` placement) when layers or experts end up in RAM, with verdict ``offload``,
    the plan on :attr:`Estimate.offload`, the worst GPU's terms as the plan places them, the engine's effective
    ``n-gpu-layers`` / ``override-tensor`` / ``tensor-split`` and the plan's expected decode speed. Unchanged for
    any other engine, without hardware, or when the engine refuses the layout."""
    hardware = est.hardware
    if hardware is None or est.verdict is None or est.refusal:
        return est
    if str(est.engine.get("name")) != "llama.cpp":
        return est
    host = hardware.host or parse_host_memory(None)
    plan, speed, why = plan_for(est.spec, hardware, choice, workload, host=host, ram_bytes=hardware.ram_bytes)
    over = est.verdict == VERDICT_DOES_NOT_FIT
    if plan is None:
        if speed is None or speed.host_read_bytes <= 0:
            notes = [f"no --fit plan: {why}"] if over and why else []
            return replace(est, warnings=(*est.warnings, *notes)) if notes else est
        # the user's own placement keeps layers / experts in RAM: it runs, at the host's speed
        note = (
            f"decode with layers in RAM: {speed.gpu_read_bytes / GiB:.2f} GiB read on the GPU + "
            f"{speed.host_read_bytes / GiB:.2f} GiB in RAM per token, host memory {speed.host_memory}"
        )
        verdict = VERDICT_DOES_NOT_FIT if over else VERDICT_OFFLOAD
        return replace(
            est,
            verdict=verdict,
            decode_tokens_per_second=speed.decode_tokens_per_second,
            speed=speed.expected,
            warnings=(*est.warnings, note),
        )
    if not over:
        return est
    if plan.status == "context":
        # --fit keeps everything on the GPU at a shorter context: the estimate at that context (the engine runs it)
        from hfvram.estimate.core import estimate_memory

        shorter = replace(choice, settings={**choice.settings, "ctx-size": str(plan.n_ctx)})
        again = estimate_memory(est.spec, hardware, shorter, workload)
        note = f"llama.cpp --fit lowers ctx-size {plan.n_ctx_asked} → {plan.n_ctx} to keep every layer on the GPU"
        if again.verdict in (VERDICT_FITS, VERDICT_TIGHT):
            return replace(again, offload=plan, warnings=(*again.warnings, note))
        return replace(est, offload=plan)
    if plan.status != "offload":
        return replace(est, offload=plan)
    return offloaded_estimate(est, plan)


def projector_bytes(est: Estimate, nd: int) -> list[int]:
    """Per GPU, the ``--mmproj`` projector's bytes: on the first GPU, loaded after the plan, which does not subtract
    it (docs/engines/llamacpp.md#llamacpp-extra-models)."""
    projector = est.engine.get("mmproj")
    extra = [0] * nd
    if isinstance(projector, dict) and projector.get("device") == "gpu0" and nd:
        extra[0] = int(projector.get("weights_bytes") or 0)
    return extra


def draft_bytes(est: Estimate, nd: int) -> list[tuple[int, int, int]]:
    """Per GPU, the ``-md`` draft context's (weights, KV, compute buffer), which the plan kept in its margin
    (docs/engines/llamacpp.md#llamacpp-draft-model)."""
    draft = est.engine.get("draft_model")
    if not isinstance(draft, dict):
        return [(0, 0, 0)] * nd

    def column(key: str) -> list[int]:
        values = draft.get(key)
        listed = [int(v) for v in values] if isinstance(values, list) else []
        return (listed + [0] * nd)[:nd]

    weights, kv, compute = column("gpu_weights_bytes"), column("gpu_kv_bytes"), column("gpu_compute_bytes")
    return list(zip(weights, kv, compute))


def plan_worst_gpu(est: Estimate, plan: OffloadPlan) -> tuple[int, PerGpu]:
    """The fullest GPU of the plan and its four terms, with the projector and the draft context added."""
    usage = plan.usage
    gpus = est.hardware.gpus if est.hardware is not None else ()
    nd = min(len(plan.budgets), len(gpus))
    extra = projector_bytes(est, nd)
    draft = draft_bytes(est, nd)
    drafted = [sum(parts) for parts in draft]
    # the plan's budgets keep the draft context inside their margin: the device's own target is the margin without it
    worst = max(
        range(nd),
        key=lambda d: (usage.gpu_total(d) + extra[d] + drafted[d]) / max(1, plan.budgets[d].target + drafted[d]),
    )
    memory = gpus[worst].gpu_memory_bytes
    return worst, PerGpu(
        weights=usage.gpu_weights[worst] + extra[worst] + draft[worst][0],
        kv_cache=usage.gpu_kv[worst] + draft[worst][1],
        activations=usage.gpu_compute[worst] + draft[worst][2],
        overhead=est.per_gpu.overhead,
        usable=memory - plan.budgets[worst].margin_bytes + drafted[worst],
        memory=memory,
    )


def offloaded_estimate(est: Estimate, plan: OffloadPlan, who: str = "llama.cpp --fit") -> Estimate:
    """The estimate as the plan places it: the worst GPU's weights, KV and compute buffer from the plan."""
    usage = plan.usage
    worst, per_gpu = plan_worst_gpu(est, plan)
    engine = dict(est.engine)
    engine.update(
        {
            "ctx-size": plan.n_ctx,
            "n-gpu-layers": plan.n_gpu_layers,
            "n-cpu-moe": 0,
            "override-tensor": ",".join(f"{pattern}={buft}" for pattern, buft in plan.overrides) or None,
            "tensor-split": list(plan.tensor_split) or None,
        }
    )
    speed = plan.speed
    ram = usage.host_total
    in_ram = (
        f"experts of {plan.expert_layers_in_ram + plan.expert_layers_split} of {plan.n_layer} layers"
        if plan.planner == "llama.cpp" and any(mm_experts for mm_experts in _expert_bytes(est.spec))
        else f"{plan.n_layer + 1 - plan.n_gpu_layers} of {plan.n_layer + 1} layers"
    )
    note = f"{who} keeps {in_ram} in RAM ({ram / GiB:.2f} GiB): it runs, slower than on the GPU alone"
    warnings = [w for w in est.warnings if not w.startswith("llama.cpp --fit would not load this as asked")]
    settings = usage.settings
    # the KV pool the plan allocates (the context --fit chose); how far the context could grow with offload is not
    # searched (each step would be a plan): unknown, as is the concurrency beyond the slots
    workload = est.workload
    if plan.n_ctx != plan.n_ctx_asked:
        workload = replace(workload, context=settings.n_ctx_seq)
    capacity = Capacity(kv_tokens=settings.n_ctx, kv_pool_sized_by=est.capacity.kv_pool_sized_by)
    return replace(
        est,
        engine=engine,
        workload=workload,
        capacity=capacity,
        per_gpu=per_gpu,
        utilization=per_gpu.total / per_gpu.usable if per_gpu.usable > 0 else None,
        verdict=VERDICT_OFFLOAD,
        decode_tokens_per_second=speed.decode_tokens_per_second if speed else None,
        speed=speed.expected if speed else None,
        worst_device=worst if est.hardware is not None and est.hardware.mixed else est.worst_device,
        offload=plan,
        warnings=(*warnings, note),
    )


def _expert_bytes(spec: ModelSpec) -> list[int]:
    return layer_weight_bytes(spec)[1]
