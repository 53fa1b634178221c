"""llama-server's speculative draft model (``-md FILE``): a second model with one context of its own, shared by every
slot — its weights placed by ``-ngld`` / ``-devd`` like the main model's, its KV cache (``-ctkd`` / ``-ctvd``, F16 by
default) for the target's n_ctx, and its compute buffer (docs/engines/llamacpp.md#llamacpp-draft-model)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hfvram.engines.llamacpp.settings import LlamaCppConstants, Settings, pipeline_copies
from hfvram.estimate.common import MiB

if TYPE_CHECKING:
    from hfvram.engines.llamacpp.breakdown import Breakdown
    from hfvram.estimate.types import Hardware


def draft_settings(settings: Settings, n_gpus: int, constants: LlamaCppConstants) -> Settings | None:
    """The draft context's settings (``common_base_params_to_speculative`` and ``common_speculative_init_result``):
    the target's (n_ctx, streams, slots, batch and ubatch, flash attention, split mode) with the draft's own GPU layers
    (``-ngld``, −1 = all), devices (``-devd``), cache types (``-ctkd`` / ``-ctvd``, F16 by default), no tensor
    overrides of the target's (``-otd`` is its own) and ``n_outputs_max`` = the slots. None without a draft."""
    spec = settings.draft_spec
    if spec is None:
        return None
    n_layer = spec.num_layers
    ngl = settings.draft_ngl if 0 <= settings.draft_ngl <= n_layer + 1 else n_layer + 1
    split_mode, main_gpu, tensor_split = settings.split_mode, settings.main_gpu, settings.tensor_split
    devices = settings.draft_devices
    if devices is not None:
        # -devd: the named devices only (none: the CPU); one device takes every offloaded layer
        ngl = ngl if devices else 0
        usable = [dev for dev in devices if dev < n_gpus] or [0]
        split_mode, main_gpu = ("none", usable[0]) if len(usable) == 1 else ("layer", 0)
        tensor_split = tuple(1.0 if dev in usable else 0.0 for dev in range(n_gpus)) if len(usable) > 1 else ()
    draft = replace(
        settings,
        n_gpu_layers=ngl,
        cpu_moe_layers=0,
        override_tensor=(),
        split_mode=split_mode,
        main_gpu=main_gpu,
        tensor_split=tensor_split,
        type_k=settings.draft_type_k,
        type_v=settings.draft_type_v,
        n_outputs_max=min(settings.n_batch, max(1, settings.n_seq_max)),
        projector_bytes=0,
        projector_file=None,
        draft_spec=None,
        extra_models=(),
    )
    return replace(draft, sched_copies=pipeline_copies(draft, n_gpus, n_layer, constants))


@dataclass(frozen=True)
class DraftBuffers:
    """The draft context's buffers per GPU and on the host, and the settings they were sized with."""

    file: str
    settings: Settings
    gpu_weights: tuple[int, ...]
    gpu_kv: tuple[int, ...]
    gpu_compute: tuple[int, ...]
    cpu_weights: int
    cpu_kv: int

    def gpu_total(self, dev: int) -> int:
        if dev >= len(self.gpu_weights):
            return 0
        return self.gpu_weights[dev] + self.gpu_kv[dev] + self.gpu_compute[dev]

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "n-gpu-layers": self.settings.n_gpu_layers,
            "ctx-size": self.settings.n_ctx,
            "cache-type-k": self.settings.type_k,
            "cache-type-v": self.settings.type_v,
            "gpu_weights_bytes": list(self.gpu_weights),
            "gpu_kv_bytes": list(self.gpu_kv),
            "gpu_compute_bytes": list(self.gpu_compute),
            "cpu_weights_bytes": self.cpu_weights,
            "cpu_kv_bytes": self.cpu_kv,
        }


def draft_buffers(
    settings: Settings,
    hardware: Hardware | None,
    constants: LlamaCppConstants,
    compute_consts: Mapping[str, float],
) -> DraftBuffers | None:
    """The draft context sized by the same functions as the main one (weights per device, KV, compute buffer)."""
    from hfvram.engines.llamacpp.breakdown import breakdown

    n_gpus = hardware.count if hardware else 1
    draft = draft_settings(settings, n_gpus, constants)
    if draft is None or settings.draft_spec is None:
        return None
    parts: Breakdown = breakdown(settings.draft_spec, hardware, draft, constants, compute_consts)
    placement = parts.placement
    # -devd none: the draft has no GPU backend at all, so no GPU compute buffer either
    computes = parts.gpu_compute if settings.draft_devices != () else tuple(0 for _ in parts.gpu_compute)
    return DraftBuffers(
        file=settings.draft_file or "",
        settings=parts.settings,
        gpu_weights=placement.gpu_weights,
        gpu_kv=placement.gpu_kv,
        gpu_compute=computes,
        cpu_weights=placement.cpu_weights,
        cpu_kv=placement.cpu_kv,
    )


def draft_line(draft: DraftBuffers | None, dev: int, term: str) -> str:
    """The draft context's share of one ``--explain`` line on GPU ``dev``."""
    if draft is None or dev >= len(draft.gpu_weights):
        return ""
    figure = {"weights": draft.gpu_weights, "kv_cache": draft.gpu_kv, "activations": draft.gpu_compute}[term][dev]
    what = {"weights": "weights", "kv_cache": "KV cache", "activations": "compute buffer"}[term]
    extra = ""
    if term == "kv_cache":
        extra = f" ({draft.settings.n_ctx} cells, {draft.settings.type_k}/{draft.settings.type_v})"
    elif term == "weights":
        extra = f" ({draft.settings.n_gpu_layers} layers offloaded)"
    return f"; draft model {draft.file}: {what} {figure / MiB:.2f} MiB{extra}"


def draft_warnings(draft: DraftBuffers | None, settings: Settings) -> list[str]:
    """What of the draft is counted, and the ``-cd`` llama-server does not apply to a draft model's context."""
    if draft is None:
        return []
    on_gpu = sum(draft.gpu_weights) + sum(draft.gpu_kv) + sum(draft.gpu_compute)
    notes = [
        f"-md {draft.file}: its context is counted (weights, KV cache and compute buffer: {on_gpu / MiB:.2f} MiB on "
        f"the GPUs, {(draft.cpu_weights + draft.cpu_kv) / MiB:.2f} MiB in RAM)"
    ]
    if settings.draft_ctx_asked:
        notes.append(
            f"-cd {settings.draft_ctx_asked}: llama-server gives a draft model's context the target's n_ctx "
            f"({draft.settings.n_ctx} cells), whatever -cd says"
        )
    return notes


def draft_device_bytes(
    settings: Settings,
    hardware: Hardware,
    constants: LlamaCppConstants,
    compute_consts: Mapping[str, float],
) -> list[int]:
    """Per GPU, the draft context's bytes, which llama-server adds to ``--fit``'s margin before it fits the main
    model (PR #23485, docs/engines/llamacpp.md#llamacpp-draft-model); zeros without a draft."""
    draft = draft_buffers(settings, hardware, constants, compute_consts)
    return [draft.gpu_total(dev) if draft else 0 for dev in range(hardware.count)]
