"""``hfvram models``: which of the embedded catalogue's models run on one GPU set (pure: rows in, rows out).

The rows are hfvram.check/1 objects (``hfvram.pipeline.scan_one``); this module filters, sorts, builds the
``hfvram.models/1`` document and renders the table, Markdown and CSV views.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hfvram.report.fitwidth import Col
from hfvram.report.text import safe
from hfvram.report.units import gib, params, tokens_short

MODELS_SCHEMA = "hfvram.models/1"
SORTS = ("verdict", "total", "params", "context", "speed")
_VERDICT_RANK = {"fits": 0, "tight": 1, "offload": 2, "does_not_fit": 3}


def search_repos(repos: Iterable[str], query: str | None) -> list[str]:
    """The repo ids that hold ``query`` (case-insensitive substring; every repo for no query), sorted."""
    wanted = (query or "").strip().lower()
    return sorted(repo for repo in repos if wanted in repo.lower())


def family_matches(report: Mapping[str, Any], family: str | None) -> bool:
    """Whether the row's architecture or model_type holds ``family`` (case-insensitive); error rows never do."""
    if not family:
        return True
    model = report.get("model") or {}
    names = [str(model.get("architecture") or ""), str(model.get("model_type") or "")]
    return any(family.strip().lower() in name.lower() for name in names)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else -1.0


def sort_key(report: Mapping[str, Any], by: str = "verdict") -> tuple[Any, ...]:
    """Errors last; ``verdict``: fits first, then larger models first; ``total``: least memory per GPU first;
    ``params`` / ``context`` / ``speed``: the largest first. Ties by repo id."""
    if "error" in report:
        return (1, 0, 0.0, str((report.get("source") or {}).get("text") or ""))
    model = report.get("model") or {}
    capacity = report.get("capacity") or {}
    name = str((report.get("source") or {}).get("repo_id") or "")
    rank = _VERDICT_RANK.get(str(report.get("verdict")), 3)
    if by == "total":
        return (0, 0, _number((report.get("per_gpu") or {}).get("total")), name)
    if by == "params":
        return (0, 0, -_number(model.get("params_total")), name)
    if by == "context":
        return (0, 0, -_number(capacity.get("max_context")), name)
    if by == "speed":
        return (0, 0, -_number(report.get("decode_tokens_per_second")), name)
    return (0, rank, -_number(model.get("params_total")), name)


def select_rows(reports: Iterable[Mapping[str, Any]], *, family: str | None, sort: str) -> list[dict[str, Any]]:
    """The rows whose family matches, sorted by ``sort`` (one of SORTS)."""
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}")
    kept = [dict(report) for report in reports if family_matches(report, family)]
    kept.sort(key=lambda report: sort_key(report, sort))
    return kept


