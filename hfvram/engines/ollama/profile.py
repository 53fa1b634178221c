"""Ollama: llama.cpp underneath, with Ollama's own defaults — and, before ``ollama@0.13``, its legacy estimator.

Rules: docs/engines/ollama.md (eras, defaults, versions #ollama-versions), docs/engines/common.md#kv-dtype-sizes
(legacy KV bytes), docs/engines/common.md#cuda-context (457 MiB per GPU); constants in
``hfvram/engines/ollama/rules.toml``, one ``[versions."X"]`` table per release where a rule changed (``--engine
ollama@0.5`` … ``ollama@0.30``; no version = the newest).

- Current (``0.13`` and later): memory is llama.cpp's graph allocation (this module reuses ``llamacpp``'s
  functions) — Ollama's own allocation dry run from 0.13, llama-server with ``--fit`` from 0.30 — with Ollama's
  defaults: ``num_ctx`` 4096, tiered by total VRAM from 0.15.5 (≥ 47 GiB → 262 144, ≥ 23 GiB → 32 768, else 4096;
  never above the model's n_ctx_train), ``num_parallel`` 1, ``num_batch`` 512, KV f16, flash attention on for every architecture from 0.30 (for
  the architectures of that release's list before), and 457 MiB (CUDA/ROCm) / 512 MiB (Metal) per GPU.
- Legacy (before ``0.13``): ``llm/memory.go::estimateGPULayers`` + ``fs/ggml/ggml.go::GraphSize`` — KV with the
  approximate q8_0 = 1.0 / q4_0 = 0.5 bytes, the per-architecture graph formulas, one spare layer per GPU, the
  layer count it would offload (``layers.offload``) and ``memory.required.*``; ``num_ctx`` 2048 (before 0.6.7)
  or 4096; ``num_parallel`` auto (4 slots before 0.6.7, 2 until 0.10, when the model then fits whole) or 1.

The modules: ``settings`` (constants, Ollama's settings, the llama-server arguments), ``legacy`` (the legacy
estimator), this profile (the five steps of the contract, either era), ``offload`` (its placement into RAM).

Settings (Ollama's names): ``num_ctx`` (``OLLAMA_CONTEXT_LENGTH``), ``num_parallel`` (``OLLAMA_NUM_PARALLEL``),
``num_batch``, ``num_gpu`` (layers on the GPU), ``flash_attention`` (``OLLAMA_FLASH_ATTENTION``),
``kv_cache_type`` (``OLLAMA_KV_CACHE_TYPE``), ``gpu_overhead`` (``OLLAMA_GPU_OVERHEAD``, bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from hfvram.engines.contract import Narration, StagedProfile, Terms
from hfvram.engines.llamacpp import profile as llamacpp
from hfvram.engines.llamacpp.settings import resolve_settings
from hfvram.engines.ollama.legacy import LegacySized, legacy_engine_report, legacy_narration, legacy_size
from hfvram.engines.ollama.settings import (
    ENGINE,
    OllamaConstants,
    Settings,
    engine_report,
    gguf_arch,
    llama_server_settings,
    minimum_memory,
    resolve,
)
from hfvram.estimate.common import MiB, require_weights, setting_int
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, Workload
from hfvram.spec import ModelSpec


@dataclass(frozen=True)
class CurrentSized:
    """From ``0.13`` on: llama-server's own accounting with Ollama's arguments (``lc_choice``), Ollama's per-GPU
    minimum as the overhead (``overhead``), sized by llama.cpp's profile."""

    settings: Settings
    lc_choice: EngineChoice
    lc_version: str
    overhead: int
    runner: str
    sized: llamacpp.Sized


def current_size(
    spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, constants: OllamaConstants, settings: Settings
) -> CurrentSized:
    """llama.cpp's buffers for the llama-server Ollama starts, with its overhead replaced by Ollama's minimum."""
    lc_choice = EngineChoice(
        name="llama.cpp", settings=llama_server_settings(choice, settings, constants.llama_server_build)
    )
    lc_version, lc_constants = llamacpp.PROFILE.constants(lc_choice.version)
    gpu_overhead = setting_int(choice, "gpu_overhead", "OLLAMA_GPU_OVERHEAD", default=constants.gpu_overhead_bytes)
    overhead = minimum_memory(hardware, constants) + (gpu_overhead or 0)
    lc_constants = replace(lc_constants, cuda_overhead_mib=overhead / MiB, metal_overhead_mib=overhead / MiB)
    lc_settings = resolve_settings(spec, lc_choice, Workload(kv_dtype=settings.kv_cache_type), lc_constants)
    require_weights(spec)
    sized = llamacpp.PROFILE.size(spec, hardware, lc_settings, lc_constants, llamacpp.PROFILE.compute_factors())
    return CurrentSized(settings, lc_choice, lc_version, overhead, constants.runner, sized)


