"""The offload plan llama.cpp's ``--fit`` makes when the whole model does not fit, and the speed of what it keeps
in RAM (docs/engines/llamacpp.md#llamacpp-offload-plan).

``plan_offload`` replays ``common_params_fit_impl`` (llama.cpp ``common/fit.cpp``) step by step on hfvram's buffer
model of the llama.cpp profile (``hfvram.engines.llamacpp.profile``): where llama.cpp measures each candidate
placement with a dry run (``no_alloc``), this module asks ``device_usage`` — weights, KV and compute buffer per
device from the profile's own functions. The decisions are llama.cpp's:

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

import bisect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hfvram.engines.llamacpp import profile as lc
from hfvram.estimate.common import GiB, MiB
from hfvram.estimate.host_memory import HostMemory, parse_host_memory, pcie_bandwidth_gbs
from hfvram.estimate.types import (
    VERDICT_DOES_NOT_FIT,
    VERDICT_FITS,
    VERDICT_OFFLOAD,
    VERDICT_TIGHT,
    Capacity,
    EngineChoice,
    Estimate,
    Hardware,
    PerGpu,
    Workload,
)
from hfvram.spec import ModelSpec

#: the tensors each partial-layer kind sends to the overflow buffer (common/fit.cpp get_overflow_pattern)
OVERFLOW_PATTERNS = {
    "attn": r"blk\.{il}\.ffn_(gate|up|gate_up|down).*",
    "up": r"blk\.{il}\.ffn_(gate|gate_up|down).*",
    "gate": r"blk\.{il}\.ffn_down.*",
    "moe": r"blk\.{il}\.ffn_(up|down|gate_up|gate)_(ch|)exps",
}
#: share of a layer's routed-expert bytes that stays on the layer's device (up, gate and down have the same
#: element count; the shared-expert and router tensors that UP / ATTN also move are counted with the dense part)
EXPERT_SHARE_ON_DEVICE = {"full": 1.0, "moe": 0.0, "attn": 0.0, "up": 1 / 3, "gate": 2 / 3}
#: llama.cpp's name for each kind (LAYER_FRACTION_*)
FRACTION_NAMES = {"attn": "ATTN", "up": "UP", "gate": "GATE", "moe": "MOE"}
UINT32 = 2**32


@dataclass(frozen=True)
class DeviceBudget:
    """One GPU as --fit sees it: the memory CUDA reports free at start-up, the margin to keep, its bandwidth."""

    label: str
    free_bytes: int
    margin_bytes: int
    bandwidth_gbs: float | None = None

    @property
    def target(self) -> int:
        return self.free_bytes - self.margin_bytes


@dataclass
class Slot:
    """Layers on one device (common/fit.cpp ``ngl_t``): ``n_layer`` of the ``n_layer + 1`` (output included), of
    which the last ``n_part`` keep their experts elsewhere; the first of those overflows ``overflow``."""

    n_layer: int = 0
    n_part: int = 0
    overflow: str = "moe"

    @property
    def n_full(self) -> int:
        return self.n_layer - self.n_part

    def copy(self) -> Slot:
        return Slot(self.n_layer, self.n_part, self.overflow)


@dataclass(frozen=True)
class LayerPlace:
    """Where one of the ``n_layer + 1`` layers lives: device (−1 = CPU), kind (full / moe / up / gate / attn) and
    the device its overflowing tensors go to (−1 = CPU)."""

    device: int
    kind: str = "full"
    overflow_to: int = -1


@dataclass(frozen=True)
class Usage:
    """Bytes per device and on the host for one placement, and the bytes each decoded token reads."""

    gpu_weights: tuple[int, ...]
    gpu_kv: tuple[int, ...]
    gpu_compute: tuple[int, ...]
    cpu_weights: int
    cpu_kv: int
    host_compute: int
    output_buffer: int
    gpu_read: tuple[float, ...]
    host_read: float
    #: host-resident weight bytes a large batch copies to the first GPU (op offload), per ubatch
    host_stream: int
    #: the same settings with the placement applied (n_gpu_layers, overrides)
    settings: lc.Settings

    def gpu_total(self, device: int) -> int:
        return self.gpu_weights[device] + self.gpu_kv[device] + self.gpu_compute[device]

    @property
    def totals(self) -> list[int]:
        return [self.gpu_total(d) for d in range(len(self.gpu_weights))]

    @property
    def host_total(self) -> int:
        return self.cpu_weights + self.cpu_kv + self.host_compute + self.output_buffer


@dataclass(frozen=True)
class Speed:
    """Bandwidth-bound decode and PCIe-bound prefill for one placement (upper bounds)."""

    decode_tokens_per_second: float | None
    gpu_read_bytes: float
    host_read_bytes: float
    host_bandwidth_gbs: float
    host_memory: str
    prefill_tokens_per_second: float | None = None
    prefill_link: str | None = None


@dataclass(frozen=True)
class OffloadPlan:
    """What --fit decides (``status``: ``fits`` unchanged, ``context`` reduced, ``offload`` layers / experts in
    RAM, ``none`` even the emptiest placement leaves a GPU over its margin or RAM short)."""

    status: str
    n_ctx: int
    n_ctx_asked: int
    n_gpu_layers: int
    n_layer: int
    slots: tuple[Slot, ...]
    overflow_to: tuple[int, ...]
    layers: tuple[LayerPlace, ...]
    usage: Usage
    budgets: tuple[DeviceBudget, ...]
    speed: Speed | None
    overrides: tuple[tuple[str, str], ...] = ()
    tensor_split: tuple[int, ...] = ()
    steps: tuple[str, ...] = ()
    reason: str | None = None
    ram_bytes: int | None = None
    command: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: who placed it: ``llama.cpp`` (--fit, also Ollama 0.30+'s llama-server) or ``ollama`` (0.13 - 0.29 layout)
    planner: str = "llama.cpp"

    def _expert_kinds(self) -> list[str]:
        """Per repeating layer: ``gpu`` (every routed expert on a GPU), ``split`` (part in RAM), ``ram``."""
        kinds = []
        for place in self.layers[: self.n_layer]:
            if place.device >= 0 and (place.kind == "full" or place.overflow_to >= 0):
                kinds.append("gpu")
            elif place.device >= 0 and place.kind in ("up", "gate"):
                kinds.append("split")
            else:
                kinds.append("ram")
        return kinds

    @property
    def expert_layers_on_gpu(self) -> int:
        return self._expert_kinds().count("gpu")

    @property
    def expert_layers_split(self) -> int:
        return self._expert_kinds().count("split")

    @property
    def expert_layers_in_ram(self) -> int:
        return self._expert_kinds().count("ram")

    def as_dict(self, moe: bool) -> dict[str, Any]:
        """The ``offload_plan`` JSON object (check.schema.json / fit.schema.json). Longer than 60 lines: one flat
        literal of every field."""
        usage = self.usage
        devices = []
        for d, budget in enumerate(self.budgets):
            devices.append(
                {
                    "device": budget.label,
                    "layers": self.slots[d].n_layer if d < len(self.slots) else 0,
                    "layers_experts_in_ram": self.slots[d].n_part if d < len(self.slots) else 0,
                    "weights_bytes": usage.gpu_weights[d],
                    "kv_bytes": usage.gpu_kv[d],
                    "compute_bytes": usage.gpu_compute[d],
                    "used_bytes": usage.gpu_total(d),
                    "free_bytes": budget.free_bytes,
                    "margin_bytes": budget.margin_bytes,
                    "projected_free_bytes": budget.free_bytes - usage.gpu_total(d),
                }
            )
        speed = self.speed
        return {
            "status": self.status,
            "planner": self.planner,
            "reason": self.reason,
            "ctx_size": self.n_ctx,
            "ctx_size_asked": self.n_ctx_asked,
            "n_gpu_layers": self.n_gpu_layers,
            "n_layer": self.n_layer,
            "moe": moe,
            "expert_layers_on_gpu": self.expert_layers_on_gpu if moe else None,
            "expert_layers_split": self.expert_layers_split if moe else None,
            "expert_layers_in_ram": self.expert_layers_in_ram if moe else None,
            "partial_layer": next(
                (
                    {
                        "layer": il,
                        "kind": FRACTION_NAMES[p.kind],
                        "overflow_to": "CPU" if p.overflow_to < 0 else p.overflow_to,
                    }
                    for il, p in enumerate(self.layers[: self.n_layer])
                    if p.device >= 0 and p.kind in ("up", "gate", "attn")
                ),
                None,
            ),
            "tensor_split": list(self.tensor_split) or None,
            "override_tensor": [f"{pattern}={buft}" for pattern, buft in self.overrides],
            "devices": devices,
            "ram": {
                "total_bytes": usage.host_total,
                "weights_bytes": usage.cpu_weights,
                "kv_bytes": usage.cpu_kv,
                "cuda_host_compute_bytes": usage.host_compute,
                "output_buffer_bytes": usage.output_buffer,
                "available_bytes": self.ram_bytes,
            },
            "speed": None
            if speed is None
            else {
                "decode_tokens_per_second": speed.decode_tokens_per_second,
                "gpu_read_bytes_per_token": int(speed.gpu_read_bytes),
                "host_read_bytes_per_token": int(speed.host_read_bytes),
                "host_bandwidth_gbs": speed.host_bandwidth_gbs,
                "host_memory": speed.host_memory,
                "prefill_tokens_per_second": speed.prefill_tokens_per_second,
                "prefill_link": speed.prefill_link,
            },
            "command": self.command,
            "steps": list(self.steps),
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------------------------
# Memory of one placement (the dry run llama.cpp does with no_alloc)
# ---------------------------------------------------------------------------------------------------------


class MemoryModel:
    """``device_usage`` for any layout at any context, from the llama.cpp profile's buffer functions.

    Linear in the layer count and the device count: per-layer weights and KV are prefix sums (a device's layers
    are one contiguous range, so its bytes are two look-ups), the largest expert tensor in RAM comes from a
    sparse table, and the compute buffer — the same for every device of one kind (holds the output or not, the
    first device with its op-offload copy or not) — is computed once per kind and context, not per device and
    search step (``work`` counts those computations)."""

    def __init__(
        self, spec: ModelSpec, settings: lc.Settings, rules: Mapping[str, object], consts: Mapping[str, float], nd: int
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.consts = consts
        self.pad = int(str(rules["n_ctx_pad"]))
        self.nd = nd
        self.n_layer = spec.num_layers
        self.dense, self.experts, self.embd, self.output = lc._layer_weight_bytes(spec)
        self.lm_head_separate = bool(spec.weights and spec.weights.bytes_by_component.get("lm_head"))
        self.row_padding = lc.cuda_row_padding_bytes(spec, settings.matrix_row_padding) if settings.cuda else 0
        n_used, n_expert = spec.experts_per_token or 0, spec.num_experts or 0
        self.active_share = min(1.0, n_used / n_expert) if n_used and n_expert else 1.0
        self.moe = any(self.experts)
        self._kv: dict[int, lc.KvBytes] = {}
        self._kv_prefix: dict[int, list[int]] = {}
        self.p_dense = _prefix(self.dense)
        self.p_experts = _prefix(self.experts)
        self.p_max = [0]
        for size in self.experts:
            self.p_max.append(max(self.p_max[-1], size))
        self._sparse = _sparse_table(self.experts)
        self._compute: dict[tuple[int, bool, bool, bool, int], int] = {}
        self._host_compute: dict[int, int] = {}
        #: how many compute buffers were computed (a test asserts it does not grow with the device count)
        self.work = 0

    def at_ctx(self, n_ctx: int) -> lc.Settings:
        cells, seq, streams = lc.kv_cells(n_ctx, self.settings.n_seq_max, self.settings.kv_unified, self.pad)
        return replace(self.settings, n_ctx=cells, n_ctx_seq=seq, n_stream=streams)

    def kv(self, settings: lc.Settings) -> lc.KvBytes:
        if settings.n_ctx not in self._kv:
            self._kv[settings.n_ctx] = lc.kv_bytes(self.spec, settings, self.pad)
        return self._kv[settings.n_ctx]

    def kv_prefix(self, settings: lc.Settings) -> list[int]:
        if settings.n_ctx not in self._kv_prefix:
            per_layer = self.kv(settings).per_layer
            self._kv_prefix[settings.n_ctx] = _prefix(
                [per_layer[il] if il < len(per_layer) else 0 for il in range(self.n_layer)]
            )
        return self._kv_prefix[settings.n_ctx]

    def largest_expert(self, low: int, high: int) -> int:
        """The largest expert bytes among layers ``low .. high − 1`` (0 for an empty range)."""
        return _range_max(self._sparse, low, high)

    def compute(self, settings: lc.Settings, with_output: bool, first: bool, output_on_cpu: bool, largest: int) -> int:
        """The compute buffer of one device: it depends on the context, whether the device holds the output, and —
        the first device only (op offload) — whether the output layer and which expert tensors stay in RAM."""
        key = (settings.n_ctx, with_output, first, output_on_cpu and first, largest if first else 0)
        if key not in self._compute:
            self.work += 1
            # the same buffer llama.cpp computes for any placement with this output / largest CPU expert: the
            # first layers up to the one holding ``largest`` keep their experts in RAM (--n-cpu-moe k)
            k = bisect.bisect_left(self.p_max, largest) if largest > 0 else 0
            ngl = self.n_layer if output_on_cpu else self.n_layer + 1
            trial = replace(settings, n_gpu_layers=ngl, cpu_moe_layers=min(k, self.n_layer), override_tensor=())
            size, _ = lc.compute_buffer_bytes(
                self.spec, trial, self.consts, with_output=with_output, pad=self.pad, first_device=first
            )
            self._compute[key] = size
        return self._compute[key]

    def host_compute(self, settings: lc.Settings) -> int:
        if settings.n_ctx not in self._host_compute:
            self._host_compute[settings.n_ctx] = lc.host_compute_buffer_bytes(
                self.spec, settings, self.consts, pad=self.pad
            )[0]
        return self._host_compute[settings.n_ctx]

    def totals(self, slots: Sequence[Slot], overflow_to: Sequence[int], n_ctx: int) -> list[int]:
        """Bytes per device (weights + KV + compute) of the layout ``layout(n_layer, slots, overflow_to)`` — the
        figures :meth:`usage` gives, from range sums: O(devices) per call, whatever the layer count."""
        settings = self.at_ctx(n_ctx)
        p_kv = self.kv_prefix(settings)
        nd, n_layer = len(slots), self.n_layer
        ngl = sum(slot.n_layer for slot in slots)
        il0 = n_layer + 1 - ngl
        out_dev = max((d for d in range(nd) if slots[d].n_layer > 0), default=-1)
        weights = [0] * nd
        kv = [0] * nd
        largest = self.largest_expert(0, max(0, min(il0, n_layer)))
        start = il0
        for d, slot in enumerate(slots):
            # the device's layers: [start, start + n_layer), the output layer (index n_layer) among them if last
            end = start + slot.n_layer
            body_end = min(end, n_layer)
            full_end = min(start + slot.n_full, body_end)
            if body_end > start:
                weights[d] += self.p_dense[body_end] - self.p_dense[start] + self.row_padding * (body_end - start)
                if self.settings.kv_offload:
                    kv[d] += p_kv[body_end] - p_kv[start]
            if full_end > start:
                weights[d] += self.p_experts[full_end] - self.p_experts[start]
            if body_end > full_end:
                first = full_end
                experts = self.experts[first]
                share = EXPERT_SHARE_ON_DEVICE[slot.overflow] if experts else 1.0
                on_device = int(experts * share)
                weights[d] += on_device
                if experts - on_device:
                    if overflow_to[d] >= 0:
                        weights[overflow_to[d]] += experts - on_device
                    else:
                        largest = max(largest, experts)
                if body_end > first + 1:
                    largest = max(largest, self.largest_expert(first + 1, body_end))
            if slot.n_layer > 0 and end > n_layer:
                weights[d] += self.output
            start = end
        # as lc.offload_copy_bytes reads -ngl: at most n_layer layers offloaded = output.weight in host memory
        output_on_cpu = ngl <= n_layer
        out: list[int] = []
        for d in range(nd):
            if d != 0 and slots[d].n_layer <= 0:
                compute = 0
            else:
                compute = self.compute(settings, out_dev == d or nd == 1, d == 0, output_on_cpu, largest)
            out.append(weights[d] + kv[d] + compute)
        return out

    def usage(self, layers: Sequence[LayerPlace], n_ctx: int) -> Usage:
        """Weights, KV and compute buffer per GPU, the host's share and the bytes a decoded token reads, for one
        layout at one context. Longer than 60 lines: one pass over the layers adds every term."""
        settings = self.at_ctx(n_ctx)
        kv = self.kv(settings)
        nd, n_layer = self.nd, self.n_layer
        gpu_w, gpu_kv, gpu_read = [0] * nd, [0] * nd, [0.0] * nd
        has_layers = [False] * nd
        cpu_w, cpu_kv, host_read, host_stream = self.embd, 0, 0.0, 0
        host_expert_layers = []
        per_stream = max(1, settings.n_stream)
        for il in range(n_layer):
            place = layers[il]
            dense, experts = self.dense[il], self.experts[il]
            layer_kv = kv.per_layer[il] if il < len(kv.per_layer) else 0
            kv_read = layer_kv / per_stream
            if place.device < 0:
                cpu_w += dense + experts
                cpu_kv += layer_kv
                host_read += dense + experts * self.active_share + kv_read
                host_stream += dense + experts
                if experts:
                    host_expert_layers.append(il)
                continue
            d = place.device
            has_layers[d] = True
            share = EXPERT_SHARE_ON_DEVICE[place.kind] if experts else 1.0
            on_device = int(experts * share)
            moved = experts - on_device
            gpu_w[d] += dense + on_device + self.row_padding
            gpu_read[d] += dense + on_device * self.active_share
            if settings.kv_offload:
                gpu_kv[d] += layer_kv
                gpu_read[d] += kv_read
            else:
                cpu_kv += layer_kv
                host_read += kv_read
            if moved:
                if place.overflow_to >= 0:
                    gpu_w[place.overflow_to] += moved
                    gpu_read[place.overflow_to] += moved * self.active_share
                else:
                    cpu_w += moved
                    host_read += moved * self.active_share
                    host_stream += moved
                    host_expert_layers.append(il)
        out = layers[n_layer]
        if out.device >= 0:
            gpu_w[out.device] += self.output
            gpu_read[out.device] += self.output
            has_layers[out.device] = True
        else:
            if self.lm_head_separate:
                cpu_w += self.output
            host_read += self.output
            host_stream += self.output
        ngl = sum(1 for place in layers if place.device >= 0)
        overrides = (expert_override(host_expert_layers),) if host_expert_layers else ()
        trial = replace(settings, n_gpu_layers=ngl, cpu_moe_layers=0, override_tensor=overrides)
        largest = max((self.experts[il] for il in host_expert_layers), default=0)
        computes = [
            0
            if d != 0 and not has_layers[d]
            else self.compute(settings, out.device == d or nd == 1, d == 0, ngl <= n_layer, largest)
            for d in range(nd)
        ]
        return Usage(
            gpu_weights=tuple(gpu_w),
            gpu_kv=tuple(gpu_kv),
            gpu_compute=tuple(computes),
            cpu_weights=cpu_w,
            cpu_kv=cpu_kv,
            host_compute=self.host_compute(settings),
            output_buffer=lc.output_buffer_bytes(self.spec, trial),
            gpu_read=tuple(gpu_read),
            host_read=host_read,
            host_stream=host_stream,
            settings=trial,
        )


def _prefix(values: Sequence[int]) -> list[int]:
    out = [0]
    for value in values:
        out.append(out[-1] + int(value))
    return out


def _sparse_table(values: Sequence[int]) -> list[list[int]]:
    """Range-maximum table: ``table[j][i]`` = max of ``values[i : i + 2**j]`` (O(n log n) to build, O(1) a query)."""
    table = [list(values)]
    width = 1
    while 2 * width <= len(values):
        prev = table[-1]
        table.append([max(prev[i], prev[i + width]) for i in range(len(values) - 2 * width + 1)])
        width *= 2
    return table


def _range_max(table: list[list[int]], low: int, high: int) -> int:
    if high <= low or not table or not table[0]:
        return 0
    level = (high - low).bit_length() - 1
    return max(table[level][low], table[level][high - (1 << level)])


def expert_override(layers: Sequence[int]) -> tuple[str, str]:
    """One ``-ot`` pair sending the routed-expert tensors of ``layers`` to the CPU."""
    return (r"blk\.(" + number_alternation(layers) + r")\.ffn_(up|down|gate_up|gate)_(ch|)exps", "CPU")


def _range_parts(low: int, high: int) -> list[str]:
    """Regex alternatives matching exactly the decimal numbers ``low..high`` (no leading zeros)."""
    if low > high:
        return []
    low_text, high_text = str(low), str(high)
    if len(low_text) != len(high_text):
        split = 10 ** len(low_text) - 1
        return _range_parts(low, split) + _range_parts(split + 1, high)
    if low == high:
        return [low_text]
    if len(low_text) == 1:
        return [f"[{low}-{high}]"]
    if low // 10 == high // 10:
        return [f"{low // 10}[{low % 10}-{high % 10}]"]
    head: list[str] = []
    tail: list[str] = []
    if low % 10:
        head = _range_parts(low, low // 10 * 10 + 9)
        low = (low // 10 + 1) * 10
    if high % 10 != 9:
        tail = _range_parts(high // 10 * 10, high)
        high = high // 10 * 10 - 1
    middle = [f"{prefix}[0-9]" for prefix in _range_parts(low // 10, high // 10)] if low <= high else []
    return head + middle + tail


def number_alternation(numbers: Sequence[int]) -> str:
    """``7|8|…|47`` written compactly as ``[7-9]|[1-3][0-9]|4[0-7]`` (each run of consecutive numbers as ranges);
    the regex matches exactly the given numbers (tests/test_offload.py checks it on random sets up to 1000)."""
    runs: list[list[int]] = []
    for value in sorted({int(n) for n in numbers}):
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return "|".join(part for low, high in runs for part in _range_parts(low, high))


def layout(n_layer: int, slots: Sequence[Slot], overflow_to: Sequence[int]) -> list[LayerPlace]:
    """Each layer's place for per-device slots, as ``set_ngl_tensor_split_tbo`` lays them out: the last
    ``Σ n_layer`` of the ``n_layer + 1`` layers on the devices in order; on each device its full layers first,
    then its partial ones (the first with the slot's overflow kind and target, the rest: experts to the CPU)."""
    ngl = sum(slot.n_layer for slot in slots)
    places = [LayerPlace(-1)] * (n_layer + 1)
    il0 = n_layer + 1 - ngl
    for d, slot in enumerate(slots):
        for il in range(il0, il0 + slot.n_full):
            places[il] = LayerPlace(d)
        il0 += slot.n_full
        for k in range(slot.n_part):
            il = il0 + k
            places[il] = LayerPlace(d, slot.overflow, overflow_to[d]) if k == 0 else LayerPlace(d, "moe", -1)
        il0 += slot.n_part
    return places


def default_slots(n_layer: int, budgets: Sequence[DeviceBudget]) -> list[Slot]:
    """Every layer on the GPUs, split in proportion to free memory (llama.cpp's default tensor split)."""
    shares = [max(0, b.free_bytes) for b in budgets]
    total = sum(shares) or 1
    devices = lc.place_layers(n_layer, n_layer + 1, [share / total for share in shares])
    return [Slot(sum(1 for dev in devices if dev == d)) for d in range(len(budgets))]


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
    settings: lc.Settings,
    rules: Mapping[str, object],
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
    mm = MemoryModel(spec, settings, rules, consts, nd)
    n_layer = mm.n_layer
    hp_ngl = n_layer
    targets = [b.target for b in budgets]
    moe = mm.moe
    steps: list[str] = []
    n_streams = 1 if settings.kv_unified else max(1, settings.n_seq_max)
    fitc = int(n_ctx_min if n_ctx_min is not None else int(str(rules["fit_ctx_min"])))
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
    slots, overflow_to = fit_search(nd, hp_ngl, moe, targets, mem, surplus_cpu_moe, [b.label for b in budgets], steps)
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
    steps: list[str],
) -> tuple[list[Slot], list[int]]:
    """Steps 3 and 4 of common_params_fit_impl over any memory function ``mem(slots, overflow_to)`` (bytes per
    device): back-to-front filling with (dense-only) layers, then — for a MoE with a dense surplus — front-to-back
    conversion to full layers and the one-extra-layer tries (UP, GATE, else ATTN). Returns (slots, overflow_to).

    Longer than 60 lines: it follows the C++ loop by loop so that each branch can be read against it."""
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
        return slots, overflow_to

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
    return slots, overflow_to


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
    settings: lc.Settings,
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


