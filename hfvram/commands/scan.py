"""``hfvram scan``: many models from a list, read concurrently, streamed as they finish."""

from __future__ import annotations

import contextlib
import json
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
    """Every source read and handed on as it finishes: printed at once (JSON Lines, the table's progress lines),
    and only what the summary, the sort and the exit code read of it kept (:func:`_summary`; a JSON array's
    elements wait in a temporary file), so memory stays flat in the list's length."""
    from hfvram.pipeline import scan_one
    from hfvram.report.jsonout import error_dict
    from hfvram.scan import run_scan

    reports: list[dict[str, Any]] = []
    stderr = _console(stderr=True)
    from hfvram.scan import QuotaProgress

    progress = _scan_progress(stderr)
    quota = QuotaProgress(len(sources), options.token)
    interrupted = False
    ascii_only = not _stdout_unicode()
    spill = _Spill() if output == "json" else None
    with progress:
        task = progress.add_task("scan", total=len(sources), quota="")
        if stderr.is_terminal:
            quota.start()
            from hfvram.sources.http import say_through

            say_through(lambda line: progress.console.print(line, markup=False, highlight=False))

        def emit(handed: dict[str, Any]) -> None:
            if output == "jsonl":  # rendered where the source was read (see _summary)
                _echo(handed["line"])
            elif spill is not None:
                handed["summary"]["spilled"] = spill.add(handed.pop("element"))
            else:
                _stream_result(handed["summary"], output, progress.console)
            reports.append(handed["summary"])
            progress.update(task, advance=1, quota=quota.update(len(reports)))

        try:
            run_scan(
                sources,
                lambda source: scan_one(source, options),
                jobs,
                emit,
                failed=error_dict,
                render=lambda report: _summary(report, output, ascii_only=ascii_only),
                token=options.token,
                offline=bool(options.offline),
            )
        except KeyboardInterrupt:
            interrupted = True
    if spill is not None:
        for report in reports:
            report["element"] = spill.get(report.pop("spilled"))
    return reports, interrupted


class _Spill:
    """The elements of a scan's JSON array, each written to one temporary file as it comes and read back once, in
    the array's order, when the array is printed (a 100,000-line list holds no report in memory meanwhile)."""

    def __init__(self) -> None:
        import tempfile

        # open until the array is printed (it outlives the scan's loop), deleted by the system when closed
        self.file = tempfile.TemporaryFile()  # noqa: SIM115
        self.end = 0

    def add(self, text: str) -> tuple[int, int]:
        data = text.encode("utf-8", "surrogatepass")
        self.file.seek(self.end)
        self.file.write(data)
        where = (self.end, len(data))
        self.end += len(data)
        return where

    def get(self, where: tuple[int, int]) -> _Lazy:
        return _Lazy(self.file, *where)


class _Lazy:
    """One spilled element, read when printed."""

    def __init__(self, file: Any, offset: int, length: int) -> None:
        self.file, self.offset, self.length = file, offset, length

    def text(self) -> str:
        self.file.seek(self.offset)
        return self.file.read(self.length).decode("utf-8", "surrogatepass")


def _summary(report: dict[str, Any], output: str, *, ascii_only: bool) -> dict[str, Any]:
    """What is handed back from a source's read (in its worker): JSON Lines, the line printed; else ``summary``,
    only what the summary of ``output`` reads of the report (the table's and Markdown's cells, the CSV row, read
    here), the sort (``scan_sort_key``) and the exit code; for a JSON array, also the element as
    ``json.dumps(reports, indent=2)`` prints it inside the array."""
    source = report.get("source") or {}
    kept: dict[str, Any] = {"source": {key: source[key] for key in ("repo_id", "text") if key in source}}
    if source.get("files"):
        kept["source"]["files"] = list(source["files"][:1])
    if "error" in report:
        kept["error"] = {key: report["error"].get(key) for key in ("kind", "message")}
    else:
        per_gpu, capacity = report.get("per_gpu") or {}, report.get("capacity") or {}
        kept["verdict"] = report.get("verdict")
        kept["per_gpu"] = {key: per_gpu.get(key) for key in ("total", "usable")}
        kept["capacity"] = {key: capacity.get(key) for key in ("kv_tokens", "max_concurrency")}
        kept["utilization"] = report.get("utilization")
    if report.get("what_if"):
        kept["what_if"] = {"quant": report["what_if"].get("quant")}
    if output == "jsonl":
        from hfvram.report.tabular import jsonl_line

        return {"line": jsonl_line(report, ascii_only=ascii_only), "summary": kept}
    if output == "csv":
        from hfvram.report.tabular import csv_row

        kept["csv"] = csv_row(report)
    handed: dict[str, Any] = {"summary": kept}
    if output == "json":
        handed["element"] = json.dumps(report, indent=2, ensure_ascii=ascii_only).replace("\n", "\n  ")
    return handed


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
    """The summary from what :func:`_summary` kept (the same text the whole reports render to)."""
    if output == "jsonl":
        return  # already printed line by line
    if output == "json":
        from hfvram.report.text import safe_json

        # json.dumps(reports, indent=2), an element at a time (each as it was written, read back in this order)
        if not reports:
            click.echo("[]")
        for index, report in enumerate(reports):  # one element at a time: never the whole array in memory
            click.echo(("[\n  " if index == 0 else ",\n  ") + safe_json(report["element"].text()), nl=False)
        if reports:
            click.echo("\n]")
    elif output == "csv":
        from hfvram.report.tabular import rows_to_csv

        _echo(rows_to_csv(report["csv"] for report in reports), nl=False)
    elif output == "markdown":
        from hfvram.report.markdown import scan_markdown

        _echo(scan_markdown(reports), nl=False)
    else:
        from hfvram.report.table import render_scan

        render_scan(_console(), reports)


# ---- models ----------------------------------------------------------------------------------------------------
