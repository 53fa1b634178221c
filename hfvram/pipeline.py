"""The run wiring behind ``check`` / ``scan`` / ``fit`` / ``calibrate`` and the Python API (``hfvram.api``): the
options as typed -> a parsed :class:`Request` -> the model loaded -> the estimate (a saved calibration applied) ->
the report document. No click and no printing here: ``hfvram.cli`` parses the command line and prints,
``hfvram.api`` returns typed results; both call this module.

Light on purpose (``hfvram --help`` imports it): the sources, readers, engine profiles and reports are imported
inside the functions that need them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hfvram.errors import HfvramError, UsageError

if TYPE_CHECKING:
    from hfvram.estimate.engine_args import ParsedEngineArgs
    from hfvram.estimate.types import DraftModel, EngineChoice, Estimate, Hardware, Workload
    from hfvram.spec import LoadedModel

EXIT_OK = 0
EXIT_DOES_NOT_FIT = 1
EXIT_USAGE = 2
EXIT_UNREADABLE = 3


@dataclass(frozen=True)
class RunOptions:
    """The options shared by check / scan / fit, as typed on the command line (not yet parsed)."""

    gpu: str | None = None
    engine: str | None = None
    context: str | None = None
    concurrency: str | None = None
    kv_dtype: str | None = None
    settings: tuple[str, ...] = ()
    engine_args: str | None = None
    tp: int | None = None
    pp: int | None = None
    gpu_util: float | None = None
    unified_fraction: float | None = None
    revision: str | None = None
    token: str | None = field(default=None, repr=False)
    offline: bool | None = None
    explain: bool = False
    calibration: str | None = None
    #: host memory system or bandwidth for layers kept in RAM (--host-memory), RAM size (--ram)
    host_memory: str | None = None
    ram: str | None = None
    #: ``--quant``: a what-if format name (Q4_K_M, …) or "auto" (hfvram.quant)
    quant: str | None = None
    #: ``--max-context-cap N``: the longest length an automatic length (``--context auto``) may pick
    max_context_cap: str | None = None
    #: ``--prompt N``: prompt tokens per request for the prefill / time-to-first-token bound
    prompt: str | None = None


@dataclass(frozen=True)
class Request:
    """What to estimate, parsed: everything except the model itself."""

    source: str
    revision: str | None
    engine: str | None  # None = pick by the model's format
    engine_version: str | None
    settings: dict[str, str]
    tp: int | None
    pp: int | None
    gpu_util: float | None
    context: int | None
    concurrency: int
    kv_dtype: str
    hardware: Hardware | None
    #: what the pasted engine command line had that hfvram did not use (reported as warnings)
    notes: tuple[str, ...] = ()
    #: --host-memory parsed (None: not given, the catalogue default applies) and --ram in bytes
    host_memory: Any = None
    ram_bytes: int | None = None
    #: the ``--quant`` what-if: a family's choice (hfvram.quant.parse), "auto", or None for the files as they are
    quant: Any = None
    #: the speculative draft checkpoint the settings name, read by :func:`with_draft` (None when none is named or
    #: the engine does not size one)
    draft: DraftModel | None = None
    #: ``--context auto``: the engine picks the length (vLLM ``--max-model-len auto``); and its cap
    context_auto: bool = False
    context_cap: int | None = None
    #: ``--concurrency max``: the largest sequence limit that starts (:func:`with_largest_batch`)
    concurrency_max: bool = False


def _parse_positive(text: str, what: str) -> int:
    from hfvram.estimate.engine_args import parse_size_tokens

    value = parse_size_tokens(text)
    if value < 1:
        raise UsageError(f"{what} must be at least 1, got {text!r}")
    return value


def _parse_count(text: str, what: str) -> int:
    """A whole number of at least 1 (``--concurrency``): not a token count, so no k / M suffixes."""
    cleaned = str(text).strip().replace(",", "").replace("_", "")
    if not cleaned.isdigit() or int(cleaned) < 1:
        raise UsageError(f"{what} must be a whole number of requests, at least 1, got {text!r}")
    return int(cleaned)


def parse_gpu_option(text: str | None, unified_fraction: float | None = None) -> Hardware | None:
    """``--gpu`` parsed; None when not given; an empty value (an unset CI variable) is a usage error."""
    if text is None:
        return None
    if not text.strip():
        raise UsageError(
            "--gpu is empty (an unset variable?): give a GPU such as --gpu rtx4090; `hfvram gpus` lists them"
        )
    from hfvram.estimate.hardware import parse_gpu_spec

    return parse_gpu_spec(text, unified_fraction=unified_fraction)


def require_gpu_for_fail_on(fail_on: str | None, gpu: str | None) -> None:
    if fail_on and gpu is None:
        raise UsageError(f"--fail-on {fail_on} needs --gpu: without a GPU there is no verdict to fail on")


#: ParsedEngineArgs field -> the explicit option that overrides it
PASTED_FIELDS = (
    ("context", "--context"),
    ("tp", "--tp"),
    ("pp", "--pp"),
    ("gpu_util", "--gpu-util"),
    ("kv_dtype", "--kv-dtype"),
)


def _pasted_conflicts(pasted: ParsedEngineArgs, explicit: dict[str, Any], settings: dict[str, str]) -> list[str]:
    """An explicit option that disagrees with the pasted command line wins, and says so; the pasted flag is
    dropped so that the engine does not read it either."""
    from hfvram.estimate.engine_args import command_line_fields

    fields = command_line_fields(pasted.engine)
    notes = []
    for name, option in PASTED_FIELDS:
        mine, theirs = explicit.get(name), getattr(pasted, name)
        if mine is None or theirs is None or str(mine).lower() == str(theirs).lower():
            continue
        flag = fields.get(name)
        if flag:
            settings.pop(flag, None)
        notes.append(f"{option} {mine} overrides the pasted {'--' + flag if flag else name} {theirs}")
    return notes


def validate_kv_dtype_name(name: str) -> None:
    """UsageError (exit 2) for a KV cache type no engine has; whether the chosen engine has it is the
    estimator's check (it names the ones that engine accepts)."""
    from hfvram.engines import engine_names
    from hfvram.estimate.common import kv_dtype_bytes
    from hfvram.estimate.engine_rules import accepts

    known = {str(item).lower() for engine in engine_names() for item in accepts(engine).get("kv_dtypes", [])}
    if all(part.strip().lower() in known for part in name.split("/")):
        return
    for part in name.split("/"):
        kv_dtype_bytes(part)