def speed_of(usage: Usage, budgets: Sequence[DeviceBudget], host: HostMemory, settings: lc.Settings) -> Speed:
    """Decode: Σ bytes read on each GPU / its bandwidth + bytes read in RAM / the host bandwidth (the devices and
    the CPU work one after another on a token). Prefill: with op offload (ubatch ≥ 32 on CUDA) every ubatch copies
    the host-resident weights over PCIe, so ``ubatch / (host bytes / PCIe bandwidth)`` bounds it."""
    seconds = 0.0
    known = True
    for d, budget in enumerate(budgets):
        if usage.gpu_read[d] <= 0:
            continue
        if not budget.bandwidth_gbs:
            known = False
            break
        seconds += usage.gpu_read[d] / (budget.bandwidth_gbs * 1e9)
    seconds += usage.host_read / (host.bandwidth_gbs * 1e9)
    decode = 1.0 / seconds if known and seconds > 0 else None
    prefill, link = None, None
    ub = min(settings.n_ctx, settings.n_ubatch)
    if usage.host_stream > 0 and settings.cuda:
        pcie, link = pcie_bandwidth_gbs()
        prefill = ub / (usage.host_stream / (pcie * 1e9))
    return Speed(decode, sum(usage.gpu_read), usage.host_read, host.bandwidth_gbs, host.describe(), prefill, link)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'" if re.search(r"[^\w@%+=:,./-]", text) else text