def models_document(query: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``hfvram.models/1`` document: the query as asked, the counts, and one check/1 object per model."""
    verdicts = [row.get("verdict") for row in rows if "error" not in row]
    return {
        "schema": MODELS_SCHEMA,
        "query": dict(query),
        "counts": {
            "models": len(rows),
            "fits": verdicts.count("fits"),
            "tight": verdicts.count("tight"),
            "offload": verdicts.count("offload"),
            "does_not_fit": verdicts.count("does_not_fit"),
            "errors": len(rows) - len(verdicts),
        },
        "models": list(rows),
    }


def models_exit_code(rows: Sequence[Mapping[str, Any]]) -> int:
    """0 when at least one model fits (or is tight, or runs with offload), else 1."""
    return 0 if any(row.get("verdict") in ("fits", "tight", "offload") for row in rows) else 1


def _speed(report: Mapping[str, Any]) -> str:
    speed = report.get("decode_tokens_per_second")
    return "—" if not isinstance(speed, (int, float)) else f"{speed:.0f} tok/s"


def _requests(report: Mapping[str, Any]) -> str:
    conc = (report.get("capacity") or {}).get("max_concurrency")
    return "—" if conc is None else f"{conc:.1f}"


def _ram(report: Mapping[str, Any]) -> str:
    """The CPU RAM the engine's offload placement needs (``offload_plan.ram``), else ``—``."""
    plan = report.get("offload_plan") or {}
    if report.get("verdict") != "offload" or not plan:
        return "—"
    return gib((plan.get("ram") or {}).get("total_bytes"))


def _params(report: Mapping[str, Any]) -> str:
    model = report.get("model") or {}
    total, active = model.get("params_total"), model.get("params_active")
    if active is not None and total is not None and active != total:
        return f"{params(total)} / {params(active)}"
    return params(total)


def row_cells(report: Mapping[str, Any]) -> list[str]:
    """model, params, verdict, per GPU, longest context, requests, decode speed (plain text)."""
    source = report.get("source") or {}
    name = safe(source.get("repo_id") or source.get("text") or "?")
    if "error" in report:
        return [name, "", f"ERROR ({safe(report['error']['kind'])})", "", "", "", "", ""]
    label = {"fits": "FITS", "tight": "TIGHT", "offload": "OFFLOAD", "does_not_fit": "DOES NOT FIT"}.get(
        str(report.get("verdict")), "—"
    )
    return [
        name,
        _params(report),
        label,
        gib((report.get("per_gpu") or {}).get("total")),
        _ram(report),
        tokens_short((report.get("capacity") or {}).get("max_context")),
        _requests(report),
        _speed(report),
    ]


HEADERS = ("model", "params / active", "verdict", "per GPU", "RAM", "longest context", "requests", "decode")
#: the terminal view's columns: compact headers, and the order in which a narrow terminal leaves them out
COLUMNS = (
    Col("model", "left", name=True),
    Col("params / active", "left", short="params", drop=1),
    Col("verdict", "left"),
    Col("per GPU", short="GiB/GPU", unit=" GiB", drop=4),
    Col("RAM", short="RAM GiB", drop=0),
    Col("longest context", short="context", drop=3),
    Col("requests", short="req", drop=2),
    Col("decode", short="tok/s", unit=" tok/s"),
)


def quant_cell(report: Mapping[str, Any]) -> str:
    """The ``--quant`` what-if of a row (the quant ``auto`` chose), else empty."""
    what_if = report.get("what_if") or {}
    return safe(str(what_if.get("quant") or ""))


def has_quant(rows: Sequence[Mapping[str, Any]]) -> bool:
    return any(row.get("what_if") for row in rows)


def title(query: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    counts = models_document(query, rows)["counts"]
    runs = counts["fits"] + counts["tight"] + counts["offload"]
    at = f"{tokens_short(query.get('context'))} context" if query.get("context") else "the engine's default context"
    quant = query.get("quant")
    what_if = ""
    if quant:
        what_if = (
            " · what-if --quant auto: the largest GGUF quant that fits, as llama.cpp would write it"
            if str(quant).lower() == "auto"
            else f" · what-if --quant {safe(quant)}: weights as that format would store them"
        )
    where = "Hub" if query.get("hub") else "catalogue"
    return f"{runs} of {counts['models']} {where} models run on {safe(query.get('gpu'))} at {at}{what_if}"


def render_models(console: Any, query: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> None:
    from rich.text import Text

    from hfvram.report.fitwidth import print_fitted, print_wrapped
    from hfvram.report.table import VERDICT_STYLE

    quant = has_quant(rows)
    cells: list[list[Text]] = []
    for report in rows:
        values = row_cells(report) + ([quant_cell(report)] if quant else [])
        style = "red" if "error" in report else VERDICT_STYLE.get(report.get("verdict"), "")
        cells.append([Text(value, style=style) if index == 2 else Text(value) for index, value in enumerate(values)])
    columns = list(COLUMNS) + ([Col("quant", "left")] if quant else [])
    if any(row[4].plain != "—" for row in cells):
        # a RAM figure (an offload row) is kept longer than the parameter counts
        columns[4] = Col("RAM", short="RAM GiB", drop=2)
    print_wrapped(console, Text(title(query, rows), style="bold"))
    print_fitted(console, columns, cells)
    errors = [report for report in rows if "error" in report]
    for report in errors:
        print_wrapped(
            console, Text(f"  • {safe((report.get('source') or {}).get('text'))}: {safe(report['error']['message'])}")
        )
    refused = refusal_lines(rows)
    if refused:
        console.print(Text("Refused by the engine, whatever the memory:"))
        for line in refused:
            print_wrapped(console, Text(line))


#: how many refused rows the table names one by one (the rest are counted)
REFUSALS_SHOWN = 8


def refusal_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per row the engine refuses (``verdict_reason`` "engine rule: …", a context above the model's own
    limit among them): the reason the verdict column cannot hold."""
    refused = [
        (
            safe((report.get("source") or {}).get("repo_id") or (report.get("source") or {}).get("text") or "?"),
            safe(report["verdict_reason"].removeprefix("engine rule: ")),
        )
        for report in rows
        if str(report.get("verdict_reason") or "").startswith("engine rule: ")
        and not str(report.get("verdict_reason")).startswith("engine rule: the four terms")
    ]
    lines = [f"  • {source}: {reason}" for source, reason in refused[:REFUSALS_SHOWN]]
    if len(refused) > REFUSALS_SHOWN:
        lines.append(f"  … and {len(refused) - REFUSALS_SHOWN} more (--json has every row's verdict_reason)")
    return lines


def models_markdown(query: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    from hfvram.report.markdown import cell

    lines = [
        f"**{cell(title(query, rows))}**",
        "",
        "| " + " | ".join(HEADERS + (("quant",) if has_quant(rows) else ())) + " |",
        "|---|---|---|---:|---:|---:|---:|---:|" + ("---|" if has_quant(rows) else ""),
    ]
    for report in rows:
        values = row_cells(report) + ([quant_cell(report)] if has_quant(rows) else [])
        lines.append("| " + " | ".join(cell(value) for value in values) + " |")
    return "\n".join(lines) + "\n"


def models_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """scan's CSV columns plus the parameter counts and the decode speed."""
    from hfvram.report.tabular import CSV_COLUMNS, csv_row

    listed = list(rows)
    quant = ("quant",) if has_quant(listed) else ()
    columns = (
        *CSV_COLUMNS[:4],
        "params_total",
        "params_active",
        *CSV_COLUMNS[4:],
        "decode_tokens_per_second",
        *quant,
    )
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for report in listed:
        row = csv_row(report)
        model = report.get("model") or {}
        row.update(
            params_total=model.get("params_total"),
            params_active=model.get("params_active"),
            decode_tokens_per_second=report.get("decode_tokens_per_second"),
        )
        if quant:
            row["quant"] = (report.get("what_if") or {}).get("quant")
        writer.writerow({key: safe(value) if isinstance(value, str) else value for key, value in row.items()})
    return buffer.getvalue()


def list_lines(repos: Sequence[str], sizes: Mapping[str, int | None]) -> list[str]:
    """``--list``: one repo id per line, with its total parameters where the catalogue states them."""
    width = max((len(repo) for repo in repos), default=0)
    return [f"{safe(repo):<{width}}  {params(sizes.get(repo))}".rstrip() for repo in repos]
