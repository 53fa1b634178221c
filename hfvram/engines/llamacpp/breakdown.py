"""All llama.cpp buffers of one configuration (weights, KV and compute buffer per device, the host buffers) and the
terms read from them: the worst GPU's four terms and the bandwidth-bound decode speed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from hfvram.engines.llamacpp.compute import compute_buffer_bytes, host_compute_buffer_bytes, output_buffer_bytes
from hfvram.engines.llamacpp.draft import DraftBuffers, draft_buffers
from hfvram.engines.llamacpp.kv import KvBytes, kv_bytes
from hfvram.engines.llamacpp.placement import (
    Placement,
    device_memory,
    free_memory,
    is_metal,
    overhead_bytes,
    place,
    usable_bytes,
)
from hfvram.engines.llamacpp.settings import LlamaCppConstants, Settings, pipeline_copies
from hfvram.estimate.common import active_weight_bytes, decode_tokens_per_second
from hfvram.estimate.types import Hardware, PerGpu
from hfvram.spec import ModelSpec


@dataclass(frozen=True)
class Breakdown:
    """All llama.cpp buffers of one configuration (bytes), worst GPU first."""

    settings: Settings
    kv: KvBytes
    placement: Placement
    gpu_compute: tuple[int, ...]
    compute_rule: str
    output_buffer: int
    overhead: int
    worst: int
    #: the CUDA_Host compute buffer (pinned host memory, not VRAM); 0 on the CPU / Metal backend
    host_compute: int = 0
    #: the ``-md`` draft context's buffers, already added to ``placement`` and ``gpu_compute`` on each GPU
    #: (docs/engines/llamacpp.md#llamacpp-draft-model)
    draft: DraftBuffers | None = None


def breakdown(
    spec: ModelSpec,
    hardware: Hardware | None,
    settings: Settings,
    constants: LlamaCppConstants,
    compute_consts: Mapping[str, float],
) -> Breakdown:
    pad = constants.n_ctx_pad
    if is_metal(hardware):
        settings = replace(settings, cuda=False)
    kv = kv_bytes(spec, settings, pad)
    n_gpus = hardware.count if hardware else 1
    settings = replace(settings, sched_copies=pipeline_copies(settings, n_gpus, spec.num_layers, constants))
    overhead, _ = overhead_bytes(hardware, constants)
    placement = with_projector(place(spec, settings, kv, n_gpus, free_memory(hardware, overhead)), settings)
    computes, rule = [], ""
    # the buffer depends only on (holds the output, is the first device): computed once per kind, not per device
    by_kind: dict[tuple[bool, bool], tuple[int, str]] = {}
    first = settings.main_gpu if settings.split_mode == "none" else 0
    for dev, has_output in enumerate(placement.gpu_has_output):
        kind = (has_output or len(placement.gpu_has_output) == 1, dev == first)
        if kind not in by_kind:
            by_kind[kind] = compute_buffer_bytes(
                spec, settings, compute_consts, with_output=kind[0], pad=pad, first_device=kind[1]
            )
        size, rule_dev = by_kind[kind]
        # a GPU holding layers, or only tensors -ot sent there, runs ops and needs a compute buffer
        active = placement.gpu_layers[dev] or placement.gpu_weights[dev] or dev == first
        computes.append(size if active else 0)
        rule = rule if rule and not has_output else rule_dev
    draft = draft_buffers(settings, hardware, constants, compute_consts) if settings.draft_spec else None
    placement, computes = with_draft(placement, computes, draft)
    totals = [
        weights + kv_cache + buffer + overhead
        for weights, kv_cache, buffer in zip(placement.gpu_weights, placement.gpu_kv, computes)
    ]
    if hardware is not None and hardware.mixed and len(totals) == hardware.count:
        # devices of different sizes: the worst is the fullest against its own memory
        usable = [usable_bytes(hardware, settings, dev) for dev in range(len(totals))]
        worst = max(range(len(totals)), key=lambda index: totals[index] / max(1, usable[index]))
    else:
        worst = max(range(len(totals)), key=lambda index: totals[index])
    host_compute, _ = host_compute_buffer_bytes(spec, settings, compute_consts, pad=pad)
    return Breakdown(
        settings,
        kv,
        placement,
        tuple(computes),
        rule,
        output_buffer_bytes(spec, settings),
        overhead,
        worst,
        host_compute,
        draft,
    )


def with_draft(placement: Placement, computes: list[int], draft: DraftBuffers | None) -> tuple[Placement, list[int]]:
    """The draft context shares the GPUs: its weights, KV and compute buffer add to each device's own
    (docs/engines/llamacpp.md#llamacpp-draft-model)."""
    if draft is None:
        return placement, computes
    placed = replace(
        placement,
        gpu_weights=tuple(w + d for w, d in zip(placement.gpu_weights, draft.gpu_weights)),
        gpu_kv=tuple(k + d for k, d in zip(placement.gpu_kv, draft.gpu_kv)),
    )
    return placed, [c + d for c, d in zip(computes, draft.gpu_compute)]


def with_projector(placement: Placement, settings: Settings) -> Placement:
    """The ``--mmproj`` projector's tensors added where llama.cpp's clip code loads them: the first GPU backend
    (``ggml_backend_init_by_type(GPU)``, device 0 whatever ``-mg`` says), or RAM with ``--no-mmproj-offload``
    (docs/engines/llamacpp.md#llamacpp-extra-models)."""
    if not settings.projector_bytes:
        return placement
    if not settings.projector_on_gpu or not placement.gpu_weights:
        return replace(placement, cpu_weights=placement.cpu_weights + settings.projector_bytes)
    first = placement.gpu_weights[0] + settings.projector_bytes
    return replace(placement, gpu_weights=(first, *placement.gpu_weights[1:]))


def per_gpu_of(parts: Breakdown, hardware: Hardware | None) -> PerGpu:
    """The four terms on the worst GPU, against the device memory less --fit's target."""
    placement, dev = parts.placement, parts.worst
    return PerGpu(
        weights=placement.gpu_weights[dev],
        kv_cache=placement.gpu_kv[dev],
        activations=parts.gpu_compute[dev],
        overhead=parts.overhead,
        usable=usable_bytes(hardware, parts.settings, dev) if hardware else 0,
        memory=device_memory(hardware, dev) if hardware else 0,
    )


def decode_bound(spec: ModelSpec, hardware: Hardware | None, parts: Breakdown) -> float | None:
    """Bandwidth / (active weights on the GPUs + one sequence's KV at the context)."""
    settings, kv = parts.settings, parts.kv
    active = active_weight_bytes(spec) or 0
    context = settings.n_ctx_seq
    per_token_kv = kv.total / max(1, settings.n_stream) / max(1, settings.n_ctx_seq) * context if kv.total else 0
    return decode_tokens_per_second(active + per_token_kv, layer_split_bandwidth(hardware, parts))


def layer_split_bandwidth(hardware: Hardware | None, parts: Breakdown) -> float | None:
    """The bandwidth one token sees: the GPU's; on a mixed set split by layers the devices run one after the other,
    so each reads its own share of the bytes at its own speed (1 / Σ share_d / bandwidth_d)."""
    if hardware is None:
        return None
    if not hardware.mixed:
        return hardware.gpu.memory_bandwidth_gbs
    placed = [w + k for w, k in zip(parts.placement.gpu_weights, parts.placement.gpu_kv)]
    bandwidths = [gpu.memory_bandwidth_gbs for gpu in hardware.gpus[: len(placed)]]
    total = sum(placed)
    if total <= 0 or any(not bw for bw in bandwidths):
        return hardware.gpu.memory_bandwidth_gbs
    return 1 / sum(bytes_d / total / float(bw) for bytes_d, bw in zip(placed, bandwidths) if bw)