def command_line(plan: OffloadPlan, settings: lc.Settings, model_path: str) -> str:
    """The llama-server command that loads this placement without --fit (explicit -ngl / -ot / -ts)."""
    flag, _, name = model_path.partition(" ") if model_path.startswith("-hf ") else ("-m", "", model_path)
    parts = ["llama-server", flag, _quote(name), "-c", str(plan.n_ctx), "-ngl", str(plan.n_gpu_layers)]
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


def uniform_budgets(hardware: Hardware, settings: lc.Settings, rules: Mapping[str, object]) -> list[DeviceBudget]:
    """Every device of the set, in order (``count`` identical devices, or each card of a mixed set): free = the
    device's memory − the CUDA context and pool (llama.cpp.toml ``cuda_overhead_mib``, what CUDA does not report
    free), margin = ``-fitt``."""
    overhead, _ = lc.overhead_bytes(hardware, rules)
    return [
        DeviceBudget(
            f"CUDA{index} ({gpu.id})",
            gpu.gpu_memory_bytes - overhead,
            settings.fit_target_bytes,
            gpu.memory_bandwidth_gbs,
        )
        for index, gpu in enumerate(hardware.gpus)
    ]


def placement_of_settings(
    spec: ModelSpec, settings: lc.Settings, nd: int, free: Sequence[int] = ()
) -> list[LayerPlace]:
    """The layout the user's own ``-ngl`` / ``--n-cpu-moe`` / ``-ot …exps=CPU`` give (one device or a layer split in
    equal shares), to time a placement hfvram did not choose."""
    n_layer = spec.num_layers
    devices = lc.place_layers(
        n_layer, min(settings.n_gpu_layers, n_layer + 1), lc._device_shares(nd, settings.tensor_split, free)
    )
    places = []
    for il in range(n_layer + 1):
        dev = devices[il]
        cpu_experts = il < n_layer and (
            il < settings.cpu_moe_layers or lc._matches_override(f"blk.{il}.ffn_up_exps.weight", settings) == "CPU"
        )
        places.append(LayerPlace(dev, "moe" if dev >= 0 and cpu_experts else "full"))
    return places


