"""What an engine refuses before any memory is counted: the KV dtypes, setting names, parallel sizes,
hardware and releases it knows. The facts are data (``[accepts]`` in ``hfvram/engines/<engine>/rules.toml``,
with their sources); this module only applies them.

- a KV dtype the engine does not have is a usage error (exit 2), listing the ones it has;
- a setting name the engine does not have is a warning naming the closest known one;
- a tensor-parallel size the engine asserts against, or hardware it does not run on, is an engine-rule
  refusal: the estimate keeps its figures but its verdict becomes does_not_fit;
- a release hfvram has no rules for is said in the warnings (which rules were used instead).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from hfvram.datafiles import data_table
from hfvram.errors import UsageError
from hfvram.estimate import common, releases
from hfvram.estimate.types import VERDICT_DOES_NOT_FIT, EngineChoice, Estimate, Hardware, Workload
from hfvram.memo import ValueCache
from hfvram.spec import LayerKind, ModelSpec


def accepts(engine: str) -> Mapping[str, Any]:
    """The ``[accepts]`` table of the engine's data file (empty when it has none)."""
    return common.load_engine_data(engine).get("accepts", {})


def _normalized(name: str) -> str:
    return name.strip().lower().lstrip("-").replace("_", "-")


# ---- KV dtypes -------------------------------------------------------------------------------------------


def requested_kv_dtypes(engine: str, choice: EngineChoice, workload: Workload) -> list[str]:
    """The KV dtype names asked for: ``--kv-dtype`` and the engine's own KV setting(s)."""
    names = [workload.kv_dtype] if workload.kv_dtype not in ("", "auto") else []
    for setting_name in accepts(engine).get("kv_dtype_settings", []):
        value = common.setting(choice, setting_name)
        if value is not None:
            names.append(value)
    return names


def check_kv_dtype(engine: str, choice: EngineChoice, workload: Workload) -> None:
    """UsageError (exit 2) when a requested KV dtype is not one the engine has; the accepted ones listed."""
    accepted = [str(name) for name in accepts(engine).get("kv_dtypes", [])]
    if not accepted:
        return
    allowed = {name.lower() for name in accepted} | {"auto"}
    for name in requested_kv_dtypes(engine, choice, workload):
        if name.strip().lower() not in allowed:
            raise UsageError(f"{engine} has no KV cache dtype {name!r}; it accepts: {', '.join(accepted)}")


# ---- setting names ---------------------------------------------------------------------------------------


@cache
def known_setting_names(engine: str) -> frozenset[str]:
    """Every setting name the engine has: the flags of its command line (its ``settings.toml``: settings,
    booleans, aliases, environment) and the names its profile reads (``[accepts] settings``); built once per
    engine (the tables are packaged data)."""
    from hfvram.estimate.engine_args import engine_command_line

    names: set[str] = {_normalized(name) for name in accepts(engine).get("settings", [])}
    table = engine_command_line(engine)
    if table is not None:
        names.update(_normalized(name) for name in (*table.settings, *table.booleans, *table.model_flags))
        for alias, canonical in (*table.aliases.items(), *table.env.items()):
            names.update((_normalized(alias), _normalized(canonical)))
    return frozenset(names)


def unknown_setting_warnings(engine: str, choice: EngineChoice) -> list[str]:
    """One warning per setting name the engine does not have, with the closest known name (difflib)."""
    known = known_setting_names(engine)
    if not known:
        return []
    notes = []
    for name in choice.settings:
        key = _normalized(name)
        if key in known:
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        notes.append(f"setting {name!r} is not a {engine} setting hfvram knows and was ignored{hint}")
    return notes


# ---- parallel sizes --------------------------------------------------------------------------------------


def kv_head_counts(spec: ModelSpec) -> set[int]:
    """Distinct KV head counts of the attention layers (MLA keeps one latent on every rank: not split)."""
    return {
        layer.num_kv_heads
        for layer in spec.layers
        if layer.kind is not LayerKind.MLA and layer.num_kv_heads and layer.kv_elems_per_token
    }


