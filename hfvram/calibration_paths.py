"""Where saved calibrations live, apart from ``hfvram.calibrate`` (its log patterns cost a check's start-up):
a check asks only whether the file for its (engine, GPU) exists, and imports ``calibrate`` when one does."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path


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


def calibration_key(engine: str, gpu_id: str) -> str:
    return f"{engine}--{gpu_id}".replace("/", "_")


def calibration_file(engine: str, gpu_id: str, directory: Path | None = None) -> Path | None:
    """The saved calibration for (engine, GPU), when there is one."""
    path = (directory or calibration_dir()) / f"{calibration_key(engine, gpu_id)}.json"
    return path if path.is_file() else None
