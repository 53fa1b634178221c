"""``hfvram models --hub``: the Hub's own models (its listing, ``GET /api/models``) with a verdict each, through the
real CLI against the test Hub: the listing's order, filters and limit, one listing request in place of a model
info per repo, GGUF repos read at a named quant, and the options that go only with --hub."""

from __future__ import annotations

import json

import jsonschema
from cli_support import run_hfvram, schema
from huggingface_hub import HfApi


def _validate(document) -> None:
    from referencing import Registry, Resource

    resources = [Resource.from_contents(schema(name)) for name in ("check", "models")]
    registry = Registry().with_resources((resource.id(), resource) for resource in resources)
    jsonschema.Draft202012Validator(schema("models"), registry=registry).validate(document)


def _hub_models(*args: str) -> dict:
    result = run_hfvram("models", "--hub", *args, "--gpu", "rtx4090", "--format", "json")
    document = json.loads(result.stdout)
    _validate(document)
    runs = any(r.get("verdict") in ("fits", "tight") for r in document["models"])
    assert result.returncode == (0 if runs else 1), result.stderr[-2000:]  # as for the catalogue
    return document


def test_an_authors_repos_with_verdicts_in_the_hubs_order(hub):
    document = _hub_models("--author", "Qwen", "--limit", "6")
    rows = document["models"]
    listed = [m.id for m in HfApi(endpoint=hub.url).list_models(author="Qwen", sort="downloads", limit=6)]
    assert [r["source"]["repo_id"] for r in rows] == listed  # the listing's order (most downloaded first)
    assert all(r["verdict"] in ("fits", "tight", "does_not_fit") for r in rows)
    assert document["query"]["hub"] == {"author": "Qwen", "search": None, "filter": [], "limit": 6}
    assert document["query"]["sort"] == "downloads"
    # one listing answered every model info: no /api/models/<repo> request
    assert not [r for r in hub.records if r.path.startswith("/api/models/")]
    assert len([r for r in hub.records if r.path == "/api/models"]) == 2  # this test's listing, and the CLI's


def test_search_filter_sort_and_a_gguf_repo_at_a_named_quant(hub):
    document = _hub_models("--filter", "gguf", "--search", "DeepSeek", "--sort", "likes")
    rows = document["models"]
    assert [(r["source"]["repo_id"], r["source"]["files"]) for r in rows] == [
        ("hfvram-test/DeepSeek-R1-Distill-Qwen-7B-GGUF", ["DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf"])
    ]
    assert rows[0]["verdict"] in ("fits", "tight")  # a 7B at Q4_K_M on 24 GB
    by_verdict = _hub_models("--author", "meta-llama", "--sort", "verdict", "--limit", "4")["models"]
    ranks = [("fits", "tight", "does_not_fit").index(r["verdict"]) for r in by_verdict]
    assert ranks == sorted(ranks)


def test_hub_options_without_hub_and_offline_are_usage_errors(hub):
    for args in (["--author", "Qwen"], ["--sort", "downloads"], ["--filter", "gguf"]):
        result = run_hfvram("models", *args, "--gpu", "rtx4090")
        assert result.returncode == 2 and "--hub" in result.stderr
    result = run_hfvram("models", "--hub", "--gpu", "rtx4090", "--offline")
    assert result.returncode == 2 and "offline" in result.stderr