def resolve_request(options: RunOptions, source: str | None) -> Request:
    """Merge the pasted engine command line with the explicit options: an explicit option that disagrees with the
    pasted line wins with a warning; a different model or engine is a usage error (exit 2)."""
    from hfvram.engines import parse_engine_name
    from hfvram.estimate.engine_args import parse_set_options

    pasted = None
    if options.engine_args:
        from hfvram.estimate.engine_args import parse_engine_args

        pasted = parse_engine_args(options.engine_args)
    from hfvram.sources.resolve import normalize_source

    if source and pasted and pasted.model and normalize_source(pasted.model) != normalize_source(source):
        raise UsageError(
            f"SOURCE {source!r} and the model of --engine-args ({pasted.model!r}) differ: give one of them"
        )
    source = source or (pasted.model if pasted else None)
    if not source:
        raise UsageError("missing SOURCE (a Hub repo id, a local folder or a .gguf file)")
    engine, version = parse_engine_name(options.engine) if options.engine else (None, None)
    if pasted and pasted.engine:
        if engine is not None and engine != pasted.engine:
            raise UsageError(f"--engine {options.engine} and the pasted {pasted.engine} command line differ: give one")
        engine = pasted.engine
    settings: dict[str, str] = dict(pasted.settings) if pasted else {}
    explicit_settings = parse_set_options(list(options.settings))
    notes: list[str] = []
    for name, value in explicit_settings.items():
        if name in settings and settings[name] != value:
            notes.append(f"--set {name}={value} overrides the pasted {name} {settings[name]}")
    context_auto = bool(options.context and options.context.strip().lower() == "auto")
    if context_auto:
        # vLLM's own automatic length (docs/engines/vllm.md#vllm-auto-length); other engines refuse it below
        explicit_settings.setdefault("max-model-len", "auto")
    context = _parse_positive(options.context, "--context") if options.context and not context_auto else None
    context_cap = _parse_positive(options.max_context_cap, "--max-context-cap") if options.max_context_cap else None
    if pasted:
        explicit = {
            "context": context,
            "tp": options.tp,
            "pp": options.pp,
            "gpu_util": options.gpu_util,
            "kv_dtype": options.kv_dtype,
        }
        notes += _pasted_conflicts(pasted, explicit, settings)
    settings.update(explicit_settings)
    if context is None and pasted:
        context = pasted.context
    concurrency_max = bool(options.concurrency and options.concurrency.strip().lower() == "max")
    concurrency = (
        _parse_count(options.concurrency, "--concurrency") if options.concurrency and not concurrency_max else 1
    )
    kv_dtype = options.kv_dtype or (pasted.kv_dtype if pasted and pasted.kv_dtype else None) or "auto"
    validate_kv_dtype_name(kv_dtype)
    from hfvram.redaction import redact

    hardware = parse_gpu_option(options.gpu, options.unified_fraction)
    from hfvram.estimate.host_memory import parse_host_memory, parse_ram

    host_memory = parse_host_memory(options.host_memory)
    ram_bytes = parse_ram(options.ram) if options.ram else None
    if hardware is not None:
        from dataclasses import replace as _replace

        # the host is part of the hardware: the engines that place layers in RAM read its bandwidth and size
        hardware = _replace(hardware, host=host_memory, ram_bytes=ram_bytes)
    quant_choice = parse_quant_option(options.quant, engine)
    return Request(
        source=source,
        revision=options.revision,
        engine=engine,
        engine_version=version,
        settings=settings,
        tp=options.tp if options.tp is not None else (pasted.tp if pasted else None),
        pp=options.pp if options.pp is not None else (pasted.pp if pasted else None),
        gpu_util=options.gpu_util if options.gpu_util is not None else (pasted.gpu_util if pasted else None),
        context=context,
        concurrency=concurrency,
        kv_dtype=kv_dtype,
        hardware=hardware,
        notes=tuple(f"--engine-args: ignored {redact(item)}" for item in (pasted.ignored if pasted else ()))
        + tuple(redact(note) for note in notes)
        + unified_fraction_notes(options, hardware),
        host_memory=host_memory,
        ram_bytes=ram_bytes,
        quant=quant_choice,
        context_auto=context_auto,
        context_cap=context_cap,
        concurrency_max=concurrency_max,
    )


