"""The ``hfvram`` command line (the contract: README.md): parses the options, calls ``hfvram.pipeline`` /
``hfvram.api`` (which wire sources -> readers -> estimator -> report documents) and prints.

Start-up must stay fast: this module imports only click and hfvram's light modules; rich, huggingface_hub, the
readers and the engine profiles are imported inside the commands that need them.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import click

from hfvram import __version__
from hfvram.completion import complete_engine, complete_gpu, complete_host_memory, complete_kv_dtype, complete_quant
from hfvram.errors import HfvramError, UsageError
from hfvram.pipeline import (
    EXIT_UNREADABLE,
    EXIT_USAGE,
    RunOptions,
    calibration_prediction,
    exit_code_for,
    parse_gpu_option,
    read_scan_list,
    require_gpu_for_fail_on,
    scan_exit_code,
    scan_one,
    scan_sort_key,
)

EXIT_INTERRUPTED = 130
DEBUG_META = "hfvram.debug"
FORMATS = ("table", "json", "markdown")
SCAN_FORMATS = ("table", "jsonl", "json", "csv", "markdown")
MODEL_SORTS = ("verdict", "total", "params", "context", "speed")
#: `models --hub` also sorts as the Hub's listing does
HUB_MODEL_SORTS = ("downloads", "likes", "trending")
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


#: options whose value is itself a command line, so it may start like one of hfvram's options
COMMAND_LINE_VALUES = frozenset({"--engine-args"})


class HfvramCommand(click.Command):
    """A command whose option values are never another of its options: ``--gpu --context 32k`` is a usage error
    naming ``--gpu``, not a GPU called ``--context``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        options = [param for param in self.params if isinstance(param, click.Option)]
        known = {name for option in options for name in (*option.opts, *option.secondary_opts)}
        takes_value = {
            name
            for option in options
            if not option.is_flag and not option.count
            for name in option.opts
            if name not in COMMAND_LINE_VALUES
        }
        for word, following in itertools.pairwise(args):
            if word == "--":
                break
            if ctx.resilient_parsing:  # shell completion parses half-typed lines
                break
            if word in takes_value and following.split("=", 1)[0] in known and following.startswith("-"):
                raise click.UsageError(f"{word} needs a value; {following} is an option", ctx=ctx)
        return super().parse_args(ctx, args)


def _usage_line(error: click.UsageError) -> str:
    """click's four-line usage error as the contract's one line: the message, then where the help is."""
    command = error.ctx.command_path if error.ctx is not None else "hfvram"
    return f"{error.format_message()} (see '{command} --help')"


