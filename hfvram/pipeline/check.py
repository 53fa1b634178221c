"""The ``hfvram.check/1`` object of one model: the estimate, the offload plan's and the launch line's model
argument, ``--concurrency max``, the notes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hfvram.errors import UsageError
from hfvram.pipeline.gguf_repo import gguf_repo_report, gguf_repo_wanted
from hfvram.pipeline.model import (
    default_engine_notes,
    engine_choice,
    load,
    parse_engine,
    run_estimate,
    with_draft,
    workload,
)
from hfvram.pipeline.request import Request, RunOptions, _parse_positive
from hfvram.pipeline.whatif import auto_quant, gguf_repo_quant, what_if_dict

if TYPE_CHECKING:
    from hfvram.estimate.types import EngineChoice, Estimate
    from hfvram.spec import LoadedModel


def check_report(request: Request, options: RunOptions, *, whole_gguf_repo: bool = True) -> dict[str, Any]:
    """The ``hfvram.check/1`` object; for a GGUF repo named without ``:QUANT`` (and ``whole_gguf_repo``), the
    ``hfvram.gguf_repo/1`` object of every quant in it. Every string in it as hfvram.redaction shows it."""
    from hfvram.redaction import redact_document

    return redact_document(_check_report(request, options, whole_gguf_repo=whole_gguf_repo))


def _check_report(request: Request, options: RunOptions, *, whole_gguf_repo: bool = True) -> dict[str, Any]:
    from hfvram.errors import GgufRepoWithoutSelector

    request = gguf_repo_quant(request)
    if whole_gguf_repo and gguf_repo_wanted(request.source):
        document = gguf_repo_report(request, options)
        if document is not None:
            return document
    try:
        loaded = load(request, options)
    except GgufRepoWithoutSelector:
        if not whole_gguf_repo:
            raise
        document = gguf_repo_report(request, options)
        if document is None:
            raise
        return document
    return loaded_report(request, options, loaded)


def loaded_report(request: Request, options: RunOptions, loaded: LoadedModel) -> dict[str, Any]:
    """The ``hfvram.check/1`` object of a model already read (not yet redacted): ``check``'s estimate, launch
    line and notes; ``check A B --gpu G`` (hfvram.pack) calls it per model and per vLLM fraction."""
    from hfvram.report.jsonout import check_dict

    tried: list[dict[str, Any]] | None = None
    request = with_draft(request, options, loaded)
    if request.quant == "auto":
        request, loaded, tried = auto_quant(request, loaded)
    request = with_largest_batch(request, loaded)
    est = run_estimate(request, options, loaded)
    report = check_dict(loaded.source, est, explain=options.explain)
    add_offload_plan(report, request, loaded, est)
    add_launch(report, request, loaded, est)
    if options.prompt:
        from hfvram.estimate.prefill import prefill_bound

        bound = prefill_bound(est, _parse_positive(options.prompt, "--prompt"))
        report["prefill"] = bound.as_dict() if bound is not None else None
    report["warnings"] = list(
        dict.fromkeys(report["warnings"] + list(request.notes) + default_engine_notes(request, loaded))
    )
    if request.quant is not None:
        report["what_if"] = what_if_dict(request.quant, loaded, tried)
    if options.explain and est.hardware is not None:
        from hfvram.estimate.hardware import memory_provenance

        report["explain"]["terms"].setdefault("memory", memory_provenance(est.hardware.gpu))
    return report


def with_largest_batch(request: Request, loaded: LoadedModel) -> Request:
    """``--concurrency max``: the request at the largest sequence limit that starts at its context
    (docs/engines/launch.md#launch-largest-batch): vLLM's ``max_num_seqs`` lowered to the recurrent state pool's
    blocks (unchanged where nothing bounds it), llama.cpp's / Ollama's slots raised to the full-length sequences
    memory holds. Another engine refuses it (exit 2)."""
    if not request.concurrency_max:
        return request
    from dataclasses import replace

    from hfvram.estimate.core import estimate
    from hfvram.estimate.launch import largest_batch

    if request.hardware is None:
        raise UsageError("--concurrency max needs --gpu: the largest batch that starts is a GPU's")
    choice = engine_choice(request, loaded)
    est = estimate(loaded.spec, request.hardware, choice, workload(request))
    found = largest_batch(est)
    name = parse_engine(choice.name)
    if found is None:
        raise UsageError(f"--concurrency max: hfvram does not model {name}'s largest batch; give --concurrency N")
    value = found["value"]
    if name == "vllm":
        if value is None or "max-num-seqs" in request.settings:
            return request
        current = est.engine.get("max_num_seqs")
        ceiling = current if isinstance(current, int) else int(value)
        if int(value) >= ceiling:
            return request  # the default already starts
        # fewer sequences capture smaller CUDA graphs and leave more blocks: the largest S with S <= blocks(S)

        def starts(seqs: int) -> int | None:
            trial = replace(choice, settings={**choice.settings, "max-num-seqs": str(seqs)})
            blocks = estimate(loaded.spec, request.hardware, trial, workload(request)).engine.get(
                "max_num_seqs_that_starts"
            )
            return blocks if isinstance(blocks, int) else None

        low = max(1, int(value))
        high = min(ceiling, starts(low) or low)
        while low < high:
            mid = (low + high + 1) // 2
            blocks = starts(mid)
            if blocks is not None and blocks >= mid:
                low = mid
            else:
                high = mid - 1
        return replace(request, settings={**request.settings, "max-num-seqs": str(low)})
    return replace(request, concurrency=max(1, int(value)))


def model_ref(request: Request, loaded: LoadedModel) -> Any:
    """How an engine's command line names the model: the Hub repo (with the revision asked for and a GGUF's quant
    tag), or the folder / file as the user typed it."""
    from hfvram.estimate.launch import ModelRef

    source = loaded.source
    what_if = None
    if request.quant is not None and not isinstance(request.quant, str):
        from hfvram import quant as quant_formats

        what_if = quant_formats.label(request.quant)
    if what_if is not None:
        return ModelRef(
            kind=source.kind,
            repo_id=source.repo_id,
            revision=request.revision,
            what_if=what_if,
            path=None if source.repo_id else request.source,
        )
    if source.kind in ("hub", "cache", "catalog") and source.repo_id:
        quant = None
        _, sep, tag = request.source.rpartition(":")
        if sep and tag and "/" not in tag:
            quant = tag
        elif loaded.spec.quantization is not None and loaded.spec.quantization.method == "gguf":
            file_type = loaded.spec.extra.get("file_type") if loaded.spec.extra else None
            quant = file_type if isinstance(file_type, str) and file_type else None
        return ModelRef(kind=source.kind, repo_id=source.repo_id, revision=request.revision, quant=quant)
    return ModelRef(kind=source.kind, repo_id=source.repo_id, path=request.source)


def launch_choice(choice: EngineChoice) -> EngineChoice:
    """The engine choice with every setting whose name or value looks like a secret left out (a launch line is
    printed: docs/engines/launch.md#launch-secrets); such settings never change memory."""
    from dataclasses import replace

    from hfvram.redaction import redact

    kept = {
        name: value
        for name, value in choice.settings.items()
        if redact(f"--{name} {value}") == f"--{name} {value}" and redact(f"{name}={value}") == f"{name}={value}"
    }
    return replace(choice, settings=kept) if len(kept) != len(choice.settings) else choice


def add_launch(report: dict[str, Any], request: Request, loaded: LoadedModel, est: Estimate) -> None:
    """``launch``: the engine's command line that reproduces the setting this check judged (None for an engine
    without one: transformers is a library)."""
    from hfvram.estimate.launch import largest_batch, launch_for

    launch = launch_for(est, launch_choice(engine_choice(request, loaded)), model_ref(request, loaded))
    report["launch"] = launch.as_dict() if launch is not None else None
    report["largest_batch"] = largest_batch(est)


def model_argument(loaded: LoadedModel) -> str:
    """How llama-server names the model file: ``-m PATH`` (a .gguf file, a file of a local folder or of the HF
    cache snapshot), ``-hf REPO -hff FILE`` for a Hub GGUF (the exact file; llama-server downloads it), never a repo
    id after ``-m``; ``MODEL.gguf`` where no file is known."""
    import os.path

    source = loaded.source
    files = [name for name in source.files if name.endswith(".gguf")]
    if source.kind == "hub" and source.repo_id:
        return f"-hf {source.repo_id}" + (f" -hff {files[0]}" if files else "")
    if not files:
        return "MODEL.gguf"
    if source.kind == "cache" and source.note and os.path.isdir(source.note):
        return os.path.join(source.note, files[0])
    if source.kind == "local" and source.repo_id and os.path.isdir(source.repo_id):
        return os.path.join(source.repo_id, files[0])
    return files[0]


def add_offload_plan(report: dict[str, Any], request: Request, loaded: LoadedModel, est: Estimate) -> None:
    """The offload plan's command line names the model's real file (docs/engines/llamacpp.md#llamacpp-offload-plan):
    the estimator, which reads no paths, writes ``MODEL.gguf``."""
    plan = est.offload
    if plan is None or "offload_plan" not in report or plan.planner != "llama.cpp":
        return
    from hfvram.engines.llamacpp.fit import command_line
    from hfvram.engines.llamacpp.launch import model_words

    ref = model_ref(request, loaded)
    # a --quant what-if: the file llama-quantize would write, named as the launch line names it
    path = model_words(ref)[1] if ref.what_if else model_argument(loaded)
    report["offload_plan"]["command"] = command_line(plan, plan.usage.settings, path)
