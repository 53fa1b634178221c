"""The ``hfvram`` command line (the contract: README.md): the group, its error handling and ``main``; each command
lives in ``hfvram.commands.<command>`` (parses the options, calls ``hfvram.pipeline`` / ``hfvram.api``, which wire
sources -> readers -> estimator -> report documents, and prints) and is registered here.

Start-up must stay fast: this module imports only click and hfvram's light modules; rich, huggingface_hub, the
readers and the engine profiles are imported inside the commands that need them.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import click

from hfvram import __version__
from hfvram.commands import calibrate, catalog, check, fit, inspect, models, scan
from hfvram.commands.options import DEBUG_META, HfvramCommand, debug_option
from hfvram.commands.output import (
    EXIT_INTERRUPTED,
    WRITE_ERRNOS,
    _fail,
    _flush_stdout,
    _quiet_broken_pipe,
    _write_stderr,
)
from hfvram.errors import HfvramError
from hfvram.pipeline import EXIT_UNREADABLE

# ---- error handling ----------------------------------------------------------------------------------------------


def _debug_enabled(ctx: click.Context | None) -> bool:
    if os.environ.get("HFVRAM_DEBUG", "").lower() in ("1", "true", "yes"):
        return True
    return bool(ctx is not None and ctx.meta.get(DEBUG_META))


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


for command in (
    check.check,
    scan.scan,
    models.models,
    fit.fit,
    catalog.gpus,
    catalog.engines,
    inspect.inspect,
    calibrate.calibrate,
):
    cli.add_command(command)


if __name__ == "__main__":  # pragma: no cover
    main()
