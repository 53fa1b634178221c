"""A GGUF repo as a whole (``hfvram.gguf_repo/1``): one row per quant, the mmproj files apart, the recommendation.
Terminal table (rich) and Markdown; the untrusted names are printed as text, never as markup."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hfvram.report.fitwidth import Col
from hfvram.report.units import gib, percent

VERDICT_WORD = {"fits": "fits", "tight": "tight", "offload": "offload", "does_not_fit": "does not fit", None: "-"}


def _headline(report: Mapping[str, Any]) -> str:
    hardware = report.get("hardware") or {}
    workload = report.get("workload") or {}
    gpu = f"{hardware.get('count', 1)}x {hardware.get('gpu')}" if hardware else "no --gpu"
    engine = (report.get("engine") or {}).get("name") or "?"
    context = workload.get("context")
    return f"{engine}, {gpu}, context {context if context else 'default'}, concurrency {workload.get('concurrency')}"


def _recommendation(report: Mapping[str, Any]) -> str:
    if report.get("recommended"):
        return f"Recommended: {report['recommended']} (the largest quant that fits)"
    if report.get("hardware"):
        return "No quant of this repo fits."
    return "No recommendation without --gpu."


def rows(report: Mapping[str, Any]) -> list[list[str]]:
    """One list of cells per quant; the first cell is the quant's name (the recommended one is marked by the caller)."""
    out = []
    for row in report.get("quants") or ():
        per_gpu = row.get("per_gpu") or {}
        capacity = row.get("capacity") or {}
        out.append(
            [
                str(row.get("quant")),
                str(len(row.get("files") or ())),
                gib(row.get("file_bytes")),
                gib(per_gpu.get("weights")),
                gib(per_gpu.get("kv_cache")),
                gib(per_gpu.get("total")),
                percent(row.get("utilization")),
                str(capacity.get("max_context") or "-"),
                _speed(row.get("decode_tokens_per_second")),
                VERDICT_WORD.get(row.get("verdict"), str(row.get("verdict"))),
            ]
        )
    return out


HEADERS = ["quant", "files", "file", "weights", "KV cache", "total/GPU", "use", "max context", "tok/s", "verdict"]
#: the terminal view's columns: compact headers, and the order in which a narrow terminal leaves them out
COLUMNS = (
    Col("quant", "left", name=True),
    Col("files", drop=0),
    Col("file", drop=3),
    Col("weights", drop=1),
    Col("KV cache", drop=2),
    Col("total/GPU", short="GiB/GPU", unit=" GiB"),
    Col("use", drop=4),
    Col("max context", short="context", drop=5),
    Col("tok/s", drop=6),
    Col("verdict", "left"),
)


def _speed(value: object) -> str:
    return f"{value:,.0f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def render_gguf_repo(console: Any, report: Mapping[str, Any]) -> None:
    from rich.text import Text

    from hfvram.report.fitwidth import print_fitted, print_wrapped
    from hfvram.report.table import plain, render_warnings

    source = report.get("source") or {}
    title = plain(source.get("repo_id"), style="bold")
    count = len(report.get("quants") or ())
    title.append(f"  ({count} quant{'' if count == 1 else 's'}; {_headline(report)})", style="dim")
    print_wrapped(console, title)
    cells = []
    for values in rows(report):
        best = values[0] == report.get("recommended")
        cells.append(
            [Text(c + (" *" if best and i == 0 else ""), style="bold" if best else "") for i, c in enumerate(values)]
        )
    print_fitted(console, COLUMNS, cells)
    for item in report.get("mmproj") or ():
        console.print(plain(f"vision projector (not a quant): {item.get('file')} {gib(item.get('file_bytes'))}"))
    console.print(plain(_recommendation(report)), style="bold")
    console.print(plain(f"sizing: {report.get('sizing')}"), style="dim")
    render_warnings(console, report.get("warnings") or [])


def gguf_repo_markdown(report: Mapping[str, Any]) -> str:
    from hfvram.report.markdown import cell, text

    source = report.get("source") or {}
    lines = [f"### {text(source.get('repo_id'))}", "", text(_headline(report)), ""]
    lines.append("| " + " | ".join(HEADERS) + " |")
    lines.append("|" + "---|" * len(HEADERS))
    for cells in rows(report):
        first = f"**{cell(cells[0])}**" if cells[0] == report.get("recommended") else cell(cells[0])
        lines.append("| " + " | ".join([first, *(cell(c) for c in cells[1:])]) + " |")
    lines.append("")
    for item in report.get("mmproj") or ():
        lines.append(f"- vision projector (not a quant): {text(item.get('file'))} {gib(item.get('file_bytes'))}")
    lines += [f"**{text(_recommendation(report))}**", "", f"Sizing: {text(report.get('sizing'))}", ""]
    lines += [f"- warning: {text(w)}" for w in report.get("warnings") or ()]
    return "\n".join(lines).rstrip("\n") + "\n"
