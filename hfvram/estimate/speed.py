"""The expected decode speed, not only the bandwidth bound (docs/methodology.md#expected-speed).

A token costs the sum of named parts: the bytes read on each GPU at that GPU's bandwidth times an efficiency, a
fixed time per layer on the GPU (kernel launches), the bytes read in RAM at the host's bandwidth times an efficiency,
the weights computed on the CPU at ``threads x`` a per-thread rate, a hand-over per layer with work on the CPU, and
(vLLM / SGLang ``--cpu-offload-gb``) the bytes crossing PCIe every step. The constants live in
``hfvram/data/speed.toml``, fitted on published runs kept apart from those they are checked on
(``benchmarks/accuracy_speed.py``). Pure: no I/O beyond the packaged table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from hfvram.datafiles import data_table
from hfvram.errors import UsageError
from hfvram.estimate.types import ExpectedPrefill, ExpectedSpeed, SpeedPart
from hfvram.spec import ModelSpec


@dataclass(frozen=True)
class CpuRate:
    id: str
    name: str
    gflops_per_thread: float
    source: str


@dataclass(frozen=True)
class PrefillConstants:
    """``[prefill]`` and ``[prefill_uncertainty]`` of ``hfvram/data/speed.toml``."""

    compute_efficiency: float
    half_batch_tokens: float
    vendors: tuple[str, ...]
    low: float
    high: float


@dataclass(frozen=True)
class SpeedConstants:
    """``hfvram/data/speed.toml``, typed and checked when loaded."""

    gpu_bandwidth_efficiency: float
    gpu_layer_us: float
    host_bandwidth_efficiency: float
    cpu_layer_hop_us: float
    pcie_efficiency: float
    default_threads: int
    max_threads: int
    low: float
    high: float
    cpus: Mapping[str, CpuRate]
    default_cpu: str
    prefill: PrefillConstants


def _number(table: Mapping[str, Any], key: str, low: float, high: float) -> float:
    value = table.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= float(value) <= high:
        raise ValueError(f"hfvram/data/speed.toml: {key} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


@cache
def speed_constants() -> SpeedConstants:
    """The table, validated: every efficiency in (0, 1], every time and rate positive and bounded."""
    table = data_table("speed.toml")
    decode, spread = table.get("decode", {}), table.get("uncertainty", {})
    cpus = {}
    for row in table.get("cpu", []):
        rate = _number(row, "gflops_per_thread", 0.1, 10_000)
        if not row.get("source"):
            raise ValueError(f"hfvram/data/speed.toml: cpu {row.get('id')!r} has no source")
        cpus[str(row["id"])] = CpuRate(str(row["id"]), str(row["name"]), rate, str(row["source"]))
    default_cpu = str(table.get("default_cpu", ""))
    if default_cpu not in cpus:
        raise ValueError(f"hfvram/data/speed.toml: default_cpu {default_cpu!r} is not a [[cpu]] row")
    return SpeedConstants(
        gpu_bandwidth_efficiency=_number(decode, "gpu_bandwidth_efficiency", 0.01, 1.0),
        gpu_layer_us=_number(decode, "gpu_layer_us", 0.0, 10_000),
        host_bandwidth_efficiency=_number(decode, "host_bandwidth_efficiency", 0.01, 1.0),
        cpu_layer_hop_us=_number(decode, "cpu_layer_hop_us", 0.0, 100_000),
        pcie_efficiency=_number(decode, "pcie_efficiency", 0.01, 1.0),
        default_threads=int(_number(decode, "default_threads", 1, 4096)),
        max_threads=int(_number(decode, "max_threads", 1, 4096)),
        low=_number(spread, "low", 0.01, 1.0),
        high=_number(spread, "high", 1.0, 100.0),
        cpus=cpus,
        default_cpu=default_cpu,
        prefill=_prefill_constants(table),
    )


def _prefill_constants(table: Mapping[str, Any]) -> PrefillConstants:
    prefill, spread = table.get("prefill", {}), table.get("prefill_uncertainty", {})
    vendors = prefill.get("vendors")
    if not isinstance(vendors, list) or not vendors:
        raise ValueError("hfvram/data/speed.toml: [prefill] vendors must be a non-empty list")
    return PrefillConstants(
        compute_efficiency=_number(prefill, "compute_efficiency", 0.01, 2.0),
        half_batch_tokens=_number(prefill, "half_batch_tokens", 0.0, 100_000),
        vendors=tuple(str(vendor) for vendor in vendors),
        low=_number(spread, "low", 0.01, 1.0),
        high=_number(spread, "high", 1.0, 100.0),
    )


def threads_of(value: object) -> tuple[int, bool]:
    """``--set threads=N`` (llama.cpp ``-t``) bounded, or the table's default; the flag says it was assumed."""
    consts = speed_constants()
    if value is None or value == "":
        return consts.default_threads, True
    try:
        threads = int(str(value))
    except ValueError:
        raise UsageError(f"threads={value!r}: expected a whole number of CPU threads") from None
    if threads <= 0:  # llama.cpp: -1 (or any value <= 0) means its default
        return consts.default_threads, True
    if threads > consts.max_threads:
        raise UsageError(f"threads={threads}: at most {consts.max_threads}")
    return threads, False


