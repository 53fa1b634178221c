"""The ``hfvram.fit/1`` document: the inverse view of one model on one GPU type (longest context, most concurrent
requests, the fewest GPUs, a context × KV-type table). Rendered from the estimator's answers, which
hfvram.pipeline.fit computes (:class:`FitFigures`); nothing is computed here."""

from __future__ import annotations

from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

from hfvram.estimate.types import Estimate
from hfvram.report.jsonout import source_dict, verdict_reason

FIT_SCHEMA = "hfvram.fit/1"


@dataclass(frozen=True)
class FitFigures:
    """The estimator's answers the fit document shows (hfvram.pipeline.fit.fit_figures)."""

    estimate: Estimate
    #: hfvram.estimate.inverse.context_table's rows
    context_rows: tuple[Any, ...]
    #: the fewest GPUs whose verdict is fits; on which it runs at all (fits or tight); with the engine's RAM placement
    smallest_gpu_count: int | None
    runs_gpu_count: int | None
    with_ram_gpu_count: int | None
    max_gpu_count_tried: int
    max_concurrency: float | None


def context_row(row: Any) -> dict[str, Any]:
    """A row of inverse.context_table as a plain dict."""
    if isinstance(row, dict):
        return dict(row)
    if is_dataclass(row) and not isinstance(row, type):
        return asdict(row)
    raise TypeError(f"unexpected context_table row {row!r}")


def fit_document(loaded: Any, hardware: Any, choice: Any, wl: Any, figures: FitFigures) -> dict[str, Any]:
    """One ``hfvram.fit/1`` object.

    ``max_context`` and ``max_concurrency`` are the figures ``check`` prints (one meaning, docs/methodology.md);
    ``smallest_gpu_count`` is the fewest GPUs whose verdict is *fits* (with the 10 % margin) and
    ``smallest_gpu_count_tight`` the fewest on which it runs at all (fits or tight)."""
    spec = loaded.spec
    est = figures.estimate
    smallest, runs, with_ram = figures.smallest_gpu_count, figures.runs_gpu_count, figures.with_ram_gpu_count
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
        "max_concurrency": figures.max_concurrency,
        "smallest_gpu_count": smallest,
        "smallest_gpu_count_tight": runs if runs is not None and (smallest is None or runs < smallest) else None,
        "smallest_gpu_count_offload": with_ram
        if with_ram is not None and (runs is None or with_ram < runs) and (smallest is None or with_ram < smallest)
        else None,
        "max_gpu_count_tried": figures.max_gpu_count_tried,
        "max_position_embeddings": spec.max_position_embeddings,
        "context_table": [context_row(row) for row in figures.context_rows],
        "warnings": list(dict.fromkeys(list(spec.warnings) + list(est.warnings))),
        **({"offload_plan": est.offload.as_dict(moe=any(layer.moe for layer in spec.layers))} if est.offload else {}),
    }
