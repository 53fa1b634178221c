"""The ``hfvram.fit/1`` document: the inverse view of one model on one GPU type (longest context, most concurrent
requests, the fewest GPUs, a context × KV-type table). Built from the estimator's answers; nothing is computed
here that the estimator does not say."""

from __future__ import annotations

from dataclasses import asdict, is_dataclass, replace
from typing import Any

from hfvram.errors import UsageError
from hfvram.estimate import inverse
from hfvram.estimate.core import estimate, estimate_memory
from hfvram.report.jsonout import source_dict, verdict_reason

FIT_SCHEMA = "hfvram.fit/1"
#: the largest GPU count `fit` tries for the smallest set that fits
FIT_MAX_GPUS = 64
#: the table's columns: the engine's own default cache type, then its first accepted 8-bit type
FIT_KV_CANDIDATES: tuple[tuple[str, ...], ...] = (("auto",), ("fp8", "fp8_e4m3", "q8_0", "int8"))


def fit_kv_dtypes(spec: Any, hardware: Any, choice: Any, wl: Any) -> tuple[str, ...]:
    """KV cache types for the fit table, as the engine names them (vLLM: bf16 / fp8; llama.cpp: f16 / q8_0)."""
    found: list[str] = []
    for candidates in FIT_KV_CANDIDATES:
        for name in candidates:
            try:
                resolved = estimate_memory(spec, hardware, choice, replace(wl, kv_dtype=name)).workload.kv_dtype
            except UsageError:
                continue
            if resolved not in found:
                found.append(resolved)
            break
    return tuple(found)


def context_row(row: Any) -> dict[str, Any]:
    """A row of inverse.context_table as a plain dict."""
    if isinstance(row, dict):
        return dict(row)
    if is_dataclass(row) and not isinstance(row, type):
        return asdict(row)
    raise TypeError(f"unexpected context_table row {row!r}")


def fit_document(loaded: Any, hardware: Any, choice: Any, wl: Any) -> dict[str, Any]:
    """One ``hfvram.fit/1`` object (plus ``_spec`` / ``_choice`` / ``_workload`` for the plot, dropped on output).

    ``max_context`` and ``max_concurrency`` are the figures ``check`` prints (one meaning, docs/methodology.md);
    ``smallest_gpu_count`` is the fewest GPUs whose verdict is *fits* (with the 10 % margin) and
    ``smallest_gpu_count_tight`` the fewest on which it runs at all (fits or tight)."""
    spec = loaded.spec
    est = estimate(spec, hardware, choice, wl)
    rows = inverse.context_table(spec, hardware, choice, wl, kv_dtypes=fit_kv_dtypes(spec, hardware, choice, wl))
    smallest = inverse.smallest_gpu_count(spec, hardware.gpu, choice, wl, max_count=FIT_MAX_GPUS, tight_ok=False)
    runs = inverse.smallest_gpu_count(spec, hardware.gpu, choice, wl, max_count=FIT_MAX_GPUS)
    # engines that place what does not fit into RAM: the fewest GPUs with that placement (None: none offloads)
    with_ram = None
    if est.offload is not None or est.verdict == "offload":
        with_ram = inverse.smallest_gpu_count(
            spec, hardware.gpu, choice, wl, max_count=FIT_MAX_GPUS, offload=True, host=hardware
        )
    return {
        "schema": FIT_SCHEMA,
        "source": source_dict(loaded.source),
        "gpu": hardware.gpu.id,
        "hardware": hardware.label,
        "engine": choice.name + (f"@{choice.version}" if choice.version else ""),
        "context": est.workload.context,
        "concurrency": wl.concurrency,
        "verdict": est.verdict,
        "verdict_reason": verdict_reason(est),
        "total": est.per_gpu.total,
        "usable": est.per_gpu.usable,
        "max_context": est.capacity.max_context,
        # the figure check prints; a search on the verdict where the engine gives none
        "max_concurrency": est.capacity.max_concurrency
        if est.capacity.max_concurrency is not None
        else inverse.max_concurrency(spec, hardware, choice, wl),
        "smallest_gpu_count": smallest,
        "smallest_gpu_count_tight": runs if runs is not None and (smallest is None or runs < smallest) else None,
        "smallest_gpu_count_offload": with_ram
        if with_ram is not None and (runs is None or with_ram < runs) and (smallest is None or with_ram < smallest)
        else None,
        "max_gpu_count_tried": FIT_MAX_GPUS,
        "max_position_embeddings": spec.max_position_embeddings,
        "context_table": [context_row(row) for row in rows],
        "warnings": list(dict.fromkeys(list(spec.warnings) + list(est.warnings))),
        **({"offload_plan": est.offload.as_dict(moe=any(layer.moe for layer in spec.layers))} if est.offload else {}),
        "_offload": est.offload,
        "_spec": spec,
        "_choice": choice,
        "_workload": wl,
        "_hardware": hardware,
    }
