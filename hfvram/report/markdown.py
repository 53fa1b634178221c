"""Markdown reports (for pull-request comments and docs)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hfvram.report.text import safe
from hfvram.report.units import count, gib, percent, tokens_short
from hfvram.report.wording import (
    capacity_lines,
    context_grid,
    largest_batch_line,
    prefill_line,
    smallest_gpu_line,
    split_provenance,
    verdict_note,
    what_if_lines,
)

VERDICT_MARK = {
    "fits": "✅ fits",
    "tight": "⚠️ tight",
    "offload": "🔁 offload",
    "does_not_fit": "❌ does not fit",
    None: "— (no GPU)",
}


#: characters Markdown reads as formatting, links, HTML or a cell's end: backslashed in untrusted text (with
#: the brackets escaped, parentheses and the rest cannot start a link)
_MARKDOWN_SPECIAL = re.compile(r"([\\`*\[\]<>|~])")


def text(value: object) -> str:
    """Untrusted text (a name, a warning, a file's field) as Markdown that shows exactly it: control characters
    escaped, formatting / link / HTML characters backslashed (``[x](y)`` is not a link)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", safe(value))


def cell(value: object) -> str:
    """Text safe inside a Markdown table cell: as :func:`text`, so pipes are escaped and there is no line break."""
    return text(value)


def titled_table(title: str, headers: Sequence[str], align: str, rows: Iterable[Sequence[object]]) -> list[str]:
    """A bold title, then a Markdown table (``align`` its separator row, e.g. ``|---|---:|``), every cell escaped."""
    lines = [f"**{cell(title)}**", "", "| " + " | ".join(headers) + " |", align]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return lines


def _name(report: Mapping[str, Any]) -> str:
    source = report.get("source") or {}
    return text(source.get("repo_id") or source.get("text") or (source.get("files") or ["?"])[0])


def _hardware_text(hardware: dict[str, Any]) -> str:
    """```rtx4090` ×2`` for a uniform set, ```rtx4090+rtx3090``` for a mixed one."""
    if hardware.get("label"):
        return f"`{safe(hardware['label'])}`"
    return f"`{safe(hardware['gpu'])}` ×{hardware['count']}"


def check_markdown(report: Mapping[str, Any], *, explain: bool = False) -> str:
    per_gpu = report["per_gpu"]
    workload = report["workload"]
    hardware = report.get("hardware")
    engine = report.get("engine") or {}
    usable = per_gpu.get("usable")
    lines = [
        f"### {_name(report)}",
        "",
        f"**{VERDICT_MARK.get(report.get('verdict'), report.get('verdict'))}**"
        f"{f' ({text(verdict_note(report))})' if verdict_note(report) else ''} · engine `{safe(engine.get('name'))}` · "
        f"GPU {_hardware_text(hardware)} · context {tokens_short(workload.get('context'))} · "
        f"concurrency {workload.get('concurrency')} · KV `{safe(workload.get('kv_dtype'))}`"
        if hardware
        else f"**footprint only** · engine `{safe(engine.get('name'))}` · context {tokens_short(workload.get('context'))}",
        "",
        *[f"> {text(line)}\n" for line in what_if_lines(report)],
        "| term | per GPU | of usable |",
        "|---|---:|---:|",
    ]
    for key, label in (
        ("weights", "weights"),
        ("kv_cache", "KV cache"),
        ("activations", "activations"),
        ("overhead", "overhead"),
        ("total", "**total**"),
    ):
        value = per_gpu.get(key)
        share = percent(value / usable) if usable and value is not None else "—"
        size = f"**{gib(value)}**" if key == "total" else gib(value)
        lines.append(f"| {label} | {size} | {share} |")
    if hardware:
        lines.append(f"| usable | {gib(usable)} | |")
        lines.append(f"| GPU memory | {gib(per_gpu.get('memory'))} | |")
    lines.append("")
    lines += [f"- {line}" for line in capacity_lines(report)]
    prefill = prefill_line(report.get("prefill"))
    lines += [f"- {text(prefill)}"] if prefill else []
    batch = largest_batch_line(report.get("largest_batch"), workload.get("context"))
    lines += [f"- {text(batch)}"] if batch else []
    lines += launch_markdown(report.get("launch"))
    lines += offload_markdown(report.get("offload_plan"))
    for warning in report.get("warnings") or []:
        lines.append(f"- ⚠️ {text(warning)}")
    if explain and report.get("explain"):
        lines += ["", "**How each term was computed**", "", "| term | how |", "|---|---|"]
        for term, how in (report["explain"].get("terms") or {}).items():
            lines.append(f"| {cell(term)} | {cell(how)} |")
        lines += ["", "**Where each input figure came from**", "", "| figure | file | field / rule |", "|---|---|---|"]
        for fact, where in sorted((report["explain"].get("provenance") or {}).items()):
            file, field = split_provenance(str(where))
            lines.append(f"| {cell(fact)} | {cell(file)} | {cell(field)} |")
    return "\n".join(lines) + "\n"


def scan_markdown(reports: Iterable[Mapping[str, Any]]) -> str:
    lines = ["| source | verdict | total / GPU | usable | KV tokens | concurrent |", "|---|---|---:|---:|---:|---:|"]
    for report in reports:
        if "error" in report:
            lines.append(
                f"| {_name(report)} | error ({cell(report['error']['kind'])}): "
                f"{cell(report['error']['message'])} | | | | |"
            )
            continue
        capacity = report.get("capacity") or {}
        conc = capacity.get("max_concurrency")
        lines.append(
            f"| {_name(report)} | {VERDICT_MARK.get(report.get('verdict'), report.get('verdict'))} | "
            f"{gib(report['per_gpu']['total'])} | {gib(report['per_gpu'].get('usable'))} | "
            f"{count(capacity.get('kv_tokens'))} | {'—' if conc is None else f'{conc:.1f}'} |"
        )
    return "\n".join(lines) + "\n"


def launch_markdown(launch: Mapping[str, Any] | None) -> list[str]:
    """The launch as list items: each file, then the commands, in code blocks (a fence longer than any run of
    backticks in them)."""
    if not launch:
        return []
    out = ["- **Launch**" + "".join(f" ({text(note)})" for note in launch.get("notes") or []) + ":"]
    blocks = [(name, list(body)) for name, body in (launch.get("files") or {}).items()]
    blocks.append(("", [str(launch.get("command") or ""), *(str(line) for line in launch.get("then") or [])]))
    for name, body in blocks:
        fence = "`" * max(3, 1 + max((len(run) for line in body for run in re.findall("`+", line)), default=0))
        if name:
            out.append(f"  - `{safe(name)}`:")
        out += ["", f"  {fence}{'' if name else 'sh'}", *(f"  {safe(line)}" for line in body), f"  {fence}"]
    return [*out, ""]


def offload_markdown(plan: Mapping[str, Any] | None) -> list[str]:
    """llama.cpp's --fit plan as list items; the command line as code."""
    if not plan:
        return []
    from hfvram.engines.llamacpp.offload_plan import plan_lines

    lines = plan_lines(plan)
    out = [f"- **{text(lines[0])}**"]
    for line in lines[1:]:
        line = line.strip()
        out.append(f"  - `{line}`" if line.startswith("llama-server") else f"  - {text(line)}")
    return out


def fit_markdown(fit: Mapping[str, Any]) -> str:
    conc = fit.get("max_concurrency")
    max_context = fit.get("max_context")
    no_room = max_context is not None and max_context <= 0
    context = tokens_short(fit.get("context"))
    at = f"- at {context} × {fit['concurrency']}: **{VERDICT_MARK.get(fit.get('verdict'), fit.get('verdict'))}**"
    if fit.get("total") is not None and fit.get("usable"):
        at += f" ({gib(fit['total'])} of {gib(fit['usable'])} usable)"
    lines = [
        f"### {_name(fit)} on {text(fit['hardware'])} ({text(fit['engine'])})",
        "",
        *[f"> {text(line)}\n" for line in what_if_lines(fit)],
        at,
        f"- longest context at concurrency {fit['concurrency']}: "
        + ("none (nothing is left for the KV cache)" if no_room else f"{count(max_context)} tokens"),
        f"- concurrent {context} requests: {'—' if conc is None else f'{conc:.1f}'}",
        f"- {text(smallest_gpu_line(fit))}",
    ]
    lines += offload_markdown(fit.get("offload_plan"))
    lines += [f"- ⚠️ {text(warning)}" for warning in fit.get("warnings") or []]
    rows = fit.get("context_table") or []
    if rows and not no_room:
        kv_dtypes, grid = context_grid(rows)
        lines += [
            "",
            "| context | " + " | ".join(f"KV {k}" for k in kv_dtypes) + " |",
            "|---:|" + "---:|" * len(kv_dtypes),
        ]
        for tokens, cells in grid:
            values = [
                "—" if cell is None or cell.get("max_concurrency") is None else f"{cell['max_concurrency']:.1f}"
                for cell in cells
            ]
            lines.append(f"| {tokens_short(tokens)} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"
