"""The local Hub answers the way huggingface.co answers huggingface_hub: its own client functions work
against it and raise their own typed errors (so hfvram's mapping is tested against real behaviour)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hubserver import HubFiles, HubServer
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub import errors as hf_errors

from hfvram.errors import UnsupportedLayoutError
from hfvram.sources import load_model

ROOT = Path(__file__).resolve().parent.parent
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def test_model_info_with_expand(hub):
    info = HfApi(endpoint=hub.url).model_info(MINILM, expand=["sha", "siblings", "safetensors", "gated"])
    assert len(info.sha) == 40
    assert {s.rfilename for s in info.siblings} >= {"config.json", "model.safetensors"}
    # per-dtype counts computed from the real header (fixtures/README.md: 104 tensors, F32 + one I64)
    assert set(info.safetensors.parameters) == {"F32", "I64"}
    assert hub.records[0].path == f"/api/models/{MINILM}"


def test_file_metadata_of_an_lfs_file(hub):
    meta = get_hf_file_metadata(hf_hub_url(MINILM, "model.safetensors", endpoint=hub.url))
    assert meta.size == 90_868_376  # the full size of the real file, fixtures/README.md
    assert meta.commit_hash and len(meta.commit_hash) == 40
    assert meta.etag


def test_download_of_a_small_file(hub, tmp_path):
    path = hf_hub_download(MINILM, "config.json", endpoint=hub.url, cache_dir=tmp_path)
    assert Path(path).read_bytes() == (ROOT / "fixtures/hub" / MINILM / "config.json").read_bytes()


def test_tree_lists_files_with_sizes(hub):
    entries = {e.path: e for e in HfApi(endpoint=hub.url).list_repo_tree(MINILM)}
    assert entries["model.safetensors"].size == 90_868_376
    assert entries["model.safetensors"].lfs is not None


def test_typed_errors(hub):
    api = HfApi(endpoint=hub.url)
    with pytest.raises(hf_errors.RepositoryNotFoundError):
        api.model_info("nobody/nothing")
    with pytest.raises(hf_errors.RevisionNotFoundError):
        api.model_info(MINILM, revision="no-such-branch")
    with pytest.raises(hf_errors.RemoteEntryNotFoundError):
        get_hf_file_metadata(hf_hub_url(MINILM, "missing.json", endpoint=hub.url))
    hub.gated.add(MINILM)
    with pytest.raises(hf_errors.GatedRepoError):
        get_hf_file_metadata(hf_hub_url(MINILM, "config.json", endpoint=hub.url))


def test_range_inside_and_beyond_the_held_header(hub):
    import httpx2

    url = hf_hub_url(MINILM, "model.safetensors", endpoint=hub.url)
    inside = httpx2.get(url, headers={"Range": "bytes=0-7"}, follow_redirects=True)
    assert inside.status_code == 206
    assert int.from_bytes(inside.content, "little") == 11_408  # header length, fixtures/README.md
    beyond = httpx2.get(url, headers={"Range": "bytes=90868370-"}, follow_redirects=True)
    assert beyond.status_code == 206 and beyond.content == bytes(6)
    assert beyond.headers["content-range"] == "bytes 90868370-90868375/90868376"


def test_pickle_only_repo_is_unsupported(tmp_path, monkeypatch):
    repo = tmp_path / "hub" / "someone" / "old-model"
    repo.mkdir(parents=True)
    shutil.copy(ROOT / "fixtures/hub/meta-llama/Llama-2-7b-hf/config.json", repo / "config.json")
    (repo / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    server = HubServer(HubFiles(root=tmp_path / "hub", headers_dir=tmp_path / "none")).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        with pytest.raises(UnsupportedLayoutError, match="bin"):
            load_model("someone/old-model")
    finally:
        server.stop()