def speed_of_settings(
    spec: ModelSpec,
    settings: lc.Settings,
    rules: Mapping[str, object],
    consts: Mapping[str, float],
    budgets: Sequence[DeviceBudget],
    host: HostMemory,
) -> Speed | None:
    """Decode / prefill bounds of the user's own placement; None when nothing but token_embd is in RAM."""
    mm = MemoryModel(spec, settings, rules, consts, len(budgets))
    usage = mm.usage(
        placement_of_settings(spec, settings, len(budgets), [b.free_bytes for b in budgets]), settings.n_ctx
    )
    if usage.host_read <= 0:
        return None
    return speed_of(usage, budgets, host, settings)


def plan_lines(plan: Mapping[str, Any]) -> list[str]:
    """The plan as text lines (table and Markdown output share them)."""
    lines = []
    if plan["status"] == "none":
        return [f"Offload plan: none — {plan['reason']}"]
    if plan["status"] == "context":
        lines.append(
            f"--fit keeps everything on the GPU by lowering ctx-size {plan['ctx_size_asked']} → {plan['ctx_size']}"
        )
    else:
        n_layer = plan["n_layer"]
        who = "Ollama's layout" if plan.get("planner") == "ollama" else "--fit plan"
        head = f"{who}: {plan['n_gpu_layers']} of {n_layer + 1} layers on the GPU"
        if plan["moe"]:
            head += (
                f"; experts of {plan['expert_layers_on_gpu']} of {n_layer} layers on the GPU, "
                f"{plan['expert_layers_in_ram']} in RAM"
                + (f", {plan['expert_layers_split']} split" if plan["expert_layers_split"] else "")
            )
        if plan["ctx_size"] != plan["ctx_size_asked"]:
            head += f"; ctx-size {plan['ctx_size_asked']} → {plan['ctx_size']}"
        lines.append(head)
        partial = plan.get("partial_layer")
        if partial:
            lines.append(f"  layer {partial['layer']}: {partial['kind']} overflow (part of its FFN stays on the GPU)")
    for device in plan["devices"]:
        lines.append(
            f"  {device['device']}: {device['layers']} layers, {device['used_bytes'] / GiB:.2f} GiB = weights "
            f"{device['weights_bytes'] / GiB:.2f} + KV {device['kv_bytes'] / GiB:.2f} + compute "
            f"{device['compute_bytes'] / GiB:.2f}; {device['projected_free_bytes'] / MiB:.0f} MiB free "
            f"(margin {device['margin_bytes'] / MiB:.0f})"
        )
    ram = plan["ram"]
    lines.append(
        f"  RAM needed: {ram['total_bytes'] / GiB:.2f} GiB (weights {ram['weights_bytes'] / GiB:.2f} incl. token_embd, "
        f"KV {ram['kv_bytes'] / GiB:.2f}, CUDA_Host {ram['cuda_host_compute_bytes'] / MiB:.0f} MiB, logits "
        f"{ram['output_buffer_bytes'] / MiB:.0f} MiB)"
        + (f" of {ram['available_bytes'] / GiB:.0f} GiB" if ram.get("available_bytes") else "")
    )
    speed = plan.get("speed")
    if speed and speed.get("decode_tokens_per_second"):
        line = (
            f"  decode ≤ {speed['decode_tokens_per_second']:.0f} tokens/s: {speed['gpu_read_bytes_per_token'] / GiB:.2f} "
            f"GiB/token from VRAM + {speed['host_read_bytes_per_token'] / GiB:.2f} GiB/token from RAM at "
            f"{speed['host_memory']}"
        )
        lines.append(line)
        if speed.get("prefill_tokens_per_second"):
            lines.append(
                f"  prefill ≤ {speed['prefill_tokens_per_second']:.0f} tokens/s: the RAM weights cross "
                f"{speed['prefill_link']} once per ubatch"
            )
    lines.append(f"  {plan['command']}")
    return lines


