"""vLLM / SGLang ``--cpu-offload-gb``: weights in host memory, read over PCIe every step
(docs/engines/vllm.md#vllm-features); applied by ``estimate.core.with_offload`` after the capacity search."""

from __future__ import annotations

from dataclasses import replace

from hfvram.estimate.common import GiB, setting_float
from hfvram.estimate.host_memory import pcie_bandwidth_gbs
from hfvram.estimate.speed import from_bound
from hfvram.estimate.types import VERDICT_FITS, VERDICT_OFFLOAD, VERDICT_TIGHT, EngineChoice, Estimate

#: the decoder-layer components UVAOffloader walks (embeddings, lm_head and the final norm stay on the GPU)
_LAYER_COMPONENTS = ("attention", "mlp", "experts", "router", "norms")


def experts_touched(num_experts: int, per_token: int, sequences: int) -> float:
    """The expected share of a layer's routed experts that ``sequences`` decoded tokens select, each picking
    ``per_token`` of ``num_experts``: ``1 - (1 - k / E) ** B``. Routing taken as uniform and independent; real
    routers are skewed, which selects fewer distinct experts, so this is the upper end of the bytes."""
    if num_experts <= 0 or per_token <= 0:
        return 1.0
    return 1.0 - (1.0 - min(1.0, per_token / num_experts)) ** max(1, sequences)


def crossing_bytes(est: Estimate, moved: float) -> tuple[float, str]:
    """Bytes of the ``moved`` host-resident weights that cross PCIe in one decode step, with its basis.

    vLLM's ``UVAOffloader`` (the default where pinned memory and UVA are available) leaves each moved parameter in
    pinned host memory behind a CUDA view, so a kernel reads over the link exactly the bytes it touches
    (docs/engines/vllm.md#vllm-features): every byte of a dense layer, and of a fused-MoE weight only the experts
    the step's tokens were routed to (``fused_moe_kernel`` loads ``b_ptr + off_experts * stride_be``). The layers
    are alike, so the moved bytes hold the decoder layers' share of experts. SGLang's ``OffloaderV1`` copies each
    offloaded module's whole state to the GPU before its forward: every moved byte crosses
    (docs/engines/sglang.md#sglang-features)."""
    if str(est.engine.get("name")) != "vllm":
        return moved, "every moved byte (the module's state is copied before its forward)"
    spec = est.spec
    by_component = spec.weights.bytes_by_component if spec.weights is not None else {}
    layers = sum(by_component.get(name, 0) for name in _LAYER_COMPONENTS)
    experts = by_component.get("experts", 0)
    if not layers or not experts or not spec.num_experts or not spec.experts_per_token:
        return moved, "every moved byte (dense layers)"
    share = experts / layers
    sequences = max(1, est.workload.concurrency)
    touched = experts_touched(spec.num_experts, spec.experts_per_token, sequences)
    basis = (
        f"{1 - share:.0%} dense + {share:.0%} experts x {touched:.1%} routed to by {sequences} "
        f"sequence{'s' if sequences > 1 else ''} ({spec.experts_per_token} of {spec.num_experts} each)"
    )
    return moved * ((1 - share) + share * touched), basis


def with_cpu_offload_gb(est: Estimate, choice: EngineChoice) -> Estimate:
    """``--cpu-offload-gb N`` (vLLM, SGLang; docs/engines/vllm.md#vllm-features): up to N GiB of decoder-layer
    weights per GPU stay in host memory and are read over PCIe on every forward step, so a run that then fits the
    GPU is verdict offload, and its decode bound gains ``bytes crossing / PCIe bandwidth`` per step (each GPU
    reads its own share over its own link; of a MoE on vLLM only the routed experts cross, :func:`crossing_bytes`). The
    PCIe link is the host table's default (PCIe 4.0 x16)."""
    gb = setting_float(choice, "cpu-offload-gb", default=0.0) or 0.0
    if gb <= 0 or est.verdict not in (VERDICT_FITS, VERDICT_TIGHT):
        return est
    pcie, link = pcie_bandwidth_gbs()
    crossing, basis = crossing_bytes(est, gb * GiB)
    step = crossing / (pcie * 1e9)
    decode = est.decode_tokens_per_second
    slowed = 1.0 / (1.0 / decode + step) if decode else None
    note = (
        f"--cpu-offload-gb {gb:g}: up to {gb:g} GiB of weights per GPU stay in host memory and cross {link} on every "
        f"step ({crossing / GiB:.2f} GiB read: {basis}; +{step * 1000:.0f} ms per token): it runs, slower"
    )
    # expected: the GPU part at its efficiency (vLLM replays CUDA graphs: no per-layer launch term) + the PCIe part
    expected = from_bound(decode, 0, (crossing, pcie, link), slowed)
    return replace(
        est, verdict=VERDICT_OFFLOAD, decode_tokens_per_second=slowed, speed=expected, warnings=(*est.warnings, note)
    )