def tp_refusal(engine: str, spec: ModelSpec, tp: int, defaulted: bool = False) -> str | None:
    """The engine's own assertion against ``tp`` for this model's heads, or None.

    vLLM ``ModelConfig.verify_with_parallel_config``: "Total number of attention heads (H) must be divisible
    by tensor parallel size (T)"; ``QKVParallelLinear`` splits the KV heads (``divide``) or replicates them
    (``divide(tp, kv_heads)``), so one must divide the other. SGLang shares both rules."""
    rule = accepts(engine).get("tp_divides_heads")
    if not rule or tp <= 1:
        return None
    size = f"tensor parallel size {tp}" + (" (all GPUs given, as no --tp was set)" if defaulted else "")
    heads = spec.num_attention_heads
    if heads and heads % tp:
        return (
            f"{engine} refuses {size}: the {heads} attention heads do not divide by it "
            f"({rule}); {valid_tp_hint(spec, tp)}"
        )
    for kv in sorted(kv_head_counts(spec)):
        if kv % tp and tp % kv:
            return (
                f"{engine} refuses {size}: {kv} KV heads neither divide by it nor divide it "
                f"({rule}); {valid_tp_hint(spec, tp)}"
            )
    return None


def tp_accepted(spec: ModelSpec, tp: int) -> bool:
    """True when ``tp`` splits the attention heads evenly and the KV heads evenly or by replication."""
    heads = spec.num_attention_heads
    if heads and heads % tp:
        return False
    return all(kv % tp == 0 or tp % kv == 0 for kv in kv_head_counts(spec))