#: settings that make llama.cpp's --fit give up ("already set by user, abort") and load as asked
USER_PLACEMENT = (
    "n-gpu-layers",
    "ngl",
    "gpu-layers",
    "override-tensor",
    "ot",
    "tensor-split",
    "ts",
    "cpu-moe",
    "cmoe",
    "n-cpu-moe",
    "ncmoe",
)


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

    _, settings, rules, consts = lc.PROFILE.settings_for(spec, hardware, choice, workload)
    budgets = uniform_budgets(hardware, settings, rules)
    if lc.is_metal(hardware):
        return None, None, "unified memory: the GPU and the CPU share RAM, there is nothing to offload to"
    if any(setting(choice, name) for name in USER_PLACEMENT):
        return (
            None,
            speed_of_settings(spec, settings, rules, consts, budgets, host),
            ("placement set by the user (-ngl / -ot / -ts / --n-cpu-moe): --fit aborts and llama.cpp loads as asked"),
        )
    if not settings.fit:
        return None, speed_of_settings(spec, settings, rules, consts, budgets, host), "--fit off"
    if settings.split_mode == "row" and hardware.count > 1:
        return None, None, "--fit does not change the weight allocation with --split-mode row"
    n_ctx_auto = workload.context is None and not setting(choice, "ctx-size", "c", "n-ctx", "num-ctx")
    plan = plan_offload(
        spec, settings, rules, consts, budgets, n_ctx_auto=n_ctx_auto, host=host, ram_bytes=ram_bytes,
        model_path=model_path,
    )  # fmt: skip
    return plan, None, None


