"""Huge numbers in a vision / audio tower's config (issue 27: a vision dimension of 1e300 gave 294-digit counts):
refused by the config bounds (hfvram/data/bounds.toml) with one read error naming the field, never a figure."""

from __future__ import annotations

import json
import re

import pytest
from cli_support import ROOT
from click.testing import CliRunner

from hfvram.cli import cli

HUB = ROOT / "fixtures" / "hub"
TOWERED = ["Qwen/Qwen3.5-27B", "meta-llama/Llama-4-Scout-17B-16E-Instruct", "google/gemma-4-26B-A4B"]


def _folder(tmp_path, repo: str, tower: str, key: str, value: object):
    config = json.loads((HUB / repo / "config.json").read_text())
    config[tower][key] = value
    folder = tmp_path / repo.replace("/", "--")
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("repo", "key"),
    [("Qwen/Qwen3.5-27B", "out_hidden_size"), ("Qwen/Qwen3.5-27B", "spatial_merge_size"),
     ("Qwen/Qwen3.5-27B", "num_position_embeddings"), ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "vision_output_dim"),
     ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "projector_output_dim")],
)  # fmt: skip
@pytest.mark.parametrize("value", [1e300, 10**300], ids=["1e300", "10^300"])
def test_a_huge_tower_dimension_is_one_read_error(tmp_path, repo, key, value):
    folder = _folder(tmp_path, repo, "vision_config", key, value)
    result = CliRunner().invoke(cli, ["check", str(folder), "--gpu", "h100", "--json"])
    assert result.exit_code == 3, result.output[:300]
    assert result.output.count("\n") == 1 and f"vision_config.{key}" in result.output, result.output[:300]
    assert not re.search(r"\d{25}", result.output)


def test_no_tower_number_makes_a_25_digit_figure_or_an_internal_error(tmp_path):
    """Every numeric field of the towers of three real multimodal configs (fixtures/hub), set to 1e300: a read error
    or an answer without a 25-digit figure, never another exception."""
    from hfvram import api
    from hfvram.errors import HfvramError

    tried = 0
    for repo in TOWERED:
        config = json.loads((HUB / repo / "config.json").read_text())
        for tower in ("vision_config", "audio_config"):
            for key, value in (config.get(tower) or {}).items():
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                tried += 1
                folder = _folder(tmp_path, repo, tower, key, 1e300)
                try:
                    document = api.check(str(folder), gpu="h100").document
                except HfvramError as error:
                    assert "\n" not in str(error)
                    continue
                assert not re.search(r"\d{25}", json.dumps(document, allow_nan=False)), (repo, tower, key)
    assert tried > 20
