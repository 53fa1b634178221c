"""vLLM's V0 engine: the rule set of v0.9 and older releases, and of ``VLLM_USE_V1=0`` up to v0.10.

Rules follow ``docs/engines/vllm.md#vllm-v0`` (read in vLLM's V0 code); constants live in the ``[v0]`` table of
``hfvram/engines/vllm/rules.toml``. Where V0 accounts as V1 does, the pure helpers of :mod:`vllm` are reused
(weights, KV pages, capacity, narration); what differs, per GPU:

    budget  = total_memory × gpu_memory_utilization                      (no ceil; no free-memory check at start)
    peak    = max(sampler, forward) + fused-MoE workspace                 sampler: max_num_seqs (256) dummy
              sequences at V0's own bytes per logit (top-k / top-p sort); forward: max_num_batched_tokens
    kv_pool = budget − weights − peak − non-torch                          (CUDA graphs always outside)
    blocks  = kv_pool // (block_size × Σ layers' K+V bytes per token)    every layer at full length, one group

Batch defaults: max_num_seqs 256; chunked prefill on above a 32k max_model_len (except multimodal, MLA,
sliding-window, speculative and LoRA set-ups), then 2048 batched tokens, else max(max_model_len, 2048).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hfvram.engines.vllm.breakdown import compute
from hfvram.engines.vllm.constants import VllmConstants
from hfvram.engines.vllm.narration import narrate
from hfvram.engines.vllm.settings import Settings, resolve_settings
from hfvram.engines.vllm.terms import Breakdown, OutsideTrouble
from hfvram.estimate import common
from hfvram.estimate.common import GiB, Rules
from hfvram.estimate.types import EngineChoice, Hardware, Workload
from hfvram.spec import RECURRENT_KINDS, LayerKind, ModelSpec

GENERATION = "v0"

FULL_LENGTH_NOTE = (
    "vLLM V0 caches every attention layer at full length: its {count} sliding-window / chunked layers hold the "
    "whole context (V1 keeps only their window), so the KV pool holds fewer tokens than on V1"
)
RECURRENT_NOTE = (
    "vLLM V0 keeps the recurrent (Mamba / linear-attention) state of max_num_seqs sequences outside the paged "
    "KV cache; hfvram counts it in the KV pool as V1 does, which may differ from V0's figures"
)


def v0_rules(constants: VllmConstants, v0: Rules, version: str | None) -> VllmConstants:
    """The V1 constants with V0's own over them (the ``[v0]`` table): what the shared helpers read (V0's flat
    CUDA-graph reserve is a setting, ``cudagraph_flat_gib``). Before ``sampler_since`` the profile shows the logits
    of the dummy sequences only, no sampler peak."""
    sampled = version is None or common.version_key(version) >= common.version_key(str(v0["sampler_since"]))
    return replace(
        constants,
        gpu_memory_utilization=v0["gpu_memory_utilization"],
        sampler_bytes_per_logit=v0["sampler_bytes_per_logit" if sampled else "logits_bytes_per_logit"],
        forward_bytes_per_ffn=v0["forward_bytes_per_ffn"],
        forward_bytes_per_hidden=v0["forward_bytes_per_hidden"],
        cudagraph_in_budget=False,
        kv_tokens_formula="blocks",
    )


def full_length_spec(spec: ModelSpec) -> tuple[ModelSpec, int]:
    """The spec as V0's CacheEngine sees it: every sliding-window / chunked layer a full-attention layer
    (one block table, ``num_attention_layers × block_size × K+V`` bytes per block); and how many were changed."""
    windowed = sum(1 for layer in spec.layers if layer.kind in (LayerKind.SLIDING, LayerKind.CHUNKED))
    if not windowed:
        return spec, 0
    layers = tuple(
        replace(layer, kind=LayerKind.FULL, window=None)
        if layer.kind in (LayerKind.SLIDING, LayerKind.CHUNKED)
        else layer
        for layer in spec.layers
    )
    return replace(spec, layers=layers), windowed


def uniform_sliding_window(spec: ModelSpec) -> bool:
    """Every attention layer slides (Mistral-7B-v0.1, Qwen2 with use_sliding_window): V0's
    ``model_config.get_sliding_window()`` is set, which keeps chunked prefill off by default. Interleaved models
    (Gemma-2/3) are not counted: V0 moves their window to ``interleaved_sliding_window``."""
    attention = [layer for layer in spec.layers if layer.kv_elems_per_token]
    return bool(attention) and all(layer.kind is LayerKind.SLIDING for layer in attention)


def resolve_batch_v0(
    spec: ModelSpec, choice: EngineChoice, v0: Rules, max_model_len: int, speculative: bool
) -> tuple[int, int, bool]:
    """(max_num_batched_tokens, max_num_seqs, chunked prefill) as V0's ``_set_default_args_v0`` and
    ``SchedulerConfig`` set them."""
    max_num_seqs = common.setting_int(choice, "max-num-seqs", default=int(v0["max_num_seqs"])) or int(
        v0["max_num_seqs"]
    )
    mla_since = common.version_key(str(v0["chunked_prefill_mla_since"]))
    has_mla = any(layer.kind is LayerKind.MLA for layer in spec.layers) and (
        choice.version is None or common.version_key(choice.version) >= mla_since
    )
    lora = common.setting_bool(choice, "enable-lora")
    auto_chunked = (
        max_model_len > int(v0["chunked_prefill_above"])
        and not spec.multimodal
        and not has_mla
        and not uniform_sliding_window(spec)
        and not speculative
        and not lora
    )
    chunked = common.setting_bool(choice, "enable-chunked-prefill", default=auto_chunked)
    batched = common.setting_int(choice, "max-num-batched-tokens")
    floor = int(v0["max_num_batched_tokens"])
    early = choice.version is not None and common.version_key(choice.version) < common.version_key(
        str(v0["chunked_2048_since"])
    )
    chunk = int(v0["early_chunked_max_num_batched_tokens"]) if early else floor
    if batched is None:
        batched = chunk if chunked else max(max_model_len, floor)
        if spec.multimodal and not chunked:
            batched = max(batched, int(v0["multimodal_max_num_batched_tokens"]))
    return batched, min(max_num_seqs, batched), chunked


def resolve_v0(
    v0: Rules,
    spec: ModelSpec,
    hardware: Hardware | None,
    choice: EngineChoice,
    workload: Workload,
    constants: VllmConstants,
    rules_version: str,
) -> tuple[Settings, VllmConstants, bool, list[str]]:
    """V0's settings (the profile's step 1 on V0): the shared settings under V0's constants, then V0's batch
    defaults, block size and flat CUDA-graph reserve; with the constants in force, the chunked-prefill default and
    the settings' warnings."""
    merged = v0_rules(constants, v0, choice.version)
    settings, notes = resolve_settings(spec, hardware, choice, workload, merged, rules_version)
    batched, seqs, chunked = resolve_batch_v0(
        spec, choice, v0, settings.max_model_len, settings.speculative_method is not None
    )
    settings = replace(
        settings,
        max_num_batched_tokens=batched,
        max_num_seqs=seqs,
        engine_generation=GENERATION,
        mla_entry_align_bytes=int(v0["mla_entry_align_bytes"]),
        block_size=common.setting_int(choice, "block-size", default=int(v0["block_size"])) or int(v0["block_size"]),
        cudagraph_flat_gib=v0["cudagraph_gib"],
        # V0: total × utilization, no ceil; a float budget keeps the arithmetic of determine_num_available_blocks
    )
    return settings, merged, chunked, notes