# ---------------------------------------------------------------------------------------------------------
# The verdict: an engine's own placement into RAM is an answer (docs/engines/llamacpp.md#llamacpp-offload-verdict)
# ---------------------------------------------------------------------------------------------------------


def apply_to_estimate(est: Estimate, choice: EngineChoice, workload: Workload) -> Estimate:
    """``est`` with the engine's placement into RAM applied: llama.cpp's --fit plan (or the user's own
    ``-ngl`` / ``-ot`` / ``--n-cpu-moe`` placement) when layers or experts end up in RAM, with verdict ``offload``,
    the plan on :attr:`Estimate.offload`, the worst GPU's terms as the plan places them, the engine's effective
    ``n-gpu-layers`` / ``override-tensor`` / ``tensor-split`` and the plan's expected decode speed. Unchanged for
    any other engine, without hardware, or when the engine refuses the layout."""
    hardware = est.hardware
    if hardware is None or est.verdict is None or est.refusal:
        return est
    if str(est.engine.get("name")) == "ollama":
        return _ollama(est, choice, workload)
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
    return _offloaded(est, plan)


def _offloaded(est: Estimate, plan: OffloadPlan, who: str = "llama.cpp --fit") -> Estimate:
    """The estimate as the plan places it: the worst GPU's weights, KV and compute buffer from the plan."""
    usage = plan.usage
    gpus = est.hardware.gpus if est.hardware is not None else ()
    nd = min(len(plan.budgets), len(gpus))
    worst = max(range(nd), key=lambda d: usage.gpu_total(d) / max(1, plan.budgets[d].target))
    memory = gpus[worst].gpu_memory_bytes
    per_gpu = PerGpu(
        weights=usage.gpu_weights[worst],
        kv_cache=usage.gpu_kv[worst],
        activations=usage.gpu_compute[worst],
        overhead=est.per_gpu.overhead,
        usable=memory - plan.budgets[worst].margin_bytes,
        memory=memory,
    )
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
        worst_device=worst if est.hardware is not None and est.hardware.mixed else est.worst_device,
        offload=plan,
        warnings=(*warnings, note),
    )


