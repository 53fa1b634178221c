"""The options as typed -> a parsed :class:`Request` (everything except the model), the exit codes and
the verdicts' exit code."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hfvram.errors import UsageError

if TYPE_CHECKING:
    from hfvram.estimate.engine_args import ParsedEngineArgs
    from hfvram.estimate.types import DraftModel, Hardware, ProjectorFile


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
    #: the ``--mmproj`` projector a llama.cpp line names, read by :func:`with_projector` (header only)
    projector: ProjectorFile | None = None
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


def _pasted_and_source(options: RunOptions, source: str | None) -> tuple[ParsedEngineArgs | None, str]:
    """The parsed ``--engine-args`` line (None without one) and the SOURCE: given, else the pasted line's model;
    the two naming different models, or neither naming one, is a usage error."""
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
    return pasted, source


def _engine_and_version(options: RunOptions, pasted: ParsedEngineArgs | None) -> tuple[str | None, str | None]:
    """``--engine NAME[@VER]``, else the pasted line's engine; the two differing is a usage error."""
    from hfvram.engines import parse_engine_name

    engine, version = parse_engine_name(options.engine) if options.engine else (None, None)
    if pasted and pasted.engine:
        if engine is not None and engine != pasted.engine:
            raise UsageError(f"--engine {options.engine} and the pasted {pasted.engine} command line differ: give one")
        engine = pasted.engine
    return engine, version


def _set_override_notes(settings: dict[str, str], explicit_settings: dict[str, str]) -> list[str]:
    """A note for each ``--set`` that overrides a different value of the pasted line."""
    notes: list[str] = []
    for name, value in explicit_settings.items():
        if name in settings and settings[name] != value:
            notes.append(f"--set {name}={value} overrides the pasted {name} {settings[name]}")
    return notes


def _concurrency(options: RunOptions) -> tuple[int, bool]:
    """``--concurrency``: (the count, default 1; whether it is ``max``)."""
    concurrency_max = bool(options.concurrency and options.concurrency.strip().lower() == "max")
    concurrency = (
        _parse_count(options.concurrency, "--concurrency") if options.concurrency and not concurrency_max else 1
    )
    return concurrency, concurrency_max


def _hardware_and_host(options: RunOptions) -> tuple[Any, Any, int | None]:
    """The GPU set of ``--gpu`` (None without one) with the host's memory (``--host-memory``, ``--ram``) in it."""
    hardware = parse_gpu_option(options.gpu, options.unified_fraction)
    from hfvram.estimate.host_memory import parse_host_memory, parse_ram

    host_memory = parse_host_memory(options.host_memory)
    ram_bytes = parse_ram(options.ram) if options.ram else None
    if hardware is not None:
        from dataclasses import replace as _replace

        # the host is part of the hardware: the engines that place layers in RAM read its bandwidth and size
        hardware = _replace(hardware, host=host_memory, ram_bytes=ram_bytes)
    return hardware, host_memory, ram_bytes


def resolve_request(options: RunOptions, source: str | None) -> Request:
    """Merge the pasted engine command line with the explicit options: an explicit option that disagrees with the
    pasted line wins with a warning; a different model or engine is a usage error (exit 2)."""
    from hfvram.estimate.engine_args import parse_set_options

    pasted, source = _pasted_and_source(options, source)
    engine, version = _engine_and_version(options, pasted)
    settings: dict[str, str] = dict(pasted.settings) if pasted else {}
    explicit_settings = parse_set_options(list(options.settings))
    notes = _set_override_notes(settings, explicit_settings)
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
    concurrency, concurrency_max = _concurrency(options)
    kv_dtype = options.kv_dtype or (pasted.kv_dtype if pasted and pasted.kv_dtype else None) or "auto"
    validate_kv_dtype_name(kv_dtype)
    from hfvram.redaction import redact

    hardware, host_memory, ram_bytes = _hardware_and_host(options)
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
