"""Several models on one GPU set (``check A B [C …] --gpu h100``): each model is read once and estimated as ``check``
estimates it (``hfvram.pipeline.loaded_report``), then the set is judged as the engines share a device
(docs/engines/launch.md#launch-pack):

- every vLLM instance is its own process with its own ``--gpu-memory-utilization``: vLLM refuses to start when the
  free memory (other processes' included) is below ``utilization × total``, and each process keeps its CUDA
  context and what else lies outside the fraction (docs/engines/vllm.md#vllm-colocated). Each instance gets the
  fraction its estimate needs, rounded up to 0.01, and is estimated again at that fraction (its launch line);
- every other process (each llama-server, each model Ollama keeps loaded, each SGLang / LMDeploy / … server)
  takes its four terms plus its engine's own reserve, once per process (docs/engines/ollama.md#ollama-loaded-models).

The set fits when everything, with the 10 % margin of a single check on every model's terms, stays within the
device; it is tight when it does so only without the margin; else it does not fit. The document is ``hfvram.pack/1``
(hfvram/data/schema/pack.schema.json). Exit codes as for one model: 0 fits (or tight, unless --fail-on names it), 1
does not fit, 2 bad input, 3 a model that cannot be read.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hfvram.errors import UsageError
from hfvram.estimate.types import (
    FITS_THRESHOLD,
    VERDICT_DOES_NOT_FIT,
    VERDICT_FITS,
    VERDICT_OFFLOAD,
    VERDICT_TIGHT,
)
from hfvram.pipeline import (
    RunOptions,
    exit_code_for,
    gguf_repo_quant,
    gguf_repo_wanted,
    load,
    loaded_report,
    resolve_request,
)
from hfvram.redaction import redact_document

if TYPE_CHECKING:
    from hfvram.pipeline import Request
    from hfvram.spec import LoadedModel

PACK_SCHEMA = "hfvram.pack/1"
#: the most models one pack takes (each is read and estimated; a bound on the work one command line asks for)
MAX_PACK_MODELS = 16
#: vLLM's --gpu-memory-utilization is printed to two decimals; each instance's fraction is rounded up to this step
FRACTION_STEP = 0.01
#: Ollama keeps this many models loaded per GPU when OLLAMA_MAX_LOADED_MODELS is unset (server/sched.go
#: defaultModelsPerGPU; docs/engines/ollama.md#ollama-loaded-models)
OLLAMA_MODELS_PER_GPU = 3


def _fraction(need: int, memory: int, target: float) -> float:
    """The smallest utilization, in steps of 0.01, whose budget ``memory × u`` holds ``need`` at ``target`` of it."""
    steps = math.ceil(round(need / (target * memory) / FRACTION_STEP, 6))
    return round(max(1, steps) * FRACTION_STEP, 2)


def _check_options(options: RunOptions, sources: tuple[str, ...]) -> None:
    from hfvram.compare_engines import is_engine_list
    from hfvram.estimate.hardware import is_gpu_list

    if len(sources) > MAX_PACK_MODELS:
        raise UsageError(f"a pack takes at most {MAX_PACK_MODELS} models; {len(sources)} given")
    if options.gpu is None:
        raise UsageError("several models on one GPU set need --gpu (e.g. --gpu h100)")
    if is_gpu_list(options.gpu) or is_engine_list(options.engine):
        raise UsageError("several models go on one GPU set with one engine: drop the comma list of --gpu / --engine")
    for given, flag in ((options.engine_args, "--engine-args"), (options.gpu_util, "--gpu-util")):
        if given is not None:
            raise UsageError(f"{flag} goes with one model: a pack gives each vLLM instance its own fraction")
    if options.explain:
        raise UsageError("--explain goes with one model: check each model of the pack on its own")


def _read(options: RunOptions, source: str) -> tuple[Request, LoadedModel]:
    request = gguf_repo_quant(resolve_request(options, source))
    if gguf_repo_wanted(request.source):
        raise UsageError(
            f"{request.source!r} is a GGUF repo: a pack needs one model file; name the quant (`{request.source}:Q4_K_M`)"
        )
    return request, load(request, options)


def _fixed(doc: dict[str, Any]) -> int:
    """What a process holds outside its terms: vLLM's CUDA context and what else lies outside the fraction; for the
    other engines the reserve a single check keeps (docs/engines/common.md#reserve-summary)."""
    engine = doc["engine"]
    if engine.get("name") == "vllm":
        return int(engine.get("outside_budget_bytes") or 0)
    return int(doc["per_gpu"].get("reserve") or 0)


def _takes(doc: dict[str, Any], target: float) -> tuple[int, float | None]:
    """The device memory one process holds when its terms are ``target`` of what it is given, and (vLLM) the
    fraction it is given."""
    per_gpu = doc["per_gpu"]
    need, memory = int(per_gpu["total"]), int(per_gpu["memory"])
    if doc["engine"].get("name") == "vllm":
        fraction = _fraction(need, memory, target)
        # vLLM's budget is ceil(total × utilization) (docs/engines/vllm.md#vllm-budget)
        return math.ceil(memory * fraction) + _fixed(doc), fraction
    return math.ceil(need / target) + _fixed(doc), None


def _set_verdict(docs: list[dict[str, Any]], memory: int) -> tuple[str, float, list[float | None], int]:
    """The set's verdict, the target its terms are held at, each vLLM instance's fraction and what the set takes."""
    for target, verdict in ((FITS_THRESHOLD, VERDICT_FITS), (1.0, VERDICT_TIGHT)):
        taken = [_takes(doc, target) for doc in docs]
        total = sum(bytes_ for bytes_, _ in taken)
        fractions = [fraction for _, fraction in taken]
        if total <= memory and all(fraction is None or fraction <= 1.0 for fraction in fractions):
            return verdict, target, fractions, total
    return VERDICT_DOES_NOT_FIT, 1.0, fractions, total


def _row(doc: dict[str, Any], fraction: float | None, memory: int) -> dict[str, Any]:
    per_gpu = doc["per_gpu"]
    need = int(per_gpu["total"])
    holds = math.ceil(int(per_gpu["memory"]) * fraction) if fraction is not None else need
    return {
        "source": doc["source"],
        "engine": doc["engine"].get("name"),
        "engine_version": doc["engine"].get("version"),
        "context": doc["workload"].get("context"),
        "concurrency": doc["workload"].get("concurrency"),
        "need_bytes": need,
        "outside_bytes": _fixed(doc),
        "takes_bytes": holds + _fixed(doc),
        "gpu_memory_utilization": fraction,
        "share": round((holds + _fixed(doc)) / memory, 4) if memory else None,
        "verdict": doc["verdict"],
        "verdict_reason": doc["verdict_reason"],
        "launch": doc.get("launch"),
        "warnings": doc.get("warnings") or [],
    }


def _notes(rows: list[dict[str, Any]], count: int) -> list[str]:
    notes = [
        f"{_name(row)}: no --gpu-memory-utilization up to 1 holds it; its line is the single check's"
        for row in rows
        if row["gpu_memory_utilization"] is not None and row["gpu_memory_utilization"] > 1
    ]
    vllm = [row for row in rows if row["engine"] == "vllm"]
    if len(vllm) > 1:
        notes.append(
            "each vLLM instance is its own process: start them one after the other (vLLM checks the free memory at "
            "start-up) and give each its own --port"
        )
    ollama = [row for row in rows if row["engine"] == "ollama"]
    if len(ollama) > 1:
        notes.append(
            "the Ollama models share one server, which keeps each loaded model in its own runner: "
            "OLLAMA_CONTEXT_LENGTH and OLLAMA_NUM_PARALLEL are the server's, so start it with the largest of them"
        )
        if len(ollama) > OLLAMA_MODELS_PER_GPU * count:
            notes.append(
                f"Ollama keeps {OLLAMA_MODELS_PER_GPU} models per GPU loaded by default: start its server with "
                f"OLLAMA_MAX_LOADED_MODELS={len(ollama)}"
            )
    return notes


def pack_report(options: RunOptions, sources: tuple[str, ...]) -> dict[str, Any]:
    """``check A B [C …] --gpu G``: each model as ``check`` estimates it, then the set on one device."""
    _check_options(options, sources)
    read = [_read(options, source) for source in sources]
    docs = [loaded_report(request, options, loaded) for request, loaded in read]
    hardware = read[0][0].hardware
    assert hardware is not None
    # engines see the device a little differently (vLLM: torch's total); the set is judged on the smallest
    memory = min(int(doc["per_gpu"]["memory"]) for doc in docs)
    verdict, target, fractions, total = _set_verdict(docs, memory)
    final = []
    for (request, loaded), doc, fraction in zip(read, docs, fractions, strict=True):
        if fraction is not None and fraction <= 1.0:
            # the instance estimated again at the fraction it is given: its launch line and its verdict there
            doc = loaded_report(replace(request, gpu_util=fraction), options, loaded)
        final.append(doc)
    # a model that does not fit on its own (a vLLM instance: at its fraction), or runs only with layers in CPU RAM
    # (offload), does not fit beside others either: a pack keeps every model on the GPU
    alone = [doc for doc in final if doc["verdict"] in (VERDICT_DOES_NOT_FIT, VERDICT_OFFLOAD)]
    if alone:
        verdict = VERDICT_DOES_NOT_FIT
    rows = [_row(doc, fraction, memory) for doc, fraction in zip(final, fractions, strict=True)]
    needs = sum(row["need_bytes"] for row in rows)
    outside = sum(row["outside_bytes"] for row in rows)
    # what the vLLM fractions must leave: every process's memory outside its fraction, and the other engines' terms
    others = sum(row["need_bytes"] for row in rows if row["gpu_memory_utilization"] is None)
    vllm_sum = round(sum(fraction for fraction in fractions if fraction is not None), 2)
    document = {
        "schema": PACK_SCHEMA,
        "gpu_set": hardware.label,
        "memory_bytes": memory,
        "models": rows,
        "set": {
            "need_bytes": needs,
            "outside_bytes": outside,
            "takes_bytes": total,
            "memory_bytes": memory,
            "margin": round(1 - target, 2),
            "vllm_utilization_sum": vllm_sum if any(fraction is not None for fraction in fractions) else None,
            # in the steps the fractions take, rounded down: the most they may sum to
            "vllm_utilization_limit": math.floor((1 - (outside + others) / memory) * 100) / 100 if memory else None,
            "utilization": round(needs / (memory - outside), 4) if memory > outside else None,
        },
        "verdict": verdict,
        "verdict_reason": _reason(verdict, total, memory, [_name(doc) for doc in alone]),
        "notes": _notes(rows, hardware.count),
    }
    return redact_document(document)


def _name(doc: dict[str, Any]) -> str:
    source = doc.get("source") or {}
    return str(source.get("repo_id") or (source.get("files") or [source.get("text") or "?"])[0])


def _reason(verdict: str, total: int, memory: int, alone: list[str]) -> str:
    gib = 1 << 30
    share = f"{total / gib:.1f} of {memory / gib:.1f} GiB"
    if verdict == VERDICT_FITS:
        return f"memory: the models with the 10% margin on their terms take {share}"
    if verdict == VERDICT_TIGHT:
        return f"memory: the models fit only without the 10% margin on their terms ({share})"
    if alone:
        return f"{', '.join(alone)}: does not fit on the GPU on its own (a pack keeps every model on the GPU)"
    return f"memory: the models take {share} even without the margin"


def pack_exit_code(document: dict[str, Any], fail_on: str | None) -> int:
    """As for one model (``hfvram.pipeline.exit_code_for``) on the set's verdict."""
    return exit_code_for([document["verdict"]], fail_on)
