"""vLLM / SGLang ``--cpu-offload-gb``: weights in host memory, streamed to the GPU every step
(docs/engines/vllm.md#vllm-features); applied by ``estimate.core.with_offload`` after the capacity search."""

from __future__ import annotations

from dataclasses import replace

from hfvram.estimate.common import GiB, setting_float
from hfvram.estimate.host_memory import pcie_bandwidth_gbs
from hfvram.estimate.speed import from_bound
from hfvram.estimate.types import VERDICT_FITS, VERDICT_OFFLOAD, VERDICT_TIGHT, EngineChoice, Estimate


def with_cpu_offload_gb(est: Estimate, choice: EngineChoice) -> Estimate:
    """``--cpu-offload-gb N`` (vLLM, SGLang; docs/engines/vllm.md#vllm-features): up to N GiB of decoder-layer
    weights per GPU stay in host memory and cross PCIe on every forward step, so a run that then fits the GPU is
    verdict offload, and its decode bound gains ``N GiB / PCIe bandwidth`` per step (each GPU streams its own share
    over its own link). The PCIe link is the host table's default (PCIe 4.0 x16)."""
    gb = setting_float(choice, "cpu-offload-gb", default=0.0) or 0.0
    if gb <= 0 or est.verdict not in (VERDICT_FITS, VERDICT_TIGHT):
        return est
    pcie, link = pcie_bandwidth_gbs()
    moved = gb * GiB
    step = moved / (pcie * 1e9)
    decode = est.decode_tokens_per_second
    slowed = 1.0 / (1.0 / decode + step) if decode else None
    note = (
        f"--cpu-offload-gb {gb:g}: up to {gb:g} GiB of weights per GPU stay in host memory and cross {link} on every "
        f"step (+{step * 1000:.0f} ms per token): it runs, slower"
    )
    # expected: the GPU part at its efficiency (vLLM replays CUDA graphs: no per-layer launch term) + the PCIe part
    expected = from_bound(decode, 0, (moved, pcie, link), slowed)
    return replace(
        est, verdict=VERDICT_OFFLOAD, decode_tokens_per_second=slowed, speed=expected, warnings=(*est.warnings, note)
    )