class OllamaProfile(StagedProfile[OllamaConstants, Settings, CurrentSized | LegacySized]):
    """Ollama's five steps; the breakdown is the legacy estimator's before ``0.13`` (``legacy`` in the rules),
    llama.cpp's from then on."""

    name = ENGINE
    constants_type = OllamaConstants
    # the current era checks the weights after resolving llama-server's settings, the legacy one never
    requires_weights = False

    @property
    def model_type_to_arch(self) -> Mapping[str, str]:
        """HF model_type -> GGUF architecture (``[model_type_to_arch]``), for specs read from config.json."""
        mapping: Mapping[str, str] = self.data.get("model_type_to_arch", {})
        return mapping

    def resolve(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: OllamaConstants,
        version: str,
    ) -> Settings:
        settings = replace(resolve(spec, hardware, choice, workload, constants, self.model_type_to_arch), rules=version)
        if not constants.legacy and settings.num_parallel <= 0:
            settings = replace(settings, num_parallel=1)  # OLLAMA_NUM_PARALLEL 0 means 1 from 0.10 on
        return settings

    def breakdown(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: OllamaConstants,
        settings: Settings,
    ) -> CurrentSized | LegacySized:
        if constants.legacy:
            arch = gguf_arch(spec, self.model_type_to_arch)
            return legacy_size(spec, hardware, choice, constants, settings, arch)
        return current_size(spec, hardware, choice, constants, settings)

    def terms(
        self, parts: CurrentSized | LegacySized, spec: ModelSpec, hardware: Hardware | None, workload: Workload
    ) -> Terms:
        if isinstance(parts, CurrentSized):
            return llamacpp.PROFILE.terms(parts.sized, spec, hardware, workload)
        settings = parts.settings
        return Terms(
            per_gpu=parts.per_gpu,
            capacity=Capacity(kv_tokens=settings.num_ctx * settings.num_parallel),
            decode=parts.decode,
            context=settings.num_ctx,
            kv_dtype=settings.kv_cache_type,
            tp=1,
            pp=parts.count,
        )

    def narrate(
        self,
        parts: CurrentSized | LegacySized,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
    ) -> Narration:
        if isinstance(parts, LegacySized):
            warnings, explain = legacy_narration(
                spec, hardware, parts.settings.rules, parts.constants, parts.settings, parts.parts, parts.count
            )
            return Narration(tuple(warnings), explain)
        lc = llamacpp.PROFILE.narrate(parts.sized, spec, hardware, parts.lc_choice, workload)
        overhead = f"Ollama's per-GPU minimum {parts.overhead / MiB:.0f} MiB (ml/device.go MinimumMemory + OLLAMA_GPU_OVERHEAD)"
        return Narration((*parts.settings.notes, *lc.warnings), {**lc.explain, "overhead": overhead})

    def report(self, parts: CurrentSized | LegacySized, choice: EngineChoice, version: str) -> dict[str, object]:
        if isinstance(parts, LegacySized):
            return legacy_engine_report(parts.settings, choice, version, parts.parts, parts.placed)
        return {
            **llamacpp.PROFILE.report(parts.sized, parts.lc_choice, parts.lc_version),
            **engine_report(parts.settings, choice, version),
            "runs": (
                f"llama-server --fit (llama.cpp rules {parts.lc_version})"
                if parts.runner == "llama-server"
                else f"Ollama's allocation dry run of the llama.cpp graph (llama.cpp rules {parts.lc_version})"
            ),
        }

    # --explain has no measurements line yet: adding one is a change of output (docs/accuracy.md holds the checks)
    explains_measurements = False

    def finished(self, result: Estimate, parts: CurrentSized | LegacySized) -> Estimate:
        # from 0.13 on: the mixed-set device llama.cpp's figures are for
        return llamacpp.PROFILE.finished(result, parts.sized) if isinstance(parts, CurrentSized) else result

    def offload(self, result: Estimate, choice: EngineChoice, workload: Workload) -> Estimate:
        # the placement planners are imported only when an estimate is offloaded
        from hfvram.engines.ollama.offload import apply_to_estimate

        return apply_to_estimate(result, choice, workload)


PROFILE = OllamaProfile()