class HfvramGroup(click.Group):
    """Turns hfvram's errors into one line and the contract's exit code; a traceback only with --debug."""

    command_class = HfvramCommand

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as error:
            _fail(_usage_line(error), error.exit_code)
            raise  # not reached: _fail exits

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            _fail(_usage_line(error), error.exit_code)
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
            help="GPU id or alias with optional count (rtx4090, h100x8, 24GiB); a mixed set rtx4090+rtx3090; "
            "check and fit --cheapest: a comma list of sets to compare (rtx4090,rtx3090x2,h100).",
        ),
        click.option(
            "--engine",
            "engine",
            metavar="NAME[@VER]",
            shell_complete=complete_engine,
            help="vllm, sglang, llama.cpp, ollama, … (default: vllm; llama.cpp for GGUF).",
        ),
        click.option(
            "--context",
            "context",
            metavar="N",
            help="Tokens per sequence: 8k, 32k, 131072 (default: the engine's); vLLM: auto, the length it would pick.",
        ),
        click.option(
            "--prompt",
            "prompt",
            metavar="N",
            help="Prompt tokens per request: adds the prefill / time-to-first-token bound (check).",
        ),
        click.option(
            "--max-context-cap",
            "max_context_cap",
            metavar="N",
            help="With --context auto (vLLM's --max-model-len auto): the longest length it may pick.",
        ),
        click.option(
            "--concurrency",
            "concurrency",
            metavar="N",
            help="Sequences held at full context (default 1); max: the largest batch that starts.",
        ),
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
        click.option(
            "--quant",
            "quant",
            metavar="Q|auto",
            shell_complete=complete_quant,
            help="What-if: size the weights as another format (GGUF Q4_K_M, Q8_0, IQ4_XS, …; Hub awq, "
            "gptq-int4-g128, fp8, fp8-block, nvfp4, mxfp4, bnb-nf4, w8a8-int8, …; `auto`: the largest that fits "
            "--gpu). Every other fact is read from the real files.",
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
        click.option(
            "--host-memory",
            "host_memory",
            metavar="MEM",
            shell_complete=complete_host_memory,
            help="llama.cpp with layers in RAM: the host memory (ddr5-6000x2, epyc-9004, apple-m4-max, 90GB/s; "
            "default ddr5-5600x2).",
        ),
        click.option("--ram", "ram", metavar="SIZE", help="llama.cpp offload plan: the RAM there is (64GiB)."),
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
price_option = click.option(
    "--price",
    "price_kind",
    type=click.Choice(("any", "new", "used")),
    default="any",
    show_default=True,
    help="GPU lists: which published price counts (any: the lowest, new or used; hfvram/data/gpu_prices.toml).",
)


# ---- request resolution (pure wiring of the parsers) -------------------------------------------------------------


def _console(stderr: bool = False) -> Any:
    """rich's Console on stdout (or stderr): the width of ``report_width``, plain ASCII where the stream cannot
    encode Unicode (``LANG=C``, ``PYTHONIOENCODING=ascii``)."""
    from rich.console import Console

    from hfvram.report.text import AsciiStream, TrimmedStream, encodes_unicode, report_width

    stream = sys.stderr if stderr else sys.stdout
    file: Any = TrimmedStream(stream if encodes_unicode(stream) else AsciiStream(stream))
    console = Console(file=file, highlight=False, soft_wrap=False, width=report_width(stream))
    # rich ends a broken pipe with SystemExit(1), which the contract reads as "does not fit": 141 instead, as scan
    console.on_broken_pipe = _quiet_broken_pipe  # type: ignore[method-assign]
    return console


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
@click.argument("sources", nargs=-1, metavar="[SOURCE]...")
@run_options
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Output format (default: table).")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json (schema hfvram.check/1).")
@click.option("--pack", "as_pack", is_flag=True, help="The SOURCEs together on one GPU set (implied by two or more).")
@markdown_option
@click.option(
    "--fail-on",
    "fail_on",
    type=click.Choice(["tight", "offload"]),
    help="Exit 1 on Offload (tight: on Tight and Offload) as well as on Doesn't fit (needs --gpu: without one there is no verdict).",
)
@price_option
@click.option(
    "--launch",
    "launch_only",
    is_flag=True,
    help="Print just the engine's command line that reproduces this check (exit code as without it).",
)
def check(
    sources: tuple[str, ...],
    fmt: str | None,
    as_json: bool,
    as_pack: bool,
    as_markdown: bool,
    fail_on: str | None,
    price_kind: str,
    launch_only: bool,
    **kwargs: Any,
) -> None:
    """One model: the four memory terms on the worst GPU, the verdict and the capacity.

    SOURCE: org/name[@revision], org/name:Q4_K_M, a local folder, a .gguf file, or a cached repo.
    With --gpu a,b,c (a comma list) the sets side by side (hfvram.compare/1): exit 0 when at least one fits.
    With --engine vllm@0.25,vllm@0.26 (or vllm,sglang,llama.cpp) the engine settings side by side, with what
    changed between them and the rule that changed it (hfvram.engines/1): exit 0 when at least one fits.
    With several SOURCEs (or --pack) the models together on one GPU set, each vLLM instance with its own
    --gpu-memory-utilization (hfvram.pack/1): exit 0 when the set fits.
    """
    options = _run_options(kwargs)
    output = _output_format(fmt, as_json, as_markdown=as_markdown)
    if as_pack or len(sources) > 1:
        _print_pack(options, sources, output, launch_only, fail_on)
    source = sources[0] if sources else None
    from hfvram.api import check_with_options
    from hfvram.estimate.hardware import is_gpu_list

    require_gpu_for_fail_on(fail_on, options.gpu)
    from hfvram.compare_engines import is_engine_list

    if is_engine_list(options.engine):
        _print_engine_comparison(options, source, output, fail_on == "tight")
    if is_gpu_list(options.gpu):
        _print_comparison(options, source, output, price_kind, fail_on)

    report = check_with_options(options, source).document
    if report.get("schema") == "hfvram.gguf_repo/1":  # a GGUF repo as a whole: one row per quant
        from hfvram.report.gguf_repo import gguf_repo_markdown, render_gguf_repo

        if output == "json":
            _echo_json(report)
        elif output == "markdown":
            _echo(gguf_repo_markdown(report), nl=False)
        else:
            render_gguf_repo(_console(), report)
        sys.exit(exit_code_for([report.get("verdict")], fail_on))
    if launch_only:
        from hfvram.report.wording import launch_command_lines

        if fmt or as_json or as_markdown:
            raise UsageError("--launch prints just the command line: drop --json / --markdown / --format")
        lines = launch_command_lines(report.get("launch"))
        if not lines:
            raise UsageError(f"{report['engine'].get('name')} has no command line to print (it is a library)")
        from hfvram.report.text import safe

        _echo("\n".join(safe(line) for line in lines))
    elif output == "json":
        _echo_json(report)
    elif output == "markdown":
        from hfvram.report.markdown import check_markdown

        _echo(check_markdown(report, explain=options.explain), nl=False)
    else:
        from hfvram.report.table import render_check

        render_check(_console(), report, explain=options.explain)
    sys.exit(exit_code_for([report.get("verdict")], fail_on))


