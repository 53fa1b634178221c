"""The view of ``hfvram.engines/1`` (``check --engine vllm@0.25,vllm@0.26``): one row per engine setting — the
rule set used, weights, KV pool, KV tokens, activations, CUDA graphs, verdict, longest context — then, between
adjacent rows, the terms that changed and the rule sets that changed them."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from hfvram.report.compare import VERDICT_TEXT
from hfvram.report.fitwidth import Col
from hfvram.report.text import safe
from hfvram.report.units import gib, tokens_short

HEADERS = (
    "engine",
    "rules",
    "weights",
    "KV pool",
    "KV tokens",
    "activations",
    "CUDA graphs",
    "verdict",
    "max context",
)
#: the terminal view's columns: compact headers (the unit moved from the cells into the header), and the order in
#: which a narrow terminal leaves them out (every term left out is still named in the changes under the table; the
#: engine, its KV tokens and its verdict stay)
COLUMNS = (
    Col("engine", "left", name=True),
    Col("rules", "left", drop=2),
    Col("weights", short="wt GiB", unit=" GiB", drop=5),
    Col("KV pool", short="KV GiB", unit=" GiB", drop=4),
    Col("KV tokens", short="tokens"),
    Col("activations", short="act GiB", unit=" GiB", drop=1),
    Col("CUDA graphs", short="graph GiB", unit=" GiB", drop=3),
    Col("verdict", "left"),
    Col("max context", short="context", drop=0),
)
_TERM_TEXT = {
    "weights_bytes": "weights",
    "kv_pool_bytes": "KV pool",
    "kv_tokens": "KV tokens",
    "activations_bytes": "activations",
    "cuda_graph_bytes": "CUDA graphs",
    "overhead_bytes": "in-budget overhead",
    "max_context": "longest context",
}


def row_cells(row: Mapping[str, Any]) -> list[str]:
    tokens = row.get("kv_tokens")
    return [
        safe(row["label"]),
        safe(row.get("rules") or "—"),
        gib(row.get("weights_bytes")),
        gib(row.get("kv_pool_bytes")),
        "—" if tokens is None else f"{tokens:,}",
        gib(row.get("activations_bytes")),
        gib(row.get("cuda_graph_bytes")),
        VERDICT_TEXT.get(row.get("verdict"), safe(row.get("verdict"))),
        tokens_short(row.get("max_context")),
    ]


def _term(change: Mapping[str, Any]) -> str:
    name = _TERM_TEXT.get(str(change["term"]), str(change["term"]))
    before, after = change.get("before"), change.get("after")
    if change["term"] in ("kv_tokens", "max_context"):
        old = "—" if before is None else f"{before:,}"
        new = "—" if after is None else f"{after:,}"
        pct = f" ({(after - before) / before:+.0%})" if before and after is not None else ""
        return f"{name} {old} → {new}{pct}"
    pct = f" ({(after - before) / before:+.0%})" if before and after is not None else ""
    return f"{name} {gib(before)} → {gib(after)}{pct}"


def change_lines(document: Mapping[str, Any]) -> list[str]:
    """One paragraph per adjacent pair: what moved, and the rule sets between them (or why none did)."""
    lines = []
    for change in document.get("changes") or []:
        moved = "; ".join(_term(term) for term in change["terms"]) or "no term of this model changed"
        verdict = change.get("verdict")
        if verdict:
            moved += f"; verdict {VERDICT_TEXT.get(verdict[0])} → {VERDICT_TEXT.get(verdict[1])}"
        lines.append(f"{safe(change['from'])} → {safe(change['to'])}: {safe(moved)}")
        if change["rules"]:
            for rule in change["rules"]:
                what = rule.get("changes") or "see the engine's note"
                lines.append(f"  rule set {safe(rule['rule_set'])} ({safe(', '.join(rule['keys']))}): {safe(what)}")
        else:
            lines.append(f"  {safe(change['why'])}")
    return lines


def render_engines_compare(console: Any, document: Mapping[str, Any]) -> None:
    from rich.text import Text

    from hfvram.report.fitwidth import print_fitted, print_wrapped
    from hfvram.report.table import VERDICT_STYLE

    cells = []
    for row in document.get("rows") or []:
        values = row_cells(row)
        style = VERDICT_STYLE.get(row.get("verdict"), "")
        cells.append([Text(value, style=style) if index == 7 else Text(value) for index, value in enumerate(values)])
    source = document.get("source") or {}
    files = source.get("files") or []
    model = source.get("repo_id") or (str(files[0]).rsplit("/", 1)[0] if files else "") or "the model"
    gpus = document.get("gpu_set") or "no GPU given"
    print_wrapped(console, Text(f"{safe(model)} on {safe(gpus)}: engine settings side by side", style="bold"))
    print_fitted(console, COLUMNS, cells)
    width = max(40, console.width)
    for line in change_lines(document):
        indent = "    " if line.startswith("  ") else "  "
        text = textwrap.fill(
            line, width=width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        )
        console.print(text, markup=False, highlight=False, soft_wrap=True)
    print_wrapped(console, Text("Each row's breakdown and warnings: `hfvram check SOURCE --engine ENGINE@VERSION`"))


def engines_markdown(document: Mapping[str, Any]) -> str:
    from hfvram.report.markdown import cell

    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for row in document.get("rows") or []:
        lines.append("| " + " | ".join(cell(value) for value in row_cells(row)) + " |")
    lines.append("")
    lines += [f"- {cell(line.strip())}" for line in change_lines(document)]
    return "\n".join(lines) + "\n"
