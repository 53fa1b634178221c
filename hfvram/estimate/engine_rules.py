"""What an engine refuses before any memory is counted: the KV dtypes, setting names, parallel sizes,
hardware and releases it knows. The facts are data (``[accepts]`` in ``hfvram/data/engines/<name>.toml``,
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
from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import cache
from typing import Any

from hfvram.datafiles import data_table
from hfvram.errors import UsageError
from hfvram.estimate import common
from hfvram.estimate.types import VERDICT_DOES_NOT_FIT, EngineChoice, Estimate, Hardware, Workload
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
    """Every setting name the engine has: the flags of its command line (``engine_args.toml``: settings,
    booleans, aliases, environment) and the names its profile reads (``[accepts] settings``); built once per
    engine (the tables are packaged data)."""
    from hfvram.estimate.engine_args import _engine_table

    names: set[str] = {_normalized(name) for name in accepts(engine).get("settings", [])}
    table = _engine_table(engine) or {}
    for key in ("settings", "booleans", "model_flags"):
        names.update(_normalized(name) for name in table.get(key, []))
    for key in ("aliases", "env"):
        for alias, canonical in dict(table.get(key, {})).items():
            names.update((_normalized(alias), _normalized(str(canonical))))
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


# ---- hardware --------------------------------------------------------------------------------------------


def platform_refusal(engine: str, hardware: Hardware | None) -> str | None:
    """Why the engine does not run on this GPU's vendor (``[accepts.refused_vendors]``), or None."""
    if hardware is None:
        return None
    reason = dict(accepts(engine).get("refused_vendors", {})).get(hardware.gpu.vendor)
    return f"{engine} does not run on {hardware.gpu.name}: {reason}" if reason else None


# ---- releases --------------------------------------------------------------------------------------------


def version_warnings(engine: str, requested: str | None, rule_versions: Iterable[str]) -> list[str]:
    """Say which release's rules were used when the one asked for is not one hfvram models."""
    ordered = sorted(rule_versions, key=common.version_key)
    if not requested or not ordered:
        return []
    want = common.version_key(requested)
    if not want:
        return []
    used = common.pick_rule_version(requested, ordered)
    width = min(len(want), len(common.version_key(used)), 2)
    if want[:width] == common.version_key(used)[:width]:
        return []
    if want < common.version_key(ordered[0]):
        return [
            f"--engine {engine}@{requested}: older than any {engine} release hfvram models; the {used} rules are used"
        ]
    if used == ordered[-1]:
        return [
            f"--engine {engine}@{requested}: hfvram uses the {used} rules, the newest {engine} release whose "
            f"memory accounting it models; a later change in {requested} would not be reflected"
        ]
    return [
        f"--engine {engine}@{requested}: hfvram uses the {used} rules (the newest change to {engine}'s memory "
        f"accounting it knows at or before {requested})"
    ]


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
