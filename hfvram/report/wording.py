"""Sentences shared by the terminal and Markdown reports (no rich import: Markdown output stays light)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hfvram.report.units import count, gib, tokens_short


def capacity_lines(report: Mapping[str, Any]) -> list[str]:
    """The KV pool the engine would allocate, the full-length requests it holds, the longest context.

    One meaning for every engine (docs/methodology.md, "Capacity"): the pool is what the engine allocates at
    start-up, sized by its memory budget (vLLM, SGLang, TensorRT-LLM, LMDeploy) or by its context setting
    (llama.cpp, Ollama, MLX, ExLlamaV2); the concurrent requests are the full-length requests memory holds at
    once; the longest context is the largest ``--context`` that is not does_not_fit, at most the model's limit.
    Zero is said in words; nothing is claimed about a layout the engine refuses."""
    capacity = report.get("capacity") or {}
    workload = report.get("workload") or {}
    max_position = (report.get("model") or {}).get("max_position_embeddings")
    refused = (report.get("verdict_reason") or "").startswith("engine rule: ") and report.get(
        "verdict"
    ) == "does_not_fit"
    lines = []
    kv_tokens = capacity.get("kv_tokens")
    max_conc = capacity.get("max_concurrency")
    context = workload.get("context")
    sized_by = capacity.get("kv_pool_sized_by")
    short = tokens_short(context)
    room = None
    if max_conc is not None and context and not refused:
        if max_conc <= 0:
            room = f"no room for a {short} request"
        elif sized_by == "context":
            room = f"memory has room for {max_conc:.1f} such requests"
        else:
            room = f"holds {max_conc:.1f} concurrent {short} requests"
    if kv_tokens is not None:
        if kv_tokens <= 0:
            pool = "none (nothing is left for it)"
        elif sized_by == "context":
            held = f"{kv_tokens / context:.1f} × {short}" if context else "the context"
            pool = f"{count(kv_tokens)} tokens (sized by the context: {held})"
        elif sized_by == "memory":
            pool_bytes = (report.get("engine") or {}).get("kv_pool_bytes")
            size = f"{gib(pool_bytes)}, " if isinstance(pool_bytes, (int, float)) and pool_bytes > 0 else ""
            pool = f"{count(kv_tokens)} tokens ({size}what the memory budget leaves)"
        else:
            pool = f"{count(kv_tokens)} tokens"
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
    if reason.startswith("offload: "):
        return reason.removeprefix("offload: ")
    utilisation = report.get("utilization")
    return None if utilisation is None else f"{utilisation * 100:.0f}% of usable memory"


def offload_speed_words(report: Mapping[str, Any]) -> str:
    """The decode bound of a run with layers or experts in RAM (shown where there is no expected speed)."""
    speed = report.get("decode_tokens_per_second")
    text = "—" if not isinstance(speed, (int, float)) else f"{speed:,.1f} tokens/s per sequence"
    return f"≤ {text} (bandwidth bound, with what stays in RAM read at the host's or the PCIe link's speed)"


def expected_speed_words(report: Mapping[str, Any]) -> str | None:
    """``≈ 35.4 tokens/s expected (30.8-37.9 over published runs); ≤ 118.5 bound``: the expected decode speed
    (docs/methodology.md#expected-speed) with its range and the bound it refines; None without one."""
    speed = report.get("speed") or {}
    rate = speed.get("expected_decode_tokens_per_second")
    if not isinstance(rate, (int, float)):
        return None
    spread = speed.get("range_tokens_per_second")
    bound = speed.get("decode_bound_tokens_per_second")
    tail = f"; ≤ {bound:,.1f} bandwidth bound" if isinstance(bound, (int, float)) else ""
    around = f"{spread[0]:,.1f}-{spread[1]:,.1f} over published runs" if spread else "no published run sizes its spread"
    return f"≈ {rate:,.1f} tokens/s per sequence expected ({around}){tail}"


def expected_prefill_words(report: Mapping[str, Any]) -> str | None:
    """``≈ 9,870 tokens/s expected for a 512-token prompt (8,880-10,860 over published runs)``: the expected prefill
    (docs/methodology.md#expected-speed); None without one."""
    prefill = (report.get("speed") or {}).get("prefill") or {}
    rate = prefill.get("expected_tokens_per_second")
    if not isinstance(rate, (int, float)):
        return None
    spread = prefill.get("range_tokens_per_second")
    around = f"{spread[0]:,.0f}-{spread[1]:,.0f} over published runs" if spread else "no published run sizes its spread"
    return f"≈ {rate:,.0f} tokens/s expected for a {prefill.get('prompt_tokens')}-token prompt ({around})"


def expected_prefill_parts(report: Mapping[str, Any]) -> list[str]:
    """One line per part of the expected prefill time per prompt token, for --explain."""
    parts = ((report.get("speed") or {}).get("prefill") or {}).get("parts") or []
    return [f"{part['name']}: {part['seconds_per_token'] * 1e6:.1f} us/token ({part['basis']})" for part in parts]


def expected_speed_parts(report: Mapping[str, Any]) -> list[str]:
    """One line per part of the expected time per token, for --explain."""
    parts = (report.get("speed") or {}).get("parts") or []
    return [f"{part['name']}: {part['seconds_per_token'] * 1000:.2f} ms/token ({part['basis']})" for part in parts]


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


def smallest_gpu_line(fit: Mapping[str, Any]) -> str:
    """``fewest rtx4090 that fit: 2 (1 runs, but tight)``: "fit" means the verdict fits, as everywhere else."""
    smallest = fit.get("smallest_gpu_count")
    tight = fit.get("smallest_gpu_count_tight")
    limit = fit.get("max_gpu_count_tried")
    context = tokens_short(fit.get("context"))
    if smallest is None:
        text = f"none up to {limit} (as tensor parallel, at {context})" if limit else "none up to the limit"
    else:
        text = str(smallest)
    if tight is not None:
        text += f" ({tight} runs, but tight: over 90% of usable memory)"
    with_ram = fit.get("smallest_gpu_count_offload")
    if with_ram is not None:
        text += f" ({with_ram} runs with layers / experts in RAM)"
    return f"fewest {fit['gpu']} that fit: {text}"


def what_if_lines(report: Mapping[str, Any]) -> list[str]:
    """The ``--quant`` what-if said plainly: the weights are not the repo's files but sized as the format would
    store them (and, for ``--quant auto``, which candidates were tried)."""
    what_if = report.get("what_if")
    if not what_if:
        return []
    lines = [
        f"What-if --quant {what_if.get('quant')}: weights {gib(what_if.get('weights_bytes'))} are not the repo's "
        f"files but sized {str(what_if.get('weights_source') or 'from the config').removeprefix('what-if: ')}"
    ]
    auto = what_if.get("auto")
    if auto:
        tried = ", ".join(
            f"{c.get('quant')} {gib(c.get('weights_bytes'))} {str(c.get('verdict') or 'no verdict').replace('_', ' ')}"
            for c in auto.get("candidates") or []
        )
        verdict = report.get("verdict")
        why = {
            "fits": "the largest that fits",
            "tight": "none fits; the largest that is tight",
            "offload": "none runs on the GPU alone; the largest that runs with offload in the --ram given",
        }.get(str(verdict), "none fits, not even the smallest")
        lines.append(f"--quant auto picked {auto.get('chosen')}: {why} (estimated: {tried})")
    return lines


def launch_lines(launch: Mapping[str, Any] | None) -> list[str]:
    """The launch as shell lines: the files to write first (``cat > Modelfile`` style headings), the command, the
    commands after it. Empty without a launch (transformers is a library)."""
    if not launch:
        return []
    lines: list[str] = []
    for name, body in (launch.get("files") or {}).items():
        lines.append(f"# {name}:")
        lines += [f"#   {line}" for line in body]
    lines.append(str(launch.get("command") or ""))
    lines += [str(line) for line in launch.get("then") or []]
    return lines


def shell_wrap(line: str, width: int) -> list[str]:
    """A shell command folded at ``width`` with ``\\`` continuations (pasted, it is the same command); comments,
    short lines and text the shell could not split stay whole."""
    import shlex

    if len(line) <= width or line.startswith("#"):
        return [line]
    try:
        words = [shlex.quote(word) for word in shlex.split(line)]
    except ValueError:
        return [line]
    # a flag and its value stay on one line: fold only before a flag
    units: list[str] = []
    for word in words:
        if units and not word.startswith("-"):
            units[-1] += " " + word
        else:
            units.append(word)
    lines: list[str] = []
    current = ""
    for unit in units:
        # room for " \\" at the end of every folded line; continuations are indented by four
        if current and len(current) + 1 + len(unit) + 2 > width:
            lines.append(current + " \\")
            current = "    " + unit
        else:
            current = f"{current} {unit}" if current else unit
    lines.append(current)
    return lines


def launch_command_lines(launch: Mapping[str, Any] | None) -> list[str]:
    """Just the commands (``check --launch``): the line, then the commands after it."""
    if not launch:
        return []
    return [str(launch.get("command") or ""), *(str(line) for line in launch.get("then") or [])]


def largest_batch_line(found: Mapping[str, Any] | None, context: Any) -> str | None:
    """``Largest batch that starts at 32k: max-num-seqs 350 (the recurrent state pool …)``; None when unknown or
    when nothing bounds it."""
    if not found or not found.get("value"):
        return None  # unknown, nothing bounds it, or not one full-length sequence fits
    return (
        f"Largest batch that starts at {tokens_short(context)}: {found.get('setting')} {found.get('value')} "
        f"({found.get('bound_by')}; --concurrency max uses it)"
    )


def prefill_line(prefill: Mapping[str, Any] | None) -> str | None:
    """``Prefill: ≥ 0.42 s to the first token of a 8,192-token prompt; ≥ 1.68 s for the last of 4 together …``."""
    if not prefill:
        return None
    first, last = prefill.get("first_token_seconds_min"), prefill.get("last_first_token_seconds_min")
    tokens, conc = prefill.get("prompt_tokens"), prefill.get("concurrency")
    text = f"Prefill: ≥ {first:.2f} s to the first token of a {count(tokens)}-token prompt"
    if conc and conc > 1:
        text += f"; ≥ {last:.2f} s for the last of {conc} arriving together"
    return text + f" (a bound: compute at {prefill.get('tflops'):,.0f} dense BF16 TFLOPS)"