def _print_pack(
    options: RunOptions, sources: tuple[str, ...], output: str, launch_only: bool, fail_on: str | None
) -> None:
    """Several models on one GPU set (check A B --gpu h100); exits."""
    from hfvram.pack import pack_exit_code, pack_report
    from hfvram.report.pack import pack_launch_lines, pack_markdown, render_pack

    if not sources:
        raise UsageError("--pack needs the models: hfvram check A B --gpu h100")
    document = pack_report(options, sources)
    if launch_only:
        if output != "table":
            raise UsageError("--launch prints just the command lines: drop --json / --markdown / --format")
        _echo("\n".join(pack_launch_lines(document)))
    elif output == "json":
        _echo_json(document)
    elif output == "markdown":
        _echo(pack_markdown(document), nl=False)
    else:
        render_pack(_console(), document)
    sys.exit(pack_exit_code(document, fail_on))


def _print_engine_comparison(options: RunOptions, source: str | None, output: str, fail_on_tight: bool) -> None:
    """Engine settings side by side (check --engine vllm@0.25,vllm@0.26 or vllm,sglang); exits."""
    from hfvram.compare_engines import engines_exit_code, engines_report
    from hfvram.report.compare_engines import engines_markdown, render_engines_compare

    if options.explain:
        raise UsageError("--explain goes with one engine: drop it, or check each setting of the list on its own")
    document = engines_report(options, source)
    if output == "json":
        _echo_json(document)
    elif output == "markdown":
        _echo(engines_markdown(document), nl=False)
    else:
        render_engines_compare(_console(), document)
    sys.exit(engines_exit_code(document, fail_on_tight))


def _print_comparison(
    options: RunOptions, source: str | None, output: str, price_kind: str, fail_on: str | None, cheapest_from: str = ""
) -> None:
    """GPU sets side by side (check --gpu a,b,c) or the cheapest that fits (fit --cheapest); exits."""
    from hfvram import compare
    from hfvram.report.compare import compare_markdown, render_compare

    if options.explain:
        raise UsageError("--explain goes with one GPU set: drop it, or check each set of the list on its own")
    if cheapest_from:
        assert source is not None
        document = compare.cheapest_report(options, source, wanted=cheapest_from, price_kind=price_kind)
    else:
        document = compare.compare_report(options, source, price_kind=price_kind)
    if output == "json":
        _echo_json(document)
    elif output == "markdown":
        _echo(compare_markdown(document), nl=False)
    else:
        render_compare(_console(), document)
    sys.exit(compare.compare_exit_code(document, fail_on))


