"""Calibration: measured start-up terms replacing predicted ones, in three rooms.

- ``hfvram.calibrate.logs``: the log reader (the line-matching toolkit, :class:`Measured`, ``parse_log``), which
  hands a log to its engine's own reader, ``hfvram/engines/<engine>/log.py``;
- ``hfvram.calibrate.files``: where calibrations live, the record ``calibrate --save`` writes, reading one back;
- ``hfvram.calibrate.apply``: whether a record describes an estimate, and replacing its terms.

The public names are re-exported here (``from hfvram import calibrate; calibrate.parse_log``), each imported from
its module on first use (the engines' readers through ``logs``): a check that only asks whether a calibration file
exists imports ``files`` alone, not the log patterns (compiled at import) nor the estimate edits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hfvram.calibrate.apply import (
        SIZE_FACTOR,
        WEIGHTS_MISMATCH,
        apply_calibration,
        calibration_match,
        calibration_mismatches,
        comparison_warnings,
        not_applied_warning,
        predicted_terms,
    )
    from hfvram.calibrate.files import (
        CALIBRATION_SCHEMA,
        calibration_dir,
        calibration_file,
        calibration_files,
        calibration_key,
        calibration_record,
        find_calibration,
        find_calibrations,
        load_calibration_file,
        release_range,
        rules_version_of,
        save_calibration,
        write_atomically,
    )
    from hfvram.calibrate.logs import (
        GIB,
        MAX_LINE,
        MIB,
        Measured,
        detect_engine,
        log_lines,
        measured_dict,
        parse_log,
        read_log,
    )
    from hfvram.engines.llamacpp.log import parse_llamacpp_log
    from hfvram.engines.sglang.log import parse_sglang_log
    from hfvram.engines.vllm.log import parse_vllm_log

_HOME = {
    **dict.fromkeys(
        (
            "SIZE_FACTOR",
            "WEIGHTS_MISMATCH",
            "apply_calibration",
            "calibration_match",
            "calibration_mismatches",
            "comparison_warnings",
            "not_applied_warning",
            "predicted_terms",
        ),
        "apply",
    ),
    **dict.fromkeys(
        (
            "CALIBRATION_SCHEMA",
            "calibration_dir",
            "calibration_file",
            "calibration_files",
            "calibration_key",
            "calibration_record",
            "find_calibration",
            "find_calibrations",
            "load_calibration_file",
            "release_range",
            "rules_version_of",
            "save_calibration",
            "write_atomically",
        ),
        "files",
    ),
    **dict.fromkeys(
        (
            "GIB",
            "MAX_LINE",
            "MIB",
            "Measured",
            "detect_engine",
            "log_lines",
            "measured_dict",
            "parse_llamacpp_log",
            "parse_log",
            "parse_sglang_log",
            "parse_vllm_log",
            "read_log",
        ),
        "logs",
    ),
}

#: the names above, as a literal (checked against _HOME by tests/test_calibrate.py)
__all__ = [
    "CALIBRATION_SCHEMA",
    "GIB",
    "MAX_LINE",
    "MIB",
    "SIZE_FACTOR",
    "WEIGHTS_MISMATCH",
    "Measured",
    "apply_calibration",
    "calibration_dir",
    "calibration_file",
    "calibration_files",
    "calibration_key",
    "calibration_match",
    "calibration_mismatches",
    "calibration_record",
    "comparison_warnings",
    "detect_engine",
    "find_calibration",
    "find_calibrations",
    "load_calibration_file",
    "log_lines",
    "measured_dict",
    "not_applied_warning",
    "parse_llamacpp_log",
    "parse_log",
    "parse_sglang_log",
    "parse_vllm_log",
    "predicted_terms",
    "read_log",
    "release_range",
    "rules_version_of",
    "save_calibration",
    "write_atomically",
]


def __getattr__(name: str) -> Any:
    """A re-exported name, imported from its module on first use (PEP 562)."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # the import statement's machinery, not importlib.import_module: ``-X importtime`` (tests/test_startup_imports.py)
    # reports only imports made through it
    value = getattr(__import__(f"{__name__}.{home}", fromlist=[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
