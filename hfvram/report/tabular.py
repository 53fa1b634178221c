"""Flat outputs for ``scan``: JSON Lines and CSV (one row per source, sizes in bytes)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping
from typing import Any

from hfvram.report.text import safe, safe_json

CSV_COLUMNS: tuple[str, ...] = (
    "source",
    "kind",
    "revision",
    "verdict",
    "gpu",
    "gpu_count",
    "engine",
    "context",
    "concurrency",
    "kv_dtype",
    "weights",
    "kv_cache",
    "activations",
    "overhead",
    "total",
    "usable",
    "utilization",
    "kv_tokens",
    "max_concurrency",
    "max_context",
    "error_kind",
    "error_message",
)


def jsonl_line(report: Mapping[str, Any], *, ascii_only: bool = False) -> str:
    """One compact JSON line; control characters (C0 by json, C1 and bidi here) escaped as ``\\uXXXX``."""
    return safe_json(json.dumps(report, separators=(",", ":"), ensure_ascii=ascii_only))


def csv_row(report: Mapping[str, Any]) -> dict[str, Any]:
    source = report.get("source") or {}
    row: dict[str, Any] = {
        "source": source.get("repo_id") or source.get("text") or ";".join(source.get("files") or []),
        "kind": source.get("kind"),
        "revision": source.get("revision"),
    }
    if "error" in report:
        row.update(error_kind=report["error"]["kind"], error_message=report["error"]["message"])
        return row
    hardware = report.get("hardware") or {}
    workload = report.get("workload") or {}
    capacity = report.get("capacity") or {}
    row.update(
        verdict=report.get("verdict"),
        gpu=hardware.get("gpu"),
        gpu_count=hardware.get("count"),
        engine=(report.get("engine") or {}).get("name"),
        context=workload.get("context"),
        concurrency=workload.get("concurrency"),
        kv_dtype=workload.get("kv_dtype"),
        utilization=report.get("utilization"),
        kv_tokens=capacity.get("kv_tokens"),
        max_concurrency=capacity.get("max_concurrency"),
        max_context=capacity.get("max_context"),
    )
    row.update(
        {
            key: report["per_gpu"].get(key)
            for key in ("weights", "kv_cache", "activations", "overhead", "total", "usable")
        }
    )
    return row


def to_csv(reports: Iterable[Mapping[str, Any]]) -> str:
    return rows_to_csv(csv_row(report) for report in reports)


def rows_to_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """The CSV of rows made by :func:`csv_row` (a scan makes each as its source finishes)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        # text fields as text: control characters escaped (a CSV opened in a terminal or a spreadsheet)
        writer.writerow({key: safe(value) if isinstance(value, str) else value for key, value in row.items()})
    return buffer.getvalue()