# ---- scan ------------------------------------------------------------------------------------------------------


@cli.command()
@click.argument("file")
@run_options
@click.option("--format", "fmt", type=click.Choice(SCAN_FORMATS), help="Output format (default: table).")
@click.option("--json", "as_json", is_flag=True, help="JSON Lines: one hfvram.check/1 object per source.")
@click.option(
    "--jobs", "-j", type=click.IntRange(1, 64), default=DEFAULT_JOBS, show_default=True, help="Sources read at once."
)
@markdown_option
@click.option(
    "--fail-on",
    "fail_on",
    type=click.Choice(["tight", "offload"]),
    help="Exit 1 on Offload (tight: on Tight and Offload) as well (needs --gpu).",
)
def scan(
    file: Any, fmt: str | None, as_json: bool, as_markdown: bool, jobs: int, fail_on: str | None, **kwargs: Any
) -> None:
    """Many models: one SOURCE per line of FILE ('-' = stdin), read concurrently.

    A source that cannot be read becomes an error row; the others are still reported.
    """
    options = _run_options(kwargs)
    output = "jsonl" if as_json and not as_markdown else _output_format(fmt, as_json, as_markdown=as_markdown)
    from hfvram.sources.limits import byte_cap, read_user_file  # capped, regular files only ('-' = stdin)

    # a regular file, never followed through a link (a list in a pull request may link to .git/config)
    listed = read_scan_list(read_user_file(file, byte_cap("scan_list"), what="scan list", follow_links=False))
    sources = listed.sources
    if not sources:
        raise UsageError("no sources in the list (one SOURCE per line, '#' comments)")
    if listed.duplicates:
        _write_stderr(f"hfvram: {listed.duplicates:,} repeated lines in the list: each source is answered once")
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
        _flush_stdout()
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        # the reads still in flight are abandoned: no interpreter teardown that would wait for their threads
        os._exit(EXIT_INTERRUPTED)
    sys.exit(scan_exit_code(reports, fail_on))


def _models_with_progress(options: RunOptions, family: str | None, sort: str) -> list[dict[str, Any]]:
    """The catalogue's rows, with a progress bar on stderr when it is a terminal (``--quant auto`` sizes every
    model at several quants: seconds, not a blink)."""
    from hfvram.pipeline import models_rows

    stderr = _console(stderr=True)
    if not stderr.is_terminal:
        return models_rows(options, family=family, sort=sort)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("checking the catalogue"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=stderr, transient=True,
    )  # fmt: skip
    with bar:
        task = bar.add_task("models", total=None)
        return models_rows(
            options,
            family=family,
            sort=sort,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )


def _scan_all(sources: list[str], options: RunOptions, jobs: int, output: str) -> tuple[list[dict[str, Any]], bool]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from hfvram.report.jsonout import error_dict
    from hfvram.scan import run_scan

    reports: list[dict[str, Any]] = []
    stderr = _console(stderr=True)
    from hfvram.scan import QuotaProgress

    progress = Progress(
        TextColumn("scanning"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[quota]}"),  # the Hub bucket that bounds the scan and the ETA its quota allows
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,
    )
    quota = QuotaProgress(len(sources), options.token)
    interrupted = False
    with progress:
        task = progress.add_task("scan", total=len(sources), quota="")
        if stderr.is_terminal:
            quota.start()
            from hfvram.sources.http import say_through

            say_through(lambda line: progress.console.print(line, markup=False, highlight=False))

        def emit(report: dict[str, Any]) -> None:
            if output == "jsonl":  # rendered where the source was read (see _jsonl_rendered)
                _echo(report["line"])
                reports.append(report["slim"])
            else:
                _stream_result(report, output, progress.console)
                reports.append(report)
            progress.update(task, advance=1, quota=quota.update(len(reports)))

        ascii_only = not _stdout_unicode()

        def as_jsonl(report: dict[str, Any]) -> dict[str, Any]:
            """JSON Lines are printed as they come: the line, and only what the exit code needs of the report
            (memory flat in the list)."""
            from hfvram.report.tabular import jsonl_line

            return {"line": jsonl_line(report, ascii_only=ascii_only), "slim": _verdict_only(report)}

        try:
            run_scan(
                sources,
                lambda source: scan_one(source, options),
                jobs,
                emit,
                failed=error_dict,
                render=as_jsonl if output == "jsonl" else None,
                token=options.token,
                offline=bool(options.offline),
            )
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


