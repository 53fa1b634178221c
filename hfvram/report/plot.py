"""``fit --plot``: memory on the worst GPU against context, one band per term, one panel per model (matplotlib,
the optional ``plot`` extra, imported only here and only when a plot is asked for).

The x axis is linear (the KV cache grows linearly with context, and a linear axis shows it so); the usable memory
and the 90 % line are drawn, the longest context (``max_context``, the figure the text report gives) is marked
where the stack crosses the usable line, and the legend sits below the panels, never over the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    """What one model's panel shows: the stacked terms (GiB) at each context, the usable line, the crossing
    (computed by hfvram.pipeline.fit.memory_panel)."""

    title: str
    #: the GPU set's label (panels of one GPU set share the y axis)
    hardware: str
    contexts: list[int]
    terms: dict[str, list[float]]
    usable_gib: float | None
    #: the longest context that is not does_not_fit (the report's max_context), marked on the x axis
    max_context: int | None
    model_limit: int | None


def plot_memory_against_context(panels: Sequence[Panel], path: str) -> None:
    """The panels (one per ``fit`` document) side by side, sharing the y axis when they share a GPU; written to
    ``path``."""
    check_plot_path(path)
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text (searchable, smaller)
    import matplotlib.pyplot as plt

    from hfvram.report.text import safe

    same_gpu = len({panel.hardware for panel in panels}) == 1
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
