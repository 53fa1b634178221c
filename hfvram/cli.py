"""The ``hfvram`` command line: wires sources -> readers -> estimator -> reports (the contract: README.md).

Start-up must stay fast: this module imports only click and hfvram's light modules; rich, huggingface_hub, the
readers and the engine profiles are imported inside the commands that need them.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from hfvram import __version__
from hfvram.completion import complete_engine, complete_gpu, complete_kv_dtype
from hfvram.errors import HfvramError, UsageError

EXIT_OK = 0
EXIT_DOES_NOT_FIT = 1
EXIT_USAGE = 2
EXIT_UNREADABLE = 3
EXIT_INTERRUPTED = 130
DEBUG_META = "hfvram.debug"
FORMATS = ("table", "json", "markdown")
SCAN_FORMATS = ("table", "jsonl", "json", "csv", "markdown")
DEFAULT_JOBS = 8


# ---- error handling ----------------------------------------------------------------------------------------------


def _debug_enabled(ctx: click.Context | None) -> bool:
    if os.environ.get("HFVRAM_DEBUG", "").lower() in ("1", "true", "yes"):
        return True
    return bool(ctx is not None and ctx.meta.get(DEBUG_META))


def _fail(message: str, code: int) -> None:
    from hfvram.report.text import safe

    _write_stderr(f"hfvram: error: {safe(message)}")
    sys.exit(code)


def _write_stderr(line: str) -> None:
    """One line on stderr, in ASCII where stderr cannot encode Unicode; a closed stderr is not an error."""
    from hfvram.report.text import encodes_unicode, to_ascii

    with contextlib.suppress(OSError, ValueError):
        click.echo(line if encodes_unicode(sys.stderr) else to_ascii(line), err=True)


#: errno values that mean the output could not be written (a full disk or /dev/full, a quota, a read-only file system)
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS})
#: exit status when the reader of stdout went away (``hfvram scan … | head -1``): 128 + SIGPIPE, as a shell reports
EXIT_BROKEN_PIPE = 141


def _quiet_broken_pipe() -> None:
    """The reader closed the pipe: stop quietly, and keep Python from complaining when it flushes stdout at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    sys.exit(EXIT_BROKEN_PIPE)


