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

from collections.abc import Mapping, Sequence
from dataclasses import replace

from hfvram.engines.base import ProfileBase
from hfvram.engines.llamacpp.breakdown import breakdown, decode_bound, per_gpu_of
from hfvram.engines.llamacpp.narrate import explain_lines, narrate_warnings
from hfvram.engines.llamacpp.placement import usable_bytes
from hfvram.engines.llamacpp.settings import ENGINE, Settings, pad_cells, resolve_settings
from hfvram.estimate.common import (
    Rules,
    engine_rules,
    finish_estimate,
    load_engine_data,
    require_weights,
)
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, Workload
from hfvram.spec import ModelSpec


def rules_for(choice: EngineChoice, engine: str = ENGINE) -> tuple[str, dict[str, object], dict[str, float]]:
    version, rules = engine_rules(engine, choice.version)
    compute = dict(load_engine_data(ENGINE)["compute"])
    compute.update(load_engine_data(engine).get("compute", {}))
    return version, rules, compute


class LlamaCppProfile(ProfileBase):
    """llama-server / llama-cli on CUDA, ROCm, Metal or Vulkan (one process, layer split over GPUs)."""

    name = ENGINE
    data_name = ENGINE

    def settings_for(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> tuple[str, Settings, dict[str, object], dict[str, float]]:
        version, rules, compute = rules_for(choice, self.data_name)
        return version, resolve_settings(spec, choice, workload, rules), rules, compute

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        require_weights(spec)
        version, settings, rules, compute = self.settings_for(spec, hardware, choice, workload)
        return self.finish(spec, hardware, choice, workload, version, settings, rules, compute)

    def finish(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        version: str,
        settings: Settings,
        rules: Rules,
        compute: Mapping[str, float],
        extra_warnings: Sequence[str] = (),
        extra_explain: Mapping[str, str] | None = None,
    ) -> Estimate:
        """The estimate for resolved settings: the breakdown, its per-GPU terms, capacity and narration
        (``extra_*``: what a profile built on llama.cpp, such as Ollama, adds to the warnings and explanation)."""
        require_weights(spec)
        parts = breakdown(spec, hardware, settings, rules, compute)
        per_gpu = per_gpu_of(parts, hardware)
        warnings = [*extra_warnings, *narrate_warnings(spec, hardware, parts, per_gpu, rules)]
        explain = {**explain_lines(spec, hardware, parts, rules), **(extra_explain or {})}
        engine = {"name": self.name, "version": choice.version, "rules": version, **settings.as_dict()}
        kv_dtype = settings.type_k if settings.type_k == settings.type_v else f"{settings.type_k}/{settings.type_v}"
        result = finish_estimate(
            spec=spec,
            hardware=hardware,
            engine=engine,
            workload=replace(workload, context=settings.n_ctx_seq, kv_dtype=kv_dtype),
            per_gpu=per_gpu,
            capacity=self._capacity(spec, hardware, settings, rules, compute, settings.n_ctx_seq * settings.n_stream),
            decode=decode_bound(spec, hardware, parts),
            warnings=warnings,
            explain=explain,
            tp=1,
            pp=hardware.count if hardware and settings.split_mode == "layer" else 1,
        )
        return replace(result, worst_device=parts.worst) if hardware is not None and hardware.mixed else result

    def _capacity(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        settings: Settings,
        rules: Rules,
        compute: Mapping[str, float],
        kv_tokens: int,
    ) -> Capacity:
        """kv_tokens = cells the cache holds; max_context / max_concurrency by searching the whole breakdown (the
        compute buffer grows with n_kv without flash attention), in steps of the 256-cell padding."""
        if hardware is None:
            return Capacity(kv_tokens=kv_tokens)
        pad = int(rules["n_ctx_pad"])
        seqs_now = settings.n_stream if settings.n_stream > 1 else max(1, settings.n_ctx // max(1, settings.n_ctx_seq))
        per_seq_now = settings.n_ctx_seq if settings.n_stream > 1 else settings.n_ctx // seqs_now

        def fits(per_seq: int, seqs: int) -> bool:
            trial = with_context(settings, per_seq, seqs, pad)
            parts = breakdown(spec, hardware, trial, rules, compute)
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