def parse_quant_option(text: str | None, engine: str | None = None) -> Any:
    """``--quant`` parsed: None, "auto", or a family's choice; an unknown name is one usage error listing them.
    ``engine`` (when given) decides a name two families spell (``mxfp4`` under vLLM is the Hub format)."""
    if text is None:
        return None
    from hfvram import quant

    if text.strip().lower() == quant.AUTO:
        return quant.AUTO
    return quant.parse(text, engine)


def unified_fraction_notes(options: RunOptions, hardware: Hardware | None) -> tuple[str, ...]:
    """--unified-fraction without a GPU, or on a discrete GPU, changes nothing: say so."""
    if options.unified_fraction is None:
        return ()
    if hardware is None:
        return ("--unified-fraction ignored: no --gpu given",)
    if not hardware.gpu.unified_memory:
        return (f"--unified-fraction ignored: {hardware.gpu.id} is a discrete GPU with its own memory",)
    return ()


def load(request: Request, options: RunOptions, *, need_split: bool = False) -> LoadedModel:
    from hfvram.sources import load_model

    # every tensor header only for --explain: otherwise the exact total is split like the config shapes
    loaded = load_model(
        request.source,
        revision=request.revision,
        token=options.token,
        offline=options.offline,
        need_split=need_split or options.explain,
    )
    if request.quant is None or isinstance(request.quant, str):
        return loaded  # as the files are; "auto" is applied per candidate (auto_quant)
    return with_quant(loaded, request.quant)


def with_quant(loaded: LoadedModel, choice: Any) -> LoadedModel:
    """The loaded model as if its weights were stored as ``choice`` (hfvram.quant): a what-if."""
    from dataclasses import replace

    from hfvram import quant
    from hfvram.errors import UnsupportedLayoutError

    try:
        spec = quant.apply(loaded.spec, choice)
    except HfvramError:
        raise
    except ValueError as error:
        raise UnsupportedLayoutError(f"--quant {quant.label(choice)}: {error}") from error
    return replace(loaded, spec=spec)


def parse_engine(name: str) -> str:
    from hfvram.engines import parse_engine_name

    return parse_engine_name(name)[0]


def engine_choice(request: Request, loaded: LoadedModel) -> EngineChoice:
    from hfvram.estimate.types import EngineChoice

    name = request.engine
    if name is None:
        from hfvram.estimate.defaults import default_engine

        name = default_engine(loaded.spec, loaded.source.kind, request.hardware).name
    if request.context_auto and parse_engine(name) != "vllm":
        raise UsageError(f"--context auto is vLLM's automatic length (--max-model-len auto); {name} has none: give N")
    return EngineChoice(
        name=name,
        version=request.engine_version,
        settings=dict(request.settings),
        tp=request.tp,
        pp=request.pp,
        gpu_util=request.gpu_util,
        draft=request.draft,
    )