class HfvramGroup(click.Group):
    """Turns hfvram's errors into one line and the contract's exit code; a traceback only with --debug."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HfvramError as error:
            if _debug_enabled(ctx):
                traceback.print_exc()
            _fail(str(error), error.exit_code)
        except KeyboardInterrupt:
            _write_stderr("hfvram: interrupted")
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            _quiet_broken_pipe()
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except OSError as error:
            if _debug_enabled(ctx):
                traceback.print_exc()
            if error.errno in WRITE_ERRNOS:  # writing the output failed (a full disk, /dev/full)
                _fail(f"cannot write the output: {error.strerror or error}", EXIT_UNREADABLE)
            _fail(
                f"internal error: {type(error).__name__}: {error} (run with --debug for the traceback)", EXIT_UNREADABLE
            )
        except Exception as error:  # a bug of ours: still one line, unless --debug
            if _debug_enabled(ctx):
                traceback.print_exc()
            _fail(
                f"internal error: {type(error).__name__}: {error} (run with --debug for the traceback)", EXIT_UNREADABLE
            )


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[DEBUG_META] = True
    return value


debug_option = click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_set_debug,
    help="Show Python tracebacks on errors.",
)


@click.group(cls=HfvramGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="hfvram")
@debug_option
def cli() -> None:
    """Will this Hugging Face model fit this hardware, with this engine, at this context?

    \b
    Examples:
      hfvram check meta-llama/Llama-3.1-8B-Instruct --gpu rtx4090 --context 32k
      hfvram check ./my-model --gpu h100x2 --engine vllm@0.19 --json
      hfvram fit --gpu rtx4090 Qwen/Qwen3-8B
      hfvram inspect ./model.gguf

    Exit codes (check, scan, fit): 0 fits (or tight), 1 does not fit (or tight with --fail-on tight), 2 usage error,
    3 the model could not be read. Shell completion: eval "$(_HFVRAM_COMPLETE=bash_source hfvram)".
    """
    # transformers (used lazily by the config reader) prints a banner about PyTorch on import
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # defaults from HFVRAM_* variables and config.toml (hfvram.settings), below the command line
    from hfvram.settings import default_map

    click.get_current_context().default_map = default_map()


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (``hfvram = "hfvram.cli:main"``)."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="hfvram")
    except BrokenPipeError:
        _quiet_broken_pipe()
    finally:
        _flush_stdout()


def _flush_stdout() -> None:
    """Flush stdout here, where a failure can still be one line and an exit code (not Python's own message)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_broken_pipe()
    except (OSError, ValueError) as error:
        _write_stderr(f"hfvram: error: cannot write the output: {getattr(error, 'strerror', None) or error}")
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        os._exit(EXIT_UNREADABLE)


# ---- shared options -------------------------------------------------------------------------------------------


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


UNIFIED_FRACTION_HELP = (
    "Apple Silicon / unified-memory devices: the share of RAM the GPU may use, 0 < F <= 1 (default: the "
    "catalogue's measured share, else macOS's rule: 2/3 of RAM up to 32 GiB, 3/4 above; raise it on a Mac with "
    "`sudo sysctl iogpu.wired_limit_mb=…`). Ignored, with a warning, for discrete GPUs."
)


def run_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a command with the contract's shared options (check / scan / fit)."""
    options = [
        click.option(
            "--gpu",
            "gpu",
            metavar="SPEC",
            shell_complete=complete_gpu,
            help="GPU id or alias with optional count (rtx4090, h100x8, 24GiB).",
        ),
        click.option(
            "--engine",
            "engine",
            metavar="NAME[@VER]",
            shell_complete=complete_engine,
            help="vllm, sglang, llama.cpp, ollama, … (default: vllm; llama.cpp for GGUF).",
        ),
        click.option(
            "--context", "context", metavar="N", help="Tokens per sequence: 8k, 32k, 131072 (default: the engine's)."
        ),
        click.option("--concurrency", "concurrency", metavar="N", help="Sequences held at full context (default 1)."),
        click.option(
            "--kv-dtype",
            "kv_dtype",
            metavar="T",
            shell_complete=complete_kv_dtype,
            help="KV cache type: auto, bf16, fp16, fp8, q8_0, q4_0, …",
        ),
        click.option(
            "--set",
            "settings",
            metavar="NAME=VALUE",
            multiple=True,
            help="An engine setting under the engine's own name (repeatable).",
        ),
        click.option(
            "--engine-args", "engine_args", metavar='"…"', help="A pasted engine command line (vllm serve … -tp 2)."
        ),
        click.option("--tp", "tp", type=click.IntRange(min=1), help="Tensor-parallel degree."),
        click.option("--pp", "pp", type=click.IntRange(min=1), help="Pipeline-parallel degree."),
        click.option(
            "--gpu-util",
            "gpu_util",
            type=click.FloatRange(0.0, 1.0, min_open=True),
            help="The engine's memory fraction.",
        ),
        click.option(
            "--unified-fraction",
            "unified_fraction",
            type=click.FloatRange(0.0, 1.0, min_open=True),
            metavar="F",
            help=UNIFIED_FRACTION_HELP,
        ),
        click.option("--revision", "revision", metavar="R", help="Hub revision (branch, tag, commit)."),
        click.option(
            "--token", "token", metavar="T", help="Hub token (else HF_TOKEN / the saved token). Never printed."
        ),
        click.option("--offline", "offline", is_flag=True, default=None, help="Never touch the network."),
        click.option("--explain", "explain", is_flag=True, help="List every input figure with where it came from."),
        click.option(
            "--calibration",
            "calibration",
            metavar="FILE",
            type=click.Path(dir_okay=False),
            help="A calibration file from `hfvram calibrate --save`.",
        ),
        debug_option,
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _run_options(kwargs: dict[str, Any]) -> RunOptions:
    names = RunOptions.__dataclass_fields__.keys()
    values = {name: kwargs.pop(name) for name in list(kwargs) if name in names}
    values["settings"] = tuple(values.get("settings") or ())
    return RunOptions(**values)


def _output_format(fmt: str | None, as_json: bool, default: str = "table", as_markdown: bool = False) -> str:
    if as_json and as_markdown:
        raise UsageError("--json and --markdown are exclusive: pick one output format")
    for flag, on, implied in (("--json", as_json, ("json", "jsonl")), ("--markdown", as_markdown, ("markdown",))):
        if on and fmt and fmt not in implied:
            raise UsageError(f"--format {fmt} and {flag} disagree: pick one output format")
    if as_json:
        return "json"
    if as_markdown:
        return "markdown"
    return fmt or default


markdown_option = click.option("--markdown", "as_markdown", is_flag=True, help="Same as --format markdown.")


# ---- request resolution (pure wiring of the parsers) -------------------------------------------------------------


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
    hardware: Any  # hfvram.estimate.types.Hardware | None
    #: what the pasted engine command line had that hfvram did not use (reported as warnings)
    notes: tuple[str, ...] = ()


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


def parse_gpu_option(text: str | None, unified_fraction: float | None = None) -> Any:
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


def _pasted_conflicts(pasted: Any, explicit: dict[str, Any], settings: dict[str, str]) -> list[str]:
    """An explicit option that disagrees with the pasted command line wins, and says so; the pasted flag is
    dropped so that the engine does not read it either."""
    from hfvram.datafiles import data_table

    fields = (data_table("engine_args.toml")["engines"].get(pasted.engine or "") or {}).get("fields", {})
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
    from hfvram.estimate.common import kv_dtype_bytes
    from hfvram.estimate.engine_rules import accepts
    from hfvram.estimate.engines import ENGINE_MODULES

    known = {str(item).lower() for engine in ENGINE_MODULES for item in accepts(engine).get("kv_dtypes", [])}
    if all(part.strip().lower() in known for part in name.split("/")):
        return
    for part in name.split("/"):
        kv_dtype_bytes(part)


def resolve_request(options: RunOptions, source: str | None) -> Request:
    """Merge the pasted engine command line with the explicit options: an explicit option that disagrees with the
    pasted line wins with a warning; a different model or engine is a usage error (exit 2)."""
    from hfvram.estimate.engine_args import parse_set_options
    from hfvram.estimate.engines import parse_engine_name

    pasted = None
    if options.engine_args:
        from hfvram.estimate.engine_args import parse_engine_args

        pasted = parse_engine_args(options.engine_args)
    if source and pasted and pasted.model and pasted.model.rstrip("/") != source.rstrip("/"):
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
    context = _parse_positive(options.context, "--context") if options.context else None
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
    concurrency = _parse_count(options.concurrency, "--concurrency") if options.concurrency else 1
    kv_dtype = options.kv_dtype or (pasted.kv_dtype if pasted and pasted.kv_dtype else None) or "auto"
    validate_kv_dtype_name(kv_dtype)
    hardware = parse_gpu_option(options.gpu, options.unified_fraction)
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
    )


def unified_fraction_notes(options: RunOptions, hardware: Any) -> tuple[str, ...]:
    """--unified-fraction without a GPU, or on a discrete GPU, changes nothing: say so."""
    if options.unified_fraction is None:
        return ()
    if hardware is None:
        return ("--unified-fraction ignored: no --gpu given",)
    if not hardware.gpu.unified_memory:
        return (f"--unified-fraction ignored: {hardware.gpu.id} is a discrete GPU with its own memory",)
    return ()


SECRET_NAME = r"[\w.-]*(?:key(?![a-z])|keyfile|token(?![a-z])|secret|password|passwd|auth|credential)[\w.-]*"
#: well-known token shapes, hidden wherever they appear (Hugging Face, OpenAI-style, GitHub)
SECRET_VALUE = re.compile(r"\b(hf_|sk-|ghp_|github_pat_)[A-Za-z0-9_-]{4,}")


def redact(text: str) -> str:
    """Hide secrets before printing: the whole value of a secret-looking flag (``--api-key a b`` ->
    ``--api-key ***``), of a secret-looking environment variable (``HF_TOKEN=x`` -> ``HF_TOKEN=***``), and any
    token-shaped word (``hf_…``, ``sk-…``). ``text`` is one ignored item: ``FLAG VALUE…: reason``."""
    body, sep, reason = text.rpartition(": ") if ": " in text else (text, "", "")
    flag = re.match(rf"^(--?{SECRET_NAME})([ =])(.+)$", body, flags=re.IGNORECASE)
    env = re.match(rf"^({SECRET_NAME})=(.+)$", body, flags=re.IGNORECASE)
    if flag:
        body = f"{flag[1]}{flag[2]}***"
    elif env:
        body = f"{env[1]}=***"
    else:  # a launcher or program segment: secrets inside it, one word each
        body = re.sub(
            rf"((?<!\S)--?{SECRET_NAME}[ =]|(?<![\w-]){SECRET_NAME}=)(\S+)", r"\1***", body, flags=re.IGNORECASE
        )
    body = SECRET_VALUE.sub(lambda m: m[1] + "***", body)
    return body + sep + SECRET_VALUE.sub(lambda m: m[1] + "***", reason)


def default_engine(loaded: Any, hardware: Any = None) -> str:
    """vLLM for safetensors checkpoints, llama.cpp for GGUF (contract table); on Apple Silicon, where vLLM does not
    run, MLX for safetensors checkpoints."""
    quant = loaded.spec.quantization
    if loaded.source.kind == "gguf" or (quant is not None and quant.method == "gguf"):
        return "llama.cpp"
    if hardware is not None and hardware.gpu.vendor == "apple":
        return "mlx"
    return "vllm"


def load(request: Request, options: RunOptions, *, need_split: bool = False) -> Any:
    from hfvram.sources import load_model

    # every tensor header only for --explain: otherwise the exact total is split like the config shapes
    return load_model(
        request.source,
        revision=request.revision,
        token=options.token,
        offline=options.offline,
        need_split=need_split or options.explain,
    )


def engine_choice(request: Request, loaded: Any) -> Any:
    from hfvram.estimate.types import EngineChoice

    return EngineChoice(
        name=request.engine or default_engine(loaded, request.hardware),
        version=request.engine_version,
        settings=dict(request.settings),
        tp=request.tp,
        pp=request.pp,
        gpu_util=request.gpu_util,
    )


def workload(request: Request, *, context: int | None = None, kv_dtype: str | None = None) -> Any:
    from hfvram.estimate.types import Workload

    return Workload(
        context=context if context is not None else request.context,
        concurrency=request.concurrency,
        kv_dtype=kv_dtype or request.kv_dtype,
    )


def run_estimate(request: Request, options: RunOptions, loaded: Any) -> Any:
    """The estimate for one loaded model, with a calibration applied when one matches (engine + GPU)."""
    from hfvram.estimate.core import estimate

    choice = engine_choice(request, loaded)
    est = estimate(loaded.spec, request.hardware, choice, workload(request))
    return calibrate_estimate(est, options, choice.name)


def calibrate_estimate(est: Any, options: RunOptions, engine: str) -> Any:
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

    if not calibration_files(engine, est.hardware.gpu.id):
        return est  # the common case: no calibration saved, and hfvram.calibrate is not imported
    from hfvram import calibrate

    notes = []
    for path, record in calibrate.find_calibrations(engine, est.hardware.gpu.id):
        reasons = calibrate.calibration_match(est, record)
        if not reasons:
            return calibrate.apply_calibration(est, record, str(path))
        notes.append(calibrate.not_applied_warning(path, reasons))
    return replace(est, warnings=tuple(est.warnings) + tuple(notes)) if notes else est


def check_report(request: Request, options: RunOptions) -> dict[str, Any]:
    from hfvram.report.jsonout import check_dict

    loaded = load(request, options)
    est = run_estimate(request, options, loaded)
    report = check_dict(loaded.source, est, explain=options.explain)
    report["warnings"] = list(
        dict.fromkeys(report["warnings"] + list(request.notes) + default_engine_notes(request, est))
    )
    if options.explain and est.hardware is not None:
        from hfvram.estimate.hardware import memory_provenance

        report["explain"]["terms"].setdefault("memory", memory_provenance(est.hardware.gpu))
    return report


def default_engine_notes(request: Request, est: Any) -> list[str]:
    """Say when the engine was chosen for the hardware rather than by the contract's plain default."""
    if request.engine is None and est.hardware is not None and est.engine.get("name") == "mlx":
        return [
            "no --engine given: MLX is the default on Apple Silicon (vLLM does not run on Metal); "
            "--engine llama.cpp describes the other common Mac runtime"
        ]
    return []


def exit_code_for(verdicts: Iterable[str | None], fail_on_tight: bool) -> int:
    """0 fits / tight; 1 when any does not fit (or is tight with --fail-on tight)."""
    for verdict in verdicts:
        if verdict == "does_not_fit" or (fail_on_tight and verdict == "tight"):
            return EXIT_DOES_NOT_FIT
    return EXIT_OK


def _console(stderr: bool = False) -> Any:
    """rich's Console on stdout (or stderr): the width of ``report_width``, plain ASCII where the stream cannot
    encode Unicode (``LANG=C``, ``PYTHONIOENCODING=ascii``)."""
    from rich.console import Console

    from hfvram.report.text import AsciiStream, encodes_unicode, report_width

    stream = sys.stderr if stderr else sys.stdout
    file: Any = stream if encodes_unicode(stream) else AsciiStream(stream)
    return Console(file=file, highlight=False, soft_wrap=False, width=report_width(stream))


def _echo(text: str, nl: bool = True) -> None:
    """Text output (Markdown, CSV, JSON) on stdout, transliterated to ASCII where stdout cannot encode Unicode."""
    from hfvram.report.text import encodes_unicode, to_ascii

    click.echo(text if encodes_unicode(sys.stdout) else to_ascii(text), nl=nl)


def _stdout_unicode() -> bool:
    from hfvram.report.text import encodes_unicode

    return encodes_unicode(sys.stdout)


def _echo_json(document: Any) -> None:
    from hfvram.report.text import encodes_unicode, safe_json

    # where stdout cannot encode Unicode, \uXXXX escapes keep the document exact
    click.echo(safe_json(json.dumps(document, indent=2, ensure_ascii=not encodes_unicode(sys.stdout))))


# ---- check ------------------------------------------------------------------------------------------------------


@cli.command()
@click.argument("source", required=False)
@run_options
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Output format (default: table).")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json (schema hfvram.check/1).")
@markdown_option
@click.option(
    "--fail-on",
    "fail_on",
    type=click.Choice(["tight"]),
    help="Exit 1 on Tight as well as on Doesn't fit (needs --gpu: without one there is no verdict).",
)
def check(
    source: str | None, fmt: str | None, as_json: bool, as_markdown: bool, fail_on: str | None, **kwargs: Any
) -> None:
    """One model: the four memory terms on the worst GPU, the verdict and the capacity.

    SOURCE: org/name[@revision], org/name:Q4_K_M, a local folder, a .gguf file, or a cached repo.
    """
    options = _run_options(kwargs)
    output = _output_format(fmt, as_json, as_markdown=as_markdown)
    from hfvram.api import check_with_options

    require_gpu_for_fail_on(fail_on, options.gpu)

    report = check_with_options(options, source).document
    if output == "json":
        _echo_json(report)
    elif output == "markdown":
        from hfvram.report.markdown import check_markdown

        _echo(check_markdown(report, explain=options.explain), nl=False)
    else:
        from hfvram.report.table import render_check

        render_check(_console(), report, explain=options.explain)
    sys.exit(exit_code_for([report.get("verdict")], fail_on == "tight"))


