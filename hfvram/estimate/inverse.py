"""The inverse questions behind ``hfvram fit``: longest context, most concurrent requests, smallest GPU set, and
the memory against context that ``fit --plot`` draws.

Every answer comes from the forward estimator (``core.estimate``), so each engine's own rules apply. Where
the engine reports its capacity in closed form (memory-fraction engines: vLLM, SGLang compute the KV pool once
and divide it), that figure is used; otherwise a binary search over the verdict, which is monotone in context
and in concurrency (more tokens never need less memory).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hfvram.datafiles import data_table
from hfvram.estimate.core import estimate_memory as estimate
from hfvram.estimate.types import GPU, VERDICT_DOES_NOT_FIT, VERDICT_FITS, EngineChoice, Estimate, Hardware, Workload
from hfvram.spec import LayerKind, ModelSpec

#: contexts the fit table walks through (then the model's own maximum)
TABLE_CONTEXTS: tuple[int, ...] = (4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576)
TABLE_KV_DTYPES: tuple[str, ...] = ("bf16", "fp8")
#: the four terms of the worst GPU, in the order they stack
MEMORY_TERMS: tuple[str, ...] = ("weights", "kv_cache", "activations", "overhead")
#: the most points one series is computed for (each point is one forward estimate)
MAX_SERIES_POINTS = 4096


def _fits(result: Estimate) -> bool:
    return result.verdict is not None and result.verdict != VERDICT_DOES_NOT_FIT


def _at(spec: ModelSpec, hardware: Hardware, choice: EngineChoice, workload: Workload, **changes) -> Estimate:
    return estimate(spec, hardware, choice, replace(workload, **changes))


def _upper_context(spec: ModelSpec, workload: Workload) -> int:
    return spec.max_position_embeddings or workload.context or 131072


def _norm(name: str) -> str:
    return name.strip().lower().lstrip("-").replace("_", "-")


def context_setting_names(engine: str) -> frozenset[str]:
    """The names under which the engine's own context setting may be typed (``max-model-len``, ``-c`` /
    ``ctx-size`` / ``n-ctx``, ``num-ctx``, ``OLLAMA_CONTEXT_LENGTH``, …), from hfvram/data/engine_args.toml
    [generic] and the engine's hfvram/engines/<engine>/settings.toml."""
    from hfvram.estimate.engine_args import engine_command_line

    generic = data_table("engine_args.toml")["generic"]
    names = {_norm(str(name)) for name in generic["fields"]["context"]} | {"n-ctx", "num-ctx"}
    table = engine_command_line(engine)
    canonical = table.fields.get("context") if table else None
    if table is not None and canonical:
        names.add(_norm(canonical))
        names |= {_norm(alias) for alias, target in table.aliases.items() if target == canonical}
    if table is not None:
        names |= {_norm(env) for env, target in table.env.items() if target == canonical}
    return frozenset(names)


def context_following(choice: EngineChoice) -> EngineChoice:
    """``choice`` without the engine's own context setting, so that the context it serves follows ``--context``."""
    if not choice.settings:
        return choice  # the common case: nothing to drop
    from hfvram.engines import parse_engine_name

    names = context_setting_names(parse_engine_name(choice.name)[0])
    kept = {key: value for key, value in choice.settings.items() if _norm(key) not in names}
    return choice if len(kept) == len(choice.settings) else replace(choice, settings=kept)


def max_context(
    spec: ModelSpec, hardware: Hardware, choice: EngineChoice, workload: Workload, known: Estimate | None = None
) -> int | None:
    """Longest context (tokens per sequence, ≤ the model's max length) at ``workload.concurrency`` that the
    engine runs, the engine's own context setting following it (a pinned ``max-model-len`` is what is being
    asked about); 0 when not even one token fits; None when the engine cannot tell (no verdict). ``known``: the
    forward estimate of ``workload`` itself, reused where the search asks for ``workload.context`` again."""
    following = context_following(choice)

    def at(context: int) -> Estimate:
        if known is not None and following is choice and context == workload.context:
            return known  # the same inputs: the same estimate
        return _at(spec, hardware, following, workload, context=context)

    upper = _upper_context(spec, workload)
    top = at(upper)
    if top.verdict is None:
        return None
    if _fits(top):
        return upper
    if top.capacity.max_context is not None and _closed_form_capacity(top):
        candidate = min(top.capacity.max_context, upper)
        # the closed form only knows the KV pool; the engine may still refuse for another reason
        # (and where the budget depends on the context, vLLM V0's profile run, a shorter one may still fit)
        if candidate > 0 and _fits(at(candidate)):
            return candidate
        if candidate == 0 and not _fits(at(1)):
            return 0
    low, high = 0, upper
    while low < high:
        mid = (low + high + 1) // 2
        if _fits(at(mid)):
            low = mid
        else:
            high = mid - 1
    return low


