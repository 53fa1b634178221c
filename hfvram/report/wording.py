"""Sentences shared by the terminal and Markdown reports (no rich import: Markdown output stays light)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hfvram.report.units import count, tokens_short


def capacity_lines(report: Mapping[str, Any]) -> list[str]:
    """The KV pool the engine would allocate, the full-length requests memory has room for, the longest context.

    The pool and the room differ for engines that size the pool from the context (llama.cpp's ``-c``), so both
    are named; zero capacity is said in words, and a longest context at the model's own limit says so."""
    capacity = report.get("capacity") or {}
    workload = report.get("workload") or {}
    max_position = (report.get("model") or {}).get("max_position_embeddings")
    lines = []
    kv_tokens = capacity.get("kv_tokens")
    max_conc = capacity.get("max_concurrency")
    context = workload.get("context")
    room = None
    if max_conc is not None and context:
        room = (
            f"room for {max_conc:.1f} concurrent {tokens_short(context)} requests"
            if max_conc > 0
            else f"no room for a {tokens_short(context)} request"
        )
    if kv_tokens is not None:
        pool = f"{count(kv_tokens)} tokens" if kv_tokens > 0 else "none (nothing is left for it)"
        lines.append(f"KV cache pool: {pool}" + (f" · {room}" if room else ""))
    elif room:
        lines.append(room[0].upper() + room[1:])
    max_context = capacity.get("max_context")
    if max_context is not None:
        if max_context <= 0:
            longest = "none"
        else:
            longest = f"{count(max_context)} tokens"
            if max_position and max_context >= max_position:
                longest += " (the model's limit)"
        lines.append(f"Longest context at concurrency {workload.get('concurrency', 1)}: {longest}")
    return lines


def verdict_note(report: Mapping[str, Any]) -> str | None:
    """What follows the verdict: the engine rule that overrides memory, else the share of usable memory."""
    reason = report.get("verdict_reason") or ""
    if reason.startswith("engine rule: "):
        return reason.removeprefix("engine rule: ")
    utilisation = report.get("utilization")
    return None if utilisation is None else f"{utilisation * 100:.0f}% of usable memory"


def split_provenance(where: str) -> tuple[str, str]:
    """``config.json: num_key_value_heads`` -> (file, field); ``derived: …`` -> ("derived", …); else ("", text)."""
    head, sep, rest = where.partition(": ")
    if sep and head and " " not in head.strip():
        return head, rest
    return "", where


def context_grid(rows: list[Mapping[str, Any]]) -> tuple[list[str], list[tuple[int, list[Mapping[str, Any] | None]]]]:
    """The fit command's context table pivoted for display: the KV dtypes (columns, in first-seen order) and, per
    context (ascending), the row of each KV dtype (None where that pair was not computed)."""
    kv_dtypes = list(dict.fromkeys(row["kv_dtype"] for row in rows))
    by_context: dict[int, dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        by_context.setdefault(row["context"], {})[row["kv_dtype"]] = row
    return kv_dtypes, [(context, [cells.get(k) for k in kv_dtypes]) for context, cells in sorted(by_context.items())]
