"""Where saved calibrations live, apart from ``hfvram.calibrate`` (its log patterns cost a check's start-up):
a check asks only whether the file for its (engine, GPU) exists, and imports ``calibrate`` when one does."""

from __future__ import annotations

import os
import re
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


def calibration_key(engine: str, gpu_id: str, family: str | None = None) -> str:
    """The file name stem: ``vllm--h100-sxm`` (no model family: never applied automatically) or
    ``vllm--h100-sxm--llama``."""
    return (f"{engine}--{gpu_id}" + (f"--{family}" if family else "")).replace("/", "_")


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