def _expert_bytes(spec: ModelSpec) -> list[int]:
    return lc._layer_weight_bytes(spec)[1]


# ---------------------------------------------------------------------------------------------------------
# Ollama: its scheduler places what does not fit into RAM (docs/engines/ollama.md#ollama-offload)
# ---------------------------------------------------------------------------------------------------------


def _ollama(est: Estimate, choice: EngineChoice, workload: Workload) -> Estimate:
    """Ollama on discrete GPUs: the legacy estimator's own layer count (before 0.13), the whole-layer layout of its
    allocation dry runs (0.13 - 0.29, ``llm/server.go`` ``assignLayers``), llama-server's ``--fit`` (0.30 on)."""
    from hfvram.engines.ollama import profile as ollama

    hardware = est.hardware
    if hardware is None or lc.is_metal(hardware) or est.verdict != VERDICT_DOES_NOT_FIT:
        return est
    _, rules = ollama.PROFILE.rules(choice.version)
    if rules["legacy"]:
        placed, total = est.engine.get("layers_offload"), est.engine.get("layers_model")
        if not isinstance(placed, int) or not isinstance(total, int) or placed >= total:
            return est
        note = f"Ollama's scheduler puts {placed} of {total} layers on the GPU and runs the rest on the CPU"
        return replace(est, verdict=VERDICT_OFFLOAD, decode_tokens_per_second=None, warnings=(*est.warnings, note))
    rules["model_type_to_arch"] = ollama.PROFILE.data.get("model_type_to_arch", {})
    settings = ollama.resolve(est.spec, hardware, choice, workload, rules)
    if settings.num_parallel <= 0:
        settings = replace(settings, num_parallel=1)
    server = ollama.llama_server_settings(choice, settings)
    if "n-gpu-layers" in server:
        return est  # num_gpu set: Ollama loads as asked
    lc_choice = EngineChoice("llama.cpp", settings=server)
    lc_workload = Workload(kv_dtype=settings.kv_cache_type)
    host = hardware.host or parse_host_memory(None)
    if rules["runner"] == "llama-server":
        plan, _, _ = plan_for(est.spec, hardware, lc_choice, lc_workload, host=host, ram_bytes=hardware.ram_bytes)
        if plan is None or plan.status != "offload":
            return replace(est, offload=plan) if plan is not None else est
        return _offloaded(est, plan, "Ollama's llama-server --fit")
    plan = ollama_layout_plan(est.spec, hardware, lc_choice, lc_workload, host, rules, choice)
    if plan.status != "offload":
        return replace(est, offload=plan)
    return _offloaded(est, plan, "Ollama's scheduler")


