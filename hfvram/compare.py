"""GPU sets side by side (``check --gpu rtx4090,rtx5090,rtx3090x2,h100``) and the cheapest set that fits
(``fit --cheapest``): the model is read once, then each set runs through the same estimate as ``check``
(``hfvram.pipeline.run_estimate``). The document is ``hfvram.compare/1`` (hfvram/data/schema/compare.schema.json);
prices come from hfvram/data/gpu_prices.toml, each with its kind, date and source, and a set with a card that has no
published price has no price.

Exit codes (README "Exit codes"): 0 when at least one set fits (or is tight, unless --fail-on tight), 1 when none
does, 2 for bad input, 3 when the model cannot be read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hfvram.errors import UsageError
from hfvram.pipeline import (
    EXIT_DOES_NOT_FIT,
    EXIT_OK,
    RunOptions,
    default_engine_notes,
    engine_choice,
    gguf_repo_wanted,
    load,
    resolve_request,
    run_estimate,
    unified_fraction_notes,
    with_draft,
    workload,
)
from hfvram.redaction import redact_document

if TYPE_CHECKING:
    from hfvram.estimate.types import GPU, Hardware
    from hfvram.pipeline import Request
    from hfvram.spec import LoadedModel

COMPARE_SCHEMA = "hfvram.compare/1"
GIB = 1 << 30
#: ``fit --cheapest --from CLASS``: the catalogue's ``category`` of each class (``apple``: Apple's unified machines)
CLASSES = ("consumer", "workstation", "datacenter", "apple", "all")
_RANK = {"fits": 0, "tight": 1, "offload": 2, "does_not_fit": 3, None: 4}


def max_cheapest_count() -> int:
    """The most GPUs of one kind ``fit --cheapest`` tries (hfvram/data/bounds.toml [hardware])."""
    from hfvram.datafiles import data_table

    return int(data_table("bounds.toml")["hardware"]["maximum_cheapest_gpu_count"])


def _request_and_model(options: RunOptions, source: str | None) -> tuple[Request, LoadedModel]:
    """Everything but the GPU parsed once, and the model (and a speculative draft checkpoint it names) read once."""
    request = resolve_request(replace(options, gpu=None, unified_fraction=None), source)
    if gguf_repo_wanted(request.source):
        raise UsageError(
            f"{request.source!r} is a GGUF repo: a comparison needs one model file; name the quant (`{request.source}:Q4_K_M`)"
        )
    loaded = load(request, options)
    return with_draft(request, options, loaded), loaded


def _usable_total(doc: dict[str, Any], hardware: Hardware, engine: str) -> int:
    """What the whole set can hold: per GPU the usable memory of the worst one, times the count (equal shards); on a
    layer split of a mixed set each device's memory less the same reserve."""
    from hfvram.estimate.mixed import LAYER_SPLIT, mixed_rule

    per_gpu = doc["per_gpu"]
    usable, memory = int(per_gpu.get("usable") or 0), int(per_gpu.get("memory") or 0)
    if hardware.mixed and mixed_rule(engine) == LAYER_SPLIT:
        reserve = max(0, memory - usable)
        return sum(max(0, gpu.gpu_memory_bytes - reserve) for gpu in hardware.gpus)
    return usable * hardware.count


def set_row(
    request: Request, options: RunOptions, loaded: LoadedModel, hardware: Hardware, price_kind: str
) -> dict[str, Any]:
    """One set of the comparison: the check estimate's verdict, capacity and speed, and the set's price."""
    from hfvram.prices import set_price
    from hfvram.report.jsonout import check_dict

    req = replace(request, hardware=hardware)
    est = run_estimate(req, options, loaded)
    doc = check_dict(loaded.source, est)
    engine = str(doc["engine"].get("name") or "")
    price = set_price([gpu.id for gpu in hardware.gpus], price_kind)
    usable_total = _usable_total(doc, hardware, engine)
    notes = list(unified_fraction_notes(options, hardware)) + default_engine_notes(req, loaded)
    return {
        "gpu_set": hardware.label,
        "gpus": [{"gpu": gpu.id, "memory_bytes": gpu.gpu_memory_bytes} for gpu in hardware.gpus],
        "count": hardware.count,
        "mixed": hardware.mixed,
        "engine": engine,
        "verdict": doc["verdict"],
        "verdict_reason": doc["verdict_reason"],
        "total_per_gpu": doc["per_gpu"]["total"],
        "usable_per_gpu": doc["per_gpu"]["usable"],
        "utilization": doc["utilization"],
        "usable_total_bytes": usable_total,
        "max_context": doc["capacity"]["max_context"],
        "max_concurrency": doc["capacity"]["max_concurrency"],
        "decode_tokens_per_second": doc["decode_tokens_per_second"],
        "parallel": doc["parallel"],
        "price": price,
        "price_per_usable_gib": (
            round(price["usd"] / (usable_total / GIB), 2) if price is not None and usable_total > 0 else None
        ),
        "warnings": list(dict.fromkeys(doc["warnings"] + notes)),
        "_model": doc["model"],
        "_workload": doc["workload"],
    }


