"""The inverse view of one model on one GPU type (``hfvram.fit/1``): the estimator's answers (longest context,
most concurrent requests, the fewest GPUs, the context × KV-type table, the memory series ``--plot`` draws) are
computed here; hfvram.report.fitdoc and hfvram.report.plot only render them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hfvram.errors import UsageError
from hfvram.pipeline.check import model_argument
from hfvram.pipeline.model import engine_choice, load, with_draft, workload
from hfvram.pipeline.request import Request, RunOptions
from hfvram.pipeline.whatif import auto_quant, gguf_repo_quant, what_if_dict

if TYPE_CHECKING:
    from hfvram.estimate.types import EngineChoice, Hardware, Workload
    from hfvram.report.fitdoc import FitFigures
    from hfvram.report.plot import Panel
    from hfvram.spec import ModelSpec

#: the largest GPU count `fit` tries for the smallest set that fits
FIT_MAX_GPUS = 64
#: the table's columns: the engine's own default cache type, then its first accepted 8-bit type
FIT_KV_CANDIDATES: tuple[tuple[str, ...], ...] = (("auto",), ("fp8", "fp8_e4m3", "q8_0", "int8"))


@dataclass(frozen=True)
class FitReport:
    """One ``hfvram.fit/1`` document and the model facts and engine setup its figures were computed for (what
    ``--plot`` draws from: :func:`memory_panel`)."""

    document: dict[str, Any]
    spec: ModelSpec
    choice: EngineChoice
    workload: Workload
    hardware: Hardware


def fit_kv_dtypes(spec: Any, hardware: Any, choice: Any, wl: Any) -> tuple[str, ...]:
    """KV cache types for the fit table, as the engine names them (vLLM: bf16 / fp8; llama.cpp: f16 / q8_0)."""
    from hfvram.estimate.core import estimate_memory

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


def fit_figures(spec: Any, hardware: Any, choice: Any, wl: Any) -> FitFigures:
    """The estimator's answers for the fit document. ``smallest_gpu_count`` is the fewest GPUs whose verdict is
    *fits* (with the 10 % margin), ``runs`` the fewest on which it runs at all (fits or tight), ``with_ram`` the
    fewest with the engine's placement into RAM (engines that place what does not fit there; None: none offloads);
    ``max_concurrency`` the figure check prints, a search on the verdict where the engine gives none."""
    from hfvram.estimate import inverse
    from hfvram.estimate.core import estimate
    from hfvram.report.fitdoc import FitFigures

    est = estimate(spec, hardware, choice, wl)
    rows = inverse.context_table(spec, hardware, choice, wl, kv_dtypes=fit_kv_dtypes(spec, hardware, choice, wl))
    smallest = inverse.smallest_gpu_count(spec, hardware.gpu, choice, wl, max_count=FIT_MAX_GPUS, tight_ok=False)
    runs = inverse.smallest_gpu_count(spec, hardware.gpu, choice, wl, max_count=FIT_MAX_GPUS)
    with_ram = None
    if est.offload is not None or est.verdict == "offload":
        with_ram = inverse.smallest_gpu_count(
            spec, hardware.gpu, choice, wl, max_count=FIT_MAX_GPUS, offload=True, host=hardware
        )
    return FitFigures(
        estimate=est,
        context_rows=tuple(rows),
        smallest_gpu_count=smallest,
        runs_gpu_count=runs,
        with_ram_gpu_count=with_ram,
        max_gpu_count_tried=FIT_MAX_GPUS,
        max_concurrency=est.capacity.max_concurrency
        if est.capacity.max_concurrency is not None
        else inverse.max_concurrency(spec, hardware, choice, wl),
    )


def fit_report(request: Request, options: RunOptions) -> FitReport:
    """The inverse view for one model on one GPU type (computed here, rendered by hfvram.report.fitdoc)."""
    from hfvram.report.fitdoc import fit_document

    request = gguf_repo_quant(request)
    loaded = load(request, options)
    request = with_draft(request, options, loaded)
    choice = engine_choice(request, loaded)
    tried = None
    if request.quant == "auto":
        request, loaded, tried = auto_quant(request, loaded)
    choice = engine_choice(request, loaded)
    assert request.hardware is not None  # fit needs --gpu (the command and the API check it)
    figures = fit_figures(loaded.spec, request.hardware, choice, workload(request))
    document = fit_document(loaded, request.hardware, choice, workload(request), figures)
    from hfvram.estimate.core import estimate
    from hfvram.estimate.launch import largest_batch

    document["largest_batch"] = largest_batch(estimate(loaded.spec, request.hardware, choice, workload(request)))
    notes = list(request.notes)
    if request.quant is not None:
        from hfvram import quant
        from hfvram.engines import parse_engine_name

        reason, quant_notes = quant.engine_rule(request.quant, parse_engine_name(choice.name)[0], request.hardware)
        notes += list(quant_notes)
        if reason:
            document["verdict"] = "does_not_fit"
            document["verdict_reason"] = f"engine rule: {reason}"
            notes.append(reason)
        document["what_if"] = what_if_dict(request.quant, loaded, tried)
    document["warnings"] = list(dict.fromkeys(document["warnings"] + notes))
    plan = figures.estimate.offload
    if plan is not None and "offload_plan" in document and plan.planner == "llama.cpp":
        from hfvram.engines.llamacpp.fit import command_line

        document["offload_plan"]["command"] = command_line(plan, plan.usage.settings, model_argument(loaded))
    from hfvram.redaction import redact_document

    return FitReport(redact_document(document), loaded.spec, choice, workload(request), request.hardware)


def memory_panel(
    document: dict[str, Any], spec: ModelSpec, hardware: Hardware, choice: EngineChoice, wl: Workload
) -> Panel:
    """What ``fit --plot`` draws for one ``fit`` document: memory on the worst GPU against context per term, the
    series computed by ``hfvram.estimate.inverse.memory_series`` (drawn by hfvram.report.plot, not computed)."""
    from hfvram.estimate.inverse import memory_series
    from hfvram.report.plot import GIB, TERM_COLOURS, Panel, plot_contexts

    top = spec.max_position_embeddings or max(131072, document.get("max_context") or 0)
    contexts = plot_contexts(top)
    series = memory_series(spec, hardware, choice, wl, contexts)
    terms = {term: [point.terms[term] / GIB for point in series] for term, _ in TERM_COLOURS}
    usable = series[-1].usable if series else None
    source = document.get("source") or {}
    name = source.get("repo_id") or (source.get("files") or ["?"])[0]
    return Panel(
        title=f"{name}\n{document['hardware']} · {document['engine']} · concurrency {document['concurrency']}",
        hardware=document["hardware"],
        contexts=contexts,
        terms=terms,
        usable_gib=None if usable is None else usable / GIB,
        max_context=document.get("max_context"),
        model_limit=spec.max_position_embeddings,
    )