def with_draft(request: Request, options: RunOptions, loaded: LoadedModel) -> Request:
    """The request with the speculative draft checkpoint its vLLM settings name (``--speculative-config
    '{"model": …}'`` for a draft model / EAGLE head, or ``--speculative-model``) read through the same sources as the
    model (Hub, local folder, HF cache; the same caps, deadlines and errors). A draft that cannot be read is kept as
    its error (the estimate warns and counts nothing of it); other engines read no draft (they warn)."""
    named = (key.replace("_", "-").lstrip("-").lower() for key in request.settings)
    if request.draft is not None or not any(key.startswith("speculative-") for key in named):
        return request
    from dataclasses import replace

    from hfvram.engines import parse_engine_name

    choice = engine_choice(request, loaded)
    if parse_engine_name(choice.name)[0] != "vllm":
        return request
    from hfvram.engines.vllm.profile import speculative_draft_name
    from hfvram.estimate.types import DraftModel
    from hfvram.sources import load_model

    name = speculative_draft_name(choice)
    if name is None:
        return request
    try:
        draft = load_model(name, token=options.token, offline=options.offline, need_split=options.explain)
    except HfvramError as error:
        from hfvram.redaction import redact

        why = redact(str(error).splitlines()[0][:200]) if str(error) else type(error).__name__
        return replace(request, draft=DraftModel(name=name, error=why))
    where = draft.source
    shown = " ".join(part for part in (where.kind, where.repo_id, where.revision and f"@{where.revision[:12]}") if part)
    return replace(request, draft=DraftModel(name=name, spec=draft.spec, source=shown or where.kind))


def workload(request: Request, *, context: int | None = None, kv_dtype: str | None = None) -> Workload:
    from hfvram.estimate.types import Workload

    return Workload(
        context=context if context is not None else request.context,
        concurrency=request.concurrency,
        kv_dtype=kv_dtype or request.kv_dtype,
        context_cap=request.context_cap,
    )


def run_estimate(request: Request, options: RunOptions, loaded: LoadedModel) -> Estimate:
    """The estimate for one loaded model, with a calibration applied when one matches (engine + GPU)."""
    from hfvram.estimate.core import estimate

    choice = engine_choice(request, loaded)
    est = estimate(loaded.spec, request.hardware, choice, workload(request))
    est = quant_engine_rule(est, request, choice.name)
    return calibrate_estimate(est, options, choice.name)


def quant_engine_rule(est: Estimate, request: Request, engine: str) -> Estimate:
    """The ``--quant`` format's engine rule: a refusal (verdict does_not_fit, ``engine rule: …``) or warnings."""
    if request.quant is None or isinstance(request.quant, str):
        return est
    from hfvram import quant
    from hfvram.engines import parse_engine_name
    from hfvram.estimate.engine_rules import with_refusals

    reason, notes = quant.engine_rule(request.quant, parse_engine_name(engine)[0], request.hardware)
    return with_refusals(est, [reason] if reason else [], list(notes))


def calibrate_estimate(est: Estimate, options: RunOptions, engine: str) -> Estimate:
    """A saved calibration replaces the activation / overhead terms only where it was measured with this engine's
    rule set (release range), on this GPU, on a model of this family and size; one that does not match is named in
    a warning and not applied. ``--calibration FILE`` is applied as asked, its mismatches said in warnings."""
    if est.hardware is None:
        return est
    from dataclasses import replace
    from pathlib import Path

    if options.calibration:
        from hfvram import calibrate

        record = calibrate.load_calibration_file(Path(options.calibration))
        return calibrate.apply_calibration(est, record, options.calibration)
    from hfvram.calibrate.files import calibration_files

    if est.hardware.mixed or not calibration_files(engine, est.hardware.gpu.id):
        # the common case: no calibration saved (the log patterns and the apply code are not imported); a calibration
        # is measured on one kind of GPU, never on a mixed set
        return est
    from hfvram import calibrate

    notes = []
    for path, record in calibrate.find_calibrations(engine, est.hardware.gpu.id):
        reasons = calibrate.calibration_match(est, record)
        if not reasons:
            return calibrate.apply_calibration(est, record, str(path))
        notes.append(calibrate.not_applied_warning(path, reasons))
    return replace(est, warnings=tuple(est.warnings) + tuple(notes)) if notes else est


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

    report["offload_plan"]["command"] = command_line(plan, plan.usage.settings, model_argument(loaded))


