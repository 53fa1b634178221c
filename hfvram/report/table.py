"""Rich terminal reports. Imported only by the commands that print tables (rich is slow to import)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hfvram.report.fitwidth import Col
from hfvram.report.text import safe
from hfvram.report.units import count, gib, params, percent, tokens_short
from hfvram.report.wording import (
    capacity_lines,
    context_grid,
    expected_prefill_parts,
    expected_prefill_words,
    expected_speed_parts,
    expected_speed_words,
    offload_speed_words,
    smallest_gpu_line,
    split_provenance,
    verdict_note,
    what_if_lines,
)

VERDICT_STYLE = {
    "fits": "bold green",
    "tight": "bold yellow",
    "offload": "bold magenta",
    "does_not_fit": "bold red",
    None: "bold",
}
VERDICT_LABEL = {
    "fits": "FITS",
    "tight": "TIGHT",
    "offload": "OFFLOAD",
    "does_not_fit": "DOES NOT FIT",
    None: "no verdict (no --gpu)",
}

#: term -> (label, colour) for the breakdown and the stacked bar
TERMS: tuple[tuple[str, str, str], ...] = (
    ("weights", "weights", "blue"),
    ("kv_cache", "KV cache", "magenta"),
    ("activations", "activations", "yellow"),
    ("overhead", "overhead", "cyan"),
)
BAR_WIDTH = 56
#: without colour every segment has its own glyph (term -> glyph), so the bar still reads in black and white
PLAIN_GLYPHS = {"weights": "W", "kv_cache": "K", "activations": "A", "overhead": "O", "free": ".", "reserve": "-"}
COLOUR_GLYPHS = {"weights": "█", "kv_cache": "█", "activations": "█", "overhead": "█", "free": "░", "reserve": "▒"}


def _glyphs(console: Console | None) -> dict[str, str]:
    if console is not None and (console.no_color or console.color_system is None):
        return PLAIN_GLYPHS
    return COLOUR_GLYPHS


def plain(value: Any, style: str = "") -> Text:
    """Untrusted text (a model's name, a file's field, a log's figure) as rich Text: never markup, every control
    character escaped."""
    return Text(safe(value), style=style)


def source_label(report: Mapping[str, Any]) -> Text:
    source = report.get("source") or {}
    name = source.get("repo_id") or (source.get("files") or [source.get("text") or "?"])[0]
    revision = source.get("revision")
    suffix = f" @ {revision[:12]}" if revision else ""
    label = plain(name, style="bold")
    label.append(f"  ({safe(source.get('kind'))}{safe(suffix)})", style="dim")
    return label


def memory_bar(per_gpu: Mapping[str, Any], console: Console | None = None) -> Text:
    """A stacked bar of the four terms, the engine's reserve and what is left, against the GPU's memory."""
    memory = per_gpu.get("memory") or 0
    reserve = per_gpu.get("reserve") or 0
    usable = per_gpu.get("usable") or 0
    total = per_gpu["total"]
    scale = max(memory, total + reserve, 1)
    glyphs = _glyphs(console)
    segments: list[tuple[int, str, str]] = [(per_gpu[key] or 0, glyphs[key], colour) for key, _, colour in TERMS]
    if memory:
        segments.append((max(0, usable - total), glyphs["free"], "green"))
        segments.append((reserve, glyphs["reserve"], "bright_black"))
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


def bar_legend(console: Console | None = None) -> Text:
    glyphs = _glyphs(console)
    legend = Text()
    for key, label, colour in TERMS:
        legend.append(glyphs[key] + " ", style=colour)
        legend.append(label + "  ")
    legend.append(glyphs["free"] + " ", style="green")
    legend.append("free  ")
    legend.append(glyphs["reserve"] + " ", style="bright_black")
    legend.append("reserve")
    return legend


def capacity_line(report: Mapping[str, Any]) -> str | None:
    return "\n".join(capacity_lines(report)) or None


def render_check(console: Console, report: Mapping[str, Any], *, explain: bool = False) -> None:
    _render_check_header(console, report)
    _render_memory(console, report)
    verdict = _render_verdict(console, report)
    line = capacity_line(report)
    if line:
        console.print(Text(safe(line, keep_lines=True)), highlight=False)
    speed = report.get("decode_tokens_per_second")
    expected = expected_speed_words(report) if verdict != "does_not_fit" else None
    if expected:
        console.print(f"Decode: {expected}", highlight=False)
        if explain:
            for part in expected_speed_parts(report):
                console.print(Text(safe(f"  {part}")), highlight=False)
    elif speed is not None and verdict == "offload":
        console.print(f"Decode: {offload_speed_words(report)}", highlight=False)
    elif speed is not None and verdict != "does_not_fit":
        console.print(f"Decode: ≤ {speed:,.1f} tokens/s per sequence (memory-bandwidth bound)", highlight=False)
    prefill_expected = expected_prefill_words(report) if verdict != "does_not_fit" else None
    if prefill_expected:
        console.print(f"Prefill: {prefill_expected}", highlight=False)
        if explain:
            for part in expected_prefill_parts(report):
                console.print(Text(safe(f"  {part}")), highlight=False)
    from hfvram.report.wording import largest_batch_line, prefill_line

    prefill = prefill_line(report.get("prefill"))
    if prefill:
        console.print(Text(safe(prefill)), highlight=False)

    batch = largest_batch_line(report.get("largest_batch"), (report.get("workload") or {}).get("context"))
    if batch:
        console.print(Text(safe(batch)), highlight=False)
    render_launch(console, report.get("launch"))
    render_offload_plan(console, report.get("offload_plan"))
    render_warnings(console, report.get("warnings") or [])
    if explain:
        render_term_explanations(console, ((report.get("explain") or {}).get("terms")) or {})
        render_provenance(console, (report.get("explain") or {}).get("provenance") or {}, report)


def _render_check_header(console: Console, report: Mapping[str, Any]) -> None:
    """The source, the engine and GPU set with the workload, the model's facts and the what-if sentences."""
    model = report["model"]
    engine = report.get("engine") or {}
    workload = report["workload"]
    hardware = report.get("hardware")
    console.print(source_label(report))
    engine_text = engine.get("name") or "?"
    if engine.get("version"):
        engine_text += f"@{engine['version']}"
    hw_text = (
        (hardware.get("label") or f"{hardware['gpu']} ×{hardware['count']}")
        if hardware
        else "no GPU given (footprint only)"
    )
    parallel = report.get("parallel") or {}
    console.print(
        plain(
            f"{engine_text} · {hw_text} · TP {parallel.get('tp', 1)} PP {parallel.get('pp', 1)} · "
            f"context {tokens_short(workload.get('context'))} · concurrency {workload.get('concurrency')} · "
            f"KV {workload.get('kv_dtype')}"
        ),
        highlight=False,
    )
    console.print(
        plain(
            f"{model.get('architecture')} · {params(model.get('params_total'))} parameters"
            f" ({params(model.get('params_active'))} active) · "
            f"{'what-if weights' if report.get('what_if') else 'checkpoint'} {gib(model.get('weights_bytes'))} · "
            f"KV {count(model.get('kv_bytes_per_token'))} B/token",
            style="dim",
        ),
        highlight=False,
    )
    for sentence in what_if_lines(report):
        console.print(plain(sentence, style="bold"), highlight=False)


def _render_memory(console: Console, report: Mapping[str, Any]) -> None:
    """The four terms on the worst GPU (with their share of usable memory and the bar when a GPU is given)."""
    hardware = report.get("hardware")
    per_gpu = report["per_gpu"]
    worst = ""
    if hardware and hardware.get("worst_device") is not None:  # a mixed set split by layers: name the device
        from rich.markup import escape

        worst = f" (GPU {hardware['worst_device']}, {escape(safe(hardware['gpu']))})"
    console.print(f"[bold]{'Memory on the worst GPU' if hardware else 'Memory footprint per GPU'}{worst}[/bold]")
    table = Table()
    table.add_column("term")
    table.add_column("size", justify="right")
    if hardware:  # without a GPU there is nothing to be a share of
        table.add_column("of usable", justify="right")
    usable = per_gpu.get("usable")
    for key, label, colour in TERMS:
        row = [f"[{colour}]{label}[/{colour}]", gib(per_gpu.get(key))]
        if hardware:
            row.append(percent(per_gpu[key] / usable if usable else None))
        table.add_row(*row)
    total_row = ["[bold]total[/bold]", f"[bold]{gib(per_gpu['total'])}[/bold]"]
    if hardware:
        total_row.append(percent(report.get("utilization")))
    table.add_row(*total_row, end_section=bool(hardware))
    if hardware:
        table.add_row("usable", gib(usable), "")
        table.add_row("reserve (engine keeps back)", gib(per_gpu.get("reserve")), "")
        table.add_row("GPU memory", gib(per_gpu.get("memory")), "")
    console.print(table)
    if hardware:
        console.print(memory_bar(per_gpu, console))
        console.print(bar_legend(console))


def _render_verdict(console: Console, report: Mapping[str, Any]) -> Any:
    """The verdict line with its note; the verdict."""
    verdict = report.get("verdict")
    verdict_text = Text("Verdict: ")
    verdict_text.append(VERDICT_LABEL.get(verdict, str(verdict)), style=VERDICT_STYLE.get(verdict, "bold"))
    note = verdict_note(report)
    if note and (report.get("verdict_reason") or "").startswith("engine rule: "):
        verdict_text.append(f" — {safe(note)}")
    elif note:
        verdict_text.append(f"  ({safe(note)})")
    console.print(verdict_text)
    return verdict


def render_launch(console: Console, launch: Mapping[str, Any] | None) -> None:
    """The command line that reproduces this check, folded at the width with shell continuations (pasted, it runs
    as printed; ``check --launch`` prints it on one line), with its notes."""
    from hfvram.report.wording import launch_lines, shell_wrap

    lines = launch_lines(launch)
    if not lines:
        return
    console.print(Text("Launch:", style="bold"), highlight=False)
    for line in lines:
        for part in shell_wrap(safe(line), max(40, console.width - 2)):
            console.print(Text("  " + part), highlight=False, soft_wrap=True)
    for note in (launch or {}).get("notes") or []:
        console.print(Text("  (" + safe(note) + ")"), highlight=False, soft_wrap=True)


def render_offload_plan(console: Console, plan: Mapping[str, Any] | None) -> None:
    """llama.cpp's --fit plan (hfvram.engines.llamacpp.offload_plan.plan_lines), printed as plain text."""
    if not plan:
        return
    from hfvram.engines.llamacpp.offload_plan import plan_lines

    lines = plan_lines(plan)
    console.print(Text(lines[0], style="bold"), highlight=False)
    for line in lines[1:]:
        console.print(Text(line), highlight=False, soft_wrap=line.startswith("  llama-server"))


#: the order terms are explained in: the table's rows first, then whatever else the engine explained
EXPLAIN_ORDER = ("weights", "kv_cache", "activations", "overhead", "budget", "usable", "reserve", "memory")
EXPLAIN_LABEL = {"kv_cache": "KV cache", "budget": "usable (budget)"}


def render_term_explanations(console: Console, terms: Mapping[str, str]) -> None:
    """How each term was computed, one paragraph per term (readable at 80 columns, unlike a table column)."""
    if not terms:
        return
    console.print("[bold]How each term was computed[/bold]")
    keys = [key for key in EXPLAIN_ORDER if key in terms] + [key for key in terms if key not in EXPLAIN_ORDER]
    width = max(40, console.width)
    for key in keys:
        text = textwrap.fill(
            safe(f"{EXPLAIN_LABEL.get(key, key)}: {terms[key]}"),
            width=width,
            initial_indent="  ",
            subsequent_indent="    ",
            break_long_words=False,
            break_on_hyphens=False,
        )
        console.print(text, markup=False, highlight=False, soft_wrap=True)


def render_warnings(console: Console, warnings: Sequence[str]) -> None:
    """One bullet per warning; a long one wraps under its own text, not under the bullet."""
    if not warnings:
        return
    console.print("[yellow]Warnings:[/yellow]")
    width = max(40, console.width)
    for warning in warnings:
        text = textwrap.fill(
            safe(warning),
            width=width,
            initial_indent="  • ",
            subsequent_indent="    ",
            break_long_words=False,
            break_on_hyphens=False,
        )
        console.print(text, highlight=False, markup=False, soft_wrap=True)


def render_provenance(console: Console, provenance: Mapping[str, str], report: Mapping[str, Any] | None = None) -> None:
    """Input figures with their file and field, then the engine settings the estimate assumed."""
    console.print("[bold]Where each input figure came from[/bold]")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("figure", no_wrap=True)
    table.add_column("file", overflow="fold")
    table.add_column("field / rule", overflow="fold")
    for fact, where in sorted(provenance.items()):
        table.add_row(plain(fact), *(plain(part) for part in split_provenance(str(where))))
    console.print(table)
    settings = {key: value for key, value in ((report or {}).get("engine") or {}).items() if value is not None}
    if settings:
        console.print("[bold]Engine settings the estimate assumed[/bold]")
        engine_table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        engine_table.add_column("setting", no_wrap=True)
        engine_table.add_column("value", overflow="fold")
        for key, value in sorted(settings.items()):
            engine_table.add_row(plain(key), plain(_setting_text(key, value)))
        console.print(engine_table)


def _setting_text(key: str, value: Any) -> str:
    if key.endswith("_bytes") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{gib(value)} ({int(value):,} B)"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(item) for item in value) or "—"
    return str(value)


def render_inspect(console: Console, report: Mapping[str, Any]) -> None:
    model = report["model"]
    console.print(source_label(report))
    table = Table(show_header=False, box=None)
    table.add_column("fact", style="bold")
    table.add_column("value", overflow="fold")
    quant = model.get("quantization")
    rows: list[tuple[str, str]] = [
        ("architecture", model.get("architecture") or "—"),
        ("model type", model.get("model_type") or "—"),
        ("dtype", model.get("dtype") or "— (not stated)"),
        ("parameters", f"{params(model.get('params_total'))} total, {params(model.get('params_active'))} active"),
        (
            "weights",
            gib(model.get("weights_bytes"))
            + ("" if model.get("weights_exact") in (None, True) else " (derived from config shapes)"),
        ),
        ("quantization", _quantization_text(quant)),
        ("layers", str(model.get("num_layers"))),
        ("layer census", ", ".join(f"{k} {v}" for k, v in (model.get("layers") or {}).items() if v)),
        ("max context", count(model.get("max_position_embeddings"))),
        (f"KV per token ({model.get('kv_dtype')})", f"{count(model.get('kv_bytes_per_token'))} B"),
        ("KV fixed per sequence", f"{count(model.get('kv_fixed_bytes_per_sequence'))} B"),
        ("decided by", str(model.get("decided_by"))),
    ]
    for fact, value in rows:
        table.add_row(plain(fact), plain(value))
    console.print(table)
    render_warnings(console, report.get("warnings") or [])
    if report.get("provenance"):
        render_provenance(console, report["provenance"])


def display_name(report: Mapping[str, Any], limit: int = 44) -> str:
    """The source as typed or as the repo id, control characters escaped; a long local path of more than two
    parts keeps its last two (``…/`` says what was left out). A repo id is never given a false ``…/`` prefix: the
    table cuts its end instead, with ``…``."""
    source = report.get("source") or {}
    name = safe(source.get("repo_id") or source.get("text") or (source.get("files") or ["?"])[0])
    parts = name.rstrip("/").split("/")
    if len(name) > limit and len(parts) > 2:
        name = "…/" + "/".join(parts[-2:])
    return name


def scan_row(report: Mapping[str, Any], what_if_in_name: bool = True) -> list[Text]:
    """One row of the scan summary: source (and its what-if, unless the title says it), verdict, total, share of
    usable, KV tokens, concurrency (or the error)."""
    name = Text(display_name(report))
    what_if = report.get("what_if")
    if what_if and what_if_in_name:
        name.append(f" [what-if {safe(what_if.get('quant'))}]")
    if "error" in report:
        return [name, plain(f"ERROR ({report['error']['kind']})", style="red"), Text(), Text(), Text(), Text()]
    per_gpu = report["per_gpu"]
    capacity = report.get("capacity") or {}
    verdict = report.get("verdict")
    style = VERDICT_STYLE.get(verdict, "bold")
    max_conc = capacity.get("max_concurrency")
    return [
        name,
        Text(VERDICT_LABEL.get(verdict, safe(verdict)), style=style),
        Text(gib(per_gpu["total"])),
        Text(percent(report.get("utilization"))),
        Text(count(capacity.get("kv_tokens"))),
        Text("—" if max_conc is None else f"{max_conc:.1f}"),
    ]


#: the scan table's columns: compact headers, and the order in which a narrow terminal leaves them out
SCAN_COLUMNS = (
    Col("source", "left", name=True),
    Col("verdict", "left"),
    Col("per GPU", short="GiB/GPU", unit=" GiB"),
    Col("used", drop=0),
    Col("KV tokens", short="KV tok", drop=2),
    Col("requests", short="req", drop=1),
)


def render_scan(console: Console, reports: Iterable[Mapping[str, Any]], title: str = "Scan summary") -> None:
    from hfvram.report.fitwidth import print_fitted

    reports = list(reports)
    estimated = [report for report in reports if "error" not in report]
    quants = {
        safe((report.get("what_if") or {}).get("quant")) if report.get("what_if") else None for report in estimated
    }
    shared = len(quants) == 1 and None not in quants  # one what-if for every row: said once, in the title
    if shared:
        title += f" · what-if --quant {quants.pop()}"
    rows = [scan_row(report, what_if_in_name=not shared) for report in reports]
    console.print(Text(title, style="bold"))
    print_fitted(console, SCAN_COLUMNS, rows)
    errors = [report for report in reports if "error" in report]
    if errors:
        unread = all(report["error"]["kind"] != "usage" for report in errors)
        console.print("[red]Could not be read:[/red]" if unread else "[red]Could not be estimated:[/red]")
        width = max(40, console.width)
        for report in errors:
            text = textwrap.fill(
                f"{display_name(report)}: {safe(report['error']['message'])}",
                width=width,
                initial_indent="  • ",
                subsequent_indent="    ",
                break_long_words=False,
                break_on_hyphens=False,
            )
            console.print(text, markup=False, highlight=False, soft_wrap=True)


#: aliases shown per GPU in the table (all of them are in --json)
GPU_ALIASES_SHOWN = 2


def titled_table_with_notes(
    console: Console, title: str, columns: Sequence[Col], cells: list[list[Text]], notes: Iterable[str]
) -> None:
    """A bold title, a table that never cuts a figure (fitwidth.print_fitted: names shortened readably, the columns
    that do not fit left out in ``columns``' order and named), then notes wrapped at the width (an indented note
    keeps a deeper indent): the GPU-set comparison and the pack."""
    from hfvram.report.fitwidth import print_fitted, print_wrapped

    print_wrapped(console, Text(title, style="bold"))
    print_fitted(console, columns, cells)
    width = max(40, console.width)
    for line in notes:
        indent = "    " if line.startswith("  ") else "  "
        text = textwrap.fill(
            line, width=width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        )
        console.print(text, markup=False, highlight=False, soft_wrap=True)


#: the accelerator list's columns (the id is typed, so it is never shortened): the aliases are left out first
GPU_COLUMNS = (
    Col("id (--gpu)", "left"),
    Col("memory"),
    Col("GB/s"),
    Col("name", "left", name=True),
    Col("also", "left", name=True, drop=0),
)


def render_gpus(console: Console, gpus: Sequence[Mapping[str, Any]]) -> None:
    """One line per accelerator: the id to type, its name, the memory the GPU can use, bandwidth, a few aliases."""
    if not gpus:
        return
    from hfvram.report.fitwidth import print_fitted, print_wrapped

    console.print(Text(f"{len(gpus)} accelerator{'s' if len(gpus) != 1 else ''}", style="bold"))
    rows: list[list[Text]] = []
    unified = False
    for gpu in gpus:
        bandwidth = gpu.get("memory_bandwidth_gbs")
        memory = gib(gpu["gpu_memory_bytes"])
        if gpu.get("unified_memory") and gpu["gpu_memory_bytes"] != gpu["memory_bytes"]:
            memory += "*"
            unified = True
        aliases = sorted(gpu.get("aliases") or (), key=len)[:GPU_ALIASES_SHOWN]
        rows.append(
            [
                plain(gpu["id"]),
                Text(memory),
                Text("—" if bandwidth is None else f"{bandwidth:,.0f}"),
                plain(gpu["name"]),
                plain(", ".join(aliases)),
            ]
        )
    print_fitted(console, GPU_COLUMNS, rows)
    if unified:
        print_wrapped(
            console,
            Text(
                "* unified memory: the share of RAM the GPU may use (macOS: 2/3 up to 32 GiB, 3/4 above); "
                "--unified-fraction F changes it"
            ),
        )


def render_fit(console: Console, fit: Mapping[str, Any]) -> None:
    title = source_label(fit)
    title.append(" on ")
    title.append(safe(fit["hardware"]), style="bold")
    title.append(f" with {safe(fit['engine'])}")
    console.print(title)
    for sentence in what_if_lines(fit):
        console.print(plain(f"  {sentence}", style="bold"), highlight=False)
    verdict = fit.get("verdict")
    context = tokens_short(fit.get("context"))
    style = VERDICT_STYLE.get(verdict, "bold")
    at = f"  at {context} × {fit['concurrency']}: [{style}]{VERDICT_LABEL.get(verdict, str(verdict))}[/{style}]"
    if fit.get("total") is not None and fit.get("usable"):
        at += f" ({gib(fit['total'])} of {gib(fit['usable'])} usable)"
    console.print(at, highlight=False)
    max_context = fit.get("max_context")
    no_room = max_context is not None and max_context <= 0
    longest = (
        "[bold]none[/bold] (nothing is left for the KV cache)"
        if no_room
        else f"[bold]{count(max_context)}[/bold] tokens"
    )
    console.print(f"  longest context at concurrency {fit['concurrency']}: {longest}", highlight=False)
    max_conc = fit.get("max_concurrency")
    console.print(
        f"  most concurrent {context} requests: [bold]{'—' if max_conc is None else f'{max_conc:.1f}'}[/bold]",
        highlight=False,
    )
    from hfvram.report.wording import largest_batch_line

    batch = largest_batch_line(fit.get("largest_batch"), fit.get("context"))
    if batch:
        console.print(Text("  " + safe(batch[0].lower() + batch[1:])), highlight=False)
    console.print(f"  {smallest_gpu_line(fit)}", highlight=False)
    rows = fit.get("context_table") or []
    if rows and not no_room:
        kv_dtypes, grid = context_grid(rows)
        console.print("Concurrent full-length requests by context and KV cache type:")
        table = Table(box=box.SIMPLE_HEAD)
        table.add_column("context", justify="right")
        for kv_dtype in kv_dtypes:
            table.add_column(f"KV {kv_dtype}", justify="right")
        for tokens, cells in grid:
            values = []
            for cell in cells:
                if cell is None:
                    values.append("")
                    continue
                style = VERDICT_STYLE.get(cell.get("verdict"), "")
                conc = cell.get("max_concurrency")
                text = "—" if conc is None else f"{conc:.1f}"
                values.append(f"[{style}]{text}[/{style}]" if style else text)
            table.add_row(tokens_short(tokens), *values)
        console.print(table)
    render_offload_plan(console, fit.get("offload_plan"))
    render_warnings(console, fit.get("warnings") or [])


def render_calibration(console: Console, result: Mapping[str, Any]) -> None:
    measured = result["measured"]
    predicted = result.get("predicted") or {}
    console.print(plain(f"{result['engine']} start-up log: per GPU", style="bold"))
    table = Table()
    table.add_column("term")
    table.add_column("measured", justify="right")
    if predicted:
        table.add_column("hfvram", justify="right")
        table.add_column("difference", justify="right")
    for key, label in (
        ("weights", "weights"),
        ("kv_cache", "KV cache"),
        ("activations", "activations"),
        ("overhead", "overhead"),
        ("kv_tokens", "KV cache tokens"),
    ):
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
        console.print("[bold]Figures read from the log[/bold]")
        detail_table = Table()
        detail_table.add_column("figure")
        detail_table.add_column("value", overflow="fold")
        for key, value in details.items():
            detail_table.add_row(plain(key), plain(value))
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
