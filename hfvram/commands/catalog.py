"""``hfvram gpus`` and ``hfvram engines``: the accelerator catalogue and the engines' rule sets."""

from __future__ import annotations

import sys
from typing import Any

import click

from hfvram.commands.options import HfvramCommand, debug_option
from hfvram.commands.output import _console, _echo_json, _write_stderr
from hfvram.pipeline import EXIT_USAGE


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


@click.command(cls=HfvramCommand)
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


@click.command(cls=HfvramCommand)
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
