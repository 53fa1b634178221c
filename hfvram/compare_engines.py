"""Engines and releases side by side (``check SOURCE --engine vllm@0.25,vllm@0.26`` or ``--engine
vllm,sglang,llama.cpp``): the model is read once, then each engine setting runs through the same estimate as
``check``; one row per setting (weights, KV pool, KV tokens, activations, CUDA graphs, verdict, longest context),
and between adjacent rows what changed with the rule that changed it: for two releases of one engine, the
``[versions]`` tables of its data file between them and what their releases changed (``[releases]``); for two
engines, that each has its own rules. The document is ``hfvram.engines/1``
(hfvram/data/schema/engines.schema.json).

Exit codes as for GPU sets: 0 when at least one row fits (or is tight, unless --fail-on tight), 1 when none does.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hfvram.errors import UsageError
from hfvram.pipeline import RunOptions, run_estimate

ENGINES_SCHEMA = "hfvram.engines/1"
#: bound on the rows of one comparison (hostile-input rule: every count is capped)
MAX_ENGINE_ROWS = 12
#: the terms compared between adjacent rows, as the row names them
TERMS = (
    "weights_bytes",
    "kv_pool_bytes",
    "kv_tokens",
    "activations_bytes",
    "cuda_graph_bytes",
    "overhead_bytes",
    "max_context",
)
_RANK = {"fits": 0, "tight": 1, "does_not_fit": 2, None: 3}


def is_engine_list(engine: str | None) -> bool:
    return bool(engine) and "," in str(engine)


def parse_engine_list(text: str) -> list[tuple[str, str | None]]:
    """``vllm@0.25,vllm@0.26`` -> [("vllm", "0.25"), ("vllm", "0.26")]; names checked, at most MAX_ENGINE_ROWS."""
    from hfvram.engines import parse_engine_name

    entries = [piece.strip() for piece in text.split(",") if piece.strip()]
    if len(entries) < 2:
        raise UsageError("--engine with a comma list needs at least two engine settings, e.g. vllm@0.25,vllm@0.26")
    if len(entries) > MAX_ENGINE_ROWS:
        raise UsageError(f"--engine lists {len(entries)} settings; at most {MAX_ENGINE_ROWS} side by side")
    return [parse_engine_name(entry) for entry in entries]


def _row(name: str, version: str | None, doc: dict[str, Any]) -> dict[str, Any]:
    engine, per_gpu, capacity = doc["engine"], doc["per_gpu"], doc["capacity"] or {}
    label = f"{name}@{version}" if version else name
    return {
        "engine": name,
        "version_asked": version,
        "label": label,
        "rules": engine.get("version"),
        "weights_bytes": per_gpu.get("weights"),
        "kv_pool_bytes": engine.get("kv_pool_bytes"),
        "kv_tokens": capacity.get("kv_tokens"),
        "activations_bytes": per_gpu.get("activations"),
        "cuda_graph_bytes": engine.get("cudagraph_bytes"),
        "overhead_bytes": per_gpu.get("overhead"),
        "verdict": doc["verdict"],
        "verdict_reason": doc["verdict_reason"],
        "max_context": capacity.get("max_context"),
        "warnings": list(doc["warnings"]),
    }


def rule_changes(engine: str, older: str | None, newer: str | None) -> list[dict[str, Any]]:
    """The rule sets of ``engine`` that take effect after ``older`` up to ``newer`` (the ``[versions]`` tables of
    its data file, oldest first), each with the keys it sets and what its release changed (``[releases]``)."""
    from hfvram.estimate import common, releases

    versions = common.load_engine_data(engine).get("versions", {})
    low = common.version_key(older) if older else ()
    high = common.version_key(newer) if newer else (10**9,)
    if low > high:
        low, high = high, low
    out = []
    for version in sorted(versions, key=common.version_key):
        key = common.version_key(version)
        if low < key <= high:
            release = releases.release_for_rule_set(engine, version)
            out.append(
                {
                    "rule_set": version,
                    "keys": sorted(str(name) for name in versions[version]),
                    "release": release.version if release else None,
                    "changes": release.changes if release else None,
                }
            )
    return out


def _change(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    terms = []
    for term in TERMS:
        old, new = before.get(term), after.get(term)
        if old != new:
            delta = new - old if isinstance(old, (int, float)) and isinstance(new, (int, float)) else None
            terms.append({"term": term, "before": old, "after": new, "delta": delta})
    if before["engine"] == after["engine"]:
        rules = rule_changes(before["engine"], before["rules"], after["rules"])
        why = (
            "the rule sets between the two releases"
            if rules
            else f"the same {before['engine']} rule set ({before['rules']}): no rule changed between these releases"
        )
    else:
        rules = []
        why = f"another engine: {after['engine']} sizes memory by its own rules (docs/engines/)"
    verdict = None if before["verdict"] == after["verdict"] else [before["verdict"], after["verdict"]]
    return {
        "from": before["label"],
        "to": after["label"],
        "terms": terms,
        "verdict": verdict,
        "rules": rules,
        "why": why,
    }


def engines_report(options: RunOptions, source: str | None) -> dict[str, Any]:
    """``check --engine a,b,c``: one row per engine setting, in the order given, and what changed between them."""
    from hfvram.estimate.hardware import is_gpu_list
    from hfvram.pipeline import gguf_repo_wanted, load, resolve_request, with_draft
    from hfvram.report.jsonout import check_dict, source_dict

    assert options.engine is not None
    if is_gpu_list(options.gpu):
        raise UsageError("compare engines on one GPU set, or GPU sets under one engine: not both lists at once")
    settings = parse_engine_list(options.engine)
    first, version = settings[0]
    request = resolve_request(replace(options, engine=f"{first}@{version}" if version else first), source)
    if gguf_repo_wanted(request.source):
        raise UsageError(f"{request.source!r} is a GGUF repo: name the quant (`{request.source}:Q4_K_M`)")
    loaded = load(request, options)
    request = with_draft(request, options, loaded)
    docs = [
        check_dict(loaded.source, run_estimate(replace(request, engine=name, engine_version=asked), options, loaded))
        for name, asked in settings
    ]
    rows = [_row(name, asked, doc) for (name, asked), doc in zip(settings, docs, strict=True)]
    changes = [_change(rows[i - 1], rows[i]) for i in range(1, len(rows))]
    return {
        "schema": ENGINES_SCHEMA,
        "source": source_dict(loaded.source),
        "model": docs[0]["model"],
        "workload": docs[0]["workload"],
        "gpu_set": request.hardware.label if request.hardware is not None else None,
        "engines_asked": options.engine,
        "rows": rows,
        "changes": changes,
        "verdict": min((row["verdict"] for row in rows), key=lambda v: _RANK.get(v, 3)),
        "warnings": list(dict.fromkeys(list(request.notes) + list(loaded.spec.warnings))),
    }


def engines_exit_code(document: dict[str, Any], fail_on_tight: bool) -> int:
    """0 when a row fits (or is tight, unless --fail-on tight); 1 when none does."""
    from hfvram.pipeline import EXIT_DOES_NOT_FIT, EXIT_OK

    good = {"fits"} if fail_on_tight else {"fits", "tight"}
    return EXIT_OK if any(row["verdict"] in good for row in document["rows"]) else EXIT_DOES_NOT_FIT
