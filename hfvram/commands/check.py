"""``hfvram check``: one model (or a GPU-set, engine or pack comparison) and its verdict."""

from __future__ import annotations

import sys
from typing import Any

import click

from hfvram.commands.options import (
    FORMATS,
    HfvramCommand,
    _output_format,
    _run_options,
    markdown_option,
    price_option,
    run_options,
)
from hfvram.commands.output import _console, _echo, _echo_json
from hfvram.errors import UsageError
from hfvram.pipeline import RunOptions, exit_code_for, require_gpu_for_fail_on


@click.command(cls=HfvramCommand)
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
        _print_gguf_repo(report, output)
    elif launch_only:
        if fmt or as_json or as_markdown:
            raise UsageError("--launch prints just the command line: drop --json / --markdown / --format")
        _print_launch(report)
    else:
        _print_check(report, output, options.explain)
    sys.exit(exit_code_for([report.get("verdict")], fail_on))


def _print_gguf_repo(report: dict[str, Any], output: str) -> None:
    from hfvram.report.gguf_repo import gguf_repo_markdown, render_gguf_repo

    if output == "json":
        _echo_json(report)
    elif output == "markdown":
        _echo(gguf_repo_markdown(report), nl=False)
    else:
        render_gguf_repo(_console(), report)


def _print_launch(report: dict[str, Any]) -> None:
    """``--launch``: just the engine's command line."""
    from hfvram.report.wording import launch_command_lines

    lines = launch_command_lines(report.get("launch"))
    if not lines:
        raise UsageError(f"{report['engine'].get('name')} has no command line to print (it is a library)")
    from hfvram.report.text import safe

    _echo("\n".join(safe(line) for line in lines))


def _print_check(report: dict[str, Any], output: str, explain: bool) -> None:
    if output == "json":
        _echo_json(report)
    elif output == "markdown":
        from hfvram.report.markdown import check_markdown

        _echo(check_markdown(report, explain=explain), nl=False)
    else:
        from hfvram.report.table import render_check

        render_check(_console(), report, explain=explain)


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
