"""A GGUF repo as a whole (``hfvram.gguf_repo/1``): every quant sized from the listing, a verdict each, the
largest that fits recommended."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hfvram.pipeline.model import default_engine_notes, run_estimate
from hfvram.pipeline.request import Request, RunOptions

GGUF_REPO_SCHEMA = "hfvram.gguf_repo/1"


def gguf_repo_wanted(source: str) -> bool:
    """A Hub repo id without ``:QUANT`` whose name says GGUF (``…-GGUF``), as the catalogue's GGUF repos' names do;
    other GGUF repos are answered once the Hub shows GGUF files and no config.json. The name alone decides: no file
    is read for a check of any other repo."""
    from hfvram.sources.resolve import HubSource, parse_source

    parsed = parse_source(source)
    return isinstance(parsed, HubSource) and parsed.gguf is None and "gguf" in parsed.repo_id.lower()


def gguf_repo_report(request: Request, options: RunOptions) -> dict[str, Any] | None:
    """Every quant of a GGUF repo (``hfvram.gguf_repo/1``): one header read for the architecture, each quant sized
    from the listing's file sizes, a verdict per quant, and the largest quant that fits recommended. None when the
    repo lists no GGUF model file."""
    from hfvram.report.jsonout import check_dict
    from hfvram.sources.gguf_repo import quant_model
    from hfvram.sources.resolve import load_gguf_repo

    found = load_gguf_repo(request.source, revision=request.revision, token=options.token, offline=options.offline)
    if found is None:
        return None
    listing, read = found
    read_quant = next(q for q in listing.quants if q.files[0] in read.source.files)
    weights = read.spec.weights_bytes
    # the bytes of the read file(s) that are not tensor data: its metadata (vocabulary included) and tensor infos
    header_bytes = _header_bytes(read_quant.file_bytes, weights)
    rows: list[dict[str, Any]] = []
    warnings: list[str] = list(request.notes)
    engine = None
    work = {"context": request.context, "concurrency": request.concurrency, "kv_dtype": request.kv_dtype}
    for quant in listing.quants:
        model = quant_model(read, quant, header_bytes=header_bytes, listing=listing)
        est = run_estimate(request, options, model)
        doc = check_dict(model.source, est)
        engine = engine or doc["engine"]
        if quant is read_quant:
            warnings += doc["warnings"]
            work = doc["workload"]  # the context the engine runs at when none was asked for
        rows.append(_quant_row(quant, model.spec.weights_bytes, doc, header_read=quant is read_quant))
    if listing.partial:
        warnings.append(
            f"the file listing of {listing.repo_id} is partial ({listing.origin}): it holds only the files whose size "
            "is on record, so other quants of the repo are not shown"
        )
    recommended = _recommend(rows)
    warnings += _ollama_default_tag_note(request, rows, engine)
    hardware = request.hardware
    return {
        "schema": GGUF_REPO_SCHEMA,
        "source": {
            "kind": read.source.kind,
            "repo_id": listing.repo_id,
            "revision": listing.revision,
            "listing": listing.origin,
            "header_file": read.source.files[0],
        },
        "hardware": None
        if hardware is None
        else {"gpu": hardware.gpu.id, "count": hardware.count, "name": hardware.gpu.name},
        "engine": engine,
        "workload": work,
        "header_bytes": header_bytes,
        "sizing": _sizing_words(read.source.files[0], listing.origin, header_bytes),
        "quants": rows,
        "mmproj": [{"file": name, "file_bytes": size} for name, size in listing.mmproj],
        "recommended": recommended["quant"] if recommended else None,
        "verdict": _repo_verdict(recommended, rows, has_gpu=hardware is not None),
        "warnings": list(dict.fromkeys(warnings + default_engine_notes(request, read))),
    }


def _header_bytes(file_bytes: int | None, weights: int | None) -> int:
    """The bytes of the read file(s) that are not tensor data (0 when either size is unknown)."""
    return file_bytes - weights if file_bytes is not None and weights is not None and file_bytes >= weights else 0


def _quant_row(quant: Any, weights_bytes: int | None, doc: dict[str, Any], *, header_read: bool) -> dict[str, Any]:
    """One quant's row: its files and weights, and the check's figures and verdict for it."""
    return {
        "quant": quant.name,
        "files": list(quant.files),
        "file_bytes": quant.file_bytes,
        "weights_bytes": weights_bytes,
        "weights_basis": ("tensor infos of the header read" if header_read else "file bytes minus header bytes"),
        "header_read": header_read,
        "per_gpu": doc["per_gpu"],
        "utilization": doc["utilization"],
        "verdict": doc["verdict"],
        "verdict_reason": doc["verdict_reason"],
        "capacity": doc["capacity"],
        "decode_tokens_per_second": doc["decode_tokens_per_second"],
    }


def _sizing_words(header_file: str, origin: str, header_bytes: int) -> str:
    return (
        f"architecture facts from the header of {header_file} (all quants of a repo share them); "
        f"each other quant's weights = its file bytes ({origin}) minus {header_bytes} header bytes, once "
        "per quant (the further parts of a split set hold only their own tensor infos, counted as weights: a "
        "few KiB too many)"
    )


def _repo_verdict(recommended: dict[str, Any] | None, rows: Sequence[dict[str, Any]], *, has_gpu: bool) -> Any:
    """The recommended quant's verdict; else offload when one quant offloads, does_not_fit; None without a GPU."""
    if recommended:
        return recommended["verdict"]
    if not has_gpu:
        return None
    return "offload" if any(row["verdict"] == "offload" for row in rows) else "does_not_fit"


def _ollama_default_tag_note(request: Request, rows: Sequence[dict[str, Any]], engine: Any) -> list[str]:
    """Ollama given a repo without a tag pulls Q4_K_M (Hugging Face's "Use Ollama with any GGUF Model" guide):
    say what that quant does here, when the source is Ollama's spelling or the engine is Ollama."""
    from hfvram.sources.resolve import normalize_source

    ollama = normalize_source(request.source) != request.source.strip().rstrip("/")
    if not ollama and (engine or {}).get("name") != "ollama":
        return []
    default = next((r for r in rows if r["quant"] == "Q4_K_M"), None)
    if default is None:
        return ["`ollama run hf.co/…` without a tag pulls Q4_K_M, which this repo does not have: name a quant (`:TAG`)"]
    verdict = (default["verdict"] or "no verdict").replace("_", " ")
    return [f"`ollama run hf.co/…` without a tag pulls Q4_K_M ({verdict} here): name another with `:TAG`"]


def _recommend(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The largest quant that fits (by file bytes); else the largest that is tight; None when none does."""
    for wanted in ("fits", "tight"):
        fitting = [r for r in rows if r["verdict"] == wanted]
        if fitting:
            return max(fitting, key=lambda r: (r["file_bytes"] or 0, r["quant"]))
    return None
