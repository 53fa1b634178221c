"""Building blocks shared by every engine profile (pure functions, no engine-specific rules).

Engine modules (``hfvram.engines.<engine>.profile``) compose these into their own accounting; the rules that
differ between engines (budgets, defaults, page sizes) stay in the engine module and its TOML file.
All sizes are bytes; "per rank" means one GPU of a tensor-/pipeline-parallel set.
Sources: ``docs/engines/common.md`` (shared blocks), ``docs/engines/vllm.md#vllm-parallelism`` (parallelism),
``docs/engines/common.md#reserve-summary`` (reserves).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, overload

from hfvram.datafiles import data_table
from hfvram.errors import ModelReadError, UsageError
from hfvram.estimate.dtypes import element_bytes
from hfvram.estimate.types import (
    Capacity,
    EngineChoice,
    Estimate,
    Hardware,
    PerGpu,
    Workload,
    verdict_for,
)
from hfvram.memo import IdentityCache
from hfvram.spec import GROWING_KINDS, RECURRENT_KINDS, WINDOWED_KINDS, Layer, LayerKind, ModelSpec, Weights

GiB = 1 << 30
MiB = 1 << 20

#: an engine's constants as parsed from its TOML file (values are TOML scalars, arrays or tables)
Rules = Mapping[str, Any]

# ---------------------------------------------------------------------------------------------------------
# KV dtypes
# ---------------------------------------------------------------------------------------------------------

#: KV cache dtype name -> bytes per element (docs/engines/common.md#kv-dtype-sizes). Names as engines and users spell them; the
#: table is hfvram/data/dtypes.toml with the ggml block types from hfvram/data/ggml_types.json.
KV_DTYPE_BYTES: Mapping[str, float] = element_bytes()


def kv_dtype_bytes(name: str, model_dtype_bytes: float = 2.0) -> float:
    """Bytes per KV element for a dtype name (``auto`` -> the model's compute dtype).

    Raises UsageError for a name no engine accepts. ggml block types (q8_0 …) carry their block scale
    (docs/engines/common.md#kv-dtype-sizes / common.md#gguf-types)."""
    key = name.strip().lower()
    if key in ("auto", "", "model"):
        return model_dtype_bytes
    if key not in KV_DTYPE_BYTES:
        known = ", ".join(sorted(KV_DTYPE_BYTES))
        raise UsageError(f"unknown KV cache dtype {name!r}; known: auto, {known}")
    return KV_DTYPE_BYTES[key]


def canonical_kv_dtype(name: str, model_dtype: str | None) -> str:
    """The name reported back for a KV dtype: ``auto`` resolves to the model's dtype (bf16/fp16/fp32)."""
    key = name.strip().lower()
    if key in ("auto", "", "model"):
        return {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16"}.get(model_dtype or "", "bf16")
    return {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32"}.get(key, key)


# ---------------------------------------------------------------------------------------------------------
# Per-rank KV shapes
# ---------------------------------------------------------------------------------------------------------


def kv_heads_per_rank(total_kv_heads: int, tp: int) -> int:
    """KV heads one TP rank holds: ``max(1, total // tp)`` — replicated once TP exceeds the head count
    (vLLM/SGLang ``get_num_kv_heads``, docs/engines/common.md#kv-bytes-per-token)."""
    if total_kv_heads <= 0:
        return 0
    return max(1, total_kv_heads // max(1, tp))


def layer_kv_row_elems(layer: Layer, tp: int = 1) -> tuple[int, int]:
    """(K, V) elements per token this layer stores on one TP rank (``tp=1``: the whole layer, llama.cpp's
    n_embd_k_gqa / n_embd_v_gqa). MLA keeps its whole latent on every rank, counted as K with no V
    (docs/engines/common.md#kv-bytes-per-token: ``num_kv_heads = 1`` when ``use_mla``); recurrent / cache-free layers -> (0, 0).
    The one place per-layer KV elements are computed in the estimator."""
    if layer.kind is LayerKind.MLA:
        return layer.kv_lora_rank + layer.qk_rope_head_dim, 0
    if layer.kind in (LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED):
        heads = kv_heads_per_rank(layer.num_kv_heads, tp)
        return heads * layer.head_dim_k, heads * layer.head_dim_v
    return 0, 0


def layer_kv_elems_per_token_rank(layer: Layer, tp: int) -> int:
    """K+V elements per token this layer stores on one TP rank (:func:`layer_kv_row_elems` summed)."""
    k_elems, v_elems = layer_kv_row_elems(layer, tp)
    return k_elems + v_elems


def layer_state_bytes_rank(layer: Layer, tp: int, fallback_dtype_bytes: float) -> float:
    """Recurrent (linear-attention / Mamba) state bytes per sequence on one TP rank.

    The state is split over ``state_heads`` when TP divides it (docs/engines/vllm.md#vllm-mamba-state state shapes); a layer whose
    state cannot be split (``state_heads == 0``) is held whole. Dtype: the layer's own, else the fallback."""
    if layer.kind not in RECURRENT_KINDS:
        return 0.0
    per_elem = layer.state_dtype_bytes or fallback_dtype_bytes
    divisor = tp if layer.state_heads and tp > 1 else 1
    return layer.state_elems * per_elem / divisor


def pp_layer_ranges(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """Layer index ranges ``[start, end)`` per pipeline stage, as vLLM's ``get_pp_indices`` splits them:
    an even share each, the remainder added one by one to the stages before the last. UsageError for more stages
    than hfvram/data/bounds.toml allows GPUs (the split lists every stage)."""
    pp = max(1, pp)
    _check_gpu_count("pipeline parallel", pp)
    per_stage = num_layers // pp
    sizes = [per_stage] * pp
    for back in range(2, num_layers % pp + 2):
        sizes[-back] += 1
    ranges, start = [], 0
    for size in sizes:
        ranges.append((start, start + size))
        start += size
    return ranges


def _check_gpu_count(name: str, value: int | None) -> None:
    """A parallel size is a GPU count: at most bounds.toml [hardware] maximum_gpu_count (UsageError, exit 2)."""
    limit = int(data_table("bounds.toml")["hardware"]["maximum_gpu_count"])
    if value is not None and value > limit:
        raise UsageError(f"{name} size {value} is more than {limit:,} GPUs (hfvram's bound)")


def worst_stage_layers(spec: ModelSpec, pp: int) -> tuple[Layer, ...]:
    """The layers of the pipeline stage with the most KV bytes per token (the stage that decides)."""
    if pp <= 1 or not spec.layers:
        return spec.layers
    stages = [spec.layers[start:end] for start, end in pp_layer_ranges(len(spec.layers), pp)]
    return max(stages, key=lambda layers: (sum(layer.kv_elems_per_token for layer in layers), len(layers)))


def layer_counts(layers: Iterable[Layer]) -> list[tuple[Layer, int]]:
    """Each layer object of ``layers`` once with the number of times it occurs, in order of first appearance.

    The config reader makes one ``Layer`` per distinct layer shape (a decoder is runs of a few identical layers),
    so a per-layer sum runs once per distinct layer and is multiplied by its count; equal layers held as separate
    objects are counted apart, which gives the same sums."""
    counts: dict[int, list[Any]] = {}
    for layer in layers:
        entry = counts.get(id(layer))
        if entry is None:
            counts[id(layer)] = [layer, 1]
        else:
            entry[1] += 1
    return [(layer, count) for layer, count in counts.values()]


@dataclass(frozen=True)
class LayerSummary:
    """What every estimate of a check asks of the model's layers (and each step of its searches): each distinct
    layer with its count (:func:`layer_counts`) and the kinds of layer present."""

    counts: tuple[tuple[Layer, int], ...]
    kinds: frozenset[LayerKind]


#: a spec's layers -> their summary. The estimates of one check share its spec's layers: they are summed once per
#: check (a newly read spec gets its own summary); hashing the layers by value would cost what the summary does
_SUMMARIES: IdentityCache[tuple[Layer, ...], LayerSummary] = IdentityCache("estimate.layer_summary", 256)


def layer_summary(layers: tuple[Layer, ...]) -> LayerSummary:
    """The :class:`LayerSummary` of ``layers`` (a spec's), worked out once for that tuple."""

    def summarise() -> LayerSummary:
        counts = tuple(layer_counts(layers))
        return LayerSummary(counts=counts, kinds=frozenset(layer.kind for layer, _ in counts))

    return _SUMMARIES.get_or_compute(layers, summarise)


def kv_bytes_per_token_rank(layers: Iterable[Layer], tp: int, kv_bytes: float) -> float:
    """KV bytes per token of context per sequence on one rank, over the layers that grow with context."""
    return sum(layer_kv_elems_per_token_rank(layer, tp) for layer in layers if layer.kind in GROWING_KINDS) * kv_bytes


def kv_fixed_bytes_rank(
    layers: Iterable[Layer], tp: int, kv_bytes: float, context: int, state_dtype_bytes: float
) -> float:
    """Bytes per sequence on one rank that stop growing: windowed layers at ``min(window, context)`` plus
    recurrent state. Engines that reserve more for windows (vLLM: window − 1 + batched tokens) add it."""
    total = 0.0
    for layer in layers:
        if layer.kind in WINDOWED_KINDS:
            total += layer_kv_elems_per_token_rank(layer, tp) * kv_bytes * min(layer.window or 0, context)
        elif layer.kind in RECURRENT_KINDS:
            total += layer_state_bytes_rank(layer, tp, state_dtype_bytes)
    return total


# ---------------------------------------------------------------------------------------------------------
# Weights per rank
# ---------------------------------------------------------------------------------------------------------

#: components held whole on every TP rank (docs/engines/vllm.md#vllm-parallelism: norms, router; tiny, replicated)
REPLICATED_COMPONENTS = frozenset({"norms", "router"})
#: components that belong to the transformer layers (split by PP with the layers)
LAYER_COMPONENTS = frozenset({"attention", "mlp", "experts", "router", "norms"})


def pad_to_multiple(value: int, multiple: int) -> int:
    """``value`` rounded up to a multiple of ``multiple`` (``multiple <= 1`` returns value)."""
    if multiple <= 1:
        return value
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class WeightsSplit:
    """Weights on the worst rank, with the per-component bytes that make it up and how it was derived."""

    bytes: int
    by_component: Mapping[str, int]
    explain: str


class WeightsUnknownError(ModelReadError):
    """The spec carries no weights: the estimator does not invent them (contract: never a made-up number)."""


def require_weights(spec: ModelSpec) -> Weights:
    """The checkpoint's weights as the sources attached them; :class:`WeightsUnknownError` (exit 3) when
    nothing could size them (a hand-built spec, or a model without headers, counts or derivable shapes)."""
    if spec.weights is None:
        said = next((note for note in spec.warnings if note.startswith("weights unknown")), None)
        if said:  # the reader already said why (e.g. a GGUF holding only a vocabulary)
            raise WeightsUnknownError(f"{said}; no memory figure can be given")
        name = spec.architecture or spec.model_type or "the model"
        raise WeightsUnknownError(
            f"weights unknown for {name}: no safetensors header, Hub parameter count, index total_size or "
            "config shapes sized them, so no memory figure can be given"
        )
    return spec.weights


def weights_per_rank(
    spec: ModelSpec,
    tp: int,
    pp: int,
    vocab_padding: int = 64,
    component_scale: Mapping[str, float] | None = None,
    replicated: Mapping[str, float] | None = None,
) -> WeightsSplit:
    """Checkpoint weights on the worst GPU of a TP×PP set (:class:`WeightsUnknownError` without weights).

    - TP divides every component except norms and router (replicated);
    - embeddings and lm_head rows are padded to ``vocab_padding`` before the split (vLLM
      ``pad_vocab_size``, docs/engines/vllm.md#vllm-weights), counted as ``padded_vocab / vocab`` on those components;
    - PP: layer components follow the layers (worst stage = the largest share), embeddings sit on the first
      stage and lm_head on the last (with PP = 1 both on the one rank); vision / mtp / other go with the
      first / last stage respectively;
    - ``component_scale`` multiplies a component (e.g. MXFP4 kernel padding of experts, vllm.md#vllm-weights);
    - ``replicated``: bytes of a component (after scaling) that the engine keeps whole on every TP rank (e.g.
      vLLM's MLA ``fused_qkv_a_proj``, vllm.md#vllm-parallelism); the rest of the component is split."""
    weights = require_weights(spec)
    tp, pp = max(1, tp), max(1, pp)
    components = dict(weights.bytes_by_component)
    if not components or sum(components.values()) != weights.total_bytes:
        known = sum(components.values())
        components["other"] = components.get("other", 0) + max(0, weights.total_bytes - known)
    scale = dict(component_scale or {})
    vocab = spec.vocab_size or 0
    if vocab and vocab_padding > 1:
        pad_ratio = pad_to_multiple(vocab, vocab_padding) / vocab
        for name in ("embeddings", "lm_head"):
            scale[name] = scale.get(name, 1.0) * pad_ratio

    per_rank: dict[str, float] = {}
    whole = replicated or {}
    for name, size in components.items():
        scaled = size * scale.get(name, 1.0)
        kept = min(scaled, max(0.0, float(whole.get(name, 0.0))))
        per_rank[name] = scaled if name in REPLICATED_COMPONENTS else (scaled - kept) / tp + kept

    if pp == 1:
        total = sum(per_rank.values())
        stage_note = ""
    else:
        total = worst_stage_bytes(per_rank, spec.num_layers or len(spec.layers) or pp, pp)
        stage_note = f", worst of {pp} pipeline stages"
    explain = (
        f"checkpoint weights {weights.total_bytes / GiB:.2f} GiB "
        f"({weights.source or ('exact' if weights.exact else 'derived from config shapes')})"
        f", split over TP={tp} except norms/router"
        + "".join(
            f" and {size / GiB:.2f} GiB of {name} kept whole on every rank"
            for name, size in whole.items()
            if size > 0 and tp > 1
        )
        + (f", vocab padded to a multiple of {vocab_padding}" if vocab and vocab_padding > 1 else "")
        + stage_note
    )
    return WeightsSplit(
        bytes=round(total), by_component={name: int(size) for name, size in per_rank.items()}, explain=explain
    )


def mla_replicated_bytes(spec: ModelSpec, tp: int, scale: float = 1.0) -> float:
    """Attention bytes vLLM and SGLang keep whole on every TP rank for MLA (vllm.md#vllm-parallelism,
    sglang.md#sglang-parallelism): per layer q_a_proj + kv_a_proj_with_mqa (vLLM ``fused_qkv_a_proj``,
    ``MergedColumnParallelLinear(disable_tp=True)``; SGLang ``fused_qkv_a_proj_with_mqa``, ``ReplicatedLinear``), or
    ``kv_a_proj_with_mqa`` alone without q_lora_rank: hidden × (q_lora_rank + kv_lora_rank + qk_rope_head_dim)
    weights, at the checkpoint's attention bytes per parameter (scales included). 0 at TP 1."""
    hidden = spec.hidden_size or 0
    if tp <= 1 or LayerKind.MLA not in layer_summary(spec.layers).kinds or not hidden or spec.weights is None:
        return 0.0
    mla = [(layer, count) for layer, count in layer_summary(spec.layers).counts if layer.kind is LayerKind.MLA]
    elems = sum(hidden * (layer.q_lora_rank + layer.kv_lora_rank + layer.qk_rope_head_dim) * n for layer, n in mla)
    attention_bytes = spec.weights.bytes_by_component.get("attention", 0)
    attention_params = spec.weights.params_by_component.get("attention", 0)
    if not attention_bytes or not attention_params:
        return 0.0
    return min(float(attention_bytes) * scale, elems * attention_bytes / attention_params * scale)


def worst_stage_bytes(per_rank: Mapping[str, float], num_layers: int, pp: int) -> float:
    """Weights on the fullest pipeline stage: layer components follow the layers, embeddings and vision sit on
    the first stage, lm_head, mtp and other on the last."""
    ranges = pp_layer_ranges(num_layers, pp)
    n_layers = max(1, ranges[-1][1])
    layer_bytes = sum(size for name, size in per_rank.items() if name in LAYER_COMPONENTS)
    first_extra = per_rank.get("embeddings", 0) + per_rank.get("vision", 0)
    last_extra = per_rank.get("lm_head", 0) + per_rank.get("mtp", 0) + per_rank.get("other", 0)
    stage_totals = []
    for index, (start, end) in enumerate(ranges):
        stage = layer_bytes * (end - start) / n_layers
        if index == 0:
            stage += first_extra
        if index == pp - 1:
            stage += last_extra
        stage_totals.append(stage)
    return max(stage_totals)


#: components a decode step does not read: the encoders (an image or a clip is encoded once, at prefill) and the
#: multi-token-prediction layers (read only when they draft tokens for speculative decoding)
NOT_READ_PER_TOKEN = ("vision", "mtp")


def active_weight_bytes(spec: ModelSpec) -> int | None:
    """Weight bytes read per decoded token: the text decoder's weights, of a MoE only ``experts_per_token /
    num_experts`` of the experts (shared experts count as dense ``mlp``). Not read: the encoders and MTP layers
    (``NOT_READ_PER_TOKEN``) and, where the checkpoint has its own ``lm_head``, the input embedding table (one
    row is gathered per token); a tied table is the output projection and is read whole."""
    if spec.weights is None:
        return None
    by_component = spec.weights.bytes_by_component
    total = spec.weights.total_bytes - sum(by_component.get(name, 0) for name in NOT_READ_PER_TOKEN)
    if by_component.get("lm_head"):
        total -= by_component.get("embeddings", 0)
    experts = by_component.get("experts", 0)
    if experts and spec.num_experts and spec.experts_per_token:
        return int(total - experts + experts * min(1.0, spec.experts_per_token / spec.num_experts))
    if spec.params_active and spec.weights.params_total:
        return int(total * spec.params_active / spec.weights.params_total)
    return total


# ---------------------------------------------------------------------------------------------------------
# Speed, capacity, verdict
# ---------------------------------------------------------------------------------------------------------


def decode_tokens_per_second(bytes_read_per_token: float, bandwidth_gbs: float | None) -> float | None:
    """Bandwidth-bound decode speed for one sequence: memory bandwidth (GB/s, 10^9) over the bytes each
    token must read on one GPU (active weights + KV at the context). An UPPER bound: compute, kernel launch
    and communication are ignored. None when the bandwidth is unknown."""
    if not bandwidth_gbs or bytes_read_per_token <= 0:
        return None
    return bandwidth_gbs * 1e9 / bytes_read_per_token


def max_concurrency_linear(kv_budget: float, bytes_per_sequence: float) -> float:
    """Full-length sequences a KV pool of ``kv_budget`` bytes holds (0 when the budget is negative)."""
    if bytes_per_sequence <= 0:
        return math.inf if kv_budget > 0 else 0.0
    return max(0.0, kv_budget / bytes_per_sequence)


def max_context_linear(
    kv_budget: float, concurrency: int, bytes_per_token: float, fixed_bytes: float, cap: int | None
) -> int:
    """Longest context at ``concurrency`` sequences when KV is ``per_token × ctx + fixed`` per sequence,
    capped at ``cap`` (the model's max length) when given."""
    per_seq = kv_budget / max(1, concurrency) - fixed_bytes
    if per_seq <= 0:
        return 0
    if bytes_per_token <= 0:
        return cap if cap is not None else 0
    tokens = int(per_seq // bytes_per_token)
    return min(tokens, cap) if cap is not None else tokens


def finish_estimate(
    *,
    spec: ModelSpec,
    hardware: Hardware | None,
    engine: Mapping[str, object],
    workload: Workload,
    per_gpu: PerGpu,
    capacity: Capacity,
    decode: float | None,
    warnings: Iterable[str],
    explain: Mapping[str, str],
    tp: int,
    pp: int,
    force_does_not_fit: bool = False,
) -> Estimate:
    """Assemble an Estimate: utilization = total / usable and the verdict (contract: fits ≤ 0.9 × usable,
    tight ≤ usable); without hardware both are None (the footprint only). ``force_does_not_fit`` for
    engines that refuse to start although the sum looks fine (e.g. vLLM's one-request check)."""
    if hardware is None:
        utilization, verdict = None, None
    else:
        utilization = per_gpu.total / per_gpu.usable if per_gpu.usable > 0 else math.inf
        verdict = "does_not_fit" if force_does_not_fit else verdict_for(per_gpu.total, per_gpu.usable)
    return Estimate(
        spec=spec,
        hardware=hardware,
        engine=dict(engine),
        workload=workload,
        per_gpu=per_gpu,
        utilization=utilization,
        verdict=verdict,
        capacity=capacity,
        decode_tokens_per_second=decode,
        warnings=tuple(dict.fromkeys(list(spec.warnings) + list(warnings))),
        explain=dict(explain),
        tp=tp,
        pp=pp,
    )


# ---------------------------------------------------------------------------------------------------------
# Parallel layout and settings
# ---------------------------------------------------------------------------------------------------------


def setting(choice: EngineChoice, *names: str) -> str | None:
    """The first of ``names`` set in ``choice.settings`` (dashes and underscores are interchangeable)."""
    if not choice.settings:
        return None  # the common case (no --set): an estimate asks for dozens of settings
    normalized = {k.replace("_", "-").lower().lstrip("-"): v for k, v in choice.settings.items()}
    for name in names:
        key = name.replace("_", "-").lower()
        if key in normalized:
            return normalized[key]
    return None


@overload
def setting_int(choice: EngineChoice, *names: str, default: int) -> int: ...
@overload
def setting_int(choice: EngineChoice, *names: str, default: None = None) -> int | None: ...
def setting_int(choice: EngineChoice, *names: str, default: int | None = None) -> int | None:
    """An integer setting (``8k`` / ``32K`` suffixes allowed); UsageError when it is not a number."""
    raw = setting(choice, *names)
    if raw is None:
        return default
    return parse_int(raw, names[0])


@overload
def setting_float(choice: EngineChoice, *names: str, default: float) -> float: ...
@overload
def setting_float(choice: EngineChoice, *names: str, default: None = None) -> float | None: ...
def setting_float(choice: EngineChoice, *names: str, default: float | None = None) -> float | None:
    raw = setting(choice, *names)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise UsageError(f"setting {names[0]}={raw!r} is not a number") from exc


def setting_bool(choice: EngineChoice, *names: str, default: bool = False) -> bool:
    raw = setting(choice, *names)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("", "1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"setting {names[0]}={raw!r} is not a boolean")


def parse_int(text: str, what: str = "value") -> int:
    """``"8192"``, ``"8k"`` (= 8192), ``"1M"`` (= 1048576), ``"131,072"`` -> int."""
    value = text.strip().lower().replace(",", "").replace("_", "")
    multiplier = 1
    if value.endswith("k"):
        multiplier, value = 1024, value[:-1]
    elif value.endswith("m"):
        multiplier, value = 1024 * 1024, value[:-1]
    try:
        return int(float(value) * multiplier)
    except (ValueError, OverflowError) as exc:  # OverflowError: a number too large for a float
        raise UsageError(f"{what}={text[:40]!r} is not a number") from exc


def resolve_parallel(
    choice: EngineChoice,
    hardware: Hardware | None,
    tp_names: Iterable[str] = (),
    pp_names: Iterable[str] = (),
    dp: int = 1,
) -> tuple[int, int]:
    """(tp, pp): explicit ``choice.tp/pp`` first, then engine settings, else all GPUs as TP (contract).
    ``dp``: data-parallel replicas of tp × pp GPUs each (vLLM ``-dp``, SGLang ``--dp-size``): the GPUs given
    are shared by the replicas. UsageError when tp × pp × dp exceeds the GPUs given."""
    pp_names, tp_names = tuple(pp_names), tuple(tp_names)
    pp = choice.pp or (setting_int(choice, *pp_names) if pp_names else None) or 1
    tp = choice.tp or (setting_int(choice, *tp_names) if tp_names else None)
    dp = max(1, dp)
    _check_gpu_count("tensor parallel", tp)
    _check_gpu_count("pipeline parallel", pp)
    _check_gpu_count("data parallel", dp)
    if tp is None:
        count = hardware.count if hardware else 1
        tp = max(1, count // (pp * dp))
    if hardware is not None and tp * pp * dp > hardware.count:
        replicas = f" x data parallel {dp}" if dp > 1 else ""
        raise UsageError(
            f"tensor parallel {tp} x pipeline parallel {pp}{replicas} needs {tp * pp * dp} GPUs, "
            f"only {hardware.count} given"
        )
    return max(1, tp), max(1, pp)


# ---------------------------------------------------------------------------------------------------------
# Engine data files and versions
# ---------------------------------------------------------------------------------------------------------


def load_engine_data(name: str) -> Mapping[str, Any]:
    """The parsed ``rules.toml`` of engine ``name`` (``hfvram/engines/<engine>/rules.toml``; shared, read-only)."""
    # the registry imports the estimator's types, so it is imported when first asked, not with this module
    from hfvram.engines import load_engine_data as registry_data

    return registry_data(name)


@lru_cache(maxsize=1024)
def version_key(version: str) -> tuple[int, ...]:
    """``"0.19.1"`` -> (0, 19, 1); non-numeric parts (``rc1``, ``post1``) are dropped."""
    parts = []
    for piece in version.strip().lstrip("v").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def pick_rule_version(requested: str | None, rule_versions: Iterable[str]) -> str:
    """The newest rule version not newer than ``requested`` (the newest when None); a request older than
    every rule set gets the oldest. ``rule_versions`` are the versions where the accounting changed."""
    ordered = sorted(rule_versions, key=version_key)
    if not ordered:
        raise ValueError("no rule versions")
    if requested is None:
        return ordered[-1]
    want = version_key(requested)
    if not want:
        raise UsageError(f"engine version {requested!r} is not a version number")
    chosen = ordered[0]
    for candidate in ordered:
        if version_key(candidate) <= want:
            chosen = candidate
    return chosen


def engine_rules(name: str, requested: str | None) -> tuple[str, dict[str, Any]]:
    """The rule version ``requested`` maps to and the rules in force at it. The versions are the toml's
    ``rule_versions`` list, else the keys of its ``[versions]`` tables (``hfvram/engines/<engine>/rules.toml``)."""
    data = load_engine_data(name)
    version = pick_rule_version(requested, data.get("rule_versions") or data.get("versions", {}))
    return version, rules_for_version(data, version)


def rules_for_version(data: Mapping[str, Any], version: str) -> dict[str, Any]:
    """Merge ``data["defaults"]`` with every ``data["versions"][v]`` for v ≤ ``version``, oldest first, so a
    TOML file lists only what changed at each release."""
    merged: dict[str, Any] = dict(data.get("defaults", {}))
    for candidate in sorted(data.get("versions", {}), key=version_key):
        if version_key(candidate) <= version_key(version):
            merged.update(data["versions"][candidate])
    return merged
