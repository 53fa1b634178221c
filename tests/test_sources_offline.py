"""Offline answers (facts cache, embedded catalogue): what they say about the revision asked for, and that they
never load the HTTP stack (start-up cost)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cli_support import ROOT
from click.testing import CliRunner

from hfvram.cli import cli
from hfvram.sources import catalog
from hfvram.sources.resolve import load_model


def test_catalogue_answer_warns_that_the_requested_revision_was_not_checked():
    loaded = load_model("Qwen/Qwen3-8B@deadbeef", offline=True)
    assert loaded.source.kind == "catalog"
    note = next(w for w in loaded.spec.warnings if "deadbeef" in w)
    assert "could not be checked" in note and str(catalog.catalog_date()) in note


def test_catalogue_answer_without_a_revision_adds_no_revision_warning():
    loaded = load_model("Qwen/Qwen3-8B", offline=True)
    assert not [w for w in loaded.spec.warnings if "revision" in w]


def test_check_json_carries_the_revision_warning():
    result = CliRunner().invoke(cli, ["check", "Qwen/Qwen3-8B@deadbeef", "--offline", "--json"])
    assert result.exit_code in (0, 1), result.output
    assert any("deadbeef" in w for w in json.loads(result.stdout)["warnings"])


def test_offline_catalogue_read_does_not_import_the_http_client(tmp_path):
    code = (
        "import sys; from hfvram.sources import load_model; load_model('Qwen/Qwen3-8B', offline=True); "
        "loaded = [m for m in ('httpx', 'httpx2', 'hfvram.sources.hub', 'hfvram.sources.http') if m in sys.modules]; "
        "print(','.join(loaded))"
    )
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"),
        "HFVRAM_CACHE_DIR": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
