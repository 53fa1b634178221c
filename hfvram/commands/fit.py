"""``hfvram fit``: the inverse view (longest context, most requests, fewest GPUs) and --cheapest."""

from __future__ import annotations

import sys
from typing import Any

import click

from hfvram.commands.check import _print_comparison
from hfvram.commands.options import (
    FORMATS,
    HfvramCommand,
    _output_format,
    _run_options,
    markdown_option,
    price_option,
    run_options,
)
from hfvram.commands.output import _console, _echo, _echo_json, _write_stderr
from hfvram.errors import UsageError
from hfvram.pipeline import exit_code_for, parse_gpu_option


@click.command(cls=HfvramCommand)
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
    if plot:
        _plot_fit(results, plot)
    public = [result.document for result in results]
    _print_fit(public, output)
    sys.exit(exit_code_for([report.get("verdict") for report in public], fail_on))


def _plot_fit(results: list[Any], plot: str) -> None:
    """``--plot``: memory against context, one panel per SOURCE."""
    from hfvram.pipeline.fit import memory_panel
    from hfvram.report.plot import plot_memory_against_context

    panels = []
    for result in results:  # fit's results carry the facts and the setup their figures were computed for
        spec, hardware, choice, workload = result.spec, result.hardware_spec, result.engine_choice, result.workload
        assert spec is not None and hardware is not None and choice is not None and workload is not None
        panels.append(memory_panel(result.document, spec, hardware, choice, workload))
    plot_memory_against_context(panels, plot)
    _write_stderr(f"wrote {plot}")


def _print_fit(public: list[dict[str, Any]], output: str) -> None:
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


# ---- gpus ------------------------------------------------------------------------------------------------------
