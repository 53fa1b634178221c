"""The views of ``hfvram.compare/1`` (``check --gpu a,b,c`` and ``fit --cheapest``): one row per GPU set — verdict,
total per GPU, longest context, concurrent requests, decode speed, the set's price (its kind and date) and the price
per usable GiB — then the cheapest set that fits, where the prices come from, and each set's own notes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hfvram.report.fitwidth import Col
from hfvram.report.text import safe
from hfvram.report.units import gib, percent, tokens_short

HEADERS = (
    "GPU set",
    "engine",
    "verdict",
    "per GPU",
    "used",
    "max context",
    "requests",
    "tok/s",
    "price",
    "$/usable GiB",
)
#: the terminal view's columns: compact headers, and the order in which a narrow terminal leaves them out
COLUMNS = (
    Col("GPU set", "left", name=True),
    Col("engine", "left", drop=2),
    Col("verdict", "left"),
    Col("per GPU", short="GiB/GPU", unit=" GiB", drop=3),
    Col("used", drop=0),
    Col("max context", short="context", drop=5),
    Col("requests", short="req", drop=1),
    Col("tok/s", drop=6),
    Col("price"),
    Col("$/usable GiB", short="$/GiB", drop=4),
)
VERDICT_TEXT = {"fits": "fits", "tight": "tight", "offload": "offload", "does_not_fit": "does not fit", None: "—"}
#: warnings worth a line under the table (the mixed-set rule, a refusal); the rest is in `check --gpu SET`
_NOTE_PREFIXES = ("mixed set ",)


def _money(value: float | None) -> str:
    return "no price" if value is None else f"${value:,.0f}"


def price_text(row: Mapping[str, Any]) -> str:
    price = row.get("price")
    if not price:
        return "no price"
    return f"{_money(price['usd'])} {price['kind']}"


def row_cells(row: Mapping[str, Any]) -> list[str]:
    conc = row.get("max_concurrency")
    speed = row.get("decode_tokens_per_second")
    per_gib = row.get("price_per_usable_gib")
    return [
        safe(row["gpu_set"]),
        safe(row.get("engine")),
        VERDICT_TEXT.get(row.get("verdict"), safe(row.get("verdict"))),
        gib(row.get("total_per_gpu")),
        percent(row.get("utilization")),
        tokens_short(row.get("max_context")),
        "—" if conc is None else f"{conc:.1f}",
        "—" if not isinstance(speed, (int, float)) else f"{speed:.0f}",
        price_text(row),
        "—" if per_gib is None else f"${per_gib:,.0f}",
    ]


def title(document: Mapping[str, Any]) -> str:
    source = document.get("source") or {}
    name = source.get("repo_id") or (source.get("files") or [source.get("text") or "?"])[0]
    work = document.get("workload") or {}
    at = f"context {tokens_short(work.get('context'))} · concurrency {work.get('concurrency')}"
    what = "cheapest GPU set that fits" if document.get("question") == "cheapest" else "GPU sets side by side"
    return f"{safe(name)}: {what} · {at} · KV {safe(work.get('kv_dtype'))}"


def footer_lines(document: Mapping[str, Any]) -> list[str]:
    """The answer, where the prices come from (with their dates) and the notes of each set."""
    lines: list[str] = []
    sets: Sequence[Mapping[str, Any]] = document.get("sets") or []
    cheapest = document.get("cheapest")
    if cheapest:
        row = next(r for r in sets if r["gpu_set"] == cheapest)
        lines.append(f"Cheapest that fits: {safe(cheapest)} ({price_text(row)}, {row['price']['date']})")
    elif not sets:
        lines.append("Cheapest that fits: none (no GPU of the class has a published price and fits)")
    else:
        fits = [r for r in sets if r.get("verdict") == "fits"]
        lines.append(
            "Cheapest that fits: none (no set fits with the 10% margin)"
            if not fits
            else "Cheapest that fits: none with a published price (see `no price`)"
        )
    if document.get("candidates"):
        lines.append(f"Candidates: {safe(document['candidates'])}")
    prices = document.get("prices") or {}
    dates = prices.get("dates") or []
    span = "" if not dates else (f" dated {dates[0]}" if len(dates) == 1 else f" dated {dates[0]} … {dates[-1]}")
    lines.append(
        f"Prices: {safe(prices.get('table'))}{span} (kind: {safe(prices.get('kind'))}; one published figure per card, "
        "source per row; `no price` = none published there)"
    )
    for row in sets:
        for card in (row.get("price") or {}).get("cards", []):
            line = f"  {card['gpu']} ${card['usd']:,.0f} {card['kind']}, {card['date']}: {safe(card['source'])}"
            if line not in lines:
                lines.append(line)
    notes = []
    for row in sets:
        reason = row.get("verdict_reason") or ""
        if reason.startswith("engine rule"):
            notes.append(f"  • {safe(row['gpu_set'])}: {safe(reason)}")
        for warning in row.get("warnings") or []:
            if warning.startswith(_NOTE_PREFIXES):
                notes.append(f"  • {safe(row['gpu_set'])}: {safe(warning)}")
    if notes:
        lines.append("Notes:")
        lines += list(dict.fromkeys(notes))
    lines.append("Each set's breakdown and warnings: `hfvram check SOURCE --gpu SET`")
    return lines


def render_compare(console: Any, document: Mapping[str, Any]) -> None:
    from rich.text import Text

    from hfvram.report.table import VERDICT_STYLE, titled_table_with_notes

    cells = []
    for row in document.get("sets") or []:
        values = row_cells(row)
        style = VERDICT_STYLE.get(row.get("verdict"), "")
        cells.append([Text(value, style=style) if index == 2 else Text(value) for index, value in enumerate(values)])
    titled_table_with_notes(console, title(document), COLUMNS, cells, footer_lines(document))


def compare_markdown(document: Mapping[str, Any]) -> str:
    from hfvram.report.markdown import cell, titled_table

    rows = (row_cells(row) for row in document.get("sets") or [])
    lines = titled_table(title(document), HEADERS, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|", rows)
    previous_item = False
    for line in footer_lines(document):
        item = line.startswith("  ")
        if not (item and previous_item):
            lines.append("")  # a paragraph per line; the indented lines are one list
        lines.append(f"- {cell(line.strip().removeprefix('• '))}" if item else cell(line))
        previous_item = item
    return "\n".join(lines) + "\n"