# ---- scan ------------------------------------------------------------------------------------------------------


#: the most sources one scan reads
SCAN_MAX_SOURCES = 100_000


def read_source_list(text: str) -> list[str]:
    """One SOURCE per line; ``#`` starts a comment; blank lines are skipped."""
    text = text.removeprefix("\ufeff")
    sources = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if line:
            sources.append(line)
    return sources


def scan_one(source: str, options: RunOptions) -> dict[str, Any]:
    """A check/1 object for one source, or an error row; never raises for a model problem."""
    from hfvram.report.jsonout import error_dict

    try:
        request = resolve_request(options, source)
        return check_report(request, options)
    except HfvramError as error:
        return error_dict(source, error)
    except Exception as error:  # one broken source must not stop the others
        return error_dict(source, error)


VERDICT_ORDER = {"fits": 0, "tight": 1, "does_not_fit": 2, None: 3}


def scan_sort_key(report: dict[str, Any]) -> tuple[int, int, str]:
    """Sorted by verdict (fits first, errors last) then by memory per GPU."""
    if "error" in report:
        return (4, 0, report["source"].get("text") or "")
    return (
        VERDICT_ORDER.get(report.get("verdict"), 3),
        report["per_gpu"]["total"],
        report["source"].get("repo_id") or "",
    )