@dataclass(frozen=True)
class Work:
    """What one decoded token does, placement by placement: bytes read per GPU with its bandwidth (GB/s, None when
    unknown), layers on the GPUs, bytes read in RAM with the host bandwidth, parameters computed on the CPU, GPU <->
    CPU hand-overs (a layer on a GPU with its experts on the CPU, or a run of whole layers on the CPU), bytes
    crossing PCIe per step with the link's rate."""

    gpu_reads: Sequence[tuple[float, float | None]]
    gpu_layers: int = 0
    host_bytes: float = 0.0
    host_gbs: float = 0.0
    host_label: str = ""
    cpu_params: float = 0.0
    cpu_layers: int = 0
    threads: object = None
    pcie_bytes: float = 0.0
    pcie_gbs: float = 0.0
    pcie_label: str = ""


def expected_speed(work: Work, bound: float | None) -> ExpectedSpeed | None:
    """The expected decode speed of ``work``: the sum of its named parts; None when a GPU's bandwidth is unknown."""
    consts = speed_constants()
    parts: list[SpeedPart] = []
    gpu_bytes, gpu_seconds = 0.0, 0.0
    for read, gbs in work.gpu_reads:
        if read <= 0:
            continue
        if not gbs:
            return None
        gpu_bytes += read
        gpu_seconds += read / (gbs * 1e9 * consts.gpu_bandwidth_efficiency)
    if gpu_bytes > 0:
        basis = f"{gpu_bytes / 2**30:.2f} GiB at {consts.gpu_bandwidth_efficiency:.0%} of the GPU bandwidth"
        parts.append(SpeedPart("gpu_weights", gpu_seconds, basis))
    if work.gpu_layers > 0 and consts.gpu_layer_us > 0:
        basis = f"{work.gpu_layers} layers x {consts.gpu_layer_us:g} us (kernel launches)"
        parts.append(SpeedPart("gpu_layers", work.gpu_layers * consts.gpu_layer_us * 1e-6, basis))
    parts.extend(_cpu_parts(work, consts))
    if work.pcie_bytes > 0 and work.pcie_gbs > 0:
        seconds = work.pcie_bytes / (work.pcie_gbs * 1e9 * consts.pcie_efficiency)
        basis = f"{work.pcie_bytes / 2**30:.2f} GiB per step over {work.pcie_label} at {consts.pcie_efficiency:.0%}"
        parts.append(SpeedPart("pcie", seconds, basis))
    total = sum(part.seconds for part in parts)
    if total <= 0:
        return None
    return ExpectedSpeed(1.0 / total, tuple(parts), bound, consts.low, consts.high)


