"""Every real config of fixtures/hub (copied from the shared corpus, sources in fixtures/README.md) reads
into a ModelSpec with no unexplained gap, and hfvram's own rules agree with transformers on layer kinds."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from hfvram.readers.config import hf_layer_types, load_json_tolerant, read_config, rule_layer_types
from hfvram.readers.config_fields import ConfigView
from hfvram.spec import LayerKind

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
REPOS = sorted(p.parent for p in HUB.glob("*/*/config.json"))
COMPANIONS = ("hf_quant_config.json", "quantize_config.json", "model.safetensors.index.json")
#: ModelSpec facts that are a gap when None (MoE facts are checked only for MoE models)
FACTS = (
    "architecture",
    "model_type",
    "dtype",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "vocab_size",
    "max_position_embeddings",
    "tie_word_embeddings",
)
MOE_FACTS = ("num_shared_experts", "experts_per_token", "moe_intermediate_size")


def _repo_id(repo: Path) -> str:
    return f"{repo.parent.name}/{repo.name}"


def _config(repo: Path) -> dict:
    return load_json_tolerant((repo / "config.json").read_bytes(), "config.json")


def _companions(repo: Path) -> dict:
    return {name: load_json_tolerant((repo / name).read_bytes(), name) for name in COMPANIONS if (repo / name).exists()}


def test_corpus_is_complete():
    assert len(REPOS) >= 66


def _readme_rows() -> list[list[str]]:
    readme = (HUB.parent / "README.md").read_text(encoding="utf-8")
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in readme.splitlines()]
    return [row for row in rows if len(row) >= 5 and row[1].startswith("hub/")]


def _named_in_derived_note(path: Path) -> bool:
    """Whether ``path``'s folder has a DERIVED.md that names the file (as a whole word, not a prefix)."""
    note = path.parent / "DERIVED.md"
    if not note.is_file():
        return False
    return path.name in set(re.findall(r"[\w.-]+", note.read_text(encoding="utf-8")))


def test_fixtures_are_byte_exact_copies_of_their_sources():
    """Size and sha256 prefix of every SOURCES.md row (kept in fixtures/README.md) match the hub/ file; every
    other hub/ file is a generated one that its folder's DERIVED.md names."""
    rows = _readme_rows()
    assert len(rows) >= 66
    for row in rows:
        data = (HUB.parent / row[1]).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()[:16]) == (int(row[3]), row[4]), row[1]
    sourced = {row[1] for row in rows}
    others = [p for p in HUB.rglob("*") if p.is_file() and str(p.relative_to(HUB.parent)) not in sourced]
    unexplained = [str(p) for p in others if p.name != "DERIVED.md" and not _named_in_derived_note(p)]
    assert unexplained == []
    notes = [p for p in others if p.name == "DERIVED.md"]
    assert notes, "the derived header fixtures are expected to be explained by DERIVED.md notes"
    for note in notes:
        assert any(p.parent == note.parent and p.name != "DERIVED.md" for p in others), f"{note} names no file"


def test_a_file_no_source_row_or_note_explains_is_caught(tmp_path: Path):
    """The rule above is not vacuous: a generated file is accepted only when DERIVED.md names it exactly."""
    (tmp_path / "model.safetensors.index.json").write_text("{}")
    assert not _named_in_derived_note(tmp_path / "model.safetensors.index.json")
    (tmp_path / "DERIVED.md").write_text("model.safetensors: header-only, written by a script.")
    assert _named_in_derived_note(tmp_path / "model.safetensors")
    assert not _named_in_derived_note(tmp_path / "model.safetensors.index.json")


@pytest.mark.parametrize("repo", REPOS, ids=_repo_id)
@pytest.mark.parametrize("use_transformers", [True, False], ids=["transformers", "rules"])
def test_every_config_reads_without_gaps(repo: Path, use_transformers: bool):
    spec = read_config(_config(repo), companions=_companions(repo), use_transformers=use_transformers)
    assert spec.num_layers == len(spec.layers) > 0
    for i, layer in enumerate(spec.layers):
        if layer.kind in (LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED):
            assert layer.num_kv_heads > 0 and layer.head_dim_k > 0, (i, layer)
        if layer.kind in (LayerKind.SLIDING, LayerKind.CHUNKED):
            assert layer.window and layer.window > 0, (i, layer)
        if layer.kind is LayerKind.MLA:
            assert layer.kv_lora_rank > 0 and layer.qk_rope_head_dim > 0, (i, layer)
        if layer.kind in (LayerKind.LINEAR, LayerKind.MAMBA):
            assert layer.conv_state_elems > 0 and layer.ssm_state_elems > 0 and layer.state_heads > 0, (i, layer)
    facts = list(FACTS) + (list(MOE_FACTS) if spec.num_experts else [])
    for fact in facts:
        if getattr(spec, fact) is None:
            assert any(w.startswith(fact) for w in spec.warnings), f"{fact} is None without a warning"
        else:
            assert fact in spec.provenance or fact in ("model_type",), f"{fact} has no provenance"
    assert "layers" in spec.provenance
    assert spec.decided_by.startswith("transformers 5.") or spec.decided_by == "hfvram rules"
    if not use_transformers:
        assert spec.decided_by == "hfvram rules"


@pytest.mark.parametrize("repo", REPOS, ids=_repo_id)
def test_rules_agree_with_transformers_on_layer_kinds(repo: Path):
    config = _config(repo)
    hf_types = hf_layer_types(config)
    with_hf = read_config(config, companions=_companions(repo))
    without = read_config(config, companions=_companions(repo), use_transformers=False)
    assert [layer.kind for layer in with_hf.layers] == [layer.kind for layer in without.layers]
    assert with_hf.kv_bytes_per_token(2) == without.kv_bytes_per_token(2)
    assert with_hf.kv_fixed_bytes_per_sequence(2, 8192) == without.kv_fixed_bytes_per_sequence(2, 8192)
    if hf_types is not None:
        text = config.get("text_config", config)
        view = ConfigView(text=text, top=config, filename="config.json")
        rules, _ = rule_layer_types(view, with_hf.num_layers, text.get("model_type"))
        mla = "kv_lora_rank" in text
        hf_kinds = [
            LayerKind.MLA.value if mla and t == LayerKind.FULL.value else t for t in hf_types[: with_hf.num_layers]
        ]
        assert rules == hf_kinds


def test_transformers_derives_layer_types_for_the_hybrid_families():
    """The comparison above is not vacuous: transformers gives layer_types for these corpus configs."""
    derived = {_repo_id(repo) for repo in REPOS if hf_layer_types(_config(repo)) is not None}
    for repo_id in (
        "google/gemma-2-9b-it",
        "google/medgemma-27b-it",
        "openai/gpt-oss-20b",
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        "Qwen/Qwen3-Next-80B-A3B-Thinking",
        "nvidia/Nemotron-H-56B-Base-8K",
        "deepseek-ai/DeepSeek-V4-Flash",
        "Qwen/Qwen2.5-7B",
    ):
        assert repo_id in derived
