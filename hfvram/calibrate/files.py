"""Calibration files: where saved calibrations live, the record ``calibrate --save`` writes, and reading one back
(capped, schema-checked). A check asks only whether a file for its (engine, GPU) exists, which needs nothing but
this module: the log patterns (``hfvram.calibrate.logs``) and the estimate edits (``hfvram.calibrate.apply``) are
imported only when a calibration is read or applied."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from hfvram.errors import HfvramError, MalformedFileError, UsageError

if TYPE_CHECKING:
    from hfvram.calibrate.logs import Measured

CALIBRATION_SCHEMA = "hfvram.calibration/1"


def calibration_dir() -> Path:
    """Where saved calibrations live: ``$HFVRAM_CONFIG_DIR/calibration`` or ``platformdirs.user_config_dir("hfvram")``."""
    override = os.environ.get("HFVRAM_CONFIG_DIR")
    if override:
        return Path(override) / "calibration"
    return _default_dir()


@lru_cache(maxsize=1)
def _default_dir() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("hfvram")) / "calibration"


def calibration_key(engine: str, gpu_id: str, family: str | None = None) -> str:
    """The file name stem: ``vllm--h100-sxm`` (no model family: never applied automatically) or
    ``vllm--h100-sxm--llama``."""
    return (f"{engine}--{gpu_id}" + (f"--{family_stem(family)}" if family else "")).replace("/", "_")


#: a model family that may name a file as it is (``llama``, ``qwen3_moe``); any other text is hashed
_FAMILY_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,39}")


def family_stem(family: str) -> str:
    """The file-name part for a model family: the family itself when it is a plain identifier, else a hash of it
    (a model_type with a NUL, a slash or 300 characters comes from a file and never becomes a file name)."""
    if _FAMILY_NAME.fullmatch(family) and ".." not in family:
        return family
    import hashlib

    return "family-" + hashlib.sha256(family.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def write_atomically(path: Path, text: str, *, what: str | None = None) -> None:
    """``text`` written to ``path`` whole or not at all: a temporary file beside it, renamed over it; on any error
    (a full disk) the temporary file is removed and no partial or empty ``path`` is left. A character device
    (``/dev/null``, ``/dev/full``) is written in place, never replaced; a FIFO, socket or folder is refused.
    OutputWriteError (exit 3)."""
    import stat
    import tempfile

    from hfvram.errors import OutputWriteError

    shown = what or str(path)
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and stat.S_ISCHR(mode):
        try:
            with open(path, "w", encoding="utf-8") as device:
                device.write(text)
        except OSError as error:
            raise OutputWriteError(f"cannot write {shown}: {error.strerror or error}") from None
        return
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise OutputWriteError(f"cannot write {shown}: not a regular file")
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:40]}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as error:
        raise OutputWriteError(f"cannot write {shown}: {error.strerror or error}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def calibration_file(engine: str, gpu_id: str, directory: Path | None = None) -> Path | None:
    """The calibration saved without a model family for (engine, GPU), when there is one."""
    path = (directory or calibration_dir()) / f"{calibration_key(engine, gpu_id)}.json"
    return path if path.is_file() else None


def calibration_files(engine: str, gpu_id: str, directory: Path | None = None) -> list[Path]:
    """Every calibration saved for (engine, GPU): those with a model family first, then the one without."""
    folder = directory or calibration_dir()
    if not folder.is_dir():
        return []
    stem = calibration_key(engine, gpu_id)
    paths = [*sorted(folder.glob(f"{glob_escape(stem)}--*.json")), folder / f"{stem}.json"]
    return [path for path in paths if path.is_file()]


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def rules_version_of(engine: str, version: object) -> str | None:
    """The hfvram rule set an engine release falls under (``0.6.4`` -> ``0.6``), None when unknown."""
    if not version:
        return None
    from hfvram.estimate import common

    try:
        return common.engine_rules(engine, str(version))[0]
    except (UsageError, ValueError, OSError):
        return None


def release_range(engine: str, rules_version: str | None) -> str | None:
    """The engine releases that share a rule set: ``0.19 – 0.20.x`` / ``0.21 and later``."""
    if rules_version is None:
        return None
    from hfvram.estimate import common

    data = common.load_engine_data(engine)
    versions = sorted(data.get("rule_versions") or data.get("versions", {}), key=common.version_key)
    later = [v for v in versions if common.version_key(v) > common.version_key(rules_version)]
    return f"{rules_version} up to {later[0]} (excluded)" if later else f"{rules_version} and later"


def calibration_record(
    measured: Measured, gpu_id: str, log_name: str, spec: object | None = None, model: str | None = None
) -> dict[str, object]:
    """What ``calibrate --save`` writes: the measured terms, keyed by engine, the engine's rule set (release
    range), GPU and — when ``--model`` names the model that ran — its family and size."""
    if measured.activations is None and measured.overhead is None:
        raise UsageError("the log has neither an activation nor an overhead figure: nothing to calibrate with")
    rules = rules_version_of(measured.engine, measured.engine_version)
    record: dict[str, object] = {
        "schema": CALIBRATION_SCHEMA,
        "engine": measured.engine,
        "engine_version": measured.engine_version,
        "engine_rules": rules,
        "engine_releases": release_range(measured.engine, rules),
        "gpu": gpu_id,
        "activations": measured.activations,
        "overhead": measured.overhead,
        "measured": {k: v for k, v in asdict(measured).items() if k not in ("details", "warnings")},
        "log": log_name,
    }
    if spec is not None:
        record["model"] = {
            "source": model,
            "family": getattr(spec, "model_type", None),
            "architecture": getattr(spec, "architecture", None),
            "params_total": getattr(spec, "params_total", None),
        }
    return record


def save_calibration(record: Mapping[str, object], directory: Path | None = None) -> Path:
    directory = directory or calibration_dir()
    model = record.get("model")
    family = model.get("family") if isinstance(model, Mapping) else None
    path = (
        directory
        / f"{calibration_key(str(record['engine']), str(record['gpu']), str(family) if family else None)}.json"
    )
    write_atomically(path, json.dumps(record, indent=2) + "\n")
    return path


def load_calibration_file(path: Path) -> dict[str, object]:
    from hfvram.sources.limits import byte_cap, read_user_file

    try:  # capped, regular files only (not /dev/zero, not a FIFO)
        record = json.loads(read_user_file(str(path), byte_cap("local_json"), what="calibration file"))
    except HfvramError:
        raise
    except (OSError, ValueError, RecursionError) as error:
        raise MalformedFileError(f"not a calibration file ({error})", file=str(path)) from None
    if not isinstance(record, dict) or record.get("schema") != CALIBRATION_SCHEMA:
        raise MalformedFileError(f"schema is not {CALIBRATION_SCHEMA}", file=str(path), field="schema")
    for key in ("activations", "overhead"):
        value = record.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise MalformedFileError("must be a non-negative integer (bytes) or null", file=str(path), field=key)
    _bounded_numbers(record, str(path))
    return record


def _bounded_numbers(record: object, path: str, where: str = "") -> None:
    """Every number of a calibration record finite and at most the bytes of the largest GPU set hfvram models
    (bounds.toml [hardware]): a saved file is read back as data, and a huge figure would overflow the estimate."""
    from hfvram.datafiles import data_table

    bounds = data_table("bounds.toml")["hardware"]
    most = int(bounds["maximum_memory_bytes"]) * int(bounds["maximum_gpu_count"])
    stack: list[tuple[str, object]] = [(where, record)]
    while stack:
        name, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{name}.{key}" if name else str(key), item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((f"{name}[{index}]", item) for index, item in enumerate(value))
        elif (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and not (abs(value) <= most and (isinstance(value, int) or math.isfinite(value)))
        ):
            raise MalformedFileError(f"implausible number (at most {most:,})", file=path, field=name[:80])


def find_calibration(engine: str, gpu_id: str, directory: Path | None = None) -> tuple[Path, dict[str, object]] | None:
    path = calibration_file(engine, gpu_id, directory)
    if path is None:
        return None
    return path, load_calibration_file(path)


def find_calibrations(engine: str, gpu_id: str, directory: Path | None = None) -> list[tuple[Path, dict[str, object]]]:
    """Every calibration saved for (engine, GPU): with a model family first, then the one without."""
    return [(path, load_calibration_file(path)) for path in calibration_files(engine, gpu_id, directory)]
