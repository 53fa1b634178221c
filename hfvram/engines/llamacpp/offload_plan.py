"""The offload plan llama.cpp's ``--fit`` makes (docs/engines/llamacpp.md#llamacpp-offload-plan), as data: the
device budgets, the per-device layer slots, each layer's place, the bytes and speed of a placement, the plan
itself (its JSON object) and its text lines."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hfvram.engines.llamacpp.settings import Settings
from hfvram.estimate.common import GiB, MiB
from hfvram.estimate.types import ExpectedSpeed

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
    settings: Settings
    #: layers computed on a GPU; GPU <-> CPU hand-overs per token (memory_model.cpu_hand_overs); parameters the CPU
    #: computes per token (for the expected speed, hfvram.estimate.speed)
    gpu_layers: int = 0
    cpu_layers: int = 0
    cpu_params: float = 0.0

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
    #: the expected decode speed and its parts (the figures above are bounds)
    expected: ExpectedSpeed | None = None


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