# ---- models ----------------------------------------------------------------------------------------------------


@cli.command()
@click.argument("query", required=False)
@click.option("--list", "listing", is_flag=True, help="List the catalogue's repo ids (those holding QUERY).")
@run_options
@click.option("--family", "family", metavar="F", help="Only architectures / model types holding F (llama, qwen3).")
@click.option(
    "--sort",
    "sort",
    type=click.Choice(MODEL_SORTS + HUB_MODEL_SORTS),
    default=None,
    help="verdict (the default): fits first, then the largest; total: least memory first; params, context, speed: "
    "largest first; with --hub also downloads (its default), likes, trending: the Hub's listing order.",
)
@click.option("--format", "fmt", type=click.Choice(SCAN_FORMATS), help="Output format (default: table).")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json (schema hfvram.models/1).")
@markdown_option
@click.option("--hub", "from_hub", is_flag=True, help="The Hub's own models (its listing), not the embedded catalogue.")
@click.option("--author", metavar="OWNER", help="With --hub: only OWNER's repos.")
@click.option("--search", metavar="TEXT", help="With --hub: only repo ids holding TEXT.")
@click.option(
    "--filter",
    "filters",
    metavar="TAG",
    multiple=True,
    help="With --hub: only repos tagged TAG (text-generation, gguf).",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    help="With --hub: the first N repos listed.",
)
def models(
    query: str | None,
    listing: bool,
    family: str | None,
    sort: str | None,
    fmt: str | None,
    as_json: bool,
    as_markdown: bool,
    from_hub: bool,
    author: str | None,
    search: str | None,
    filters: tuple[str, ...],
    limit: int,
    **kwargs: Any,
) -> None:
    """Which of the embedded catalogue's models run on --gpu: one row per model (offline, no network).

    \b
    Examples:
      hfvram models --gpu m4-max-64 --context 8k
      hfvram models --gpu rtx4090 --engine llama.cpp --family qwen --sort speed
      hfvram models --list llama

    With --hub: the Hub's own models instead (--author, --search, --filter, --sort downloads|likes|trending,
    --limit), each read from the Hub as `scan` reads it (facts cache, caps, the Hub's rate limits); the catalogue
    stays the offline answer.

    Exit codes: 0 at least one model fits (or is tight), 1 none does, 2 usage error (3: --hub and the Hub could
    not be read). With --list: 0, or 1 when no repo id holds QUERY.
    """
    from hfvram.pipeline import catalogue_params, models_query
    from hfvram.report.models import search_repos
    from hfvram.sources.catalog import catalog_repos

    if listing:
        from hfvram.report.models import list_lines

        found = search_repos(catalog_repos(), query)
        if not found:
            _write_stderr(f"hfvram: no catalogue repo matches {query!r}")
            sys.exit(1)
        _echo("\n".join(list_lines(found, catalogue_params(found))))
        sys.exit(0)
    if query is not None:
        raise UsageError(f"QUERY ({query!r}) goes with --list; to check one model use `hfvram check {query}`")
    options = _run_options(kwargs)
    output = _output_format(fmt, as_json, as_markdown=as_markdown)
    hub_only = [name for name, given in (("--author", author), ("--search", search), ("--filter", filters)) if given]
    if not from_hub and (hub_only or sort in HUB_MODEL_SORTS):
        raise UsageError(f"{(hub_only or ['--sort ' + str(sort)])[0]} goes with --hub (the Hub's own listing)")
    if from_hub:
        asked, rows = _hub_models(options, family, sort or "downloads", author, search, filters, limit)
    else:
        sort = sort or "verdict"
        asked = models_query(options, family=family, sort=sort)
        rows = _models_with_progress(options, family, sort)
    from hfvram.report import models as view

    if output == "json":
        _echo_json(view.models_document(asked, rows))
    elif output == "jsonl":
        from hfvram.report.tabular import jsonl_line

        for row in rows:
            _echo(jsonl_line(row, ascii_only=not _stdout_unicode()))
    elif output == "csv":
        _echo(view.models_csv(rows), nl=False)
    elif output == "markdown":
        _echo(view.models_markdown(asked, rows), nl=False)
    else:
        view.render_models(_console(), asked, rows)
    if not rows:
        _write_stderr(
            "hfvram: the Hub listed no model for that query"
            if from_hub and not family
            else f"hfvram: no {'listed' if from_hub else 'catalogue'} model has the family {family!r}"
        )
    sys.exit(view.models_exit_code(rows))


