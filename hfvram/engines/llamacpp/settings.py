"""llama.cpp's settings: the ggml type table, the KV cache types it accepts, and every setting the estimate depends
on, resolved with llama.cpp's defaults (docs/engines/llamacpp.md#llamacpp-defaults); constants in
``hfvram/engines/llamacpp/rules.toml``. The option names are llama.cpp's own (see ``profile``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hfvram.engines.contract import Constants
from hfvram.errors import UsageError
from hfvram.estimate import releases
from hfvram.estimate.common import (
    MiB,
    load_engine_data,
    pad_to_multiple,
    setting,
    setting_bool,
    setting_int,
    version_key,
)
from hfvram.estimate.dtypes import ggml_blocks
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.spec import LayerKind, ModelSpec

ENGINE = "llama.cpp"

#: ggml type name -> (block elements, bytes per block) — docs/engines/common.md#gguf-types (ggml-common.h static_asserts), from
#: hfvram/data/ggml_types.json (generated from gguf's GGML_QUANT_SIZES)
GGML_BLOCKS: Mapping[str, tuple[int, int]] = ggml_blocks()
#: KV cache types llama.cpp accepts (common/arg.cpp::kv_cache_types)
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
#: hfvram / HF spellings -> llama.cpp names
KV_ALIASES = {"fp16": "f16", "float16": "f16", "half": "f16", "bfloat16": "bf16", "fp32": "f32", "float32": "f32"}


def row_size(type_name: str, count: int) -> int:
    """Bytes of a row of ``n`` elements of a ggml type: ``n / block × block_bytes`` (ggml_row_size)."""
    block, size = GGML_BLOCKS[type_name]
    return -(-count // block) * size


def kv_type(name: str) -> str:
    """A KV dtype as llama.cpp names it; UsageError for one it does not accept (e.g. fp8)."""
    key = KV_ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in KV_CACHE_TYPES:
        raise UsageError(f"llama.cpp KV cache type {name!r} is not one of {', '.join(KV_CACHE_TYPES)}")
    return key


@dataclass(frozen=True)
class LlamaCppConstants(Constants):
    """The ``[defaults]`` and ``[versions]`` keys of ``rules.toml`` (each value's source is beside it there),
    checked when they load. The ``[compute]`` table (the fitted compute-buffer factors) is read as a mapping."""

    n_batch: int
    n_ubatch: int
    type_k: str
    type_v: str
    flash_attn: str
    binary: str
    server_reserve_outputs: str
    server_outputs_cap_build: int
    server_auto_parallel: int
    kv_dequant_scratch_build: int
    sched_max_copies: int
    n_ctx_pad: int
    fit: bool
    fit_target_mib: int
    fit_ctx_min: int
    matrix_row_padding: int
    cuda_overhead_mib: float
    metal_overhead_mib: float
    swa_full: bool
    kv_unified: bool
    n_rs_seq: int


# ---------------------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """Every llama.cpp setting the estimate depends on, resolved (defaults applied)."""

    binary: str
    n_ctx: int  # after padding (cparams.n_ctx)
    n_ctx_seq: int
    n_stream: int
    n_seq_max: int
    kv_unified: bool
    n_batch: int
    n_ubatch: int
    n_outputs_max: int
    flash_attn: bool
    type_k: str
    type_v: str
    swa_full: bool
    n_gpu_layers: int  # of n_layer + 1
    cpu_moe_layers: int  # blocks 0..N-1 keep their experts on the CPU
    override_tensor: tuple[tuple[str, str], ...]
    split_mode: str
    tensor_split: tuple[float, ...]
    kv_offload: bool
    fit: bool
    fit_target_bytes: int
    n_rs_seq: int
    notes: tuple[str, ...] = ()
    #: ``--main-gpu`` / ``-mg``: the device of ``--split-mode none`` (docs/engines/llamacpp.md#llamacpp-split-modes)
    main_gpu: int = 0
    #: the user placed the weights (``-ngl``, ``-ot``, ``--n-cpu-moe``): --fit aborts after its context step
    #: (docs/engines/llamacpp.md#llamacpp-user-placement)
    user_placement: bool = False
    #: the context was left unset (``-c`` 0): --fit's context step still keeps its margin free
    ctx_auto: bool = False
    #: CUDA flash attention reserves F16 copies of a quantized K / V view in its output (builds from
    #: kv_dequant_scratch_build on; docs/engines/llamacpp.md#llamacpp-kv-dequant-scratch)
    kv_dequant_scratch: bool = False
    #: scheduler copies of every graph input (GGML_SCHED_MAX_COPIES with pipeline parallelism, else 1): set per
    #: hardware by ``pipeline_copies`` (docs/engines/llamacpp.md#llamacpp-pipeline-parallel)
    sched_copies: int = 1
    #: other GGUFs the line loads (``-md`` draft model, ``--mmproj`` projector): their buffers are not counted, a
    #: warning names them (docs/engines/llamacpp.md#llamacpp-extra-models)
    extra_models: tuple[tuple[str, str], ...] = ()
    #: the ``--mmproj`` projector read from its header: the file, its tensor bytes (0: none read) and whether they
    #: sit on the first GPU (False with ``--no-mmproj-offload``: in RAM) (docs/engines/llamacpp.md#llamacpp-extra-models)
    projector_file: str | None = None
    projector_bytes: int = 0
    projector_on_gpu: bool = True
    #: where the projector came from: "file", "hub" (``--mmproj NAME`` of the Hub repo), "hub-auto" (``-hf``'s own)
    projector_origin: str = "file"
    projector_repo: str | None = None
    #: the ``-md`` draft model the pipeline read (its GGUF facts) and how its context is placed: ``-ngld`` (−1: every
    #: layer), ``-devd`` (None: the model's GPUs; () for ``none``: the CPU; else the GPU indices), ``-ctkd`` /
    #: ``-ctvd`` (docs/engines/llamacpp.md#llamacpp-draft-model)
    draft_spec: ModelSpec | None = field(default=None, compare=False, repr=False)
    draft_file: str | None = None
    draft_ngl: int = -1
    draft_devices: tuple[int, ...] | None = None
    draft_type_k: str = "f16"
    draft_type_v: str = "f16"
    #: ``-cd`` as given: llama-server's draft context takes the target's n_ctx whatever it says (a warning says so)
    draft_ctx_asked: int | None = None
    #: the GPU backend pads quantized rows (CUDA / ROCm); False for Metal and the CPU-only truth runs
    cuda: bool = True
    #: row length the CUDA buffer type pads quantized matrices to (llama.cpp.toml matrix_row_padding)
    matrix_row_padding: int = field(default_factory=lambda: packaged_row_padding())
    #: ``-t`` / ``--threads`` as given (None: llama.cpp's default, hfvram assumes data/speed.toml's)
    threads: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "binary": self.binary,
            "ctx-size": self.n_ctx,
            "n_ctx_seq": self.n_ctx_seq,
            "parallel": self.n_seq_max,
            "kv-unified": self.kv_unified,
            "batch-size": self.n_batch,
            "ubatch-size": self.n_ubatch,
            "n_outputs_max": self.n_outputs_max,
            "flash-attn": "on" if self.flash_attn else "off",
            "cache-type-k": self.type_k,
            "cache-type-v": self.type_v,
            "swa-full": self.swa_full,
            "n-gpu-layers": self.n_gpu_layers,
            "n-cpu-moe": self.cpu_moe_layers,
            "override-tensor": ",".join(f"{pattern}={buffer}" for pattern, buffer in self.override_tensor) or None,
            "split-mode": self.split_mode,
            "main-gpu": self.main_gpu,
            "tensor-split": list(self.tensor_split) or None,
            "kv-offload": self.kv_offload,
            "fit": self.fit,
            "fit-target-mib": self.fit_target_bytes // MiB,
            "mmproj": self.projector_dict(),
            "draft_model": None,
        }

    def projector_dict(self) -> dict[str, object] | None:
        """The ``--mmproj`` projector counted (docs/engines/llamacpp.md#llamacpp-extra-models); None when none was read."""
        if self.projector_file is None:
            return None
        return {
            "file": self.projector_file,
            "weights_bytes": self.projector_bytes,
            "device": "gpu0" if self.projector_on_gpu else "cpu",
            "compute_buffer_bytes": None,
            "origin": self.projector_origin,
            "repo": self.projector_repo,
        }


def pad_cells(count: int, pad: int) -> int:
    return pad_to_multiple(max(1, count), pad)


def kv_cells(n_ctx: int, n_seq_max: int, kv_unified: bool, pad: int = 256) -> tuple[int, int, int]:
    """(n_ctx, n_ctx_seq, n_stream) as llama_context pads them (docs/engines/llamacpp.md#llamacpp-kv-cache): n_ctx to 256; a unified
    cache is one stream of n_ctx cells; otherwise n_seq_max streams of pad256(n_ctx / n_seq_max)."""
    n_ctx = pad_cells(n_ctx, pad)
    if kv_unified or n_seq_max <= 1:
        return n_ctx, n_ctx, 1
    n_ctx_seq = pad_cells(n_ctx // n_seq_max, pad)
    return n_ctx_seq * n_seq_max, n_ctx_seq, n_seq_max


#: the short spellings of the flags naming another GGUF (llamacpp.md#llamacpp-extra-models)
EXTRA_ALIASES = {"model-draft": "md", "mmproj": "mm"}

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

#: an ``-ot`` buffer type naming one GPU: the backend's device name and its index (CUDA0, ROCm1, Vulkan0, SYCL0,
#: MUSA0, CANN0; Metal's one device is MTL0 or Metal) — docs/engines/llamacpp.md#llamacpp-override-devices
_GPU_BUFT = re.compile(r"^(?:cuda|rocm|hip|vulkan|sycl|musa|cann|opencl|mtl|metal)(\d*)$", re.IGNORECASE)


def override_device(buft: str) -> int:
    """The device an ``-ot`` buffer type places a tensor on: −1 for host memory (``CPU``, ``CPU_Mapped``,
    ``CUDA_Host`` …), the GPU's index for a device buffer type; UsageError for a name llama.cpp would not know
    ("unknown buffer type")."""
    name = buft.strip()
    lower = name.lower()
    if lower.startswith("cpu") or lower.endswith("_host"):
        return -1
    match = _GPU_BUFT.match(name)
    if match is None:
        raise UsageError(
            f"override-tensor buffer type {name!r}: use CPU or a device name such as CUDA0, ROCm0, Vulkan0"
        )
    return int(match.group(1) or 0)


def _parse_override(text: str | None) -> tuple[tuple[str, str], ...]:
    if not text:
        return ()
    pairs = []
    for item in text.split(","):
        pattern, sep, buft = item.partition("=")
        if not sep or not pattern:
            raise UsageError(f"override-tensor {item!r} is not REGEX=BUFFER_TYPE")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"override-tensor regex {pattern!r}: {exc}") from exc
        override_device(buft)
        pairs.append((pattern, buft.strip()))
    return tuple(pairs)


def _on_off_auto(value: str | None, default: str) -> str:
    raw = (value if value is not None else default).strip().lower()
    mapping = {
        "": "on",
        "1": "on",
        "true": "on",
        "on": "on",
        "yes": "on",
        "enabled": "on",
        "0": "off",
        "false": "off",
        "off": "off",
        "no": "off",
        "disabled": "off",
        "auto": "auto",
    }
    if raw not in mapping:
        raise UsageError(f"flash-attn={value!r}: use on, off or auto")
    return mapping[raw]


def resolve_settings(
    spec: ModelSpec, choice: EngineChoice, workload: Workload, constants: LlamaCppConstants
) -> Settings:
    """Apply llama.cpp's defaults (llamacpp.md#llamacpp-defaults) to the user's settings and workload.

    Context: ``ctx-size`` is the whole cache (all sequences); without it, n_ctx = workload.context (default the
    model's n_ctx_train) × the sequences the workload holds at full length (``workload.concurrency``)."""
    binary = resolve_binary(choice, constants)
    parallel, kv_unified, notes = resolve_slots(choice, workload, binary, constants)
    ctx_size = resolve_ctx_size(spec, choice, workload, parallel, kv_unified)
    n_ctx, n_ctx_seq, n_stream = kv_cells(ctx_size, parallel, kv_unified, constants.n_ctx_pad)
    n_batch, n_ubatch, n_outputs_max = resolve_batches(choice, constants, binary, parallel)
    notes.extend(reserve_note(choice, constants, binary, min(n_ubatch, n_outputs_max)))
    fa = _on_off_auto(setting(choice, "flash-attn", "fa"), constants.flash_attn)
    if fa == "auto":
        notes.append("flash-attn auto resolves to on when the device supports every FA op (assumed)")
    flash_attn = fa != "off"
    type_k, type_v = resolve_kv_types(spec, choice, workload, constants, flash_attn)
    ngl, cpu_moe = resolve_layers(spec, choice)
    split_mode, tensor_split = resolve_split(choice)
    fit_target = setting_int(choice, "fit-target", "fitt", default=constants.fit_target_mib)
    return Settings(
        binary=binary,
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_stream=n_stream,
        n_seq_max=parallel,
        kv_unified=kv_unified,
        n_batch=n_batch,
        n_ubatch=n_ubatch,
        n_outputs_max=n_outputs_max,
        flash_attn=flash_attn,
        type_k=type_k,
        type_v=type_v,
        swa_full=setting_bool(choice, "swa-full", default=constants.swa_full),
        n_gpu_layers=ngl,
        cpu_moe_layers=cpu_moe,
        override_tensor=_parse_override(setting(choice, "override-tensor", "ot")),
        split_mode=split_mode,
        tensor_split=tensor_split,
        kv_offload=not setting_bool(choice, "no-kv-offload", "nkvo"),
        fit=setting_bool(choice, "fit", default=constants.fit),
        fit_target_bytes=(fit_target or 0) * MiB,
        n_rs_seq=constants.n_rs_seq,
        notes=tuple(notes),
        matrix_row_padding=constants.matrix_row_padding,
        threads=setting(choice, "threads"),
        **placement_flags(choice, workload, constants),
    )


def placement_flags(choice: EngineChoice, workload: Workload, constants: LlamaCppConstants) -> dict[str, Any]:
    """The Settings fields of docs/engines/llamacpp.md#llamacpp-split-modes, #llamacpp-user-placement,
    #llamacpp-kv-dequant-scratch and #llamacpp-extra-models."""
    return {
        "main_gpu": max(0, setting_int(choice, "main-gpu", "mg", default=0) or 0),
        # -ts counts only on several GPUs (fit_keeps_margin reads it from tensor_split)
        "user_placement": any(setting(choice, name) for name in USER_PLACEMENT if name not in ("tensor-split", "ts")),
        "ctx_auto": workload.context is None and not setting(choice, "ctx-size", "c", "n-ctx", "num-ctx"),
        "kv_dequant_scratch": (resolved_build(choice) or 0) >= constants.kv_dequant_scratch_build,
        "extra_models": extra_models(choice),
        **projector_flags(choice),
        **draft_flags(choice),
    }


def draft_flags(choice: EngineChoice) -> dict[str, Any]:
    """The ``-md`` draft model the pipeline read and the flags that place its context (``-ngld``, ``-devd``,
    ``-ctkd`` / ``-ctvd``, ``-cd``): docs/engines/llamacpp.md#llamacpp-draft-model."""
    draft = choice.draft
    if draft is None or draft.spec is None:
        return {}
    ngl = setting_int(choice, "n-gpu-layers-draft", "ngld", "gpu-layers-draft", "spec-draft-ngl", default=-1)
    return {
        "draft_spec": draft.spec,
        "draft_file": draft.name,
        "draft_ngl": -1 if ngl is None else ngl,
        "draft_devices": draft_devices(setting(choice, "device-draft", "devd", "spec-draft-device")),
        "draft_type_k": kv_type(setting(choice, "cache-type-k-draft", "ctkd", "spec-draft-type-k") or "f16"),
        "draft_type_v": kv_type(setting(choice, "cache-type-v-draft", "ctvd", "spec-draft-type-v") or "f16"),
        "draft_ctx_asked": setting_int(choice, "ctx-size-draft", "cd"),
    }


def draft_devices(text: str | None) -> tuple[int, ...] | None:
    """``-devd``: None when unset (the model's devices), () for ``none`` / host devices (the CPU), else the GPU
    indices of the named devices (``CUDA1``, ``Vulkan0,Vulkan1``), in the order given."""
    if not text or not text.strip():
        return None
    indices = []
    for name in text.split(","):
        if name.strip().lower() == "none":
            continue
        device = override_device(name)
        if device >= 0 and device not in indices:
            indices.append(device)
    return tuple(indices)


def projector_flags(choice: EngineChoice) -> dict[str, Any]:
    """The ``--mmproj`` file the pipeline read (docs/engines/llamacpp.md#llamacpp-extra-models): llama.cpp's clip code
    loads its tensors on the first GPU backend, on the CPU with ``--no-mmproj-offload``."""
    projector = choice.projector
    if projector is None or projector.weight_bytes is None:
        return {}
    return {
        "projector_file": projector.name,
        "projector_bytes": projector.weight_bytes,
        "projector_on_gpu": not setting_bool(choice, "no-mmproj-offload"),
        "projector_origin": projector.origin,
        "projector_repo": projector.repo_id,
    }


def pipeline_copies(settings: Settings, n_devices: int, n_layer: int, constants: LlamaCppConstants) -> int:
    """Scheduler input copies (docs/engines/llamacpp.md#llamacpp-pipeline-parallel): llama_context enables pipeline
    parallelism — ``n_copies = GGML_SCHED_MAX_COPIES`` — when the model spans several devices, every layer and the
    output are offloaded, the split is by layer, the KV cache is offloaded and no tensor is overridden
    (``-ot``, ``--cpu-moe`` / ``--n-cpu-moe``); otherwise 1."""
    parallel = (
        n_devices > 1
        and settings.n_gpu_layers > n_layer
        and settings.split_mode == "layer"
        and settings.kv_offload
        and not settings.override_tensor
        and settings.cpu_moe_layers == 0
    )
    return constants.sched_max_copies if parallel else 1


def extra_models(choice: EngineChoice) -> tuple[tuple[str, str], ...]:
    """(flag, file) for each other GGUF the line loads (``-md``, ``--mmproj``), the name capped at 200 characters."""
    read = {
        "mmproj": choice.projector is not None and choice.projector.weight_bytes is not None,
        "model-draft": choice.draft is not None and choice.draft.spec is not None,
    }
    named = ((flag, setting(choice, flag, EXTRA_ALIASES[flag])) for flag in ("model-draft", "mmproj"))
    return tuple((flag, value[:200]) for flag, value in named if value and not read[flag])


def resolved_build(choice: EngineChoice) -> int | None:
    """The llama.cpp build the rules are for (``--set build=N``); None when not given (older rules apply)."""
    build = setting_int(choice, "build")
    return build if build is not None and build > 0 else None


def resolve_layers(spec: ModelSpec, choice: EngineChoice) -> tuple[int, int]:
    """(layers on the GPUs of n_layer + 1, blocks whose experts stay on the CPU): ``-ngl`` (all when unset or out
    of range), ``--cpu-moe`` / ``--n-cpu-moe``."""
    n_layer = spec.num_layers
    ngl = setting_int(choice, "n-gpu-layers", "ngl", "gpu-layers")
    if ngl is None or ngl < 0 or ngl > n_layer + 1:
        ngl = n_layer + 1
    cpu_moe = n_layer if setting_bool(choice, "cpu-moe", "cmoe") else 0
    cpu_moe = max(cpu_moe, setting_int(choice, "n-cpu-moe", "ncmoe", default=0) or 0)
    return ngl, min(cpu_moe, n_layer)


def resolve_binary(choice: EngineChoice, constants: LlamaCppConstants) -> str:
    """llama-server or llama-cli (their slot and output defaults differ)."""
    binary = (setting(choice, "binary") or constants.binary).strip().lower()
    if binary in ("server", "llama-server"):
        return "llama-server"
    if binary in ("cli", "llama-cli", "main", "llama-bench", "library"):
        return "llama-cli"
    raise UsageError(f"binary={binary!r}: use llama-server or llama-cli")


def resolve_slots(
    choice: EngineChoice, workload: Workload, binary: str, constants: LlamaCppConstants
) -> tuple[int, bool, list[str]]:
    """(parallel sequences, unified KV cache, notes): ``-np`` when given, else the workload's concurrency, else
    llama-server's auto slots sharing one unified cache (which a note says)."""
    notes: list[str] = []
    parallel = setting_int(choice, "parallel", "np", "n-parallel")
    unified_setting = setting(choice, "kv-unified", "kvu")
    if parallel is None or parallel < 0:
        if workload.concurrency > 1:
            parallel = workload.concurrency
        elif binary == "llama-server":
            parallel = constants.server_auto_parallel
            if unified_setting is None:
                unified_setting = "true"
                notes.append(f"llama-server -np auto: {parallel} slots sharing one unified KV cache")
        else:
            parallel = 1
    kv_unified = (
        setting_bool(choice, "kv-unified", "kvu", default=constants.kv_unified)
        if unified_setting is None
        else unified_setting.strip().lower() in ("", "1", "true", "on", "yes")
    )
    return parallel, kv_unified, notes


def resolve_ctx_size(spec: ModelSpec, choice: EngineChoice, workload: Workload, parallel: int, kv_unified: bool) -> int:
    """``ctx-size`` (all sequences together) as given, else the per-sequence context × the sequences held."""
    ctx_size = setting_int(choice, "ctx-size", "c", "n-ctx", "num-ctx")
    if ctx_size is not None and ctx_size > 0:
        return ctx_size
    per_seq = workload.context or spec.max_position_embeddings
    if per_seq is None:
        raise UsageError("the model states no context length (n_ctx_train); pass --context or --set ctx-size=N")
    # a unified cache shared by auto slots holds `concurrency` full sequences; per-sequence streams hold one each
    return per_seq * max(1, workload.concurrency if kv_unified else parallel)


def reserve_note(choice: EngineChoice, constants: LlamaCppConstants, binary: str, rows: int) -> list[str]:
    """The assumed llama-server reserve, when no build, version or reserve setting says which."""
    if binary != "llama-server" or choice.version:
        return []
    if any(setting(choice, name) for name in ("build", "reserve-outputs", "n-outputs-max")):
        return []
    return [
        f"llama-server reserve: {rows} logits rows per ubatch (n_outputs_max = slots, builds from "
        f"{constants.server_outputs_cap_build} on: the newest release hfvram models; --engine llama.cpp@bN or "
        "@vX.Y.Z for another build)"
    ]


def requested_build(choice: EngineChoice) -> int | None:
    """The llama.cpp build asked for: ``--set build=N``, else the build of ``--engine llama.cpp@bN`` / ``@vX.Y.Z`` (a
    tag maps to the build it was cut from, ``[semver]`` of rules.toml); None when neither is given."""
    build = setting_int(choice, "build")
    if build is None and choice.version:
        key = version_key(releases.as_build(ENGINE, choice.version)[0])
        build = key[0] if len(key) == 1 else None
    return build


def resolve_batches(
    choice: EngineChoice, constants: LlamaCppConstants, binary: str, parallel: int
) -> tuple[int, int, int]:
    """(n_batch, n_ubatch, n_outputs_max). The prompt graph of the reserve holds ``min(ubatch, n_outputs_max)`` logits
    rows; ``n_outputs_max`` is n_batch except in llama-server from build 9460 on (de6f727a, 2026-06-01:
    ``server_n_outputs_max`` = n_parallel × (1 + draft)). Without ``build=N`` hfvram assumes an older llama-server
    (every published log we hold: one row per ubatch token); ``reserve-outputs=ubatch|slots`` forces the era,
    ``n-outputs-max=N`` sets the cap directly."""
    n_batch = setting_int(choice, "batch-size", "b", default=constants.n_batch) or constants.n_batch
    n_ubatch = setting_int(choice, "ubatch-size", "ub", default=constants.n_ubatch) or constants.n_ubatch
    n_ubatch = min(n_ubatch, n_batch)
    n_outputs_max = n_batch
    if binary == "llama-server":
        build = requested_build(choice)
        default = constants.server_reserve_outputs
        if build is not None and build > 0:
            default = "slots" if build >= constants.server_outputs_cap_build else "ubatch"
        era = (setting(choice, "reserve-outputs") or default).strip().lower()
        if era not in ("ubatch", "slots"):
            raise UsageError(f"reserve-outputs={era!r}: use ubatch (builds before the cap) or slots (n_outputs_max)")
        if era == "slots":
            n_outputs_max = min(n_batch, parallel)
    n_outputs_max = setting_int(choice, "n-outputs-max", default=n_outputs_max) or n_outputs_max
    return n_batch, n_ubatch, n_outputs_max


def resolve_kv_types(
    spec: ModelSpec, choice: EngineChoice, workload: Workload, constants: LlamaCppConstants, flash_attn: bool
) -> tuple[str, str]:
    """(cache-type-k, cache-type-v), with llama.cpp's refusals: different K and V types for MLA, a quantized
    V cache without flash attention."""
    default_kv = None if workload.kv_dtype in ("auto", "") else kv_type(workload.kv_dtype)
    type_k = kv_type(setting(choice, "cache-type-k", "ctk") or default_kv or constants.type_k)
    type_v = kv_type(setting(choice, "cache-type-v", "ctv") or default_kv or constants.type_v)
    if type_k != type_v and any(layer.kind is LayerKind.MLA for layer in spec.layers):
        # llama_init_from_model: "model does not support different K and V cache types" (MLA keeps V inside K);
        # seen in benchmarks/data/llamacpp_truth.jsonl (deepseek-v2-lite, q8_0 / f16)
        raise UsageError(f"llama.cpp refuses different K ({type_k}) and V ({type_v}) cache types for an MLA model")
    if GGML_BLOCKS[type_v][0] > 1 and not flash_attn:
        raise UsageError(f"llama.cpp needs flash-attn for a quantized V cache (cache-type-v={type_v})")
    return type_k, type_v


def resolve_split(choice: EngineChoice) -> tuple[str, tuple[float, ...]]:
    """(split-mode, tensor-split proportions)."""
    split_mode = (setting(choice, "split-mode", "sm") or "layer").strip().lower()
    if split_mode not in ("layer", "row", "none"):
        raise UsageError(f"split-mode={split_mode!r}: use layer, row or none")
    ts_text = setting(choice, "tensor-split", "ts")
    if not ts_text:
        return split_mode, ()
    try:
        tensor_split = tuple(float(part) for part in re.split(r"[,/]", ts_text) if part.strip())
    except ValueError as exc:
        raise UsageError(f"tensor-split={ts_text!r} is not a list of numbers") from exc
    if any(share < 0 for share in tensor_split) or not any(tensor_split):
        raise UsageError(f"tensor-split={ts_text!r} needs non-negative proportions")
    return split_mode, tensor_split


def matches_override(name: str, settings: Settings) -> str | None:
    """The buffer type of the first ``-ot`` pattern matching ``name`` (llama.cpp takes the first match)."""
    for pattern, buft in settings.override_tensor:
        if re.search(pattern, name):
            return "CPU" if override_device(buft) < 0 else buft
    return None


def override_target(name: str, settings: Settings) -> int | None:
    """The device ``-ot`` sends tensor ``name`` to (−1 = host memory), None when no pattern matches."""
    buft = matches_override(name, settings)
    return None if buft is None else override_device(buft)


def packaged_row_padding() -> int:
    """``matrix_row_padding`` of the packaged llama.cpp.toml."""
    return int(load_engine_data(ENGINE)["defaults"]["matrix_row_padding"])