def valid_tp_hint(spec: ModelSpec, tp: int) -> str:
    """The sizes below ``tp`` the engine accepts: divisors of the heads (O(sqrt(heads))), or — heads unknown — the
    sizes up to the GPU-count bound (hfvram/data/bounds.toml)."""
    heads = spec.num_attention_heads
    if heads:
        candidates = sorted({d for i in range(1, math.isqrt(heads) + 1) if heads % i == 0 for d in (i, heads // i)})
    else:
        candidates = list(range(1, min(tp, int(data_table("bounds.toml")["hardware"]["maximum_gpu_count"]) + 1)))
    kvs = kv_head_counts(spec)
    sizes = [size for size in candidates if size < tp and all(kv % size == 0 or size % kv == 0 for kv in kvs)]
    return f"it accepts {', '.join(map(str, sizes))} below {tp} (pass --tp)" if sizes else "pass --tp"


# ---- quantized weights under tensor parallelism ---------------------------------------------------------


@dataclass(frozen=True)
class QuantSplit:
    """One linear layer's weight ``[out, in]`` as tensor parallelism cuts it: the full and per-GPU sizes."""

    name: str
    full_in: int
    full_out: int
    rank_in: int
    rank_out: int
    #: row-parallel (the input is split: o_proj, down_proj); column-parallel otherwise (qkv_proj, gate_up_proj)
    row: bool


def quant_splits(spec: ModelSpec, tp: int) -> list[QuantSplit]:
    """The quantized linear layers of one decoder layer of each kind, cut for ``tp`` GPUs (vLLM / SGLang
    ``ColumnParallelLinear`` divides the output, ``RowParallelLinear`` the input): attention projections of
    non-MLA attention layers, the dense MLP, the routed experts (``moe_intermediate_size`` per GPU, as ``w2``'s
    input). A size that does not divide by ``tp`` is left out (the engine's ``divide`` asserts on it first)."""
    hidden, heads = spec.hidden_size, spec.num_attention_heads
    if not hidden or tp < 1:
        return []
    splits: list[QuantSplit] = []
    attention = [layer for layer in spec.layers if layer.kind in (LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED)]
    if heads and heads % tp == 0 and attention and not any(layer.kind is LayerKind.MLA for layer in spec.layers):
        head_dim, kv = attention[0].head_dim_v, attention[0].num_kv_heads
        if head_dim and kv:
            qkv_rank = (heads // tp + 2 * max(1, kv // tp)) * head_dim
            splits.append(QuantSplit("qkv_proj", hidden, (heads + 2 * kv) * head_dim, hidden, qkv_rank, False))
            o_in = heads * head_dim
            splits.append(QuantSplit(f"o_proj (heads x head_dim {o_in})", o_in, hidden, o_in // tp, hidden, True))
    inter = spec.intermediate_size
    if inter and inter % tp == 0 and any(not layer.moe for layer in spec.layers):
        splits.append(QuantSplit("gate_up_proj", hidden, 2 * inter, hidden, 2 * inter // tp, False))
        splits.append(QuantSplit(f"down_proj (intermediate_size {inter})", inter, hidden, inter // tp, hidden, True))
    return splits


#: (failure, note) of one layer
_Check = tuple[str | None, str | None]


def _marlin_rejects(rules: Mapping[str, Any], rank_in: int, rank_out: int, full_in: int, group: int) -> str | None:
    """Why Marlin's shape check (``verify_marlin_supports_shape``) rejects these sizes, or None."""
    thread_n, thread_k = int(rules["marlin_min_thread_n"]), int(rules["marlin_min_thread_k"])
    if rank_out % thread_n:
        return f"{rank_out} outputs per GPU, not a multiple of Marlin's min_thread_n {thread_n}"
    if rank_in % thread_k:
        return f"{rank_in} inputs per GPU, not a multiple of Marlin's min_thread_k {thread_k}"
    if 0 < group < full_in and rank_in % group:
        return f"{rank_in} inputs per GPU, not a multiple of the group size {group}"
    return None


def _groups(rank_in: int, group: int) -> str:
    """ "3696 inputs per GPU = 28.875 groups of 128" (or, per channel, not the whole input)."""
    if group <= 0:
        return f"{rank_in} inputs per GPU, while per-channel scales need the whole input"
    return f"{rank_in} inputs per GPU = {rank_in / group:g} groups of {group}"


def _moe_check(rules: Mapping[str, Any], spec: ModelSpec, tp: int, group: int) -> _Check:
    """(failure, note) of the routed experts: Marlin MoE (``check_moe_marlin_supports_layer``) or, when it cannot
    take them, ``MoeWNA16Method``, which halves the group size until it divides both sizes and asserts it stays at
    least ``moe_wna16_min_group``."""
    inter, hidden = spec.moe_intermediate_size, spec.hidden_size
    if not inter or not hidden or inter % tp or not any(layer.moe for layer in spec.layers):
        return None, None
    rank = inter // tp
    marlin = (
        hidden % int(rules["moe_marlin_hidden_align"]) == 0
        and rank % max(int(rules["moe_marlin_k_align"]), group) == 0
        and group in rules["marlin_group_sizes"]
    )
    if marlin or group <= 0:
        return None, None
    size, floor = group, int(rules["moe_wna16_min_group"])
    while rank % size or hidden % size:
        size //= 2
        if size < floor:
            return (
                f"the experts' w2 splits moe_intermediate_size {inter} into {rank} per GPU, which no group size "
                f"from {group} down to {floor} divides (MoeWNA16Method.create_weights asserts group_size >= {floor})"
            ), None
    return None, f"the experts' {rank} per GPU do not suit Marlin MoE; the MoE WNA16 kernel takes them"


def _gpu_sm(hardware: Hardware | None) -> int | None:
    """The NVIDIA GPU's compute capability x 10 from the catalogue, or None (unknown, or not NVIDIA)."""
    if hardware is None or hardware.gpu.vendor != "nvidia":
        return None
    return _catalogue_sm(hardware.gpu.id)


@cache
def _catalogue_sm(gpu_id: str) -> int | None:
    from hfvram.estimate.hardware import catalog_row
    from hfvram.quant.hub_formats import compute_capability

    try:
        return compute_capability(catalog_row(gpu_id).get("architecture"))
    except (UsageError, KeyError):
        return None


def _awq_fallback(engine: str, rules: Mapping[str, Any], split: QuantSplit, group: int, pack: int) -> _Check:
    """vLLM AWQ: ``AWQMarlinConfig.get_quant_method`` checks the per-GPU sizes; a layer Marlin declines goes to
    ``AWQLinearMethod``, which raises on a slice that is not whole groups (per channel: not the whole input)."""
    why = _marlin_rejects(rules, split.rank_in, split.rank_out, split.full_in, group)
    if why is None:
        return None, None
    if split.rank_in % (group if group > 0 else split.full_in):
        return (
            f"AWQ {split.name}: {_groups(split.rank_in, group)}; Marlin declines the layer and the AWQ kernel "
            f"{engine} falls back to raises {rules['awq_error']!r}"
        ), None
    if split.rank_out % pack:
        return f"AWQ {split.name}: {split.rank_out} outputs per GPU, not a multiple of {pack}", None
    return None, f"{split.name}: {why}; {engine} falls back to the unoptimized AWQ kernel"


def _awq_verified(rules: Mapping[str, Any], split: QuantSplit, group: int) -> _Check:
    """SGLang AWQ: Marlin is picked on the full sizes (the per-GPU ones are set after ``get_quant_method``) and
    ``verify_marlin_supports_shape`` raises on the per-GPU ones; a layer declined on its full sizes goes to the AWQ
    scheme, which takes the group size as stated."""
    if _marlin_rejects(rules, split.full_in, split.full_out, split.full_in, group) is not None:
        if group > 0 and split.rank_in % group:
            return f"AWQ {split.name}: {_groups(split.rank_in, group)} ({rules['awq_error']!r})", None
        return None, None
    why = _marlin_rejects(rules, split.rank_in, split.rank_out, split.full_in, group)
    return (f"AWQ {split.name}: {why} ({rules['marlin_error']})" if why else None), None


def _gptq_kernels(
    engine: str, rules: Mapping[str, Any], spec: ModelSpec, split: QuantSplit, group: int, hardware: Hardware | None
) -> _Check:
    """vLLM GPTQ: ``choose_mp_linear_kernel`` in its CUDA order (Machete on sm_90 before Marlin, Exllama last);
    it raises when none takes the layer."""
    why = _marlin_rejects(rules, split.rank_in, split.rank_out, split.full_in, group)
    if why is None:
        return None, None
    if hardware is not None and hardware.gpu.vendor != "nvidia":
        return None, f"{split.name}: {why}; {engine}'s kernel choice off NVIDIA GPUs is not modelled"
    quant = spec.quantization
    assert quant is not None
    pack = 32 // int(quant.bits or 4)
    desc_act = bool(quant.details.get("desc_act")) and split.row
    # the activations run in the checkpoint's torch_dtype (a --quant what-if: the dtype its quantizer writes)
    act = str(quant.details.get("torch_dtype") or spec.dtype or "").lower()
    machete_shape = (
        not desc_act
        and group in rules["machete_group_sizes"]
        and split.rank_in % int(rules["machete_k_align"]) == 0
        and split.rank_out % int(rules["machete_n_align"]) == 0
    )
    sm = _gpu_sm(hardware)
    if machete_shape and sm in rules["machete_sm"]:
        return None, f"{split.name}: {why}; on sm_{sm} {engine} runs it with its Machete kernel"
    fp16 = act in rules["exllama_act_dtypes"]
    if fp16 and not desc_act and group > 0 and split.full_in % group == 0 and split.rank_out % pack == 0:
        return None, f"{split.name}: {why}; {engine} falls back to its Exllama kernel ({act} activations)"
    if machete_shape and sm is None:
        return None, (
            f"{split.name}: {why}; {engine} takes it with its Machete kernel on sm_90 GPUs only and fails "
            "elsewhere (the GPU's compute capability is not known here)"
        )
    reasons = [
        "" if fp16 else "Exllama takes float16 activations only",
        "act-order (desc_act) with a split input is taken by neither Exllama nor Machete" if desc_act else "",
    ]
    reason = "; ".join(r for r in reasons if r) or "neither Exllama nor Machete takes it"
    return f"GPTQ {split.name}: {why}, and {reason} ({rules['kernel_error']!r})", None


def _layer_check(
    engine: str, rules: Mapping[str, Any], spec: ModelSpec, split: QuantSplit, group: int, hardware: Hardware | None
) -> _Check:
    """(failure, note) of one layer under the engine's loading path for the checkpoint's method."""
    quant = spec.quantization
    assert quant is not None
    if quant.method in rules.get("marlin_fallback_methods", []):
        return _awq_fallback(engine, rules, split, group, 32 // int(quant.bits or 4))
    if quant.method in rules.get("marlin_verified_methods", []):
        return _awq_verified(rules, split, group)
    if quant.method in rules.get("kernel_choice_methods", []):
        return _gptq_kernels(engine, rules, spec, split, group, hardware)
    if quant.method in rules.get("unchecked_methods", []):
        why = _marlin_rejects(rules, split.rank_in, split.rank_out, split.full_in, group)
        if why:
            return None, (
                f"{split.name}: {why}; {engine} loads it without acting on its Marlin shape check, and whether its "
                "first forward then fails is not modelled"
            )
    return None, None


def quant_tp_check(
    engine: str, spec: ModelSpec, tp: int, hardware: Hardware | None = None
) -> tuple[str | None, list[str]]:
    """(the first failure, notes) of the checkpoint's group-quantized (GPTQ / AWQ) layers at ``tp``:
    ``[accepts.quant_tp]`` of the engine's data file says which methods each loading path applies to."""
    rules = accepts(engine).get("quant_tp")
    quant = spec.quantization
    if not rules or quant is None or tp <= 1:
        return None, []
    group = quant.group_size or (-1 if quant.details.get("group_size") == -1 else None)
    if group is None:
        return None, []
    notes: list[str] = []
    for split in quant_splits(spec, tp):
        failure, note = _layer_check(engine, rules, spec, split, group, hardware)
        if failure:
            return failure, []
        if note:
            notes.append(note)
    if quant.method in rules.get("marlin_fallback_methods", []) + rules.get("marlin_verified_methods", []) + rules.get(
        "kernel_choice_methods", []
    ):
        failure, note = _moe_check(rules, spec, tp, group)
        if failure:
            return f"{quant.method.upper()} {failure}", []
        if note:
            notes.append(note)
    return None, [f"{engine} at tensor parallel size {tp}: {note} ({rules['doc']})" for note in notes]


def _splits_evenly(spec: ModelSpec, tp: int) -> bool:
    """Whether the MLP and expert sizes divide by ``tp`` (the engines' ``divide`` asserts otherwise)."""
    return all(not size or size % tp == 0 for size in (spec.intermediate_size, spec.moe_intermediate_size))


#: quant_tp_refusal answers by the facts it reads (the searches of hfvram.estimate.inverse ask the same one often)
_QUANT_TP_ANSWERS: ValueCache[tuple[object, ...], tuple[str | None, list[str]]] = ValueCache(
    "estimate.quant_tp_refusal", 1024
)


def quant_tp_refusal(
    engine: str, spec: ModelSpec, tp: int, hardware: Hardware | None = None, defaulted: bool = False
) -> tuple[str | None, list[str]]:
    """(refusal, notes): the engine failing to load the group-quantized checkpoint at ``tp`` (the layer, its sizes,
    the engine's error and the sizes below ``tp`` it accepts), like :func:`tp_refusal`."""
    quant = spec.quantization
    if quant is None or tp <= 1 or not accepts(engine).get("quant_tp"):
        return None, []
    details = quant.details
    layers = frozenset((layer.kind, layer.num_kv_heads, layer.head_dim_v, layer.moe) for layer in spec.layers)
    key: tuple[object, ...] = (engine, quant.method, quant.bits, quant.group_size, details.get("group_size"))
    key += (details.get("desc_act"),)
    key += (details.get("torch_dtype"), spec.dtype, spec.hidden_size, spec.num_attention_heads, layers)
    key += (spec.intermediate_size, spec.moe_intermediate_size, tp, defaulted)
    key += (hardware.gpu.id, hardware.gpu.vendor) if hardware is not None else (None, None)
    answer = _QUANT_TP_ANSWERS.get_or_compute(key, lambda: _quant_tp_refusal(engine, spec, tp, hardware, defaulted))
    return answer[0], list(answer[1])


def _quant_tp_refusal(
    engine: str, spec: ModelSpec, tp: int, hardware: Hardware | None, defaulted: bool
) -> tuple[str | None, list[str]]:
    failure, notes = quant_tp_check(engine, spec, tp, hardware)
    if failure is None:
        return None, notes
    rules = accepts(engine)["quant_tp"]
    size = f"tensor parallel size {tp}" + (" (all GPUs given, as no --tp was set)" if defaulted else "")
    sizes = [
        s
        for s in range(1, tp)
        if tp_accepted(spec, s) and _splits_evenly(spec, s) and quant_tp_check(engine, spec, s, hardware)[0] is None
    ]
    accepted = f"it accepts {', '.join(map(str, sizes))} below {tp} (pass --tp)" if sizes else "pass --tp"
    return f"{engine} refuses {size}: {failure} ({rules['rule']}, {rules['doc']}); {accepted}", []


# ---- hardware --------------------------------------------------------------------------------------------


def platform_refusal(engine: str, hardware: Hardware | None, backend: str | None = None) -> str | None:
    """Why the engine does not run on this GPU (a ``[[refused_on]]`` row of its hfvram/engines/<engine>/engine.toml:
    by vendor, or by a vendor's device family), or None. ``backend``: the engine's ``backend`` setting when one is
    given."""
    from hfvram.engines import registry

    entry = registry().get(engine)
    if hardware is None or entry is None:
        return None
    gpu = hardware.gpu
    architecture: str | None = None
    for row in entry.refused_on:
        if row.vendor != gpu.vendor:
            continue
        if row.backend is not None and backend is not None and backend.strip().lower() != row.backend:
            continue
        if row.architecture is not None:
            if architecture is None:
                architecture = _architecture(gpu.id)
            if not re.search(row.architecture, architecture):
                continue
        return f"{engine} does not run on {gpu.name}: {row.reason}"
    return None


def _architecture(gpu_id: str | None) -> str:
    """The catalogue's architecture field of a GPU id ("" for a GPU the catalogue does not hold)."""
    from hfvram.estimate.hardware import catalog_row

    try:
        return str(catalog_row(gpu_id).get("architecture") or "") if gpu_id else ""
    except (UsageError, KeyError):
        return ""


# ---- releases --------------------------------------------------------------------------------------------


def version_warnings(engine: str, requested: str | None, rule_versions: Iterable[str]) -> list[str]:
    """Say which release's rules were used when the one asked for is not one hfvram models."""
    ordered = sorted(rule_versions, key=common.version_key)
    if not requested or not ordered:
        return []
    asked = requested
    requested, mapped = releases.as_build(engine, requested)
    notes = [f"--engine {engine}@{asked}: {mapped}"] if mapped else []
    shown = asked if asked == requested else f"{asked} (= {requested})"
    return notes + _version_notes(engine, requested, shown, ordered)


def _version_notes(engine: str, requested: str, shown: str, ordered: list[str]) -> list[str]:
    want = common.version_key(requested)
    if not want:
        return []
    used = common.pick_rule_version(requested, ordered)
    width = min(len(want), len(common.version_key(used)), 2)
    if want < common.version_key(ordered[0]):
        return [f"--engine {engine}@{shown}: older than any {engine} release hfvram models; the {used} rules are used"]
    newer = newer_than_reviewed(engine, requested, used, shown)
    if newer is not None:
        return [newer]
    unread = releases.unread_release(engine, requested) if releases.covered(engine, requested) else None
    if unread is not None:
        return [
            f"--engine {engine}@{requested}: its memory-relevant changes were not read ({unread.changes}); "
            f"hfvram uses the {used} rules"
        ]
    if releases.covered(engine, requested) or want[:width] == common.version_key(used)[:width]:
        return []
    if used == ordered[-1]:
        return [
            f"--engine {engine}@{shown}: hfvram uses the {used} rules, the newest {engine} release whose "
            f"memory accounting it models; a later change in {shown} would not be reflected"
        ]
    return [
        f"--engine {engine}@{shown}: hfvram uses the {used} rules (the newest change to {engine}'s memory "
        f"accounting it knows at or before {shown})"
    ]


def newer_than_reviewed(engine: str, requested: str, used: str, shown: str | None = None) -> str | None:
    """The warning for a release above the newest one whose changes hfvram reviewed (``[releases]`` of the
    engine's data file), naming that release and its date; None when the data lists no releases or the request
    is not newer."""
    newest = releases.newest_reviewed(engine)
    if newest is None or common.version_key(requested) <= common.version_key(newest.version):
        return None
    known = releases.newest_known(engine)
    listed = (
        f"; {engine} {known.version} is known to exist ({known.date_text}), its changes not read"
        if known is not None
        and known is not newest
        and common.version_key(known.version) >= common.version_key(requested)
        else ""
    )
    return (
        f"--engine {engine}@{shown or requested}: newer than {engine} {newest.version} ({newest.date_text}), the newest release "
        f"whose memory accounting hfvram has reviewed; its rules (the {used} rule set) are used, and a change "
        f"made after it would not be reflected{listed}"
    )


# ---- decode speed ----------------------------------------------------------------------------------------


def generates_tokens(spec: ModelSpec) -> bool:
    """False for a model whose every layer keeps nothing per sequence (an encoder such as BERT): an
    autoregressive decoder needs a KV cache or a recurrent state somewhere. Unknown layers count as True."""
    return not spec.layers or any(layer.kind is not LayerKind.NONE for layer in spec.layers)


def without_decode_speed(result: Estimate) -> Estimate:
    """An encoder-only model has no decode speed: None and a warning instead of a bandwidth bound."""
    if generates_tokens(result.spec) or result.decode_tokens_per_second is None:
        return result
    note = (
        "the model keeps no KV cache or recurrent state in any layer (an encoder, not a decoder): it does "
        "not generate tokens, so no decode speed is given"
    )
    explain = {**result.explain, "decode": note}
    return replace(
        result, decode_tokens_per_second=None, warnings=tuple(dict.fromkeys([*result.warnings, note])), explain=explain
    )


# ---- applying them ---------------------------------------------------------------------------------------


def with_refusals(result: Estimate, refusals: list[str], notes: list[str]) -> Estimate:
    """The estimate with ``notes`` added to its warnings and, for each refusal, a does_not_fit verdict
    (when there is hardware to give a verdict on) and the reason as a warning."""
    refusals = [reason for reason in refusals if reason]
    if not refusals and not notes:
        return result
    warnings = tuple(dict.fromkeys(list(result.warnings) + refusals + notes))
    if not refusals:
        return replace(result, warnings=warnings)
    verdict = VERDICT_DOES_NOT_FIT if result.verdict is not None else None
    return replace(
        result, warnings=warnings, verdict=verdict, refusal=refusals[0] if verdict is not None else result.refusal
    )
