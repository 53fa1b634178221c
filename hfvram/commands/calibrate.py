"""``hfvram calibrate``: a start-up log's measured terms next to hfvram's prediction; --save."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from hfvram.commands.options import HfvramCommand, debug_option
from hfvram.commands.output import _console, _echo, _echo_json
from hfvram.completion import complete_engine, complete_gpu
from hfvram.errors import UsageError


@click.command(cls=HfvramCommand)
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
        from hfvram.pipeline import calibration_prediction

        est = calibration_prediction(measured, model, hardware, engine_name, engine_version, settings, offline, token)
        result["_spec"] = est.spec
        result["predicted"] = cal.predicted_terms(est)
        result["warnings"] += cal.comparison_warnings(measured, result["predicted"]) + list(est.warnings)
    if save:
        result["warnings"] += _save_warnings(measured, model)
        assert hardware is not None  # --save needs --gpu (checked above)
        result["saved"] = _save(measured, hardware.gpu.id, logfile, result.get("_spec"), model, output_path)
    result.pop("_spec", None)
    from hfvram.redaction import redact_document

    _print_calibration(redact_document(result), as_json)


def _save_warnings(measured: Any, model: str | None) -> list[str]:
    """What a saved calibration will not do later: no release named, or no model to apply it to."""
    warnings = []
    if not measured.engine_version:
        warnings.append(
            f"the log does not say which {measured.engine} release ran: later checks do not apply this calibration "
            f"(pass --engine {measured.engine}@VERSION)"
        )
    if not model:
        warnings.append(
            "saved without --model: later checks name this calibration but do not apply it (it applies to the "
            "model family it measured; pass --model SOURCE, the model that ran)"
        )
    return warnings


def _save(measured: Any, gpu_id: str, logfile: str, spec: Any, model: str | None, output_path: str | None) -> str:
    """Write the calibration record (to ``--output`` or the config folder); the path written."""
    from pathlib import Path

    from hfvram import calibrate as cal

    record = cal.calibration_record(measured, gpu_id, os.path.basename(logfile), spec=spec, model=model)
    if output_path:
        path = Path(output_path)
        # whole or not at all: no partial or 0-byte file on a full disk (exit 3)
        cal.write_atomically(path, json.dumps(record, indent=2) + "\n", what=f"--output {output_path}")
    else:
        path = cal.save_calibration(record)
    return str(path)


def _print_calibration(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _echo_json(result)
    else:
        from hfvram.report.table import render_calibration

        render_calibration(_console(), result)
        if "saved" in result:
            from hfvram.report.text import safe

            _echo(f"saved calibration: {safe(result['saved'])}")