def _row_repo(row: dict[str, Any]) -> str:
    source = row.get("source") or {}
    return str(source.get("repo_id") or str(source.get("text") or "").split(":", 1)[0])


def _hub_models(
    options: RunOptions,
    family: str | None,
    sort: str,
    author: str | None,
    search: str | None,
    filters: tuple[str, ...],
    limit: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`models --hub`: the Hub's listing, then each listed repo read as `scan` reads it (its model info from the
    listing; a GGUF repo at the quant --quant names when it holds it, else Q4_K_M, else its first)."""
    from hfvram.pipeline import models_query, scan_one
    from hfvram.report.jsonout import error_dict
    from hfvram.report.models import family_matches, select_rows
    from hfvram.scan import run_scan
    from hfvram.sources.limits import validate_endpoint_env
    from hfvram.sources.repo_files import offline_requested, quant_tags

    if options.offline or offline_requested():
        raise UsageError("models --hub reads the Hub's listing: drop --offline (the catalogue is the offline answer)")
    asked = models_query(options, family=family, sort="verdict")
    asked["sort"] = sort
    asked["hub"] = {"author": author, "search": search, "filter": list(filters), "limit": limit}
    validate_endpoint_env()
    from hfvram.sources import hub

    listed = hub.list_hub_models(
        author=author, search=search, filters=filters, sort=sort if sort in HUB_MODEL_SORTS else "downloads",
        limit=limit, token=options.token,
    )  # fmt: skip
    sources = []
    for info in listed:
        tags = quant_tags([f for f in info.files if f.lower().endswith(".gguf")])
        if "config.json" in info.files or not tags:
            sources.append(info.repo_id)
            continue
        wanted = str(options.quant or "").upper()
        sources.append(f"{info.repo_id}:{wanted if wanted in tags else 'Q4_K_M' if 'Q4_K_M' in tags else tags[0]}")
    order = {info.repo_id: index for index, info in enumerate(listed)}
    rows: list[dict[str, Any]] = []
    run_scan(
        sources,
        lambda source: scan_one(source, options),
        DEFAULT_JOBS,
        rows.append,
        failed=error_dict,
        token=options.token,
    )
    if sort in HUB_MODEL_SORTS:
        kept = [row for row in rows if family_matches(row, family)]
        kept.sort(key=lambda row: order.get(_row_repo(row), len(order)))
        return asked, kept
    return asked, select_rows(rows, family=family, sort=sort)


# ---- fit -------------------------------------------------------------------------------------------------------


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
@click.option(
    "--fail-on",
    "fail_on",
    type=click.Choice(["tight", "offload"]),
    help="Exit 1 on Offload (tight: on Tight and Offload) as well.",
)
@click.option(
    "--cheapest",
    "cheapest",
    is_flag=True,
    help="Name the cheapest GPU set that fits: the --gpu list as given, or the fewest of each priced catalogue GPU.",
)
@click.option(
    "--from",
    "cheapest_from",
    type=click.Choice(("consumer", "workstation", "datacenter", "apple", "all")),
    help="--cheapest without --gpu: the catalogue class to pick from (default all).",
)
@price_option
def fit(
    sources: tuple[str, ...],
    fmt: str | None,
    as_json: bool,
    as_markdown: bool,
    plot: str | None,
    fail_on: str | None,
    cheapest: bool,
    cheapest_from: str | None,
    price_kind: str,
    **kwargs: Any,
) -> None:
    """The inverse view: longest context, most concurrent requests and the smallest GPU count that fit.

    With --cheapest: the cheapest GPU set that fits at --context / --concurrency (hfvram.compare/1), from the --gpu
    list or from the catalogue (--from CLASS, up to 8 GPUs of one kind); exit 0 when one fits, 1 when none does.

    Exit codes as for check, for the layout asked (--gpu, --context, --concurrency): 0 fits or tight, 1 does not
    fit (or tight with --fail-on tight) for any SOURCE, 2 usage error, 3 a model could not be read."""
    from hfvram.estimate.hardware import is_gpu_list

    options = _run_options(kwargs)
    output = _output_format(fmt, as_json, as_markdown=as_markdown)
    if cheapest_from and not cheapest:
        raise UsageError("--from goes with --cheapest")
    if cheapest:
        if len(sources) != 1:
            raise UsageError("fit --cheapest answers for one SOURCE at a time")
        if cheapest_from and options.gpu is not None:
            raise UsageError("--from picks GPUs from the catalogue; --gpu names them: give one of the two")
        if plot:
            raise UsageError("--plot goes with one GPU set, not with --cheapest")
        _print_comparison(options, sources[0], output, price_kind, fail_on, cheapest_from or "all")
    if options.gpu is None:
        raise UsageError("fit needs --gpu SPEC (for example --gpu rtx4090)")
    if is_gpu_list(options.gpu):
        raise UsageError("fit takes one GPU set; a comma list goes with --cheapest (or `hfvram check`, to compare)")
    hardware = parse_gpu_option(options.gpu, options.unified_fraction)
    if hardware is not None and hardware.mixed:
        raise UsageError(
            "fit's smallest GPU count is for one kind of GPU: check a mixed set with `hfvram check --gpu "
            f"{hardware.label}`, or compare it with `fit --cheapest --gpu {hardware.label},…`"
        )
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
    sys.exit(exit_code_for([report.get("verdict") for report in public], fail_on))


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
    """The accelerator catalogue: id, memory the device exposes, bandwidth, aliases.

    QUERY is part of a name (4090, h100) or a memory size (24GB, 16GiB: every device sold with that much).
    """
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


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="JSON (schema hfvram.engine_list/1).")
@debug_option
def engines(as_json: bool) -> None:
    """Every engine: its rule sets and their release dates, the newest release reviewed and the newest known.

    --engine NAME@VERSION picks the rule set in force at VERSION; above the newest reviewed release the newest
    rules apply, with a warning.
    """
    from hfvram.estimate.releases import engines_document

    document = engines_document()
    if as_json:
        _echo_json(document)
    else:
        from hfvram.report.engines import render_engine_list

        render_engine_list(_console(), document)


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
        from hfvram.engines import parse_engine_name

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
        est = calibration_prediction(measured, model, hardware, engine_name, engine_version, settings, offline, token)
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
            # whole or not at all: no partial or 0-byte file on a full disk (exit 3)
            cal.write_atomically(path, json.dumps(record, indent=2) + "\n", what=f"--output {output_path}")
        else:
            path = cal.save_calibration(record)
        result["saved"] = str(path)
    result.pop("_spec", None)
    from hfvram.redaction import redact_document

    result = redact_document(result)
    if as_json:
        _echo_json(result)
    else:
        from hfvram.report.table import render_calibration

        render_calibration(_console(), result)
        if "saved" in result:
            from hfvram.report.text import safe

            _echo(f"saved calibration: {safe(result['saved'])}")


if __name__ == "__main__":  # pragma: no cover
    main()
