"""The views of ``hfvram.pack/1`` (``check A B --gpu h100``): one row per model — engine, context, its four terms,
what its process holds outside them, the fraction of the device it is given (``--gpu-memory-utilization`` for a
vLLM instance), its own verdict there — then the set against the device, its verdict, and each model's command
line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hfvram.report.fitwidth import Col
from hfvram.report.text import safe
from hfvram.report.units import gib, percent, tokens_short
from hfvram.report.wording import launch_command_lines

HEADERS = ("model", "engine", "context", "terms", "outside", "share", "gpu util", "verdict")
#: the terminal view's columns: compact headers, and the order in which a narrow terminal leaves them out (the
#: share first: the gpu util of a vLLM row and the terms say it; the engine last)
COLUMNS = (
    Col("model", "left", name=True),
    Col("engine", "left", drop=4),
    Col("context", drop=3),
    Col("terms", short="terms GiB", unit=" GiB"),
    Col("outside", short="out GiB", unit=" GiB", drop=1),
    Col("share", drop=0),
    Col("gpu util", short="util", drop=2),
    Col("verdict", "left"),
)
VERDICT_TEXT = {"fits": "fits", "tight": "tight", "does_not_fit": "does not fit", None: "—"}


def _name(source: Mapping[str, Any]) -> str:
    return str(source.get("repo_id") or (source.get("files") or [source.get("text") or "?"])[0])


def row_cells(row: Mapping[str, Any]) -> list[str]:
    util = row.get("gpu_memory_utilization")
    return [
        safe(_name(row.get("source") or {})),
        safe(row.get("engine")),
        tokens_short(row.get("context")),
        gib(row.get("need_bytes")),
        gib(row.get("outside_bytes")),
        percent(row.get("share")),
        "—" if util is None else f"{util:.2f}",
        VERDICT_TEXT.get(row.get("verdict"), safe(row.get("verdict"))),
    ]


def title(document: Mapping[str, Any]) -> str:
    count = len(document.get("models") or [])
    return f"{count} models on one {safe(document.get('gpu_set'))} ({gib(document.get('memory_bytes'))})"


def pack_launch_lines(document: Mapping[str, Any]) -> list[str]:
    """Every model's command lines, in the order given (``check A B --launch``)."""
    lines: list[str] = []
    for row in document.get("models") or []:
        lines += [safe(line) for line in launch_command_lines(row.get("launch"))]
    return lines


def footer_lines(document: Mapping[str, Any]) -> list[str]:
    whole = document.get("set") or {}
    lines = [
        f"Set: {VERDICT_TEXT.get(document.get('verdict'), safe(document.get('verdict')))} — "
        f"{safe(document.get('verdict_reason'))}",
        f"  terms {gib(whole.get('need_bytes'))} + outside the terms {gib(whole.get('outside_bytes'))}; "
        f"the processes take {gib(whole.get('takes_bytes'))} of {gib(whole.get('memory_bytes'))}",
    ]
    if whole.get("vllm_utilization_sum") is not None:
        lines.append(
            f"  vLLM utilizations sum to {whole['vllm_utilization_sum']:.2f} "
            f"(at most {whole.get('vllm_utilization_limit'):.2f}: 1 less what the other processes and the memory outside "
            "the fractions take)"
        )
    lines += [f"  • {safe(note)}" for note in document.get("notes") or []]
    lines.append("Each model's breakdown and warnings: `hfvram check SOURCE --gpu SET`")
    return lines


def render_pack(console: Any, document: Mapping[str, Any]) -> None:
    from rich.text import Text

    from hfvram.report.table import VERDICT_STYLE, titled_table_with_notes

    cells = []
    verdict_column = len(HEADERS) - 1
    for row in document.get("models") or []:
        style = VERDICT_STYLE.get(row.get("verdict"), "")
        cells.append(
            [
                Text(value, style=style) if index == verdict_column else Text(value)
                for index, value in enumerate(row_cells(row))
            ]
        )
    titled_table_with_notes(console, title(document), COLUMNS, cells, footer_lines(document))
    console.print("Launch lines:", markup=False, highlight=False)
    for line in pack_launch_lines(document):
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)  # a command line stays whole


def pack_markdown(document: Mapping[str, Any]) -> str:
    from hfvram.report.markdown import cell, titled_table

    rows = (row_cells(row) for row in document.get("models") or [])
    lines = titled_table(title(document), HEADERS, "|---|---|---:|---:|---:|---:|---:|---|", rows)
    lines.append("")
    for line in footer_lines(document):
        lines.append(f"- {cell(line.strip().removeprefix('• '))}" if line.startswith("  ") else cell(line))
    lines += ["", "```"]
    lines += pack_launch_lines(document)
    lines += ["```"]
    return "\n".join(lines) + "\n"
