"""``fit --plot``: memory on the worst GPU against context, one band per term, one panel per model (matplotlib,
the optional ``plot`` extra, imported only here and only when a plot is asked for).

The x axis is linear (the KV cache grows linearly with context, and a linear axis shows it so); the usable memory
and the 90 % line are drawn, the longest context (``max_context``, the figure the text report gives) is marked
where the stack crosses the usable line, and the legend sits below the panels, never over the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hfvram.errors import UsageError
from hfvram.report.units import tokens_short

GIB = 1024**3
TERM_COLOURS = (("weights", "#1f77b4"), ("kv_cache", "#9467bd"), ("activations", "#e6b800"), ("overhead", "#17becf"))
#: points per curve: enough for a smooth stack, few enough for a quick plot (each point is one estimate)
PLOT_POINTS = 48
FORMATS = (".png", ".svg")


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'hfvram[plot]'") from None


def check_plot_path(path: str) -> None:
    if not path.lower().endswith(FORMATS):
        raise UsageError(f"--plot writes .png or .svg files, not {path!r}")


def plot_contexts(max_context: int, points: int = PLOT_POINTS) -> list[int]:
    """``points`` evenly spaced contexts ending at the model's maximum (rounded to whole tokens)."""
    points = max(1, min(points, max_context))
    return sorted({max(1, round(max_context * index / points)) for index in range(1, points + 1)})


@dataclass(frozen=True)
class Panel:
    """What one model's panel shows: the stacked terms (GiB) at each context, the usable line, the crossing."""

    title: str
    contexts: list[int]
    terms: dict[str, list[float]]
    usable_gib: float | None
    #: the longest context that is not does_not_fit (the report's max_context), marked on the x axis
    max_context: int | None
    model_limit: int | None


def panel_for(document: dict[str, Any]) -> Panel:
    """The series of one ``fit`` document, computed by ``hfvram.estimate.inverse.memory_series`` (drawn here, not
    computed)."""
    from hfvram.estimate.inverse import memory_series

    spec, choice, wl, hardware = (document[key] for key in ("_spec", "_choice", "_workload", "_hardware"))
    top = spec.max_position_embeddings or max(131072, document.get("max_context") or 0)
    contexts = plot_contexts(top)
    series = memory_series(spec, hardware, choice, wl, contexts)
    terms = {term: [point.terms[term] / GIB for point in series] for term, _ in TERM_COLOURS}
    usable = series[-1].usable if series else None
    source = document.get("source") or {}
    name = source.get("repo_id") or (source.get("files") or ["?"])[0]
    return Panel(
        title=f"{name}\n{document['hardware']} · {document['engine']} · concurrency {document['concurrency']}",
        contexts=contexts,
        terms=terms,
        usable_gib=None if usable is None else usable / GIB,
        max_context=document.get("max_context"),
        model_limit=spec.max_position_embeddings,
    )


def plot_memory_against_context(documents: Sequence[dict[str, Any]], path: str) -> None:
    """One panel per ``fit`` document, side by side, sharing the y axis when they share a GPU; written to ``path``."""
    check_plot_path(path)
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text (searchable, smaller)
    import matplotlib.pyplot as plt

    from hfvram.report.text import safe

    panels = [panel_for(document) for document in documents]
    same_gpu = len({document["hardware"] for document in documents}) == 1
    figure, axes_list = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), sharey=same_gpu, squeeze=False)
    top = max(max([sum(values) for values in zip(*panel.terms.values())] + [panel.usable_gib or 0]) for panel in panels)
    for axes, panel in zip(axes_list[0], panels):
        axes.stackplot(
            panel.contexts,
            *(panel.terms[term] for term, _ in TERM_COLOURS),
            labels=[term.replace("_", " ") for term, _ in TERM_COLOURS],
            colors=[colour for _, colour in TERM_COLOURS],
        )
        if panel.usable_gib:
            axes.axhline(panel.usable_gib, color="red", linestyle="--", label="usable")
            axes.axhline(panel.usable_gib * 0.9, color="orange", linestyle=":", label="tight from here (90 %)")
        if panel.max_context:
            axes.axvline(panel.max_context, color="black", linewidth=1, label="longest context")
            axes.annotate(
                f"longest context {tokens_short(panel.max_context)}",
                xy=(panel.max_context, panel.usable_gib or 0),
                xytext=(-6, 6),
                textcoords="offset points",
                ha="right",
                fontsize="small",
            )
        axes.set_xlim(0, panel.contexts[-1])
        axes.set_ylim(0, top * 1.08)
        ticks = [panel.contexts[-1] * i // 4 for i in range(5)]
        axes.set_xticks(ticks, [tokens_short(tick) if tick else "0" for tick in ticks])
        axes.set_xlabel("context (tokens per request, linear)")
        axes.set_ylabel("GiB on the worst GPU")
        axes.set_title(safe(panel.title, keep_lines=True), fontsize="medium")
    handles, labels = axes_list[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize="small", frameon=False)
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    figure.savefig(path)
    plt.close(figure)