def scan_exit_code(reports: Sequence[dict[str, Any]], fail_on_tight: bool) -> int:
    if any("error" in report for report in reports):
        return EXIT_UNREADABLE
    return exit_code_for((report.get("verdict") for report in reports), fail_on_tight)


@cli.command()
@click.argument("file")
@run_options
@click.option("--format", "fmt", type=click.Choice(SCAN_FORMATS), help="Output format (default: table).")
@click.option("--json", "as_json", is_flag=True, help="JSON Lines: one hfvram.check/1 object per source.")
@click.option(
    "--jobs", "-j", type=click.IntRange(1, 64), default=DEFAULT_JOBS, show_default=True, help="Sources read at once."
)
@markdown_option
@click.option("--fail-on", "fail_on", type=click.Choice(["tight"]), help="Exit 1 on Tight as well (needs --gpu).")
def scan(
    file: Any, fmt: str | None, as_json: bool, as_markdown: bool, jobs: int, fail_on: str | None, **kwargs: Any
) -> None:
    """Many models: one SOURCE per line of FILE ('-' = stdin), read concurrently.

    A source that cannot be read becomes an error row; the others are still reported.
    """
    options = _run_options(kwargs)
    output = "jsonl" if as_json and not as_markdown else _output_format(fmt, as_json, as_markdown=as_markdown)
    from hfvram.sources.limits import byte_cap, read_user_file  # capped, regular files only ('-' = stdin)

    sources = read_source_list(read_user_file(file, byte_cap("scan_list"), what="scan list"))
    if not sources:
        raise UsageError("no sources in the list (one SOURCE per line, '#' comments)")
    if len(sources) > SCAN_MAX_SOURCES:
        raise UsageError(f"{len(sources):,} sources in the list: a scan reads at most {SCAN_MAX_SOURCES:,}")
    # a bad --gpu or pasted command line is one usage error, not an error row per source
    parse_gpu_option(options.gpu, options.unified_fraction)
    require_gpu_for_fail_on(fail_on, options.gpu)
    if options.engine_args:
        from hfvram.estimate.engine_args import parse_engine_args

        if parse_engine_args(options.engine_args).model:
            raise UsageError("scan reads the models from FILE: drop the model from --engine-args")
    reports, interrupted = _scan_all(sources, options, jobs, output)
    reports.sort(key=scan_sort_key)
    _print_scan(reports, output, streamed=output in ("jsonl", "table"))
    if interrupted:
        _write_stderr(f"hfvram: interrupted: {len(reports)} of {len(sources)} sources finished")
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(scan_exit_code(reports, fail_on == "tight"))


