"""SGLang: ``mem_fraction_static``, the RadixAttention token pool and what is left for the rest.

Rules follow ``docs/engines/sglang.md`` (read in SGLang's source; section anchors in parentheses below); constants live in
``hfvram/engines/sglang/rules.toml``. Per GPU (the worst rank):

    pre_load_free  = memory − CUDA context − NCCL init                         (sglang.md#sglang-budget baseline, common.md#cuda-context)
    rest           = (pre_load_free − weights) − pre_load_free × (1 − mem_fraction_static)
    rest          −= mamba state pool (hybrid linear attention, sglang.md#sglang-mamba-state)
    tokens         = rest // cell_size // page_size × page_size                (sglang.md#sglang-mem-fraction, sglang.md#sglang-token-pool)

So weights and the KV pool share ``pre_load_free × mem_fraction_static``; the other ``1 − mfs`` is left for
activations, CUDA graphs and the ``req_to_token`` table. hfvram reports that slack as the activations term,
the context and NCCL as overhead, and the whole device as usable.

The profile is the staged contract (hfvram/engines/contract.py): its constants (``constants.py``), then
:func:`resolve_settings` (``settings.py``), :func:`compute` (``breakdown.py``, with the token pool arithmetic of
``pool.py``), the terms, :func:`narrate` (``narration.py``) and the report.
"""

from __future__ import annotations

from dataclasses import replace

from hfvram.engines.contract import Narration, StagedProfile, Terms
from hfvram.engines.sglang.breakdown import Breakdown, compute
from hfvram.engines.sglang.constants import SglangConstants
from hfvram.engines.sglang.narration import narrate
from hfvram.engines.sglang.settings import Settings, resolve_settings
from hfvram.estimate.types import EngineChoice, Hardware, PerGpu, Workload
from hfvram.spec import ModelSpec

ENGINE = "sglang"


# ---- profile ----------------------------------------------------------------------------------------------


class SglangProfile(StagedProfile[SglangConstants, Settings, Breakdown]):
    name = ENGINE
    constants_type = SglangConstants

    # --explain has no measurements line yet: adding one is a change of output (docs/accuracy.md holds the checks)
    explains_measurements = False

    def resolve(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: SglangConstants,
        version: str,
    ) -> Settings:
        settings, notes = resolve_settings(spec, hardware, choice, workload, constants, version)
        return replace(settings, notes=tuple(notes))

    def breakdown(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: SglangConstants,
        settings: Settings,
    ) -> Breakdown:
        return compute(spec, hardware, settings, workload, constants)

    def terms(self, parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, workload: Workload) -> Terms:
        memory = hardware.gpu.gpu_memory_bytes if hardware else 0
        per_gpu = PerGpu(
            weights=parts.weights.bytes,
            kv_cache=parts.kv_needed,
            activations=int(parts.slack),
            overhead=parts.overhead,
            usable=memory,
            memory=memory,
        )
        return Terms(
            per_gpu=per_gpu,
            capacity=parts.capacity,
            decode=parts.decode,
            context=parts.context,
            kv_dtype=parts.settings.kv_cache_dtype,
            tp=parts.settings.tp,
            pp=parts.settings.pp,
            refused=parts.refused or parts.requests_short,
        )

    def narrate(
        self, parts: Breakdown, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Narration:
        warnings, explain = narrate(parts, spec, workload)
        return Narration((*parts.settings.notes, *warnings), explain)

    def report(self, parts: Breakdown, choice: EngineChoice, version: str) -> dict[str, object]:
        return engine_report(parts, choice)


def engine_report(parts: Breakdown, choice: EngineChoice) -> dict[str, object]:
    """The settings the estimate assumed, under SGLang's names (``Estimate.engine``)."""
    settings, pool = parts.settings, parts.pool
    return {
        "name": ENGINE,
        "version": settings.rules,
        "requested_version": choice.version,
        "gpu_util": settings.mem_fraction_static,
        "mem_fraction_static": settings.mem_fraction_static,
        "mem_fraction_static_source": settings.fraction_source,
        "chunked_prefill_size": settings.chunked_prefill_size,
        "cuda_graph_max_bs": settings.cuda_graph_max_bs,
        "context_length": settings.context_length,
        "kv_cache_dtype": settings.kv_cache_dtype,
        "page_size": settings.page_size,
        "cell_size": parts.cell.cell,
        "swa_full_tokens_ratio": settings.swa_full_tokens_ratio if parts.cell.hybrid_swa else None,
        "max_total_num_tokens": parts.tokens,
        "max_running_requests": parts.running,
        "max_mamba_cache_size": pool.mamba_size if pool else None,
        "req_to_token_bytes": parts.table,
        "tp_size": settings.tp,
        "pp_size": settings.pp,
        "dp_size": settings.dp_size,
        "max_req_len": parts.max_req_len,
    }


PROFILE = SglangProfile()