# ---- the --quant what-if -------------------------------------------------------------------------------------


def gguf_repo_quant(request: Request) -> Request:
    """A GGUF repo named without ``:QUANT`` and ``--quant Q``: the repo's own file of that quant (real, not a
    what-if), as ``org/repo:Q``; ``--quant auto`` answers for every quant of the repo (its recommendation)."""
    if request.quant is None or not gguf_repo_wanted(request.source):
        return request
    from dataclasses import replace

    if request.quant == "auto":
        return replace(request, quant=None)
    return replace(request, source=f"{request.source}:{request.quant.name}", quant=None)


def auto_quant(request: Request, loaded: LoadedModel) -> tuple[Request, LoadedModel, list[dict[str, Any]]]:
    """``--quant auto``: the largest candidate (by weight bytes) that fits, else the largest that is tight, else
    the smallest; each candidate under the engine asked for (or the one its format gets by default), candidates
    that engine refuses left out. Returns the request with the chosen quant, the model as it, and the candidates
    the search estimated (quant, weights bytes, verdict), largest first."""
    from dataclasses import replace

    from hfvram import quant
    from hfvram.engines import parse_engine_name
    from hfvram.estimate.core import estimate_memory

    if request.hardware is None:
        raise UsageError("--quant auto needs --gpu: the best quant is the largest that fits a GPU")
    sized = []
    for choice in quant.auto_candidates(request.engine, request.hardware):
        model = with_quant(loaded, choice)
        engine = engine_choice(request, model)
        if quant.engine_rule(choice, parse_engine_name(engine.name)[0], request.hardware)[0] is None:
            sized.append((model.spec.weights_bytes or 0, choice, model, engine))
    if not sized:
        engine_name = request.engine or "the default engine"
        raise UsageError(f"--quant auto: {engine_name} runs none of the what-if formats; name one with --quant")
    sized.sort(key=lambda item: -item[0])
    verdicts: dict[int, str | None] = {}

    def verdict(index: int) -> str | None:
        if index not in verdicts:
            _, _, model, engine = sized[index]
            verdicts[index] = estimate_memory(model.spec, request.hardware, engine, workload(request)).verdict
        return verdicts[index]

    # memory grows with the weights: a binary search finds the largest that fits (else is tight)
    pick = _first_index(len(sized), lambda i: verdict(i) == "fits")
    if pick is None:
        pick = _first_index(len(sized), lambda i: verdict(i) in ("fits", "tight"))
    if pick is None and request.hardware.ram_bytes is not None:
        # none runs on the GPUs alone: with --ram, the largest whose engine placement into RAM fits that RAM
        # (llama.cpp --fit, Ollama); without --ram the RAM is unknown and every quant would "offload"
        from hfvram.estimate.core import with_offload

        def offloaded(index: int) -> str | None:
            _, _, model, engine = sized[index]
            wl = workload(request)
            est = with_offload(estimate_memory(model.spec, request.hardware, engine, wl), engine, wl)
            verdicts[index] = est.verdict
            return est.verdict

        pick = _first_index(len(sized), lambda i: offloaded(i) == "offload")
    if pick is None:
        pick = len(sized) - 1
    tried = [
        {"quant": quant.label(sized[i][1]), "weights_bytes": sized[i][0], "verdict": verdicts.get(i)}
        for i in sorted(verdicts)
    ]
    return replace(request, quant=sized[pick][1]), sized[pick][2], tried


def _first_index(count: int, good: Any) -> int | None:
    """The first index in ``range(count)`` where ``good`` holds, for a ``good`` that holds from some index on."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        if good(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo if lo < count and good(lo) else None


def what_if_dict(choice: Any, loaded: LoadedModel, tried: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The check document's ``what_if`` object: which quant, from which family, sized how."""
    from hfvram import quant

    weights = loaded.spec.weights
    out: dict[str, Any] = {
        "quant": quant.label(choice),
        "family": getattr(choice, "family", None),
        "weights_bytes": weights.total_bytes if weights else None,
        "weights_source": weights.source if weights else None,
        "bytes_by_type": dict(weights.bytes_by_dtype) if weights else {},
        "auto": None,
    }
    if tried is not None:
        out["auto"] = {"chosen": quant.label(choice), "candidates": tried}
    return out