def ollama_layout_plan(
    spec: ModelSpec,
    hardware: Hardware,
    lc_choice: EngineChoice,
    lc_workload: Workload,
    host: HostMemory,
    rules: Mapping[str, object],
    choice: EngineChoice,
) -> OffloadPlan:
    """Ollama 0.13 - 0.29's layout (``llm/server.go`` ``buildLayout`` / ``assignLayers`` / ``findBestFit`` /
    ``greedyFit``): each layer's weights + cache as one block, the output layer last; GPUs free memory less
    Ollama's minimum, ``OLLAMA_GPU_OVERHEAD`` and the graph; greedy from the last layer backwards, spilling to the
    next GPU, a capacity factor balanced by bisection; when not every block fits, once more without the output
    layer (it then stays on the CPU). Whole layers: no expert tensors apart.

    Longer than 60 lines: it follows Ollama's steps in their order, so that it reads against the Go source."""
    from hfvram.engines.ollama import profile as ollama
    from hfvram.estimate.common import setting_int

    _, settings, lc_rules, consts = lc.PROFILE.settings_for(spec, hardware, lc_choice, lc_workload)
    nd = hardware.count
    mm = MemoryModel(spec, settings, lc_rules, consts, nd)
    n_layer = mm.n_layer
    st = mm.at_ctx(settings.n_ctx)
    kv = mm.kv(st)
    blocks = [
        mm.dense[il] + mm.experts[il] + (kv.per_layer[il] if il < len(kv.per_layer) else 0) for il in range(n_layer)
    ]
    blocks.append(mm.output)
    gpu_overhead = setting_int(
        choice, "gpu_overhead", "OLLAMA_GPU_OVERHEAD", default=int(str(rules["gpu_overhead_bytes"]))
    )
    minimum = ollama.minimum_memory(hardware, rules) + (gpu_overhead or 0)
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


# ---------------------------------------------------------------------------------------------------------
# vLLM / SGLang --cpu-offload-gb: weights in host memory, streamed to the GPU every step
# ---------------------------------------------------------------------------------------------------------


def with_cpu_offload_gb(est: Estimate, choice: EngineChoice) -> Estimate:
    """``--cpu-offload-gb N`` (vLLM, SGLang; docs/engines/vllm.md#vllm-features): up to N GiB of decoder-layer
    weights per GPU stay in host memory and cross PCIe on every forward step, so a run that then fits the GPU is
    verdict offload, and its decode bound gains ``N GiB / PCIe bandwidth`` per step (each GPU streams its own share
    over its own link). The PCIe link is the host table's default (PCIe 4.0 x16)."""
    from hfvram.estimate.common import setting_float

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
    return replace(est, verdict=VERDICT_OFFLOAD, decode_tokens_per_second=slowed, warnings=(*est.warnings, note))
