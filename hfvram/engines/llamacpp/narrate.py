"""What a llama.cpp estimate says: the warnings (what llama.cpp would do differently from what was asked, what
lands outside the GPUs) and one explanation line per term, from the breakdown's own figures."""

from __future__ import annotations

from collections.abc import Sequence

from hfvram.engines.llamacpp.breakdown import Breakdown
from hfvram.engines.llamacpp.draft import draft_line, draft_warnings
from hfvram.engines.llamacpp.placement import (
    device_shares,
    fit_keeps_margin,
    free_memory,
    overhead_bytes,
    place_layers,
)
from hfvram.engines.llamacpp.settings import LlamaCppConstants, Settings
from hfvram.estimate.common import GiB, MiB
from hfvram.estimate.types import Hardware, PerGpu
from hfvram.spec import WINDOWED_KINDS, ModelSpec


def extra_model_warnings(settings: Settings) -> list[str]:
    """The other GGUFs the line loads, whose buffers the estimate does not count (only the main file is read):
    docs/engines/llamacpp.md#llamacpp-extra-models."""
    what = {
        "model-draft": "the draft model's weights, KV cache and compute buffer (a second context, placed by -ngld / "
        "-devd like the main model) are not counted",
        "mmproj": "the vision projector's weights and compute buffer (on the main GPU; in RAM with "
        "--no-mmproj-offload) are not counted",
    }
    return [f"--{flag} {name}: {what[flag]}; check that file's size too" for flag, name in settings.extra_models]


def projector_line(settings: Settings, dev: int) -> str:
    """The ``--mmproj`` projector's share of the weights line (docs/engines/llamacpp.md#llamacpp-extra-models)."""
    if not settings.projector_bytes:
        return ""
    where = (
        "this GPU" if settings.projector_on_gpu and dev == 0 else "GPU 0" if settings.projector_on_gpu else "the CPU"
    )
    return f"; vision projector {settings.projector_file} {settings.projector_bytes / MiB:.2f} MiB on {where}"


def projector_warnings(settings: Settings) -> list[str]:
    """What of the ``--mmproj`` projector is counted and what is not: its compute buffer is reserved by building
    the vision graph for a warm-up image (clip's ``alloc_compute_meta``), which a header does not size."""
    if not settings.projector_bytes:
        return []
    where = "on the first GPU" if settings.projector_on_gpu else "in RAM (--no-mmproj-offload)"
    named = f"--mmproj {settings.projector_file}"
    notes = []
    if settings.projector_origin == "hub-auto":
        named = f"-hf projector {settings.projector_repo}/{settings.projector_file}"
        notes.append(
            f"llama-server -hf downloads {settings.projector_file} with the model (find_best_mmproj); --no-mmproj "
            "leaves it out"
        )
    elif settings.projector_origin == "hub":
        notes.append(
            f"--mmproj {settings.projector_file} was read from {settings.projector_repo} on the Hub; llama-server "
            "takes --mmproj as a local path: download the file first, or leave --mmproj out and -hf fetches the "
            "projector it picks"
        )
    return [
        f"{named}: its weights ({settings.projector_bytes / MiB:.2f} MiB) are counted "
        f"{where}; its compute buffer is not (clip reserves it by building the vision graph of a warm-up image, which the "
        "header does not size: read the 'alloc_compute_meta: … compute buffer size' line llama-server prints for it)",
        *notes,
    ]


def narrate_warnings(
    spec: ModelSpec, hardware: Hardware | None, parts: Breakdown, per_gpu: PerGpu, constants: LlamaCppConstants
) -> list[str]:
    """What llama.cpp would do differently from what was asked, and what lands outside the GPUs."""
    settings, placement = parts.settings, parts.placement
    warnings = []
    if not spec.extra.get("gguf_arch") and not (spec.quantization and spec.quantization.method == "gguf"):
        warnings.append(
            "not a GGUF: weights counted as if converted to GGUF at the checkpoint's own dtype; a quantized GGUF "
            "(Q4_K_M ≈ 4.9 bits per weight) is much smaller"
        )
    warnings.extend(extra_model_warnings(settings))
    warnings.extend(projector_warnings(settings))
    warnings.extend(draft_warnings(parts.draft, settings))
    token_embd = spec.weights.bytes_by_component.get("embeddings", 0) if spec.weights else 0
    if placement.cpu_weights > token_embd or placement.cpu_kv:
        host = placement.cpu_weights + placement.cpu_kv + parts.output_buffer
        warnings.append(
            f"CPU RAM needed besides the GPUs: {host / GiB:.2f} GiB "
            f"(weights {placement.cpu_weights / GiB:.2f} GiB incl. token embeddings, KV {placement.cpu_kv / GiB:.2f} GiB, "
            f"logits buffer {parts.output_buffer / MiB:.0f} MiB); mmap'd weights live in the page cache"
        )
    if settings.n_gpu_layers < spec.num_layers + 1:
        warnings.append(
            f"only {settings.n_gpu_layers} of {spec.num_layers + 1} layers on the GPU: the rest runs on the CPU (slow)"
        )
    if hardware is not None and fit_keeps_margin(settings, hardware.count) and per_gpu.total > per_gpu.usable:
        warnings.append(
            f"llama.cpp --fit would not load this as asked: it keeps {settings.fit_target_bytes // MiB} MiB free per GPU and "
            f"would first lower ctx-size (not below {constants.fit_ctx_min}, only when ctx-size is not set) and then "
            "move layers / experts to the CPU"
        )
    if settings.sched_copies > 1:
        warnings.append(
            f"multi-GPU layer split: pipeline parallelism keeps {settings.sched_copies} copies of the attention masks "
            "in every GPU's compute buffer (counted)"
        )
    if hardware is not None and hardware.mixed:
        warnings.append(mixed_split_note(spec, hardware, parts))
    return [*warnings, *settings.notes, *placement.notes]


