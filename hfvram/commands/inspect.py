"""``hfvram inspect``: the model's facts only, each with where it came from."""

from __future__ import annotations

import click

from hfvram.commands.options import HfvramCommand, _output_format, debug_option
from hfvram.commands.output import _console, _echo_json
from hfvram.completion import complete_kv_dtype


@click.command(cls=HfvramCommand)
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