def _cpu_parts(work: Work, consts: SpeedConstants) -> list[SpeedPart]:
    parts = []
    if work.host_bytes > 0 and work.host_gbs > 0:
        seconds = work.host_bytes / (work.host_gbs * 1e9 * consts.host_bandwidth_efficiency)
        basis = f"{work.host_bytes / 2**30:.2f} GiB at {consts.host_bandwidth_efficiency:.0%} of {work.host_label or 'the host'}"
        parts.append(SpeedPart("ram_weights", seconds, basis))
    if work.cpu_params > 0:
        threads, assumed = threads_of(work.threads)
        cpu = consts.cpus[consts.default_cpu]
        seconds = 2 * work.cpu_params / (threads * cpu.gflops_per_thread * 1e9)
        basis = (
            f"{2 * work.cpu_params / 1e9:.2f} GFLOP on {threads} threads{' (assumed)' if assumed else ''} x "
            f"{cpu.gflops_per_thread:g} GFLOP/s ({cpu.id})"
        )
        parts.append(SpeedPart("cpu_compute", seconds, basis))
    if work.cpu_layers > 0 and consts.cpu_layer_hop_us > 0:
        basis = f"{work.cpu_layers} hand-overs x {consts.cpu_layer_hop_us:g} us (GPU <-> CPU)"
        parts.append(SpeedPart("cpu_hops", work.cpu_layers * consts.cpu_layer_hop_us * 1e-6, basis))
    return parts


#: engines whose expected speed on the GPUs alone follows from the bound: the constants were fitted on llama.cpp
#: runs (Ollama runs llama.cpp's kernels)
GPU_ONLY_ENGINES = frozenset({"llama.cpp", "ollama"})


def from_bound(
    bound: float | None,
    gpu_layers: int,
    pcie: tuple[float, float, str] = (0.0, 0.0, ""),
    total_bound: float | None = None,
) -> ExpectedSpeed | None:
    """Everything computed on the GPUs: the bound's seconds at the GPU efficiency, plus the per-layer time (llama.cpp
    kernels; 0 layers for an engine that replays CUDA graphs) and the bytes crossing PCIe every step (``pcie``:
    bytes, link GB/s, link name; vLLM / SGLang ``--cpu-offload-gb``). ``total_bound`` is the bound printed beside
    it (default ``bound``)."""
    if not bound or bound <= 0:
        return None
    consts = speed_constants()
    seconds = 1.0 / bound / consts.gpu_bandwidth_efficiency
    basis = f"the bound's bytes at {consts.gpu_bandwidth_efficiency:.0%} of the GPU bandwidth"
    parts = [SpeedPart("gpu_weights", seconds, basis)]
    if gpu_layers > 0 and consts.gpu_layer_us > 0:
        basis = f"{gpu_layers} layers x {consts.gpu_layer_us:g} us (kernel launches)"
        parts.append(SpeedPart("gpu_layers", gpu_layers * consts.gpu_layer_us * 1e-6, basis))
    moved, gbs, label = pcie
    if moved > 0 and gbs > 0:
        basis = f"{moved / 2**30:.2f} GiB per step over {label} at {consts.pcie_efficiency:.0%}"
        parts.append(SpeedPart("pcie", moved / (gbs * 1e9 * consts.pcie_efficiency), basis))
    total = sum(part.seconds for part in parts)
    shown = bound if total_bound is None else total_bound
    # the fit set holds llama.cpp runs only: an engine replaying CUDA graphs over PCIe has no measured spread
    fitted = gpu_layers > 0
    return ExpectedSpeed(
        1.0 / total, tuple(parts), shown, consts.low if fitted else None, consts.high if fitted else None
    )


@dataclass(frozen=True)
class PrefillFlops:
    """FLOPs of one prompt token, by the batch its products see: the dense products (attention projections, dense
    and shared-expert FFNs; not the embedding lookup nor the output matrix, which a prompt computes for its last
    token only), the routed experts' products, and the causal attention over ``ubatch`` tokens."""

    dense: float
    experts: float
    attention: float
    expert_share: float


