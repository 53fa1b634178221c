"""The run wiring behind ``check`` / ``scan`` / ``fit`` / ``calibrate`` and the Python API (``hfvram.api``): the
options as typed -> a parsed :class:`Request` -> the model loaded -> the estimate (a saved calibration applied) ->
the report document. No click and no printing here: ``hfvram.cli`` parses the command line and prints,
``hfvram.api`` returns typed results; both call this module.

One module per step: ``request`` (options -> :class:`Request`, exit codes), ``model`` (load, engine choice,
estimate, calibration), ``check`` (the check document, launch and offload wiring), ``whatif`` (``--quant``),
``gguf_repo`` (a GGUF repo as a whole), ``scan`` (scan lists, ``models``), ``fit`` (the inverse view and the plot's
series); this package re-exports their names, each module
imported when one of its names is first asked for (``hfvram --help`` loads only ``request``).

Light on purpose (``hfvram --help`` imports it): the sources, readers, engine profiles and reports are imported
inside the functions that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hfvram.pipeline.check import (
        add_launch,
        add_offload_plan,
        check_report,
        launch_choice,
        loaded_report,
        model_argument,
        model_ref,
        with_largest_batch,
    )
    from hfvram.pipeline.fit import (
        FIT_KV_CANDIDATES,
        FIT_MAX_GPUS,
        FitReport,
        fit_figures,
        fit_kv_dtypes,
        fit_report,
        memory_panel,
    )
    from hfvram.pipeline.gguf_repo import GGUF_REPO_SCHEMA, gguf_repo_report, gguf_repo_wanted
    from hfvram.pipeline.model import (
        calibrate_estimate,
        calibration_prediction,
        default_engine_notes,
        engine_choice,
        load,
        parse_engine,
        quant_engine_rule,
        run_estimate,
        with_draft,
        with_quant,
        workload,
    )
    from hfvram.pipeline.request import (
        EXIT_DOES_NOT_FIT,
        EXIT_OK,
        EXIT_UNREADABLE,
        EXIT_USAGE,
        PASTED_FIELDS,
        Request,
        RunOptions,
        exit_code_for,
        parse_gpu_option,
        parse_quant_option,
        require_gpu_for_fail_on,
        resolve_request,
        unified_fraction_notes,
        validate_kv_dtype_name,
    )
    from hfvram.pipeline.scan import (
        NOT_A_SOURCE,
        SCAN_LINE,
        SCAN_MAX_SOURCES,
        VERDICT_ORDER,
        SourceList,
        catalogue_params,
        models_query,
        models_rows,
        read_scan_list,
        read_source_list,
        scan_exit_code,
        scan_one,
        scan_request,
        scan_sort_key,
    )
    from hfvram.pipeline.whatif import auto_quant, gguf_repo_quant, what_if_dict

#: each re-exported name -> the module that defines it
_MODULE_OF = {
    "EXIT_DOES_NOT_FIT": "request",
    "EXIT_OK": "request",
    "EXIT_UNREADABLE": "request",
    "EXIT_USAGE": "request",
    "PASTED_FIELDS": "request",
    "Request": "request",
    "RunOptions": "request",
    "exit_code_for": "request",
    "parse_gpu_option": "request",
    "parse_quant_option": "request",
    "require_gpu_for_fail_on": "request",
    "resolve_request": "request",
    "unified_fraction_notes": "request",
    "validate_kv_dtype_name": "request",
    "calibrate_estimate": "model",
    "calibration_prediction": "model",
    "default_engine_notes": "model",
    "engine_choice": "model",
    "load": "model",
    "parse_engine": "model",
    "quant_engine_rule": "model",
    "run_estimate": "model",
    "with_draft": "model",
    "with_quant": "model",
    "workload": "model",
    "auto_quant": "whatif",
    "gguf_repo_quant": "whatif",
    "what_if_dict": "whatif",
    "GGUF_REPO_SCHEMA": "gguf_repo",
    "gguf_repo_report": "gguf_repo",
    "gguf_repo_wanted": "gguf_repo",
    "add_launch": "check",
    "add_offload_plan": "check",
    "check_report": "check",
    "launch_choice": "check",
    "loaded_report": "check",
    "model_argument": "check",
    "model_ref": "check",
    "with_largest_batch": "check",
    "NOT_A_SOURCE": "scan",
    "SCAN_LINE": "scan",
    "SCAN_MAX_SOURCES": "scan",
    "SourceList": "scan",
    "VERDICT_ORDER": "scan",
    "catalogue_params": "scan",
    "models_query": "scan",
    "models_rows": "scan",
    "read_scan_list": "scan",
    "read_source_list": "scan",
    "scan_exit_code": "scan",
    "scan_one": "scan",
    "scan_request": "scan",
    "scan_sort_key": "scan",
    "FIT_KV_CANDIDATES": "fit",
    "FIT_MAX_GPUS": "fit",
    "FitReport": "fit",
    "fit_figures": "fit",
    "fit_kv_dtypes": "fit",
    "fit_report": "fit",
    "memory_panel": "fit",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'hfvram.pipeline' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"hfvram.pipeline.{module}"), name)


__all__ = [
    "EXIT_DOES_NOT_FIT",
    "EXIT_OK",
    "EXIT_UNREADABLE",
    "EXIT_USAGE",
    "FIT_KV_CANDIDATES",
    "FIT_MAX_GPUS",
    "GGUF_REPO_SCHEMA",
    "NOT_A_SOURCE",
    "PASTED_FIELDS",
    "SCAN_LINE",
    "SCAN_MAX_SOURCES",
    "VERDICT_ORDER",
    "FitReport",
    "Request",
    "RunOptions",
    "SourceList",
    "add_launch",
    "add_offload_plan",
    "auto_quant",
    "calibrate_estimate",
    "calibration_prediction",
    "catalogue_params",
    "check_report",
    "default_engine_notes",
    "engine_choice",
    "exit_code_for",
    "fit_figures",
    "fit_kv_dtypes",
    "fit_report",
    "gguf_repo_quant",
    "gguf_repo_report",
    "gguf_repo_wanted",
    "launch_choice",
    "load",
    "loaded_report",
    "memory_panel",
    "model_argument",
    "model_ref",
    "models_query",
    "models_rows",
    "parse_engine",
    "parse_gpu_option",
    "parse_quant_option",
    "quant_engine_rule",
    "read_scan_list",
    "read_source_list",
    "require_gpu_for_fail_on",
    "resolve_request",
    "run_estimate",
    "scan_exit_code",
    "scan_one",
    "scan_request",
    "scan_sort_key",
    "unified_fraction_notes",
    "validate_kv_dtype_name",
    "what_if_dict",
    "with_draft",
    "with_largest_batch",
    "with_quant",
    "workload",
]
