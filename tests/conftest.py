"""Shared fixtures: every test runs with its own HF_HOME / HF cache / hfvram facts cache (under tmp_path),
no token and no offline switch from the developer's environment; ``hub`` is the local Hub in miniature
(tests/hubserver.py) with HF_ENDPOINT pointing at it and short timeouts / backoff."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hubserver import HubFiles, HubServer


def pytest_configure(config):
    # Hundreds of tests run `python -m hfvram` in a fresh interpreter. Where PYTHONDONTWRITEBYTECODE is set (as on
    # these CI machines) each of them compiled all of hfvram from source again: 0.25 s of a 0.55 s check. The
    # controller gives every child one bytecode folder of the run's own (removed at the end), so the source tree
    # stays as the user's setting wants it; xdist's workers inherit it.
    if hasattr(config, "workerinput") or "PYTHONPYCACHEPREFIX" in os.environ:
        return
    folder = tempfile.mkdtemp(prefix="hfvram-tests-pycache-")
    config._hfvram_pycache = folder
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_unconfigure(config):
    folder = getattr(config, "_hfvram_pycache", None)
    if folder is not None:
        os.environ.pop("PYTHONPYCACHEPREFIX", None)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def isolated_caches(tmp_path, monkeypatch):
    home = tmp_path / "hf_home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setenv("HFVRAM_CACHE_DIR", str(tmp_path / "hfvram_cache"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    # output width as off a terminal (the README's 120 columns), whatever terminal or runner the suite is under;
    # tests of other widths set COLUMNS themselves
    monkeypatch.setenv("COLUMNS", "120")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    # no user defaults from the developer's config.toml or HFVRAM_* variables (hfvram.settings)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg_config"))
    for name in ("HFVRAM_CONFIG_DIR", "HFVRAM_GPU", "HFVRAM_ENGINE", "HFVRAM_CONTEXT", "HFVRAM_CONCURRENCY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HFVRAM_KV_DTYPE", "HFVRAM_UNIFIED_FRACTION"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture(scope="session")
def hub_server():
    server = HubServer(HubFiles()).start()
    yield server
    server.stop()


@pytest.fixture
def hub(hub_server, monkeypatch):
    """The local Hub, reset (no faults, no gating, counters at zero), with HF_ENDPOINT set to it."""
    hub_server.reset()
    monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
    monkeypatch.setenv("HFVRAM_HTTP_TIMEOUT", "2")
    monkeypatch.setenv("HFVRAM_RETRY_BASE", "0.02")
    monkeypatch.setenv("HFVRAM_RETRY_BUDGET", "3")
    yield hub_server
    hub_server.reset()