# ---- a GGUF repo as a whole ----------------------------------------------------------------------------------

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
    header_bytes = (
        read_quant.file_bytes - weights
        if read_quant.file_bytes is not None and weights is not None and read_quant.file_bytes >= weights
        else 0
    )
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
        rows.append(
            {
                "quant": quant.name,
                "files": list(quant.files),
                "file_bytes": quant.file_bytes,
                "weights_bytes": model.spec.weights_bytes,
                "weights_basis": (
                    "tensor infos of the header read" if quant is read_quant else "file bytes minus header bytes"
                ),
                "header_read": quant is read_quant,
                "per_gpu": doc["per_gpu"],
                "utilization": doc["utilization"],
                "verdict": doc["verdict"],
                "verdict_reason": doc["verdict_reason"],
                "capacity": doc["capacity"],
                "decode_tokens_per_second": doc["decode_tokens_per_second"],
            }
        )
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
        "sizing": (
            f"architecture facts from the header of {read.source.files[0]} (all quants of a repo share them); "
            f"each other quant's weights = its file bytes ({listing.origin}) minus {header_bytes} header bytes, once "
            "per quant (the further parts of a split set hold only their own tensor infos, counted as weights: a "
            "few KiB too many)"
        ),
        "quants": rows,
        "mmproj": [{"file": name, "file_bytes": size} for name, size in listing.mmproj],
        "recommended": recommended["quant"] if recommended else None,
        "verdict": recommended["verdict"]
        if recommended
        else (
            ("offload" if any(row["verdict"] == "offload" for row in rows) else "does_not_fit")
            if hardware is not None
            else None
        ),
        "warnings": list(dict.fromkeys(warnings + default_engine_notes(request, read))),
    }


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


def default_engine_notes(request: Request, loaded: LoadedModel) -> list[str]:
    """Say when no --engine was given and the engine was chosen for the hardware rather than by the plain default
    (the ``note`` of the rule of hfvram/data/engine_defaults.toml that chose it)."""
    if request.engine is not None:
        return []
    from hfvram.estimate.defaults import default_engine

    note = default_engine(loaded.spec, loaded.source.kind, request.hardware).note
    return [note] if note else []


def exit_code_for(verdicts: Iterable[str | None], fail_on: str | bool | None = None) -> int:
    """0 fits / tight / offload; 1 when any does not fit, or (``--fail-on offload``) runs only with offload, or
    (``--fail-on tight``, ``True``) is tight or offload: the gate is a rank in fits < tight < offload < does not fit."""
    from hfvram.estimate.types import VERDICT_ORDER, verdict_rank

    level = "tight" if fail_on is True else (fail_on or "does_not_fit")
    threshold = verdict_rank(level) if level in VERDICT_ORDER else verdict_rank("does_not_fit")
    for verdict in verdicts:
        if verdict in VERDICT_ORDER and verdict_rank(verdict) >= threshold:
            return EXIT_DOES_NOT_FIT
    return EXIT_OK


# ---- scan ------------------------------------------------------------------------------------------------------


#: the most sources one scan reads
SCAN_MAX_SOURCES = 100_000


