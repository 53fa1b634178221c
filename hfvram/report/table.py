"""Rich terminal reports. Imported only by the commands that print tables (rich is slow to import)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hfvram.report.units import count, gib, params, percent, tokens_short

VERDICT_STYLE = {"fits": "bold green", "tight": "bold yellow", "does_not_fit": "bold red", None: "bold"}
VERDICT_LABEL = {"fits": "FITS", "tight": "TIGHT", "does_not_fit": "DOES NOT FIT", None: "no verdict (no --gpu)"}

#: term -> (label, colour) for the breakdown and the stacked bar
TERMS: tuple[tuple[str, str, str], ...] = (
    ("weights", "weights", "blue"),
    ("kv_cache", "KV cache", "magenta"),
    ("activations", "activations", "yellow"),
    ("overhead", "overhead", "cyan"),
)
BAR_WIDTH = 56


def source_label(report: Mapping[str, Any]) -> str:
    source = report.get("source") or {}
    name = source.get("repo_id") or (source.get("files") or [source.get("text") or "?"])[0]
    revision = source.get("revision")
    suffix = f" @ {revision[:12]}" if revision else ""
    return f"{name}  [dim]({source.get('kind')}{suffix})[/dim]"


def memory_bar(per_gpu: Mapping[str, Any]) -> Text:
    """A stacked bar of the four terms, the engine's reserve and what is left, against the GPU's memory."""
    memory = per_gpu.get("memory") or 0
    reserve = per_gpu.get("reserve") or 0
    usable = per_gpu.get("usable") or 0
    total = per_gpu["total"]
    scale = max(memory, total + reserve, 1)
    segments: list[tuple[int, str, str]] = [(per_gpu[key] or 0, "█", colour) for key, _, colour in TERMS]
    if memory:
        segments.append((max(0, usable - total), "░", "green"))
        segments.append((reserve, "▒", "bright_black"))
    bar = Text()
    drawn = 0
    for index, (size, glyph, colour) in enumerate(segments):
        cells = round(size / scale * BAR_WIDTH) if size else 0
        if index == len(segments) - 1 and memory:
            cells = max(0, BAR_WIDTH - drawn) if size else 0
        cells = min(cells, BAR_WIDTH - drawn)
        bar.append(glyph * cells, style=colour)
        drawn += cells
    if memory and total > usable:
        bar.append(" ▶ over by " + gib(total - usable), style="bold red")
    return bar


def bar_legend() -> Text:
    legend = Text()
    for _, label, colour in TERMS:
        legend.append("█ ", style=colour)
        legend.append(label + "  ")
    legend.append("░ ", style="green")
    legend.append("free  ")
    legend.append("▒ ", style="bright_black")
    legend.append("reserve")
    return legend


def capacity_line(report: Mapping[str, Any]) -> str | None:
    capacity = report.get("capacity") or {}
    workload = report.get("workload") or {}
    parts = []
    if capacity.get("kv_tokens") is not None:
        text = f"KV cache: {count(capacity['kv_tokens'])} tokens"
        if capacity.get("max_concurrency") is not None and workload.get("context"):
            text += f" — {capacity['max_concurrency']:.1f} concurrent {tokens_short(workload['context'])} requests"
        parts.append(text)
    elif capacity.get("max_concurrency") is not None and workload.get("context"):
        parts.append(f"{capacity['max_concurrency']:.1f} concurrent {tokens_short(workload['context'])} requests")
    if capacity.get("max_context") is not None:
        parts.append(
            f"Longest context at concurrency {workload.get('concurrency', 1)}: {count(capacity['max_context'])} tokens"
        )
    return "\n".join(parts) or None


def render_check(console: Console, report: Mapping[str, Any], *, explain: bool = False) -> None:
    model = report["model"]
    engine = report.get("engine") or {}
    workload = report["workload"]
    hardware = report.get("hardware")
    per_gpu = report["per_gpu"]
    console.print(f"[bold]{source_label(report)}[/bold]")
    engine_text = engine.get("name") or "?"
    if engine.get("version"):
        engine_text += f"@{engine['version']}"
    hw_text = f"{hardware['gpu']} ×{hardware['count']}" if hardware else "no GPU given (footprint only)"
    parallel = report.get("parallel") or {}
    console.print(
        f"{engine_text} · {hw_text} · TP {parallel.get('tp', 1)} PP {parallel.get('pp', 1)} · "
        f"context {tokens_short(workload.get('context'))} · concurrency {workload.get('concurrency')} · "
        f"KV {workload.get('kv_dtype')}",
        highlight=False,
    )
    console.print(
        f"[dim]{model.get('architecture')} · {params(model.get('params_total'))} parameters"
        f" ({params(model.get('params_active'))} active) · weights {gib(model.get('weights_bytes'))} · "
        f"KV {count(model.get('kv_bytes_per_token'))} B/token[/dim]",
        highlight=False,
    )

    table = Table(title="Memory on the worst GPU" if hardware else "Memory footprint per GPU", title_justify="left")
    table.add_column("term")
    table.add_column("size", justify="right")
    table.add_column("of usable", justify="right")
    if explain:
        table.add_column("how", overflow="fold")
    usable = per_gpu.get("usable")
    terms_explain = ((report.get("explain") or {}).get("terms")) or {}
    for key, label, colour in TERMS:
        row = [f"[{colour}]{label}[/{colour}]", gib(per_gpu.get(key)), percent(per_gpu[key] / usable if usable else None)]
        if explain:
            row.append(terms_explain.get(key, ""))
        table.add_row(*row)
    total_row = ["[bold]total[/bold]", f"[bold]{gib(per_gpu['total'])}[/bold]", percent(report.get("utilization"))]
    if explain:
        total_row.append("")
    table.add_row(*total_row, end_section=True)
    if hardware:
        usable_row = ["usable", gib(usable), ""]
        reserve_row = ["reserve (engine keeps back)", gib(per_gpu.get("reserve")), ""]
        memory_row = ["GPU memory", gib(per_gpu.get("memory")), ""]
        for row, key in ((usable_row, "budget"), (reserve_row, "reserve"), (memory_row, "memory")):
            if explain:
                row.append(terms_explain.get(key, terms_explain.get("usable", "")) if key == "budget"
                           else terms_explain.get(key, ""))
            table.add_row(*row)
    console.print(table)
    if hardware:
        console.print(memory_bar(per_gpu))
        console.print(bar_legend())
    verdict = report.get("verdict")
    utilisation = report.get("utilization")
    verdict_text = Text("Verdict: ")
    verdict_text.append(VERDICT_LABEL.get(verdict, str(verdict)), style=VERDICT_STYLE.get(verdict, "bold"))
    if utilisation is not None:
        verdict_text.append(f"  ({utilisation * 100:.0f}% of usable memory)")
    console.print(verdict_text)
    line = capacity_line(report)
    if line:
        console.print(line, highlight=False)
    speed = report.get("decode_tokens_per_second")
    if speed is not None:
        console.print(f"Decode: ≤ {speed:,.1f} tokens/s per sequence (memory-bandwidth bound)", highlight=False)
    render_warnings(console, report.get("warnings") or [])
    if explain:
        shown = {key for key, _, _ in TERMS} | {"budget", "usable", "reserve", "memory"}
        for key, how in terms_explain.items():
            if key not in shown:
                console.print(f"[bold]{key}[/bold]: {how}", highlight=False)
        render_provenance(console, (report.get("explain") or {}).get("provenance") or {}, report)


def render_warnings(console: Console, warnings: Sequence[str]) -> None:
    if not warnings:
        return
    console.print("[yellow]Warnings:[/yellow]")
    for warning in warnings:
        console.print(f"  • {warning}", highlight=False, markup=False)


def render_provenance(console: Console, provenance: Mapping[str, str], report: Mapping[str, Any] | None = None) -> None:
    table = Table(title="Where each input figure came from", title_justify="left")
    table.add_column("fact")
    table.add_column("source", overflow="fold")
    for fact, where in sorted(provenance.items()):
        table.add_row(fact, where)
    if report is not None:
        for key, value in sorted((report.get("engine") or {}).items()):
            table.add_row(f"engine.{key}", str(value))
    console.print(table)


def render_inspect(console: Console, report: Mapping[str, Any]) -> None:
    model = report["model"]
    console.print(f"[bold]{source_label(report)}[/bold]")
    table = Table(show_header=False, box=None)
    table.add_column("fact", style="bold")
    table.add_column("value", overflow="fold")
    quant = model.get("quantization")
    rows: list[tuple[str, str]] = [
        ("architecture", str(model.get("architecture"))),
        ("model type", str(model.get("model_type"))),
        ("dtype", str(model.get("dtype"))),
        ("parameters", f"{params(model.get('params_total'))} total, {params(model.get('params_active'))} active"),
        ("weights", gib(model.get("weights_bytes")) + ("" if model.get("weights_exact") in (None, True) else " (derived from config shapes)")),
        ("quantization", _quantization_text(quant)),
        ("layers", str(model.get("num_layers"))),
        ("layer census", ", ".join(f"{k} {v}" for k, v in (model.get("layers") or {}).items() if v)),
        ("max context", count(model.get("max_position_embeddings"))),
        (f"KV per token ({model.get('kv_dtype')})", f"{count(model.get('kv_bytes_per_token'))} B"),
        ("KV fixed per sequence", f"{count(model.get('kv_fixed_bytes_per_sequence'))} B"),
        ("decided by", str(model.get("decided_by"))),
    ]
    for fact, value in rows:
        table.add_row(fact, value)
    console.print(table)
    render_warnings(console, report.get("warnings") or [])
    if report.get("provenance"):
        render_provenance(console, report["provenance"])


def display_name(report: Mapping[str, Any], limit: int = 44) -> str:
    """The source as typed or as the repo id; a long local path keeps its last two parts."""
    source = report.get("source") or {}
    name = source.get("repo_id") or source.get("text") or (source.get("files") or ["?"])[0]
    if len(name) > limit and "/" in name:
        name = "…/" + "/".join(name.rstrip("/").split("/")[-2:])
    return name


def scan_row(report: Mapping[str, Any]) -> list[str]:
    """One row of the scan summary: source, verdict, total, share of usable, KV tokens, concurrency (or the error)."""
    name = display_name(report)
    if "error" in report:
        return [name, f"[red]ERROR ({report['error']['kind']})[/red]", "", "", "", ""]
    per_gpu = report["per_gpu"]
    capacity = report.get("capacity") or {}
    verdict = report.get("verdict")
    style = VERDICT_STYLE.get(verdict, "bold")
    max_conc = capacity.get("max_concurrency")
    return [
        name,
        f"[{style}]{VERDICT_LABEL.get(verdict, str(verdict))}[/{style}]",
        gib(per_gpu["total"]),
        percent(report.get("utilization")),
        count(capacity.get("kv_tokens")),
        "—" if max_conc is None else f"{max_conc:.1f}",
    ]


def render_scan(console: Console, reports: Iterable[Mapping[str, Any]], title: str = "Scan summary") -> None:
    reports = list(reports)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("source", no_wrap=True)
    for column, justify in (("verdict", "left"), ("per GPU", "right"), ("used", "right"),
                            ("KV tokens", "right"), ("requests", "right")):
        table.add_column(column, justify=justify, no_wrap=True)
    for report in reports:
        table.add_row(*scan_row(report))
    console.print(table)
    errors = [report for report in reports if "error" in report]
    if errors:
        console.print("[red]Could not be read:[/red]")
        for report in errors:
            console.print(f"  • {display_name(report)}: {report['error']['message']}", markup=False)


def render_gpus(console: Console, gpus: Sequence[Mapping[str, Any]]) -> None:
    table = Table(title=f"{len(gpus)} accelerators", title_justify="left")
    for column, justify in (("id", "left"), ("name", "left"), ("vendor", "left"), ("memory", "right"),
                            ("bandwidth GB/s", "right"), ("aliases", "left")):
        table.add_column(column, justify=justify, overflow="fold")
    for gpu in gpus:
        bandwidth = gpu.get("memory_bandwidth_gbs")
        table.add_row(
            gpu["id"], gpu["name"], gpu["vendor"], gib(gpu["gpu_memory_bytes"]),
            "—" if bandwidth is None else f"{bandwidth:,.0f}", ", ".join(gpu.get("aliases") or ()),
        )
    console.print(table)


def render_fit(console: Console, fit: Mapping[str, Any]) -> None:
    console.print(f"[bold]{source_label(fit)}[/bold] on [bold]{fit['hardware']}[/bold] with {fit['engine']}")
    console.print(
        f"  longest context at concurrency {fit['concurrency']}: [bold]{count(fit.get('max_context'))}[/bold] tokens",
        highlight=False,
    )
    max_conc = fit.get("max_concurrency")
    console.print(
        f"  most concurrent {tokens_short(fit.get('context'))} requests: "
        f"[bold]{'—' if max_conc is None else f'{max_conc:.1f}'}[/bold]",
        highlight=False,
    )
    smallest = fit.get("smallest_gpu_count")
    console.print(
        f"  smallest number of {fit['gpu']} that fits: [bold]{'none up to the limit' if smallest is None else smallest}[/bold]",
        highlight=False,
    )
    rows = fit.get("context_table") or []
    if rows:
        kv_dtypes = list(dict.fromkeys(row["kv_dtype"] for row in rows))
        console.print("Concurrent full-length requests by context and KV cache type:")
        table = Table(box=box.SIMPLE_HEAD)
        table.add_column("context", justify="right")
        for kv_dtype in kv_dtypes:
            table.add_column(f"KV {kv_dtype}", justify="right")
        by_context: dict[int, dict[str, Mapping[str, Any]]] = {}
        for row in rows:
            by_context.setdefault(row["context"], {})[row["kv_dtype"]] = row
        for context, cells in sorted(by_context.items()):
            values = []
            for kv_dtype in kv_dtypes:
                cell = cells.get(kv_dtype)
                if cell is None:
                    values.append("")
                    continue
                verdict = cell.get("verdict")
                style = VERDICT_STYLE.get(verdict, "")
                conc = cell.get("max_concurrency")
                text = "—" if conc is None else f"{conc:.1f}"
                values.append(f"[{style}]{text}[/{style}]" if style else text)
            table.add_row(tokens_short(context), *values)
        console.print(table)
    render_warnings(console, fit.get("warnings") or [])


def render_calibration(console: Console, result: Mapping[str, Any]) -> None:
    measured = result["measured"]
    predicted = result.get("predicted") or {}
    table = Table(title=f"{result['engine']} start-up log: per GPU", title_justify="left")
    table.add_column("term")
    table.add_column("measured", justify="right")
    if predicted:
        table.add_column("hfvram", justify="right")
        table.add_column("difference", justify="right")
    for key, label in (("weights", "weights"), ("kv_cache", "KV cache"), ("activations", "activations"),
                       ("overhead", "overhead"), ("kv_tokens", "KV cache tokens")):
        value = measured.get(key)
        if value is None and predicted.get(key) is None:
            continue
        fmt = count if key == "kv_tokens" else gib
        row = [label, fmt(value)]
        if predicted:
            other = predicted.get(key)
            row.append(fmt(other))
            row.append("—" if value is None or other is None else _signed(other - value, fmt))
        table.add_row(*row)
    console.print(table)
    details = measured.get("details") or {}
    if details:
        detail_table = Table(title="figures read from the log", title_justify="left")
        detail_table.add_column("figure")
        detail_table.add_column("value", justify="right")
        for key, value in details.items():
            detail_table.add_row(key, str(value))
        console.print(detail_table)
    render_warnings(console, result.get("warnings") or [])


def _signed(delta: float, fmt) -> str:
    text = fmt(abs(delta))
    return ("+" if delta >= 0 else "−") + text


def _quantization_text(quant: Mapping[str, Any] | None) -> str:
    if not quant:
        return "none"
    text = str(quant["method"])
    if quant.get("bits"):
        text += f", {quant['bits']:.2f} bits per weight"
    if quant.get("group_size"):
        text += f", group size {quant['group_size']}"
    return text