def compute_v0(
    spec: ModelSpec,
    hardware: Hardware | None,
    settings: Settings,
    workload: Workload,
    merged: VllmConstants,
    non_torch: Sequence[Rules],
) -> tuple[Breakdown, int]:
    """V0's breakdown (the profile's step 2 on V0): the shared breakdown of the spec as V0's cache sees it (every
    layer at full length), its start-up checks relaxed as V0's; and how many layers were lengthened."""
    cache_spec, windowed = full_length_spec(spec)
    parts = compute(cache_spec, hardware, settings, workload, merged, non_torch)
    # V0 checks no free memory at start-up (V1's "Free memory on device ... is less than desired"), and warms up
    # no sampler after it: memory short outside the budget is a risk to name, not a refusal
    trouble = parts.outside_trouble
    if trouble in (OutsideTrouble.CUDA_CONTEXT, OutsideTrouble.CUDA_GRAPHS):
        parts = replace(parts, outside_trouble=OutsideTrouble.UNCHECKED_OUTSIDE)
    elif trouble is OutsideTrouble.SAMPLER_WARM_UP:
        parts = replace(parts, outside_trouble=None)
    return parts, windowed


def narrate_v0(
    graphs_in_budget_since: str | None,
    parts: Breakdown,
    spec: ModelSpec,
    workload: Workload,
    merged: VllmConstants,
    chunked: bool,
    windowed: int,
) -> tuple[list[str], list[str], dict[str, str]]:
    """V0's own notes (full-length layers, recurrent state), V1's narration of the breakdown and an ``engine``
    explain line saying which V0 rules were applied (``graphs_in_budget_since`` as :func:`narrate` takes it)."""
    settings = parts.settings
    warnings, explain = narrate(parts, spec, workload, graphs_in_budget_since)
    notes: list[str] = []
    if windowed:
        notes.append(FULL_LENGTH_NOTE.format(count=windowed))
    if any(layer.kind in RECURRENT_KINDS for layer in spec.layers):
        notes.append(RECURRENT_NOTE)
    explain["engine"] = (
        f"vLLM V0 engine rules (docs/engines/vllm.md#vllm-v0): the profile run samples {settings.max_num_seqs} "
        f"dummy sequences ({merged.sampler_bytes_per_logit} B per logit) and pushes "
        f"{settings.max_num_batched_tokens} tokens (chunked prefill {'on' if chunked else 'off'}); every layer is "
        f"cached at full length in one block table; CUDA graphs ({parts.overhead.cudagraphs / GiB:.2f} GiB) are "
        "captured after the KV cache, outside the budget"
    )
    return notes, warnings, explain