def layer_ranges(devices: Sequence[int], device: int) -> str:
    """``0-20`` / ``21-31 + output`` for the layers placed on ``device`` (the last index is the output layer)."""
    n_layer = len(devices) - 1
    runs: list[str] = []
    start = None
    for il in range(n_layer + 1):
        on = il < n_layer and devices[il] == device
        if on and start is None:
            start = il
        if not on and start is not None:
            runs.append(f"{start}-{il - 1}" if il - 1 > start else str(start))
            start = None
    if devices[n_layer] == device:
        runs.append("output")
    return " + ".join(runs) if runs else "none"


def mixed_split_note(spec: ModelSpec, hardware: Hardware, parts: Breakdown) -> str:
    """Which layers land where on a mixed set, and by what rule (llama.cpp's default tensor split: free memory)."""
    settings = parts.settings
    free = free_memory(hardware, parts.overhead)
    gpus = 1 if settings.split_mode == "none" else hardware.count
    shares = device_shares(gpus, settings.tensor_split, free)
    devices = place_layers(spec.num_layers, min(settings.n_gpu_layers, spec.num_layers + 1), shares)
    rule = (
        f"tensor-split {','.join(f'{share:g}' for share in settings.tensor_split)}"
        if settings.tensor_split
        else "llama.cpp's default tensor split, in proportion to each GPU's free memory"
    )
    placed = "; ".join(
        f"GPU {dev} {gpu.id}: layers {layer_ranges(devices, dev)} "
        f"({parts.placement.gpu_layers[dev] if dev < len(parts.placement.gpu_layers) else 0} of {spec.num_layers}+1)"
        for dev, gpu in enumerate(hardware.gpus[:gpus])
    )
    return f"mixed set {hardware.label}, {rule}: {placed}"


def explain_lines(
    spec: ModelSpec, hardware: Hardware | None, parts: Breakdown, constants: LlamaCppConstants
) -> dict[str, str]:
    """One line per term, from the breakdown's own figures."""
    settings, placement, kv, dev = parts.settings, parts.placement, parts.kv, parts.worst
    embd = spec.weights.bytes_by_component.get("embeddings", 0) if spec.weights else 0
    windowed = any(layer.kind in WINDOWED_KINDS for layer in spec.layers) and not settings.swa_full
    return {
        "weights": (
            f"GGUF tensor bytes of the {placement.gpu_layers[dev]} layers on this GPU (of {spec.num_layers}+1 incl. output); "
            f"token_embd {embd / MiB:.0f} MiB stays on the CPU; CPU holds {placement.cpu_weights / GiB:.2f} GiB"
            + projector_line(settings, dev)
            + draft_line(parts.draft, dev, "weights")
        ),
        "kv_cache": (
            f"{settings.n_stream} stream(s) × {settings.n_ctx_seq} cells (ctx-size {settings.n_ctx}, padded to "
            f"{constants.n_ctx_pad}), K {settings.type_k} {kv.k / MiB:.2f} MiB + V {settings.type_v} {kv.v / MiB:.2f} MiB"
            + (f" + recurrent state F32 {kv.state / MiB:.2f} MiB" if kv.state else "")
            + (" (windowed layers: n_swa + ubatch cells)" if windowed else "")
            + draft_line(parts.draft, dev, "kv_cache")
        ),
        "activations": (
            f"compute buffer {parts.gpu_compute[dev] / MiB:.2f} MiB = {parts.compute_rule}; "
            f"host: logits buffer {parts.output_buffer / MiB:.2f} MiB"
            + (f" + CUDA_Host compute buffer {parts.host_compute / MiB:.2f} MiB" if parts.host_compute else "")
            + " (not VRAM)"
            + draft_line(parts.draft, dev, "activations")
        ),
        "overhead": overhead_bytes(hardware, constants)[1],
        "usable": (
            f"device memory − {settings.fit_target_bytes // MiB} MiB that --fit keeps free"
            if hardware is not None and fit_keeps_margin(settings, hardware.count)
            else "device memory (--fit off)"
            if not settings.fit
            else "device memory (placement and context set by the user: --fit aborts and loads as asked)"
        ),
        "decode": "bandwidth-bound upper bound: active weights on the GPU + KV at the context, per token",
    }
