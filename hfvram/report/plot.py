"""``fit --plot``: memory on the worst GPU against context, one band per term (matplotlib, optional extra)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hfvram.errors import UsageError
from hfvram.report.units import tokens_short

GIB = 1024**3
TERM_COLOURS = (("weights", "#1f77b4"), ("kv_cache", "#9467bd"), ("activations", "#e6b800"), ("overhead", "#17becf"))


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'hfvram[plot]'") from None


def plot_contexts(max_context: int, start: int = 4096) -> list[int]:
    """4k, 8k, … doubling up to the model's maximum (which is always the last point)."""
    contexts = []
    context = start
    while context < max_context:
        contexts.append(context)
        context *= 2
    contexts.append(max_context)
    return contexts


def plot_memory_against_context(
    spec: Any, hardware: Any, choice: Any, workload: Any, path: str, title: str | None = None
) -> None:
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hfvram.estimate.core import estimate

    if not path.lower().endswith((".png", ".svg")):
        raise UsageError(f"--plot writes .png or .svg files, not {path!r}")
    max_context = spec.max_position_embeddings or 131072
    contexts = plot_contexts(max_context)
    series: dict[str, list[float]] = {term: [] for term, _ in TERM_COLOURS}
    usable = None
    for context in contexts:
        est = estimate(spec, hardware, choice, replace(workload, context=context))
        for term, _ in TERM_COLOURS:
            series[term].append(getattr(est.per_gpu, term) / GIB)
        usable = est.per_gpu.usable / GIB
    figure, axes = plt.subplots(figsize=(8, 4.5))
    axes.stackplot(
        contexts,
        *(series[term] for term, _ in TERM_COLOURS),
        labels=[term.replace("_", " ") for term, _ in TERM_COLOURS],
        colors=[colour for _, colour in TERM_COLOURS],
    )
    if usable:
        axes.axhline(usable, color="red", linestyle="--", label="usable")
        axes.axhline(usable * 0.9, color="orange", linestyle=":", label="tight from here")
    axes.set_xscale("log", base=2)
    axes.set_xticks(contexts, [tokens_short(context) for context in contexts])
    axes.set_xlabel("context (tokens)")
    axes.set_ylabel("GiB on the worst GPU")
    axes.set_title(
        f"{title or spec.architecture} on {hardware.label} ({choice.name}), concurrency {workload.concurrency}"
    )
    axes.legend(loc="upper left", fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