def _cheapest(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The set with the lowest price among those that fit (with the 10 % margin); None when none with a price does."""
    fitting = [row for row in rows if row["verdict"] == "fits" and row["price"] is not None]
    return min(fitting, key=lambda row: (row["price"]["usd"], row["count"], row["gpu_set"])) if fitting else None


def _document(
    question: str,
    request: Request,
    loaded: LoadedModel,
    rows: list[dict[str, Any]],
    price_kind: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from hfvram.report.jsonout import source_dict

    cheapest = _cheapest(rows)
    verdict = min((row["verdict"] for row in rows), key=lambda v: _RANK.get(v, 4)) if rows else None
    first = rows[0] if rows else {}
    dates = sorted({card["date"] for row in rows if row["price"] for card in row["price"]["cards"]})
    warnings = list(dict.fromkeys(list(request.notes) + list(loaded.spec.warnings)))
    return {
        "schema": COMPARE_SCHEMA,
        "question": question,
        "source": source_dict(loaded.source),
        "model": first.get("_model"),
        "workload": first.get("_workload")
        or {"context": request.context, "concurrency": request.concurrency, "kv_dtype": request.kv_dtype},
        "engine_asked": request.engine,
        "prices": {
            "kind": price_kind,
            "table": "hfvram/data/gpu_prices.toml",
            "dates": dates,
            "note": "one published price per row (kind new or used, its date and source); a card without one has no "
            "price; street prices move",
        },
        **(extra or {}),
        "sets": [{key: value for key, value in row.items() if not key.startswith("_")} for row in rows],
        "cheapest": cheapest["gpu_set"] if cheapest else None,
        "verdict": verdict,
        "warnings": warnings,
    }


def compare_report(options: RunOptions, source: str | None, *, price_kind: str = "any") -> dict[str, Any]:
    """``check --gpu a,b,c``: every set of the comma list, in the order given."""
    from hfvram.estimate.hardware import parse_gpu_sets

    if options.gpu is None:
        raise UsageError("a comparison needs --gpu with a comma list of GPU sets, e.g. --gpu rtx4090,rtx3090x2")
    sets = parse_gpu_sets(options.gpu, unified_fraction=options.unified_fraction)
    request, loaded = _request_and_model(options, source)
    rows = [set_row(request, options, loaded, hardware, price_kind) for hardware in sets]
    return redact_document(_document("compare", request, loaded, rows, price_kind))


def _class_gpus(wanted: str) -> list[GPU]:
    """Catalogue GPUs of one class that have a published price (the catalogue's ``category`` field)."""
    from hfvram.estimate.hardware import _catalog_rows, load_catalog
    from hfvram.prices import priced_gpu_ids

    priced = priced_gpu_ids()
    found = []
    for gpu, row in zip(load_catalog(), _catalog_rows(), strict=True):
        category = str(row.get("category", ""))
        if wanted == "apple":
            matches = gpu.vendor == "apple"
        else:
            matches = wanted == "all" or category == wanted
        if matches and gpu.id in priced and not row.get("exposed_as"):
            found.append(gpu)
    return found


def _smallest_fitting_count(
    request: Request, loaded: LoadedModel, gpu: GPU, limit: int
) -> tuple[Hardware, Request] | None:
    """The fewest GPUs of one kind (a valid tensor-parallel size, up to ``limit``) on which the workload fits with
    the 10 % margin: the forward estimate only, as ``fit`` searches its smallest count."""
    from hfvram.errors import HfvramError
    from hfvram.estimate.core import estimate_memory
    from hfvram.estimate.inverse import valid_tp_sizes
    from hfvram.estimate.types import Hardware

    for count in valid_tp_sizes(loaded.spec, limit):
        hardware = Hardware(gpu=gpu, count=count)
        req = replace(request, hardware=hardware, tp=count if count > 1 else request.tp, pp=None)
        try:
            est = estimate_memory(loaded.spec, hardware, engine_choice(req, loaded), workload(req))
        except HfvramError:
            return None
        if est.verdict == "fits":
            return hardware, req
    return None


def cheapest_report(
    options: RunOptions, source: str, *, wanted: str = "all", price_kind: str = "any"
) -> dict[str, Any]:
    """``fit --cheapest``: with ``--gpu a,b,c`` each set as given; else, per catalogue GPU of the class ``wanted``
    with a price, the fewest of it that fit; the document names the cheapest that fits."""
    from hfvram.estimate.hardware import is_gpu_list, parse_gpu_sets, parse_gpu_spec
    from hfvram.prices import check_price_kind

    check_price_kind(price_kind)
    if wanted not in CLASSES:
        raise UsageError(f"--from {wanted!r}: use one of {', '.join(CLASSES)}")
    if options.gpu is not None:
        sets = (
            parse_gpu_sets(options.gpu, unified_fraction=options.unified_fraction)
            if is_gpu_list(options.gpu)
            else (parse_gpu_spec(options.gpu, unified_fraction=options.unified_fraction),)
        )
        request, loaded = _request_and_model(options, source)
        rows = [set_row(request, options, loaded, hardware, price_kind) for hardware in sets]
        return redact_document(
            _document("cheapest", request, loaded, rows, price_kind, {"candidates": "the --gpu list"})
        )
    request, loaded = _request_and_model(options, source)
    limit = max_cheapest_count()
    rows = []
    for gpu in _class_gpus(wanted):
        found = _smallest_fitting_count(request, loaded, gpu, limit)
        if found is not None:
            hardware, req = found
            rows.append(set_row(req, options, loaded, hardware, price_kind))
    rows.sort(key=lambda row: (row["price"]["usd"] if row["price"] else float("inf"), row["gpu_set"]))
    extra = {"candidates": f"catalogue class {wanted}, GPUs with a price, up to {limit} of one kind"}
    return redact_document(_document("cheapest", request, loaded, rows, price_kind, extra))


def compare_exit_code(document: dict[str, Any], fail_on: str | bool | None = None) -> int:
    """0 when at least one set fits (or is tight or runs with offload, unless ``--fail-on`` says otherwise); 1 when
    none does."""
    ok = (
        {"fits"}
        if fail_on in (True, "tight")
        else {"fits", "tight"}
        if fail_on == "offload"
        else {"fits", "tight", "offload"}
    )
    return EXIT_OK if any(row["verdict"] in ok for row in document["sets"]) else EXIT_DOES_NOT_FIT
