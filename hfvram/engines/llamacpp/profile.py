"""llama.cpp (llama-server / llama-cli): exact KV cells, weights per device, measured compute-buffer model.

Rules: docs/engines/llamacpp.md (defaults #llamacpp-defaults, weights #llamacpp-weights, KV #llamacpp-kv-cache, compute
buffer #llamacpp-compute-buffer, output buffer #llamacpp-output-buffer and --fit
#llamacpp-fit) and the ggml type table docs/engines/common.md#gguf-types; constants in ``hfvram/engines/llamacpp/rules.toml``. Checked against real
llama.cpp loads in ``benchmarks/data/llamacpp_truth.jsonl`` (docs/accuracy.md).

The modules of this folder, in the order an estimate runs them: ``settings`` (the settings with llama.cpp's
defaults) → ``kv``, ``placement``, ``compute`` (the buffers) → ``breakdown`` (one configuration's buffers and the
terms read from them) → ``narrate`` (warnings and explanations) → this profile. The --fit offload plan is ``fit``
(its records ``offload_plan``, its memory model ``memory_model``), its verdict on an estimate ``offload``.

Settings use llama.cpp's own option names (long or short): ``ctx-size``/``c``, ``batch-size``/``b``,
``ubatch-size``/``ub``, ``flash-attn``/``fa``, ``cache-type-k``/``ctk``, ``cache-type-v``/``ctv``,
``n-gpu-layers``/``ngl``, ``parallel``/``np``, ``kv-unified``/``kvu``, ``swa-full``, ``cpu-moe``/``cmoe``,
``n-cpu-moe``/``ncmoe``, ``override-tensor``/``ot``, ``split-mode``/``sm``, ``tensor-split``/``ts``,
``no-kv-offload``/``nkvo``, ``fit``, ``fit-target``/``fitt``, plus ``binary`` (llama-server | llama-cli).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from hfvram.engines.contract import Narration, StagedProfile, Terms
from hfvram.engines.llamacpp.breakdown import Breakdown, breakdown, decode_bound, per_gpu_of
from hfvram.engines.llamacpp.narrate import explain_lines, narrate_warnings
from hfvram.engines.llamacpp.placement import usable_bytes
from hfvram.engines.llamacpp.settings import ENGINE, LlamaCppConstants, Settings, pad_cells, resolve_settings
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, PerGpu, Workload
from hfvram.spec import ModelSpec


def constants_for(choice: EngineChoice) -> tuple[str, LlamaCppConstants, dict[str, float]]:
    """(rule version, llama.cpp's constants at it, the ``[compute]`` factors) for ``choice``'s release."""
    version, constants = PROFILE.constants(choice.version)
    return version, constants, PROFILE.compute_factors()


@dataclass(frozen=True)
class Sized:
    """The breakdown step's answer: llama.cpp's buffers for the resolved settings, the worst GPU's four terms read
    from them, the capacity searched over the whole breakdown, the decode bound, and the constants they used."""

    parts: Breakdown
    constants: LlamaCppConstants
    per_gpu: PerGpu
    capacity: Capacity
    decode: float | None


class LlamaCppProfile(StagedProfile[LlamaCppConstants, Settings, Sized]):
    """llama-server / llama-cli on CUDA, ROCm, Metal or Vulkan (one process, layer split over GPUs)."""

    name = ENGINE
    constants_type = LlamaCppConstants

    def compute_factors(self) -> dict[str, float]:
        """The ``[compute]`` table: the fitted compute-buffer factors (docs/engines/llamacpp.md#llamacpp-compute-buffer)."""
        return dict(self.data["compute"])

    def settings_for(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> tuple[str, Settings, LlamaCppConstants, dict[str, float]]:
        """(rule version, settings, constants, compute factors): what the --fit planner starts from."""
        version, constants = self.constants(choice.version)
        return version, resolve_settings(spec, choice, workload, constants), constants, self.compute_factors()

    def resolve(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: LlamaCppConstants,
        version: str,
    ) -> Settings:
        return resolve_settings(spec, choice, workload, constants)

    def breakdown(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: LlamaCppConstants,
        settings: Settings,
    ) -> Sized:
        return self.size(spec, hardware, settings, constants, self.compute_factors())

    def size(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        settings: Settings,
        constants: LlamaCppConstants,
        compute: Mapping[str, float],
    ) -> Sized:
        """The buffers of ``settings``, their per-GPU terms, capacity and decode bound (a profile built on
        llama.cpp, such as Ollama, sizes its own settings and constants with it)."""
        parts = breakdown(spec, hardware, settings, constants, compute)
        capacity = self._capacity(spec, hardware, settings, constants, compute, settings.n_ctx_seq * settings.n_stream)
        return Sized(parts, constants, per_gpu_of(parts, hardware), capacity, decode_bound(spec, hardware, parts))

    def terms(self, parts: Sized, spec: ModelSpec, hardware: Hardware | None, workload: Workload) -> Terms:
        settings = parts.parts.settings
        kv_dtype = settings.type_k if settings.type_k == settings.type_v else f"{settings.type_k}/{settings.type_v}"
        return Terms(
            per_gpu=parts.per_gpu,
            capacity=parts.capacity,
            decode=parts.decode,
            context=settings.n_ctx_seq,
            kv_dtype=kv_dtype,
            tp=1,
            pp=hardware.count if hardware and settings.split_mode == "layer" else 1,
        )

    def narrate(
        self, parts: Sized, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Narration:
        warnings = narrate_warnings(spec, hardware, parts.parts, parts.per_gpu, parts.constants)
        return Narration(tuple(warnings), explain_lines(spec, hardware, parts.parts, parts.constants))

    def report(self, parts: Sized, choice: EngineChoice, version: str) -> dict[str, object]:
        report = {"name": self.name, "version": choice.version, "rules": version, **parts.parts.settings.as_dict()}
        draft = parts.parts.draft
        return {**report, "draft_model": draft.as_dict() if draft else None}

    # --explain has no measurements line yet: adding one is a change of output (docs/accuracy.md holds the checks)
    explains_measurements = False

    def finished(self, result: Estimate, parts: Sized) -> Estimate:
        """On a mixed set the figures are those of its fullest device against its own memory: which one it is."""
        hardware = result.hardware
        return replace(result, worst_device=parts.parts.worst) if hardware is not None and hardware.mixed else result

    def offload(self, result: Estimate, choice: EngineChoice, workload: Workload) -> Estimate:
        # the --fit planner is imported only when an estimate is offloaded
        from hfvram.engines.llamacpp.offload import apply_to_estimate

        return apply_to_estimate(result, choice, workload)

    def _capacity(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        settings: Settings,
        constants: LlamaCppConstants,
        compute: Mapping[str, float],
        kv_tokens: int,
    ) -> Capacity:
        """kv_tokens = cells the cache holds; max_context / max_concurrency by searching the whole breakdown (the
        compute buffer grows with n_kv without flash attention), in steps of the 256-cell padding."""
        if hardware is None:
            return Capacity(kv_tokens=kv_tokens)
        pad = constants.n_ctx_pad
        seqs_now = settings.n_stream if settings.n_stream > 1 else max(1, settings.n_ctx // max(1, settings.n_ctx_seq))
        per_seq_now = settings.n_ctx_seq if settings.n_stream > 1 else settings.n_ctx // seqs_now

        def fits(per_seq: int, seqs: int) -> bool:
            trial = with_context(settings, per_seq, seqs, pad)
            parts = breakdown(spec, hardware, trial, constants, compute)
            dev = parts.worst
            return parts.placement.gpu_weights[dev] + parts.placement.gpu_kv[dev] + parts.gpu_compute[
                dev
            ] + parts.overhead <= usable_bytes(hardware, trial, dev)

        limit = max(1, (spec.max_position_embeddings or per_seq_now) // pad)
        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid * pad, seqs_now):
                lo = mid
            else:
                hi = mid - 1
        max_context = lo * pad
        max_conc = 0
        if fits(per_seq_now, 1):
            lo, hi = 1, 2
            while hi <= 65536 and fits(per_seq_now, hi):
                lo, hi = hi, hi * 2
            while lo < hi - 1:
                mid = (lo + hi) // 2
                if fits(per_seq_now, mid):
                    lo = mid
                else:
                    hi = mid
            max_conc = lo
        return Capacity(kv_tokens=kv_tokens, max_concurrency=float(max_conc), max_context=max_context)


def with_context(settings: Settings, per_seq: int, seqs: int, pad: int = 256) -> Settings:
    """The same settings holding ``seqs`` sequences of ``per_seq`` tokens: one unified cache of
    ``per_seq × seqs`` cells, or ``seqs`` streams of ``per_seq`` cells."""
    if settings.n_stream > 1 or (not settings.kv_unified and seqs > 1):
        cells = pad_cells(per_seq, pad)
        return replace(settings, n_ctx=cells * seqs, n_ctx_seq=cells, n_stream=seqs, n_seq_max=seqs)
    n_ctx = pad_cells(per_seq * seqs, pad)
    return replace(settings, n_ctx=n_ctx, n_ctx_seq=n_ctx, n_stream=1, n_seq_max=max(settings.n_seq_max, seqs))


PROFILE = LlamaCppProfile()