def _scan_all(sources: list[str], options: RunOptions, jobs: int, output: str) -> tuple[list[dict[str, Any]], bool]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from hfvram.report.jsonout import error_dict
    from hfvram.scan import run_scan

    reports: list[dict[str, Any]] = []
    stderr = _console(stderr=True)
    progress = Progress(
        TextColumn("scanning"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,
    )
    interrupted = False
    with progress:
        task = progress.add_task("scan", total=len(sources))

        def emit(report: dict[str, Any]) -> None:
            _stream_result(report, output, progress.console)
            # JSON Lines are printed as they come: keep only what the exit code needs (memory flat in the list)
            reports.append(_verdict_only(report) if output == "jsonl" else report)
            progress.advance(task)

        try:
            run_scan(sources, lambda source: scan_one(source, options), jobs, emit, failed=error_dict)
        except KeyboardInterrupt:
            interrupted = True
    return reports, interrupted


def _verdict_only(report: dict[str, Any]) -> dict[str, Any]:
    slim: dict[str, Any] = {"source": {"text": (report.get("source") or {}).get("text")}}
    if "error" in report:
        slim["error"] = True
    else:
        slim["verdict"] = report.get("verdict")
        slim["per_gpu"] = {"total": (report.get("per_gpu") or {}).get("total", 0)}
    return slim


def _stream_result(report: dict[str, Any], output: str, console: Any) -> None:
    """Results as they finish: JSON Lines on stdout; one line per model on stderr for the table view."""
    if output == "jsonl":
        from hfvram.report.tabular import jsonl_line

        _echo(jsonl_line(report, ascii_only=not _stdout_unicode()))
    elif output == "table":
        from rich.text import Text

        from hfvram.report.table import scan_row

        name, verdict, total, *_ = scan_row(report)
        # the name last, so that a narrow terminal cuts the name, never the figures; through the progress bar's own
        # console, so that the line goes above the bar, not onto it
        line = Text("  ").append_text(verdict).append(f"  {total.plain}  ").append_text(name)
        console.print(line, highlight=False, overflow="ellipsis", no_wrap=True)


def _print_scan(reports: list[dict[str, Any]], output: str, *, streamed: bool) -> None:
    if output == "jsonl":
        return  # already printed line by line
    if output == "json":
        _echo_json(reports)
    elif output == "csv":
        from hfvram.report.tabular import to_csv

        _echo(to_csv(reports), nl=False)
    elif output == "markdown":
        from hfvram.report.markdown import scan_markdown

        _echo(scan_markdown(reports), nl=False)
    else:
        from hfvram.report.table import render_scan

        render_scan(_console(), reports)


# ---- fit -------------------------------------------------------------------------------------------------------


def fit_report(request: Request, options: RunOptions) -> dict[str, Any]:
    """The inverse view for one model on one GPU type (built by hfvram.report.fitdoc)."""
    from hfvram.report.fitdoc import fit_document

    loaded = load(request, options)
    document = fit_document(loaded, request.hardware, engine_choice(request, loaded), workload(request))
    document["warnings"] = list(dict.fromkeys(document["warnings"] + list(request.notes)))
    return document


@cli.command()
@click.argument("sources", nargs=-1, required=True)
@run_options
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Output format (default: table).")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@markdown_option
@click.option(
    "--plot",
    "plot",
    metavar="FILE.png|svg",
    type=click.Path(dir_okay=False),
    help="Draw memory against context per term (needs the 'plot' extra).",
)
@click.option("--fail-on", "fail_on", type=click.Choice(["tight"]), help="Exit 1 on Tight as well.")
def fit(
    sources: tuple[str, ...],
    fmt: str | None,
    as_json: bool,
    as_markdown: bool,
    plot: str | None,
    fail_on: str | None,
    **kwargs: Any,
) -> None:
    """The inverse view: longest context, most concurrent requests and the smallest GPU count that fit.

    Exit codes as for check, for the layout asked (--gpu, --context, --concurrency): 0 fits or tight, 1 does not
    fit (or tight with --fail-on tight) for any SOURCE, 2 usage error, 3 a model could not be read."""
    options = _run_options(kwargs)
    if options.gpu is None:
        raise UsageError("fit needs --gpu SPEC (for example --gpu rtx4090)")
    parse_gpu_option(options.gpu, options.unified_fraction)
    output = _output_format(fmt, as_json, as_markdown=as_markdown)
    if plot:
        from hfvram.report.plot import check_plot_path, require_matplotlib

        check_plot_path(plot)
        require_matplotlib()
    from hfvram.api import fit_with_options

    results = [fit_with_options(options, source) for source in sources]
    reports = [
        {
            **result.document,
            "_spec": result.spec,
            "_choice": result.engine_choice,
            "_workload": result.workload,
            "_hardware": result.hardware_spec,
        }
        for result in results
    ]
    if plot:
        from hfvram.report.plot import plot_memory_against_context

        plot_memory_against_context(reports, plot)
        _write_stderr(f"wrote {plot}")
    public = [{k: v for k, v in report.items() if not k.startswith("_")} for report in reports]
    if output == "json":
        _echo_json(public if len(public) > 1 else public[0])
    elif output == "markdown":
        from hfvram.report.markdown import fit_markdown

        _echo("\n".join(fit_markdown(report) for report in public), nl=False)
    else:
        from hfvram.report.table import render_fit

        console = _console()
        for report in public:
            render_fit(console, report)
    sys.exit(exit_code_for([report.get("verdict") for report in public], fail_on == "tight"))


# ---- gpus ------------------------------------------------------------------------------------------------------


def gpu_dict(gpu: Any) -> dict[str, Any]:
    return {
        "id": gpu.id,
        "name": gpu.name,
        "vendor": gpu.vendor,
        "memory_bytes": gpu.memory_bytes,
        "gpu_memory_bytes": gpu.gpu_memory_bytes,
        "memory_bandwidth_gbs": gpu.memory_bandwidth_gbs,
        "bf16_tflops_dense": gpu.bf16_tflops_dense,
        "unified_memory": gpu.unified_memory,
        "aliases": list(gpu.aliases),
    }


@cli.command()
@click.argument("query", required=False)
@click.option("--vendor", metavar="V", help="Only this vendor (nvidia, amd, intel, apple).")
@click.option("--json", "as_json", is_flag=True, help="JSON list.")
@debug_option
def gpus(query: str | None, vendor: str | None, as_json: bool) -> None:
    """The accelerator catalogue: id, memory the device exposes, bandwidth, aliases."""
    from hfvram.estimate.hardware import search_catalog

    found = [gpu_dict(gpu) for gpu in search_catalog(query, vendor=vendor)]
    if as_json:
        _echo_json(found)
    else:
        from hfvram.report.table import render_gpus

        render_gpus(_console(), found)
    if not found:
        _write_stderr("hfvram: no GPU matches; try `hfvram gpus` for the whole catalogue")
        sys.exit(EXIT_USAGE)


# ---- inspect ------------------------------------------------------------------------------------------------------


@cli.command()
@click.argument("source")
@click.option(
    "--kv-dtype",
    "kv_dtype",
    metavar="T",
    shell_complete=complete_kv_dtype,
    help="KV figures at this dtype (default: the checkpoint's).",
)
@click.option("--revision", metavar="R", help="Hub revision.")
@click.option("--token", metavar="T", help="Hub token (never printed).")
@click.option("--offline", is_flag=True, default=None, help="Never touch the network.")
@click.option("--format", "fmt", type=click.Choice(("table", "json")), help="Output format.")
@click.option("--json", "as_json", is_flag=True, help="JSON (schema hfvram.inspect/1).")
@debug_option
def inspect(
    source: str,
    kv_dtype: str | None,
    revision: str | None,
    token: str | None,
    offline: bool | None,
    fmt: str | None,
    as_json: bool,
) -> None:
    """The model's facts only (no GPU, no engine), each with the file and field it came from."""
    from hfvram import api

    report = api.inspect(source, kv_dtype=kv_dtype, revision=revision, token=token, offline=offline).document
    if _output_format(fmt, as_json) == "json":
        _echo_json(report)
    else:
        from hfvram.report.table import render_inspect

        render_inspect(_console(), report)


# ---- calibrate ----------------------------------------------------------------------------------------------------


@cli.command()
@click.argument("logfile")
@click.option("--model", "model", metavar="SOURCE", help="Compare with hfvram's prediction for this model.")
@click.option(
    "--gpu",
    metavar="SPEC",
    shell_complete=complete_gpu,
    help="The GPU the log came from (needed for --model and --save).",
)
@click.option(
    "--engine",
    metavar="NAME[@VER]",
    shell_complete=complete_engine,
    help="Force the log parser / the rules (default: detected).",
)
@click.option("--set", "settings", metavar="NAME=VALUE", multiple=True, help="Engine settings of that run.")
@click.option("--save", is_flag=True, help="Write the measured overhead as a calibration file for later checks.")
@click.option(
    "--output", "output_path", type=click.Path(dir_okay=False), help="Where --save writes (default: the config folder)."
)
@click.option("--offline", is_flag=True, default=None, help="Never touch the network.")
@click.option("--token", metavar="T", help="Hub token (never printed).")
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@debug_option
def calibrate(
    logfile: str,
    model: str | None,
    gpu: str | None,
    engine: str | None,
    settings: tuple[str, ...],
    save: bool,
    output_path: str | None,
    offline: bool | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Read a vLLM / llama.cpp start-up log: what the engine really reserved, next to hfvram's prediction."""
    from hfvram import calibrate as cal

    engine_name, engine_version = (None, None)
    if engine:
        from hfvram.estimate.engines import parse_engine_name

        engine_name, engine_version = parse_engine_name(engine)
    hardware = None
    if gpu:
        from hfvram.estimate.hardware import parse_gpu_spec

        hardware = parse_gpu_spec(gpu)
    if (model or save) and hardware is None:
        raise UsageError("--model and --save need --gpu SPEC (the GPU the log came from)")
    text = cal.read_log(logfile)
    measured = cal.parse_log(text, engine_name)
    if engine_version and not measured.engine_version:  # --engine vllm@0.6.4 says what the log does not
        from dataclasses import replace

        measured = replace(measured, engine_version=engine_version)
    result: dict[str, Any] = {
        "schema": "hfvram.calibrate/1",
        "engine": measured.engine,
        "measured": cal.measured_dict(measured),
        "warnings": list(measured.warnings),
    }
    if model:
        est = _calibration_prediction(measured, model, hardware, engine_name, engine_version, settings, offline, token)
        result["_spec"] = est.spec
        result["predicted"] = cal.predicted_terms(est)
        result["warnings"] += cal.comparison_warnings(measured, result["predicted"]) + list(est.warnings)
    if save and not measured.engine_version:
        result["warnings"].append(
            f"the log does not say which {measured.engine} release ran: later checks do not apply this calibration "
            f"(pass --engine {measured.engine}@VERSION)"
        )
    if save and not model:
        result["warnings"].append(
            "saved without --model: later checks name this calibration but do not apply it (it applies to the "
            "model family it measured; pass --model SOURCE, the model that ran)"
        )
    if save:
        from pathlib import Path

        assert hardware is not None  # --save needs --gpu (checked above)

        record = cal.calibration_record(
            measured,
            hardware.gpu.id,
            os.path.basename(logfile),
            spec=result.get("_spec"),
            model=model,
        )
        if output_path:
            path = Path(output_path)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            except OSError as error:
                raise UsageError(f"cannot write --output {output_path}: {error.strerror or error}") from None
        else:
            path = cal.save_calibration(record)
        result["saved"] = str(path)
    result.pop("_spec", None)
    if as_json:
        _echo_json(result)
    else:
        from hfvram.report.table import render_calibration

        render_calibration(_console(), result)
        if "saved" in result:
            from hfvram.report.text import safe

            _echo(f"saved calibration: {safe(result['saved'])}")


def _calibration_prediction(
    measured: Any,
    model: str,
    hardware: Any,
    engine_name: str | None,
    engine_version: str | None,
    settings: tuple[str, ...],
    offline: bool | None,
    token: str | None,
) -> Any:
    """hfvram's estimate for the run the log describes (context, memory fraction, TP and KV dtype from the log)."""
    from hfvram.estimate.core import estimate
    from hfvram.estimate.engine_args import parse_set_options
    from hfvram.estimate.types import EngineChoice, Workload
    from hfvram.sources import load_model

    loaded = load_model(model, token=token, offline=offline, need_split=True)
    choice = EngineChoice(
        name=engine_name or measured.engine,
        version=engine_version or measured.engine_version,
        settings=parse_set_options(list(settings)),
        tp=measured.tp,
        gpu_util=measured.gpu_util,
    )
    kv_dtype = measured.kv_dtype or "auto"
    if kv_dtype in ("f16",):
        kv_dtype = "fp16"
    return estimate(loaded.spec, hardware, choice, Workload(context=measured.context, kv_dtype=kv_dtype))


if __name__ == "__main__":  # pragma: no cover
    main()
