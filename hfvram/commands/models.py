"""``hfvram models``: the embedded catalogue's (or the Hub's) models that run on --gpu."""

from __future__ import annotations

import sys
from typing import Any

import click

from hfvram.commands.options import (
    DEFAULT_JOBS,
    HUB_MODEL_SORTS,
    MODEL_SORTS,
    SCAN_FORMATS,
    HfvramCommand,
    _output_format,
    _run_options,
    markdown_option,
    run_options,
)
from hfvram.commands.output import _console, _echo, _echo_json, _stdout_unicode, _write_stderr
from hfvram.completion import complete_family
from hfvram.errors import UsageError
from hfvram.pipeline import RunOptions


@click.command(cls=HfvramCommand)
@click.argument("query", required=False)
@click.option("--list", "listing", is_flag=True, help="List the catalogue's repo ids (those holding QUERY).")
@run_options
@click.option(
    "--family",
    "family",
    metavar="F",
    shell_complete=complete_family,
    help="Only architectures / model types holding F (llama, qwen3).",
)
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
    from hfvram.pipeline import models_query

    if listing:
        _list_catalogue(query)
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
    _print_models(asked, rows, output)
    if not rows:
        _write_stderr(
            "hfvram: the Hub listed no model for that query"
            if from_hub and not family
            else f"hfvram: no {'listed' if from_hub else 'catalogue'} model has the family {family!r}"
        )
    from hfvram.report import models as view

    sys.exit(view.models_exit_code(rows))


def _list_catalogue(query: str | None) -> None:
    """``--list [QUERY]``: the catalogue's repo ids (exit 0), or exit 1 when none holds QUERY."""
    from hfvram.pipeline import catalogue_params
    from hfvram.report.models import list_lines, search_repos
    from hfvram.sources.catalog import catalog_repos

    found = search_repos(catalog_repos(), query)
    if not found:
        _write_stderr(f"hfvram: no catalogue repo matches {str(query)[:80]!r}")  # (bounded echo: first 80 characters)
        sys.exit(1)
    _echo("\n".join(list_lines(found, catalogue_params(found))))
    sys.exit(0)


def _print_models(asked: Any, rows: list[dict[str, Any]], output: str) -> None:
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
    from contextlib import nullcontext

    from hfvram.pipeline.listed import listed_rows_off

    with listed_rows_off() if family else nullcontext():  # a family is matched on the architecture the config names
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
