"""``hfvram scan``: many models from a list, read concurrently, streamed as they finish."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import click

from hfvram.commands.options import (
    DEFAULT_JOBS,
    SCAN_FORMATS,
    HfvramCommand,
    _output_format,
    _run_options,
    markdown_option,
    run_options,
)
from hfvram.commands.output import (
    EXIT_INTERRUPTED,
    _console,
    _echo,
    _echo_json,
    _flush_stdout,
    _stdout_unicode,
    _write_stderr,
)
from hfvram.errors import UsageError
from hfvram.pipeline import RunOptions, parse_gpu_option, require_gpu_for_fail_on


@click.command(cls=HfvramCommand)
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
    from hfvram.pipeline import read_scan_list, scan_exit_code, scan_sort_key

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


def _scan_all(sources: list[str], options: RunOptions, jobs: int, output: str) -> tuple[list[dict[str, Any]], bool]:
    from hfvram.pipeline import scan_one
    from hfvram.report.jsonout import error_dict
    from hfvram.scan import run_scan

    reports: list[dict[str, Any]] = []
    stderr = _console(stderr=True)
    from hfvram.scan import QuotaProgress

    progress = _scan_progress(stderr)
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


def _scan_progress(stderr: Any) -> Any:
    """The progress bar on stderr (off when it is not a terminal), with the Hub quota's words after it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("scanning"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[quota]}"),  # the Hub bucket that bounds the scan and the ETA its quota allows
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,
    )


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
