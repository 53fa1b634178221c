"""Every fact the estimator reads carries provenance (a file and field, or "derived: …"), for config.json and
GGUF alike: the real corpus configs of fixtures/hub and the GGUF headers of fixtures/headers (sources in
fixtures/README.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_config_corpus import REPOS, _companions, _config, _repo_id

from hfvram.readers.config import read_config
from hfvram.readers.gguf import read_gguf_file, spec_from_gguf
from hfvram.readers.provenance import missing_provenance, required_provenance
from hfvram.readers.safetensors import file_reader, read_safetensors_header, weights_from_tensors
from hfvram.readers.shapes import derived_weights
from hfvram.readers.tensors import spec_with_weights

HEADERS = Path(__file__).resolve().parent.parent / "fixtures" / "headers"
GGUFS = sorted(HEADERS.glob("*.gguf"))
DISTILL = HEADERS / "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf-header.gguf"
GEMMA3 = HEADERS / "hugginllam--gemma-3-270m-Q4_K_M-GGUF--gemma-3-270m-q4_k_m.gguf-header.gguf"


def _gguf_spec(path: Path):
    return spec_from_gguf([read_gguf_file(path)], filename=path.name)


@pytest.mark.parametrize("repo", REPOS, ids=_repo_id)
@pytest.mark.parametrize("use_transformers", [True, False], ids=["transformers", "rules"])
def test_every_estimator_fact_of_a_corpus_config_has_provenance(repo: Path, use_transformers: bool):
    spec = read_config(_config(repo), companions=_companions(repo), use_transformers=use_transformers)
    assert missing_provenance(spec) == []


@pytest.mark.parametrize("path", GGUFS, ids=lambda p: p.name)
def test_every_estimator_fact_of_a_gguf_has_provenance(path: Path):
    assert missing_provenance(_gguf_spec(path)) == []


def test_gguf_head_dim_is_derived_when_no_key_length_is_stated():
    """The QA case: DeepSeek-R1-Distill-Qwen-7B's GGUF has no qwen2.attention.key_length, so head_dim is
    embedding_length 3584 / head_count 28 = 128, and --explain must say so."""
    spec = _gguf_spec(DISTILL)
    assert spec.head_dim == 128
    assert spec.provenance["head_dim"] == "derived: qwen2.embedding_length / qwen2.attention.head_count"
    assert spec.provenance["num_kv_heads"].endswith(": qwen2.attention.head_count_kv")
    assert spec.provenance["quantization"].endswith(": general.file_type")


def test_gguf_head_dim_stated_by_the_file_is_cited():
    spec = _gguf_spec(GEMMA3)
    assert spec.provenance["head_dim"] == f"{GEMMA3.name}: gemma3.attention.key_length"
    assert spec.provenance["sliding_window"] == f"{GEMMA3.name}: gemma3.attention.sliding_window"
    assert spec.provenance["layers"].startswith("llama.cpp gemma3: set_swa_pattern(6)")


def test_the_walk_covers_each_layer_kind_and_catches_a_gap():
    """Not vacuous: the required names follow the layer kinds, and a dropped entry is reported."""
    by_repo = {_repo_id(repo): repo for repo in REPOS}
    wanted = {
        "deepseek-ai/DeepSeek-V3": {"kv_lora_rank", "qk_rope_head_dim", "moe_layers", "num_mtp_layers"},
        "Qwen/Qwen3-Next-80B-A3B-Thinking": {"recurrent_state", "num_kv_heads", "head_dim"},
        "nvidia/Nemotron-H-56B-Base-8K": {"recurrent_state", "state_dtype_bytes"},
        "mistralai/Mistral-7B-v0.1": {"sliding_window"},
        "meta-llama/Llama-4-Scout-17B-16E-Instruct": {"attention_chunk_size", "num_experts", "experts_per_token"},
    }
    for repo_id, names in wanted.items():
        repo = by_repo[repo_id]
        spec = read_config(_config(repo), companions=_companions(repo), use_transformers=False)
        assert names <= required_provenance(spec), repo_id
        for name in names:
            without = replace(spec, provenance={k: v for k, v in spec.provenance.items() if k != name})
            assert missing_provenance(without) == [name], (repo_id, name)


def test_weights_attached_by_the_readers_name_their_source():
    """sentence-transformers/all-MiniLM-L6-v2: config.json (fixtures/hub) plus the real safetensors header
    (fixtures/headers); and Qwen3-8B's config with weights derived from its shapes. Either way the attached
    weights add a `weights` provenance entry, so the walk over the whole spec passes."""
    header = HEADERS / "sentence-transformers--all-MiniLM-L6-v2--model.safetensors-header"
    by_repo = {_repo_id(repo): repo for repo in REPOS}
    minilm = read_config(_config(by_repo["sentence-transformers/all-MiniLM-L6-v2"]), use_transformers=False)
    tensors = read_safetensors_header(file_reader(header), filename="model.safetensors")
    exact = weights_from_tensors(
        tensors.values(), source="model.safetensors: header (exact)", num_layers=minilm.num_layers
    )
    with_exact = spec_with_weights(minilm, exact)
    assert with_exact.provenance["weights"] == "model.safetensors: header (exact)"
    assert with_exact.params_total == 22_713_216  # as in test_safetensors: the header's 22.7M parameters
    assert "weights" not in minilm.provenance and missing_provenance(with_exact) == []

    qwen = read_config(_config(by_repo["Qwen/Qwen3-8B"]), use_transformers=False)
    derived = derived_weights(qwen)
    with_derived = spec_with_weights(qwen, derived)
    assert with_derived.provenance["weights"] == derived.source and derived.exact is False
    assert missing_provenance(with_derived) == []