def prefill_flops(spec: ModelSpec, ubatch: int) -> PrefillFlops | None:
    """The FLOPs per prompt token of ``spec`` in ubatches of ``ubatch`` tokens; None without a parameter count."""
    active = spec.params_active or spec.params_total
    if not active:
        return None
    hidden, vocab = spec.hidden_size or 0, spec.vocab_size or 0
    tied = spec.tie_word_embeddings or spec.tie_word_embeddings is None
    embeddings = hidden * vocab * (1 if tied else 2)
    moe_layers = sum(1 for layer in spec.layers if layer.moe)
    used, experts = spec.experts_per_token or 0, spec.num_experts or 0
    # a gated expert FFN: gate, up and down, hidden x moe width each
    routed = moe_layers * used * 3 * hidden * (spec.moe_intermediate_size or 0) if used and experts else 0
    dense = max(0.0, float(active - embeddings - routed))
    heads, head_dim = spec.num_attention_heads or 0, spec.head_dim or 0
    attention_layers = sum(1 for layer in spec.layers if layer.kv_elems_per_token > 0)
    # scores (Q K^T) and their product with V, 2 FLOPs per multiply-add each, over the (ubatch + 1) / 2 keys a causal
    # prompt token of a ubatch-long prompt sees on average
    attention = 4.0 * attention_layers * heads * head_dim * (ubatch + 1) / 2.0
    share = used / experts if used and experts else 1.0
    return PrefillFlops(2.0 * dense, 2.0 * routed, attention, share)


def expected_prefill(
    spec: ModelSpec,
    tflops: float | None,
    ubatch: int,
    host_bytes: float = 0.0,
    pcie: tuple[float, str] = (0.0, ""),
) -> ExpectedPrefill | None:
    """The expected prefill speed of a ``ubatch``-token prompt (llama-bench's pp512 at the default ubatch) on a GPU
    of ``tflops`` dense FP16 tensor peak: the named parts of ``hfvram/data/speed.toml`` [prefill], plus the
    ``host_bytes`` of host-resident weights each ubatch copies over the ``pcie`` link (GB/s, label). None without
    the peak or the model's parameter count."""
    flops = prefill_flops(spec, ubatch)
    if flops is None or not tflops or tflops <= 0 or ubatch <= 0:
        return None
    consts = speed_constants()
    table = consts.prefill

    def rate(batch: float) -> float:
        return tflops * 1e12 * table.compute_efficiency * batch / (batch + table.half_batch_tokens)

    per_expert = ubatch * flops.expert_share
    parts = [
        SpeedPart(
            "gpu_dense",
            flops.dense / rate(ubatch),
            f"{flops.dense / 1e9:.2f} GFLOP/token at {rate(ubatch) / 1e12:.1f} TFLOPS ({ubatch}-token products)",
        )
    ]
    if flops.experts > 0:
        basis = (
            f"{flops.experts / 1e9:.2f} GFLOP/token at {rate(per_expert) / 1e12:.1f} TFLOPS (each expert's "
            f"products see {per_expert:.0f} of the {ubatch} tokens)"
        )
        parts.append(SpeedPart("gpu_experts", flops.experts / rate(per_expert), basis))
    if flops.attention > 0:
        basis = f"{flops.attention / 1e9:.2f} GFLOP/token of causal attention over {ubatch} tokens"
        parts.append(SpeedPart("gpu_attention", flops.attention / rate(ubatch), basis))
    gbs, label = pcie
    if host_bytes > 0 and gbs > 0:
        seconds = host_bytes / (gbs * 1e9 * consts.pcie_efficiency) / ubatch
        basis = (
            f"{host_bytes / 2**30:.2f} GiB of weights in RAM copied per {ubatch}-token ubatch over {label} at "
            f"{consts.pcie_efficiency:.0%}"
        )
        parts.append(SpeedPart("pcie", seconds, basis))
    total = sum(part.seconds for part in parts)
    return ExpectedPrefill(1.0 / total, tuple(parts), ubatch, ubatch, table.low, table.high)
