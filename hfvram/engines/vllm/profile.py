"""vLLM (V1 engine): the memory budget, the KV block pool and what it holds.

Rules follow ``docs/engines/vllm.md`` (read in vLLM's source; section anchors in parentheses below); constants live in
``hfvram/engines/vllm/rules.toml`` with their sources. In short, per GPU:

    budget  = ceil(memory × gpu_memory_utilization)                      (vllm.md#vllm-budget)
    kv_pool = budget − weights − activation peak − non-torch − CUDA graphs (graphs only from v0.21)
    outside the budget: CUDA context + NCCL (and CUDA graphs before v0.21)

The KV pool is paged: per layer type a page of ``block_size`` tokens, per request the blocks
``max_memory_usage_bytes`` asks for (vllm.md#vllm-kv-specs), grouped as in ``get_kv_cache_groups`` (vllm.md#vllm-kv-groups).

The profile is the staged contract (hfvram/engines/contract.py) over the typed constants of ``constants.py``:
``resolve`` (which engine generation, ``--max-model-len auto``, then :func:`resolve_settings`: vLLM's effective
settings, ``settings.py``), ``breakdown`` (:func:`compute`: a typed :class:`Breakdown`, arithmetic only:
``breakdown.py``, with the terms of ``terms.py``, the memory arithmetic of ``memory.py`` and the paged KV cache of
``kv.py``), the terms, ``narrate`` (``narration.py``: warnings and ``--explain`` lines written from the breakdown's own
values, so a figure and its explanation cannot disagree) and the report; ``finished`` adds a speculative set-up vLLM
refuses. The V0 engine (``v0.py``) is a branch of the resolve, breakdown and narrate steps.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hfvram.engines.contract import Narration, StagedProfile, Terms
from hfvram.engines.vllm import features
from hfvram.engines.vllm import v0 as vllm_v0
from hfvram.engines.vllm.breakdown import compute
from hfvram.engines.vllm.constants import VllmConstants
from hfvram.engines.vllm.narration import narrate
from hfvram.engines.vllm.settings import Settings, resolve_settings, speculative_method
from hfvram.engines.vllm.terms import Breakdown
from hfvram.errors import UsageError
from hfvram.estimate import common
from hfvram.estimate.common import GiB, Rules
from hfvram.estimate.types import EngineChoice, Estimate, Hardware, PerGpu, Workload
from hfvram.spec import ModelSpec

ENGINE = "vllm"


# ---------------------------------------------------------------------------------------------------------
# The profile: settings -> breakdown -> terms, narration and report (hfvram/engines/contract.py)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """Step 1's answer: vLLM's settings and what was resolved around them."""

    settings: Settings
    #: the constants in force (V0: its ``[v0]`` constants laid over the release's)
    constants: VllmConstants
    #: the choice and workload the settings are for (``--max-model-len auto`` fitted; V0 without the draft)
    choice: EngineChoice
    workload: Workload
    #: the ``[[non_torch]]`` rows of rules.toml
    non_torch: tuple[Mapping[str, Any], ...]
    #: the warnings written while resolving (they come first)
    notes: tuple[str, ...] = ()
    #: the V0 engine's chunked-prefill default (None: the V1 engine)
    v0_chunked: bool | None = None


@dataclass(frozen=True)
class Outcome:
    """Step 2's answer: the breakdown, the resolution it was computed from, and V0's full-length layers."""

    parts: Breakdown
    run: Resolved
    hardware_given: bool
    #: V0: the sliding-window / chunked layers cached at full length
    windowed: int = 0


class VllmProfile(StagedProfile[VllmConstants, Resolved, Outcome]):
    name = ENGINE
    constants_type = VllmConstants

    # --explain has no measurements line yet: adding one is a change of output (docs/accuracy.md holds the checks)
    explains_measurements = False

    def resolve(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: VllmConstants,
        version: str,
    ) -> Resolved:
        non_torch = tuple(self.data.get("non_torch", ()))
        generation, notes = engine_generation(choice, constants, self.data.get("v0", {}))
        if generation == "v0":
            # V0 ran a draft in its own worker with its own cache: the draft read for V1 is not sized there
            choice = replace(choice, draft=None)
            settings, merged, chunked, v0_notes = vllm_v0.resolve_v0(
                self.data["v0"], spec, hardware, choice, workload, constants, version
            )
            notes.extend(v0_notes)
            return Resolved(settings, merged, choice, workload, non_torch, tuple(notes), v0_chunked=chunked)
        if auto_length_asked(choice):
            choice, workload, auto_note = fit_auto_length(
                spec, hardware, choice, workload, constants, version, non_torch
            )
            notes.append(auto_note)
        settings, settings_notes = resolve_settings(spec, hardware, choice, workload, constants, version)
        notes.extend(settings_notes)
        return Resolved(settings, constants, choice, workload, non_torch, tuple(notes))

    def breakdown(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: VllmConstants,
        settings: Resolved,
    ) -> Outcome:
        run = settings
        if run.v0_chunked is not None:
            parts, windowed = vllm_v0.compute_v0(
                spec, hardware, run.settings, run.workload, run.constants, run.non_torch
            )
            return Outcome(parts, run, hardware is not None, windowed)
        parts = compute(spec, hardware, run.settings, run.workload, run.constants, run.non_torch)
        return Outcome(parts, run, hardware is not None)

    def terms(self, parts: Outcome, spec: ModelSpec, hardware: Hardware | None, workload: Workload) -> Terms:
        """The per-GPU terms inside vLLM's budget (V1 and V0 alike)."""
        run, breakdown = parts.run, parts.parts
        per_gpu = PerGpu(
            weights=breakdown.weights.bytes,
            kv_cache=breakdown.kv_needed,
            activations=breakdown.activations.bytes,
            overhead=breakdown.overhead.in_budget,
            usable=int(breakdown.budget.budget) if breakdown.sized else 0,
            memory=breakdown.budget.memory,
        )
        return Terms(
            per_gpu=per_gpu,
            capacity=breakdown.capacity,
            decode=breakdown.decode,
            context=breakdown.context,
            kv_dtype=run.settings.kv_cache_dtype,
            tp=run.settings.tensor_parallel_size,
            pp=run.settings.pipeline_parallel_size,
            refused=breakdown.refused,
        )

    def narrate(
        self, parts: Outcome, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Narration:
        run, since = parts.run, self.first_version_with("cudagraph_in_budget", True)
        if run.v0_chunked is not None:
            notes, warnings, explain = vllm_v0.narrate_v0(
                since, parts.parts, spec, run.workload, run.constants, run.v0_chunked, parts.windowed
            )
            return Narration((*run.notes, *notes, *warnings), explain)
        warnings, explain = narrate(parts.parts, spec, run.workload, since)
        return Narration((*run.notes, *warnings), explain)

    def report(self, parts: Outcome, choice: EngineChoice, version: str) -> dict[str, object]:
        report = engine_report(parts.parts, parts.run.choice, version, parts.hardware_given)
        if parts.run.v0_chunked is not None:
            report["enable_chunked_prefill"] = parts.run.v0_chunked
        return report

    def finished(self, result: Estimate, parts: Outcome) -> Estimate:
        # a setup vLLM refuses at start-up is the verdict (hfvram/estimate/core.py applies it); V0 checks none
        run = parts.run
        if run.v0_chunked is not None:
            return result
        refusal = features.speculative_refusal(run.settings.speculative, result.spec, run.constants)
        return replace(result, refusal=refusal) if refusal else result


#: the values of ``--max-model-len`` that ask vLLM to pick the length (docs/engines/vllm.md#vllm-auto-length)
AUTO_LENGTHS = ("auto", "-1")


def auto_length_asked(choice: EngineChoice) -> bool:
    """``--max-model-len auto`` / ``-1`` (or ``--context auto``, which the pipeline passes as the former)."""
    value = common.setting(choice, "max-model-len")
    return value is not None and value.strip().lower() in AUTO_LENGTHS


def fit_auto_length(
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    constants: VllmConstants,
    rules_version: str,
    non_torch: Sequence[Rules],
) -> tuple[EngineChoice, Workload, str]:
    """The length vLLM's auto-fit picks (docs/engines/vllm.md#vllm-auto-length): vLLM profiles at the model's own
    length, then, when one request of that length does not fit the KV pool, takes the largest length whose
    ``max_memory_usage_bytes`` does (a binary search over 1 … the model's length); a cap (``--max-context-cap``)
    lowers the upper end. Returns the choice with that length set, the workload at it and the note saying so."""
    since = str(constants.max_model_len_auto_since or "0.12")
    if choice.version and _version_tuple(choice.version) < _version_tuple(since):
        raise UsageError(f"vLLM {choice.version} has no --max-model-len auto (-1): it came in vLLM {since}")
    derived = spec.max_position_embeddings or int(constants.fallback_max_model_len)
    upper = min(derived, workload.context_cap) if workload.context_cap else derived
    settings_at = {
        key: value
        for key, value in choice.settings.items()
        if key.replace("_", "-").lstrip("-").lower() != "max-model-len"
    }
    trial = replace(choice, settings={**settings_at, "max-model-len": str(upper)})
    trial_workload = replace(workload, context=None)
    parts = compute(
        spec,
        hardware,
        resolve_settings(spec, hardware, trial, trial_workload, constants, rules_version)[0],
        trial_workload,
        constants,
        non_torch,
    )
    fitted = upper
    if parts.one_request_short and parts.longest_single > 0:
        fitted = parts.longest_single
    cap_note = f" (--max-context-cap: the model's own is {derived:,})" if upper < derived else ""
    if hardware is None:
        note = f"max-model-len auto: without a GPU vLLM's pick is the model's length {upper:,}{cap_note}"
    elif fitted < upper:
        note = (
            f"max-model-len auto: vLLM reduces the length from {upper:,} to {fitted:,}, the longest one request's KV "
            f"cache fits in the {parts.budget.pool / GiB:.2f} GiB pool{cap_note}"
        )
    elif parts.pool_empty or parts.one_request_short:
        note = "max-model-len auto: not even one token fits: vLLM refuses to start (Cannot auto-fit max_model_len)"
    else:
        note = f"max-model-len auto: the full length {upper:,} fits{cap_note}"
    context = workload.context if workload.context and workload.context <= fitted else fitted
    fitted_choice = replace(choice, settings={**settings_at, "max-model-len": str(fitted)})
    return fitted_choice, replace(workload, context=context), note


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def newest_release_running(generation: str) -> str | None:
    """The newest release whose rules run ``generation`` ("v0" / "v1") by default (``engine`` of its
    ``[versions]`` table; docs/engines/vllm.md#vllm-v0), None when none does."""
    running = [v for v in PROFILE.rule_versions if PROFILE.constants(v)[1].engine == generation]
    return max(running, key=common.version_key) if running else None


def engine_generation(choice: EngineChoice, constants: VllmConstants, v0: Rules) -> tuple[str, list[str]]:
    """Which engine's rules apply (docs/engines/vllm.md#vllm-v0): the release's default (``engine`` of its
    ``[versions]`` table), or what ``VLLM_USE_V1`` says (``--set VLLM_USE_V1=0``); V0 asked for on a release without
    it is a warning and the V1 rules (the notes returned with it)."""
    default = str(constants.engine)
    raw = common.setting(choice, "VLLM_USE_V1")
    if raw is None:
        return default, []
    wants_v0 = not common.setting_bool(choice, "VLLM_USE_V1")
    if not wants_v0:
        return "v1", []
    removed_in = str(v0.get("removed_in", ""))
    if removed_in and (choice.version is None or common.version_key(choice.version) >= common.version_key(removed_in)):
        asked = f"vllm@{choice.version}" if choice.version else "the newest vLLM"
        note = (
            f"VLLM_USE_V1=0: {asked} has no V0 engine (removed in v{removed_in}); the V1 rules apply "
            f"(name an older release, e.g. --engine vllm@0.9, for V0)"
        )
        return "v1", [note]
    return "v0", []


def engine_report(
    parts: Breakdown, choice: EngineChoice, rules_version: str, hardware_given: bool
) -> dict[str, object]:
    """The settings the estimate assumed, under vLLM's names (``Estimate.engine``)."""
    settings = parts.settings
    return {
        "name": ENGINE,
        "version": rules_version,
        "requested_version": choice.version,
        "engine_generation": settings.engine_generation,
        "gpu_util": settings.gpu_memory_utilization,
        "max_model_len": settings.max_model_len,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "max_num_seqs": settings.max_num_seqs,
        # the largest max_num_seqs that starts (a recurrent state pool's blocks; None: nothing bounds it at start-up)
        "max_num_seqs_that_starts": parts.state_seq_limit,
        "num_gpu_blocks": parts.num_blocks if parts.sized else None,
        "kv_cache_dtype": settings.kv_cache_dtype,
        "block_size": parts.layout.min_block_size,
        "enforce_eager": settings.enforce_eager,
        "enable_prefix_caching": settings.enable_prefix_caching,
        "cudagraph_bytes": parts.overhead.cudagraphs,
        "cudagraph_in_budget": settings.cudagraph_in_budget,
        "outside_budget_bytes": parts.overhead.outside_budget,
        "kv_pool_bytes": int(max(0.0, parts.budget.pool)) if (hardware_given or parts.budget.fixed_pool) else None,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "pipeline_parallel_size": settings.pipeline_parallel_size,
        "data_parallel_size": settings.data_parallel_size,
        "num_gpu_blocks_override": settings.num_gpu_blocks_override,
        "lora_bytes": parts.weights.lora.bytes if parts.weights.lora else None,
        "speculative_method": settings.speculative.method if settings.speculative else None,
        "speculative_draft": parts.draft.as_dict() if parts.draft else None,
    }


def speculative_draft_name(choice: EngineChoice) -> str | None:
    """The draft checkpoint the settings name for a method whose draft hfvram reads (draft_model / eagle /
    eagle3; docs/engines/vllm.md#vllm-features), None otherwise: what the pipeline loads before the estimate."""
    _, constants = PROFILE.constants(choice.version)
    text = common.setting(choice, "speculative-config")
    if text is not None:
        method, model, _ = speculative_method(text)
    else:
        method, model = None, common.setting(choice, "speculative-model")
        model = model[:120] if model else None
    if not model or model in ("ngram", "[ngram]") or features.names_custom_class(model):
        return None
    resolved = method or "draft_model"
    return model if resolved in constants.speculative_draft_methods else None


PROFILE = VllmProfile()