#: what a line of a scan list may name: a Hub repo id (``org/name[@rev][:QUANT]``, with Ollama's ``hf.co/``), a
#: path (``./…``, ``/…``, ``~/…``, no white space) or a ``.gguf`` file
SCAN_LINE = re.compile(
    r"(?:(?:https?://)?(?:www\.)?(?:hf\.co|huggingface\.co)/)?[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}"
    r"(?:@[\w./-]{1,256})?(?::[\w.-]{1,200})?|[.~/]\S{0,4095}|\S{1,4091}\.gguf",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SourceList:
    """A scan list as read: the sources in order, each once, and how many lines repeated one."""

    sources: list[str]
    duplicates: int = 0


def read_source_list(text: str) -> list[str]:
    """One SOURCE per line; ``#`` starts a comment; blank lines are skipped; a repeated source is kept once."""
    return read_scan_list(text).sources


#: how a scan list line that is not a SOURCE is passed on: this prefix and its line number (its text is dropped)
NOT_A_SOURCE = "\x00line "


def read_scan_list(text: str) -> SourceList:
    """:func:`read_source_list` with the count of repeated lines. A line that is not a SOURCE (:data:`SCAN_LINE`)
    is kept by its line number only (``NOT_A_SOURCE`` + the number), so that its error row never shows its text:
    the list may be any file."""
    text = text.removeprefix("\ufeff")
    sources: dict[str, None] = {}
    lines = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if not SCAN_LINE.fullmatch(line):
            line = f"{NOT_A_SOURCE}{number}"
        lines += 1
        if lines > SCAN_MAX_SOURCES:
            raise UsageError(f"more than {SCAN_MAX_SOURCES:,} sources in the list: a scan reads at most that many")
        sources[line] = None
    return SourceList(list(sources), lines - len(sources))


#: the request a scan's options make, parsed once per options (RunOptions -> a Request for the first source)
_SCAN_REQUESTS: dict[RunOptions, Request] = {}


def scan_request(options: RunOptions, source: str) -> Request:
    """:func:`resolve_request` for one source of a scan. Without a pasted command line (which may name a model to
    compare with the source) the options parse to the same request for every source: parsed once (the GPU spec,
    the KV type, the settings), then only the source differs."""
    if options.engine_args or not source:
        return resolve_request(options, source)
    template = _SCAN_REQUESTS.get(options)
    if template is None:
        template = resolve_request(options, source)  # a usage error is raised, and parsed again, for every source
        if len(_SCAN_REQUESTS) >= 16:
            _SCAN_REQUESTS.clear()
        _SCAN_REQUESTS[options] = template
    if template.source == source:
        return template
    from dataclasses import replace

    return replace(template, source=source, settings=dict(template.settings))


def scan_one(source: str, options: RunOptions) -> dict[str, Any]:
    """A check/1 object for one source, or an error row; never raises for a model problem."""
    from hfvram.report.jsonout import error_dict

    if source.startswith(NOT_A_SOURCE):
        shown = source.removeprefix("\x00")
        why = f"scan list {shown}: not a SOURCE (org/name[@rev][:QUANT], ./folder, a .gguf file); its text is not shown"
        return error_dict(shown, UsageError(why))
    try:
        request = scan_request(options, source)
        return check_report(request, options, whole_gguf_repo=False)  # one row per source: name the quant
    except Exception as error:  # one broken source must not stop the others
        from hfvram.redaction import redact_document

        return redact_document(error_dict(source, error))


VERDICT_ORDER = {"fits": 0, "tight": 1, "offload": 2, "does_not_fit": 3, None: 4}


def scan_sort_key(report: dict[str, Any]) -> tuple[int, int, str]:
    """Sorted by verdict (fits first, errors last) then by memory per GPU."""
    if "error" in report:
        return (4, 0, report["source"].get("text") or "")
    return (
        VERDICT_ORDER.get(report.get("verdict"), 4),
        report["per_gpu"]["total"],
        report["source"].get("repo_id") or "",
    )


def scan_exit_code(reports: Sequence[dict[str, Any]], fail_on: str | bool | None = None) -> int:
    if any("error" in report for report in reports):
        return EXIT_UNREADABLE
    return exit_code_for((report.get("verdict") for report in reports), fail_on)


# ---- fit -------------------------------------------------------------------------------------------------------


def fit_report(request: Request, options: RunOptions) -> dict[str, Any]:
    """The inverse view for one model on one GPU type (built by hfvram.report.fitdoc)."""
    from hfvram.report.fitdoc import fit_document

    request = gguf_repo_quant(request)
    loaded = load(request, options)
    request = with_draft(request, options, loaded)
    choice = engine_choice(request, loaded)
    tried = None
    if request.quant == "auto":
        request, loaded, tried = auto_quant(request, loaded)
    choice = engine_choice(request, loaded)
    document = fit_document(loaded, request.hardware, choice, workload(request))
    from hfvram.estimate.core import estimate
    from hfvram.estimate.launch import largest_batch

    document["largest_batch"] = largest_batch(estimate(loaded.spec, request.hardware, choice, workload(request)))
    notes = list(request.notes)
    if request.quant is not None:
        from hfvram import quant
        from hfvram.engines import parse_engine_name

        reason, quant_notes = quant.engine_rule(request.quant, parse_engine_name(choice.name)[0], request.hardware)
        notes += list(quant_notes)
        if reason:
            document["verdict"] = "does_not_fit"
            document["verdict_reason"] = f"engine rule: {reason}"
            notes.append(reason)
        document["what_if"] = what_if_dict(request.quant, loaded, tried)
    document["warnings"] = list(dict.fromkeys(document["warnings"] + notes))
    plan = document.get("_offload")
    if plan is not None and "offload_plan" in document and plan.planner == "llama.cpp":
        from hfvram.engines.llamacpp.fit import command_line

        document["offload_plan"]["command"] = command_line(plan, plan.usage.settings, model_argument(loaded))
    from hfvram.redaction import redact_document

    return redact_document(document)


# ---- calibrate ----------------------------------------------------------------------------------------------------


def calibration_prediction(
    measured: Any,
    model: str,
    hardware: Hardware | None,
    engine_name: str | None,
    engine_version: str | None,
    settings: tuple[str, ...],
    offline: bool | None,
    token: str | None,
) -> Estimate:
    """hfvram's estimate for the run the log describes (context, memory fraction, TP and KV dtype from the log)."""
    from hfvram.estimate.core import estimate
    from hfvram.estimate.engine_args import parse_set_options
    from hfvram.estimate.types import EngineChoice, Workload
    from hfvram.sources import load_model

    loaded = load_model(model, token=token, offline=offline, need_split=True)
    version = engine_version or measured.engine_version
    notes: list[str] = []
    if version is None and (engine_name or measured.engine) == "vllm" and measured.engine_generation == "v0":
        # the log's own lines are V0's: the newest release that runs V0 by default, not the newest (V1) rules
        from hfvram.engines.vllm.profile import newest_release_running

        version = newest_release_running("v0")
        if version:
            notes.append(
                f"the log's lines are vLLM V0's and name no release: compared with the vllm@{version} rules, the "
                "newest release that runs V0 by default (--engine vllm@X to name the release)"
            )
    choice = EngineChoice(
        name=engine_name or measured.engine,
        version=version,
        settings=parse_set_options(list(settings)),
        tp=measured.tp,
        gpu_util=measured.gpu_util,
    )
    kv_dtype = measured.kv_dtype or "auto"
    if kv_dtype in ("f16",):
        kv_dtype = "fp16"
    from dataclasses import replace

    est = estimate(loaded.spec, hardware, choice, Workload(context=measured.context, kv_dtype=kv_dtype))
    return replace(est, warnings=(*notes, *est.warnings)) if notes else est


# ---- models ----------------------------------------------------------------------------------------------------


def models_query(options: RunOptions, *, family: str | None, sort: str) -> dict[str, Any]:
    """The ``models`` query, checked before any model is read: a missing, empty or unknown ``--gpu``, a bad number
    or engine is one usage error (exit 2), not an error row per model."""
    from hfvram.sources.catalog import catalog_date, catalog_repos

    if options.gpu is None:
        raise UsageError("models needs --gpu (a GPU or Mac such as --gpu m4-max-64; `hfvram gpus` lists them)")
    parse_gpu_option(options.gpu, options.unified_fraction)
    repos = catalog_repos()
    request = resolve_request(options, repos[0] if repos else "catalogue")
    query: dict[str, Any] = {
        "gpu": options.gpu,
        "engine": options.engine,
        "context": request.context,
        "concurrency": request.concurrency,
        "family": family,
        "sort": sort,
        "catalogue_built": catalog_date(),
    }
    if options.quant is not None:
        query["quant"] = options.quant  # an addition: only with --quant
    return query


def models_rows(
    options: RunOptions, *, family: str | None, sort: str, progress: Callable[[int, int], None] | None = None
) -> list[dict[str, Any]]:
    """One check/1 row per repo of the embedded catalogue (offline: never the network), filtered by family and
    sorted (hfvram.report.models). ``progress(done, total)`` after each repo (the CLI's progress bar)."""
    from dataclasses import replace

    from hfvram.report.models import select_rows
    from hfvram.sources.catalog import catalog_repos

    offline = replace(options, offline=True)
    repos = catalog_repos()

    def checked() -> Iterator[dict[str, Any]]:
        for done, repo in enumerate(repos, 1):
            row = scan_one(repo, offline)
            if progress is not None:
                progress(done, len(repos))
            yield row

    return select_rows(checked(), family=family, sort=sort)


def catalogue_params(repos: Sequence[str]) -> dict[str, int | None]:
    """Total parameters of catalogue repos, as the readers derive them from the stored files (None if unread)."""
    from hfvram.sources.catalog import load_from_catalog

    sizes: dict[str, int | None] = {}
    for repo in repos:
        try:
            loaded = load_from_catalog(repo, reason="listing the catalogue")
            sizes[repo] = None if loaded is None else loaded.spec.params_total
        except Exception:  # one unreadable entry must not stop the listing
            sizes[repo] = None
    return sizes
