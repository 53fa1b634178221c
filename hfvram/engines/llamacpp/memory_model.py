"""Memory and speed of one placement: what llama.cpp measures with a dry run (``no_alloc``) for each candidate
placement of ``--fit``, hfvram computes from the llama.cpp profile's buffer functions (``MemoryModel``); the regex
of ``-ot`` overrides, the layout of per-device slots, and the decode / prefill bounds of a placement
(docs/engines/llamacpp.md#llamacpp-offload-plan)."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import replace

from hfvram.engines.llamacpp.compute import compute_buffer_bytes, host_compute_buffer_bytes, output_buffer_bytes
from hfvram.engines.llamacpp.kv import KvBytes, kv_bytes
from hfvram.engines.llamacpp.offload_plan import EXPERT_SHARE_ON_DEVICE, DeviceBudget, LayerPlace, Slot, Speed, Usage
from hfvram.engines.llamacpp.placement import cuda_row_padding_bytes, device_shares, layer_weight_bytes, place_layers
from hfvram.engines.llamacpp.settings import (
    LlamaCppConstants,
    Settings,
    kv_cells,
    override_target,
    pipeline_copies,
)
from hfvram.estimate.host_memory import HostMemory, pcie_bandwidth_gbs
from hfvram.estimate.speed import Work, expected_speed
from hfvram.spec import ModelSpec


class MemoryModel:
    """``device_usage`` for any layout at any context, from the llama.cpp profile's buffer functions.

    Linear in the layer count and the device count: per-layer weights and KV are prefix sums (a device's layers
    are one contiguous range, so its bytes are two look-ups), the largest expert tensor in RAM comes from a
    sparse table, and the compute buffer — the same for every device of one kind (holds the output or not, the
    first device with its op-offload copy or not) — is computed once per kind and context, not per device and
    search step (``work`` counts those computations)."""

    def __init__(
        self, spec: ModelSpec, settings: Settings, constants: LlamaCppConstants, consts: Mapping[str, float], nd: int
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.consts = consts
        self.pad = constants.n_ctx_pad
        self.constants = constants
        self.nd = nd
        self.n_layer = spec.num_layers
        self.dense, self.experts, self.embd, self.output = layer_weight_bytes(spec)
        self.lm_head_separate = bool(spec.weights and spec.weights.bytes_by_component.get("lm_head"))
        self.row_padding = cuda_row_padding_bytes(spec, settings.matrix_row_padding) if settings.cuda else 0
        n_used, n_expert = spec.experts_per_token or 0, spec.num_experts or 0
        self.active_share = min(1.0, n_used / n_expert) if n_used and n_expert else 1.0
        self.moe = any(self.experts)
        weights = spec.weights
        #: parameters per stored byte, to turn the bytes the CPU reads into the FLOPs it computes
        self.params_per_byte = weights.params_total / weights.total_bytes if weights and weights.total_bytes else 0.0
        self._kv: dict[int, KvBytes] = {}
        self._kv_prefix: dict[int, list[int]] = {}
        self.p_dense = _prefix(self.dense)
        self.p_experts = _prefix(self.experts)
        self.p_max = [0]
        for size in self.experts:
            self.p_max.append(max(self.p_max[-1], size))
        self._sparse = _sparse_table(self.experts)
        self._compute: dict[tuple[int, bool, bool, bool, int, int], int] = {}
        self._host_compute: dict[int, int] = {}
        #: how many compute buffers were computed (a test asserts it does not grow with the device count)
        self.work = 0

    def at_ctx(self, n_ctx: int) -> Settings:
        cells, seq, streams = kv_cells(n_ctx, self.settings.n_seq_max, self.settings.kv_unified, self.pad)
        return replace(self.settings, n_ctx=cells, n_ctx_seq=seq, n_stream=streams)

    def kv(self, settings: Settings) -> KvBytes:
        if settings.n_ctx not in self._kv:
            self._kv[settings.n_ctx] = kv_bytes(self.spec, settings, self.pad)
        return self._kv[settings.n_ctx]

    def kv_prefix(self, settings: Settings) -> list[int]:
        if settings.n_ctx not in self._kv_prefix:
            per_layer = self.kv(settings).per_layer
            self._kv_prefix[settings.n_ctx] = _prefix(
                [per_layer[il] if il < len(per_layer) else 0 for il in range(self.n_layer)]
            )
        return self._kv_prefix[settings.n_ctx]

    def largest_expert(self, low: int, high: int) -> int:
        """The largest expert bytes among layers ``low .. high − 1`` (0 for an empty range)."""
        return _range_max(self._sparse, low, high)

    def compute(self, settings: Settings, with_output: bool, first: bool, output_on_cpu: bool, largest: int) -> int:
        """The compute buffer of one device: it depends on the context, whether the device holds the output, and —
        the first device only (op offload) — whether the output layer and which expert tensors stay in RAM."""
        ngl = self.n_layer if output_on_cpu else self.n_layer + 1
        # pipeline parallelism (several devices, all layers offloaded, no expert in RAM): input copies on every
        # device (docs/engines/llamacpp.md#llamacpp-pipeline-parallel)
        placed = replace(settings, n_gpu_layers=ngl, cpu_moe_layers=int(largest > 0), override_tensor=())
        copies = pipeline_copies(placed, self.nd, self.n_layer, self.constants)
        key = (settings.n_ctx, with_output, first, output_on_cpu and first, largest if first else 0, copies)
        if key not in self._compute:
            self.work += 1
            # the same buffer llama.cpp computes for any placement with this output / largest CPU expert: the
            # first layers up to the one holding ``largest`` keep their experts in RAM (--n-cpu-moe k)
            k = bisect.bisect_left(self.p_max, largest) if largest > 0 else 0
            trial = replace(
                settings, n_gpu_layers=ngl, cpu_moe_layers=min(k, self.n_layer), override_tensor=(), sched_copies=copies
            )
            size, _ = compute_buffer_bytes(
                self.spec, trial, self.consts, with_output=with_output, pad=self.pad, first_device=first
            )
            self._compute[key] = size
        return self._compute[key]

    def host_compute(self, settings: Settings) -> int:
        if settings.n_ctx not in self._host_compute:
            self._host_compute[settings.n_ctx] = host_compute_buffer_bytes(
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
        # as offload_copy_bytes reads -ngl: at most n_layer layers offloaded = output.weight in host memory
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
        hand_overs = cpu_hand_overs(layers, host_expert_layers)
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
            output_buffer=output_buffer_bytes(self.spec, trial),
            gpu_read=tuple(gpu_read),
            host_read=host_read,
            host_stream=host_stream,
            settings=trial,
            gpu_layers=sum(1 for place in layers[:n_layer] if place.device >= 0),
            cpu_layers=hand_overs,
            cpu_params=host_read * self.params_per_byte,
        )


def cpu_hand_overs(layers: Sequence[LayerPlace], host_expert_layers: Sequence[int]) -> int:
    """GPU <-> CPU hand-overs of one token: each layer on a GPU whose experts run on the CPU, plus each run of whole
    layers on the CPU next to layers on a GPU (none when nothing is on a GPU)."""
    on_gpu = [place.device >= 0 for place in layers]
    if not any(on_gpu):
        return 0
    runs = sum(1 for i, gpu in enumerate(on_gpu) if not gpu and (i == 0 or on_gpu[i - 1]))
    return runs + sum(1 for il in host_expert_layers if on_gpu[il])


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
    devices = place_layers(n_layer, n_layer + 1, [share / total for share in shares])
    return [Slot(sum(1 for dev in devices if dev == d)) for d in range(len(budgets))]


def speed_of(usage: Usage, budgets: Sequence[DeviceBudget], host: HostMemory, settings: Settings) -> Speed:
    """Decode bound: Σ bytes read on each GPU / its bandwidth + bytes read in RAM / the host bandwidth (the devices
    and the CPU work one after another on a token). Prefill bound: with op offload (ubatch ≥ 32 on CUDA) every
    ubatch copies the host-resident weights over PCIe, so ``ubatch / (host bytes / PCIe bandwidth)`` bounds it.
    ``expected``: the expected decode speed, the same bytes at fitted efficiencies plus the CPU's compute and the
    per-layer costs (hfvram.estimate.speed, docs/methodology.md#expected-speed)."""
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
    work = Work(
        gpu_reads=[(usage.gpu_read[d], budget.bandwidth_gbs) for d, budget in enumerate(budgets)],
        gpu_layers=usage.gpu_layers,
        host_bytes=usage.host_read,
        host_gbs=host.bandwidth_gbs,
        host_label=host.describe(),
        cpu_params=usage.cpu_params,
        cpu_layers=usage.cpu_layers,
        threads=settings.threads,
    )
    expected = expected_speed(work, decode) if known else None
    if expected is not None and prefill is not None:
        # the bytes each ubatch copies to the GPU, for the expected prefill (hfvram.estimate.speed.expected_prefill)
        expected = replace(expected, prefill_host_bytes=float(usage.host_stream))
    gpu_bytes, host_bytes = sum(usage.gpu_read), usage.host_read
    return Speed(decode, gpu_bytes, host_bytes, host.bandwidth_gbs, host.describe(), prefill, link, expected)


def placement_of_settings(spec: ModelSpec, settings: Settings, nd: int, free: Sequence[int] = ()) -> list[LayerPlace]:
    """The layout the user's own ``-ngl`` / ``--n-cpu-moe`` / ``-ot …exps=CPU`` give (one device or a layer split in
    equal shares), to time a placement hfvram did not choose."""
    n_layer = spec.num_layers
    devices = place_layers(
        n_layer, min(settings.n_gpu_layers, n_layer + 1), device_shares(nd, settings.tensor_split, free)
    )
    places = []
    for il in range(n_layer + 1):
        dev = devices[il]
        target = override_target(f"blk.{il}.ffn_up_exps.weight", settings) if il < n_layer else None
        if il < settings.cpu_moe_layers:
            target = -1
        if dev >= 0 and target is not None and target != dev:
            # experts -ot sends elsewhere: to the CPU, or to another GPU (read there at its bandwidth)
            places.append(LayerPlace(dev, "moe", target if 0 <= target < nd else -1))
        else:
            places.append(LayerPlace(dev, "full"))
    return places


def speed_of_settings(
    spec: ModelSpec,
    settings: Settings,
    constants: LlamaCppConstants,
    consts: Mapping[str, float],
    budgets: Sequence[DeviceBudget],
    host: HostMemory,
) -> Speed | None:
    """Decode / prefill bounds of the user's own placement; None when nothing but token_embd is in RAM."""
    mm = MemoryModel(spec, settings, constants, consts, len(budgets))
    usage = mm.usage(
        placement_of_settings(spec, settings, len(budgets), [b.free_bytes for b in budgets]), settings.n_ctx
    )
    if usage.host_read <= 0:
        return None
    return speed_of(usage, budgets, host, settings)
