"""Markdown reports (for pull-request comments and docs)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from hfvram.report.units import count, gib, percent, tokens_short

VERDICT_MARK = {"fits": "✅ fits", "tight": "⚠️ tight", "does_not_fit": "❌ does not fit", None: "— (no GPU)"}


def _name(report: Mapping[str, Any]) -> str:
    source = report.get("source") or {}
    return source.get("repo_id") or source.get("text") or (source.get("files") or ["?"])[0]


def check_markdown(report: Mapping[str, Any], *, explain: bool = False) -> str:
    per_gpu = report["per_gpu"]
    workload = report["workload"]
    hardware = report.get("hardware")
    engine = report.get("engine") or {}
    usable = per_gpu.get("usable")
    lines = [
        f"### {_name(report)}",
        "",
        f"**{VERDICT_MARK.get(report.get('verdict'), report.get('verdict'))}** · engine `{engine.get('name')}` · "
        f"GPU `{hardware['gpu']}` ×{hardware['count']} · context {tokens_short(workload.get('context'))} · "
        f"concurrency {workload.get('concurrency')} · KV `{workload.get('kv_dtype')}`"
        if hardware
        else f"**footprint only** · engine `{engine.get('name')}` · context {tokens_short(workload.get('context'))}",
        "",
        "| term | per GPU | of usable |",
        "|---|---:|---:|",
    ]
    for key, label in (("weights", "weights"), ("kv_cache", "KV cache"), ("activations", "activations"),
                       ("overhead", "overhead"), ("total", "**total**")):
        value = per_gpu.get(key)
        share = percent(value / usable) if usable and value is not None else "—"
        size = f"**{gib(value)}**" if key == "total" else gib(value)
        lines.append(f"| {label} | {size} | {share} |")
    if hardware:
        lines.append(f"| usable | {gib(usable)} | |")
        lines.append(f"| GPU memory | {gib(per_gpu.get('memory'))} | |")
    capacity = report.get("capacity") or {}
    lines.append("")
    if capacity.get("kv_tokens") is not None:
        lines.append(f"- KV cache: {count(capacity['kv_tokens'])} tokens")
    if capacity.get("max_concurrency") is not None:
        lines.append(
            f"- concurrent {tokens_short(workload.get('context'))} requests: {capacity['max_concurrency']:.1f}"
        )
    if capacity.get("max_context") is not None:
        lines.append(f"- longest context: {count(capacity['max_context'])} tokens")
    for warning in report.get("warnings") or []:
        lines.append(f"- ⚠️ {warning}")
    if explain and report.get("explain"):
        lines += ["", "| fact | source |", "|---|---|"]
        for fact, where in sorted((report["explain"].get("provenance") or {}).items()):
            lines.append(f"| {fact} | {where} |")
        for term, how in (report["explain"].get("terms") or {}).items():
            lines.append(f"| term {term} | {how} |")
    return "\n".join(lines) + "\n"


def scan_markdown(reports: Iterable[Mapping[str, Any]]) -> str:
    lines = ["| source | verdict | total / GPU | usable | KV tokens | concurrent |", "|---|---|---:|---:|---:|---:|"]
    for report in reports:
        if "error" in report:
            lines.append(f"| {_name(report)} | error: {report['error']['kind']} | | | | {report['error']['message']} |")
            continue
        capacity = report.get("capacity") or {}
        conc = capacity.get("max_concurrency")
        lines.append(
            f"| {_name(report)} | {VERDICT_MARK.get(report.get('verdict'), report.get('verdict'))} | "
            f"{gib(report['per_gpu']['total'])} | {gib(report['per_gpu'].get('usable'))} | "
            f"{count(capacity.get('kv_tokens'))} | {'—' if conc is None else f'{conc:.1f}'} |"
        )
    return "\n".join(lines) + "\n"


def fit_markdown(fit: Mapping[str, Any]) -> str:
    conc = fit.get("max_concurrency")
    lines = [
        f"### {_name(fit)} on {fit['hardware']} ({fit['engine']})",
        "",
        f"- longest context at concurrency {fit['concurrency']}: {count(fit.get('max_context'))} tokens",
        f"- concurrent {tokens_short(fit.get('context'))} requests: {'—' if conc is None else f'{conc:.1f}'}",
        f"- smallest number of {fit['gpu']} that fits: {fit.get('smallest_gpu_count') or '—'}",
    ]
    rows = fit.get("context_table") or []
    if rows:
        kv_dtypes = list(dict.fromkeys(row["kv_dtype"] for row in rows))
        lines += ["", "| context | " + " | ".join(f"KV {k}" for k in kv_dtypes) + " |",
                  "|---:|" + "---:|" * len(kv_dtypes)]
        by_context: dict[int, dict[str, Mapping[str, Any]]] = {}
        for row in rows:
            by_context.setdefault(row["context"], {})[row["kv_dtype"]] = row
        for context, cells in sorted(by_context.items()):
            values = []
            for kv_dtype in kv_dtypes:
                value = (cells.get(kv_dtype) or {}).get("max_concurrency")
                values.append("—" if value is None else f"{value:.1f}")
            lines.append(f"| {tokens_short(context)} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"
