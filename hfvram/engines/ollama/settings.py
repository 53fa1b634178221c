"""Ollama's constants and settings: ``num_ctx``, ``num_parallel``, ``num_batch``, the KV type and flash attention
with Ollama's defaults for the release (docs/engines/ollama.md#ollama-defaults), and the llama-server arguments
Ollama starts from them; constants in ``hfvram/engines/ollama/rules.toml``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hfvram.engines.contract import Constants
from hfvram.engines.llamacpp.settings import KV_ALIASES
from hfvram.errors import UsageError
from hfvram.estimate.common import GiB, MiB, setting, setting_bool, setting_int
from hfvram.estimate.types import EngineChoice, Hardware, Workload
from hfvram.spec import ModelSpec

ENGINE = "ollama"


@dataclass(frozen=True)
class OllamaConstants(Constants):
    """The ``[defaults]`` and ``[versions]`` keys of ``rules.toml`` (each value's source is beside it there),
    checked when they load; ``[model_type_to_arch]`` is a table of names, read as a mapping."""

    minimum_memory_cuda_mib: int
    minimum_memory_metal_mib: int
    gpu_overhead_bytes: int
    num_parallel: int
    auto_parallel: int
    num_batch: int
    kv_cache_type: str
    kv_cache_types: list[str]
    #: [GiB of total VRAM at least, num_ctx], largest first
    num_ctx_tiers: list[list[int]]
    num_ctx_no_gpu: int
    flash_attention_archs: list[str]
    #: from 0.30: llama-server gets ``--flash-attn auto`` whatever the architecture (the list no longer decides)
    flash_attention_all: bool
    legacy: bool
    legacy_weights_include_kv: bool
    runner: str
    legacy_forward_layers: bool
    #: the llama.cpp build of the llama-server the release ships (0: Ollama's own runner, before 0.30)
    llama_server_build: int
    gptoss_graph: str
    #: KV dtype -> bytes per element as the legacy estimator counts them
    legacy_kv_bytes: dict[str, float]
    gptoss_swa_cells: int


def gguf_arch(spec: ModelSpec, mapping: Mapping[str, str]) -> str:
    """The GGUF architecture name Ollama switches on: the GGUF's own, else mapped from config.json's model_type
    (``mapping``: the ``[model_type_to_arch]`` table)."""
    arch = spec.extra.get("gguf_arch") if spec.extra else None
    if isinstance(arch, str) and arch:
        return arch
    return (
        str(mapping.get(spec.model_type or "", spec.model_type or ""))
        if isinstance(mapping, Mapping)
        else (spec.model_type or "")
    )


def default_num_ctx(hardware: Hardware | None, constants: OllamaConstants) -> int:
    """server/routes.go: num_ctx from the total VRAM of all GPUs (tiers in ollama.toml)."""
    if hardware is None:
        return constants.num_ctx_no_gpu
    total_gib = hardware.total_gpu_memory_bytes / GiB  # every GPU's, a mixed set's too
    for threshold, num_ctx in constants.num_ctx_tiers:
        if total_gib >= threshold:
            return int(num_ctx)
    return constants.num_ctx_no_gpu


def flash_attention_default(spec: ModelSpec, constants: OllamaConstants, arch_map: Mapping[str, str]) -> bool:
    """Flash attention without OLLAMA_FLASH_ATTENTION: the per-architecture list before 0.30, every architecture
    from 0.30 on (``--flash-attn auto``, on where the devices support it: docs/engines/ollama.md#ollama-flash-attention)."""
    return constants.flash_attention_all or gguf_arch(spec, arch_map) in tuple(constants.flash_attention_archs)


def minimum_memory(hardware: Hardware | None, constants: OllamaConstants) -> int:
    """Ollama's fixed reserve per GPU (ml/device.go::MinimumMemory) plus OLLAMA_GPU_OVERHEAD."""
    metal = hardware is not None and (hardware.gpu.unified_memory or hardware.gpu.vendor == "apple")
    mib = constants.minimum_memory_metal_mib if metal else constants.minimum_memory_cuda_mib
    return mib * MiB


@dataclass(frozen=True)
class Settings:
    """Ollama's settings as the estimate used them (notes: what resolving them changed, for the warnings)."""

    num_ctx: int  # per sequence
    num_parallel: int
    num_batch: int
    kv_cache_type: str
    flash_attention: bool
    notes: tuple[str, ...] = ()
    #: the rule version the settings were resolved at ("" when built by hand, as the accuracy script does)
    rules: str = ""


def resolve(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    constants: OllamaConstants,
    arch_map: Mapping[str, str],
) -> Settings:
    """num_ctx per sequence, num_parallel, num_batch, KV type and flash attention with Ollama's defaults."""
    notes: list[str] = []
    num_ctx = setting_int(choice, "num_ctx", "OLLAMA_CONTEXT_LENGTH") or workload.context
    if num_ctx is None:
        num_ctx = default_num_ctx(hardware, constants)
        tiered = len(constants.num_ctx_tiers) > 1
        notes.append(
            f"num_ctx default {num_ctx} "
            + ("(Ollama tiers it by total VRAM)" if tiered else "(this release's default)")
        )
    train = spec.max_position_embeddings
    if train and num_ctx > train:
        notes.append(f"num_ctx {num_ctx} is above the model's n_ctx_train {train}: Ollama lowers it to {train}")
        num_ctx = train
    parallel = setting_int(choice, "num_parallel", "OLLAMA_NUM_PARALLEL")
    if parallel is None:
        parallel = workload.concurrency if workload.concurrency > 1 else constants.num_parallel
    if parallel <= 0:
        # OLLAMA_NUM_PARALLEL 0 (the default before 0.10): server/sched.go tries defaultParallel slots first and
        # keeps them when the model fits the GPU(s) whole, else one (legacy.legacy_auto_parallel decides)
        parallel = 0
    num_batch = setting_int(choice, "num_batch", default=constants.num_batch) or constants.num_batch
    fa_default = flash_attention_default(spec, constants, arch_map)
    flash = setting_bool(choice, "flash_attention", "OLLAMA_FLASH_ATTENTION", default=fa_default)
    kv = (
        setting(choice, "kv_cache_type", "OLLAMA_KV_CACHE_TYPE")
        or (workload.kv_dtype if workload.kv_dtype not in ("auto", "") else None)
        or constants.kv_cache_type
    )
    kv = KV_ALIASES.get(kv.lower(), kv.lower())
    if kv not in tuple(constants.kv_cache_types):
        raise UsageError(f"Ollama KV cache type {kv!r} is not one of {', '.join(constants.kv_cache_types)}")
    if kv != "f16" and not flash:
        notes.append(f"OLLAMA_KV_CACHE_TYPE={kv} needs flash attention: Ollama falls back to f16")
        kv = "f16"
    return Settings(num_ctx, parallel, num_batch, kv, flash, tuple(notes))


def llama_server_settings(choice: EngineChoice, settings: Settings, build: int = 0) -> dict[str, str]:
    """The llama-server arguments Ollama starts: -c num_ctx×num_parallel -np num_parallel -b/-ub num_batch, -fa,
    -ctk/-ctv (and -ngl num_gpu when set). ``build``: the llama.cpp build the release ships (its reserve rows
    follow it); 0 for Ollama's own runner before 0.30, sized with the pre-9460 one row per ubatch token."""
    kv = settings.kv_cache_type
    arguments = {
        "binary": "llama-server",
        **({"build": str(build)} if build > 0 else {"reserve-outputs": "ubatch"}),
        "ctx-size": str(settings.num_ctx * settings.num_parallel),
        "parallel": str(settings.num_parallel),
        "kv-unified": "false",
        "batch-size": str(settings.num_batch),
        "ubatch-size": str(settings.num_batch),
        "flash-attn": "on" if settings.flash_attention else "off",
        "cache-type-k": kv,
        "cache-type-v": kv,
    }
    num_gpu = setting_int(choice, "num_gpu")
    if num_gpu is not None:
        arguments["n-gpu-layers"] = str(num_gpu)
    return arguments


def engine_report(settings: Settings, choice: EngineChoice, version: str) -> dict[str, object]:
    return {
        "name": ENGINE,
        "version": choice.version,
        "rules": version,
        "num_ctx": settings.num_ctx,
        "num_parallel": settings.num_parallel,
        "num_batch": settings.num_batch,
        "kv_cache_type": settings.kv_cache_type,
        "flash_attention": settings.flash_attention,
    }