def max_concurrency(spec: ModelSpec, hardware: Hardware, choice: EngineChoice, workload: Workload) -> float:
    """Full-length requests at ``workload.context`` that fit together (fractional for paged engines, which
    report e.g. vLLM's "Maximum concurrency … 3.3x"; whole sequences otherwise)."""
    base = _at(spec, hardware, choice, workload, concurrency=1)
    if _closed_form_capacity(base) and base.capacity.max_concurrency is not None:
        if not _fits(base) and base.capacity.max_concurrency >= 1:
            return 0.0  # the engine refuses for a reason other than its KV pool (e.g. no room outside its budget)
        return float(base.capacity.max_concurrency)
    if not _fits(base):
        return 0.0
    low, high = 1, 2
    while _fits(_at(spec, hardware, choice, workload, concurrency=high)):
        low, high = high, high * 2
        if high > 1 << 20:
            return math.inf
    while low + 1 < high:
        mid = (low + high) // 2
        if _fits(_at(spec, hardware, choice, workload, concurrency=mid)):
            low = mid
        else:
            high = mid
    return float(low)


def _closed_form_capacity(result: Estimate) -> bool:
    """True when the engine sized its KV pool independently of the workload (the pool is the budget's
    remainder), so its capacity figures are exact and no search is needed."""
    return bool(result.engine.get("kv_pool_bytes") is not None)


def valid_tp_sizes(spec: ModelSpec, max_count: int) -> list[int]:
    """Powers of two, plus sizes that divide the KV heads (and the attention heads), up to ``max_count``.
    Engines need the attention heads divisible by TP; KV heads either divisible or replicated."""
    heads = spec.num_attention_heads
    kv_heads = {layer.num_kv_heads for layer in spec.layers if layer.kind is not LayerKind.MLA and layer.num_kv_heads}
    sizes = []
    for count in range(1, max_count + 1):
        power_of_two = count & (count - 1) == 0
        divides_kv = all(h % count == 0 or count % h == 0 for h in kv_heads) if kv_heads else True
        divides_heads = heads is None or heads % count == 0
        if divides_heads and (power_of_two or (divides_kv and kv_heads)):
            sizes.append(count)
    return sizes


def smallest_gpu_count(
    spec: ModelSpec,
    gpu: GPU,
    choice: EngineChoice,
    workload: Workload,
    max_count: int = 64,
    *,
    tight_ok: bool = True,
    offload: bool = False,
    host: Hardware | None = None,
) -> int | None:
    """Fewest GPUs of one kind (as tensor parallel, a valid TP size) on which the workload runs on the GPUs alone
    (fits or tight; with ``tight_ok=False``: fits, with the 10 % margin); with ``offload``: on which it runs at all,
    with the engine's own placement into RAM (verdict offload counts; ``host``: the hardware whose host memory and
    RAM apply). None when even ``max_count`` does not."""
    from hfvram.estimate.core import with_offload

    for count in valid_tp_sizes(spec, max_count):
        pinned = replace(choice, tp=count, pp=1)
        hardware = Hardware(gpu=gpu, count=count)
        if host is not None:
            hardware = replace(hardware, host=host.host, ram_bytes=host.ram_bytes)
        result = estimate(spec, hardware, pinned, workload)
        if offload:
            result = with_offload(result, pinned, workload)
        if _fits(result) if tight_ok else result.verdict == VERDICT_FITS:
            return count
    return None


@dataclass(frozen=True)
class ContextRow:
    """One row of the fit table: a context length and, per KV dtype, what fits at it."""

    context: int
    kv_dtype: str
    verdict: str | None
    max_concurrency: float | None
    kv_cache_bytes: int
    utilization: float | None


def context_table(
    spec: ModelSpec,
    hardware: Hardware,
    choice: EngineChoice,
    workload: Workload,
    kv_dtypes: tuple[str, ...] = TABLE_KV_DTYPES,
) -> list[ContextRow]:
    """Verdict and concurrency for contexts 4k … the model's max length, for each KV dtype."""
    model_max = spec.max_position_embeddings
    contexts = [c for c in TABLE_CONTEXTS if model_max is None or c < model_max]
    if model_max:
        contexts.append(model_max)
    rows = []
    for kv_dtype in kv_dtypes:
        for context in contexts:
            result = _at(spec, hardware, choice, workload, context=context, kv_dtype=kv_dtype)
            concurrency = result.capacity.max_concurrency
            if concurrency is None:
                concurrency = max_concurrency(
                    spec, hardware, choice, replace(workload, context=context, kv_dtype=kv_dtype)
                )
            rows.append(
                ContextRow(
                    context=context,
                    kv_dtype=kv_dtype,
                    verdict=result.verdict,
                    max_concurrency=concurrency,
                    kv_cache_bytes=result.per_gpu.kv_cache,
                    utilization=result.utilization,
                )
            )
    return rows


@dataclass(frozen=True)
class MemoryPoint:
    """The worst GPU at one context: bytes per term (:data:`MEMORY_TERMS`) and the usable memory."""

    context: int
    terms: dict[str, int]
    usable: int | None


def memory_series(
    spec: ModelSpec, hardware: Hardware, choice: EngineChoice, workload: Workload, contexts: Sequence[int]
) -> list[MemoryPoint]:
    """Each term on the worst GPU at each of ``contexts`` (everything else as in ``workload``), one forward
    estimate per context: the series ``fit --plot`` draws."""
    if len(contexts) > MAX_SERIES_POINTS:
        raise ValueError(f"{len(contexts)} contexts: a memory series has at most {MAX_SERIES_POINTS} points")
    points = []
    for context in contexts:
        per_gpu = _at(spec, hardware, choice, workload, context=context).per_gpu
        terms = {term: int(getattr(per_gpu, term)) for term in MEMORY_TERMS}
        points.append(MemoryPoint(context=context, terms=terms, usable=per_gpu.usable))
    return points
