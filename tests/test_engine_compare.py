"""Engine settings side by side (``check --engine vllm@0.25,vllm@0.26``, ``--engine vllm,sglang,llama.cpp``),
through the real CLI: one row per setting, what changed between adjacent rows and the rule set that changed it
(read from vllm.toml: no version is typed here as "the one with the change"), schema hfvram.engines/1, exit 0 when
a row fits."""

from __future__ import annotations

import json

from cli_support import FIXTURES, run_hfvram, validate

from hfvram.estimate import common, releases

QWEN27 = str(FIXTURES / "hub" / "Qwen" / "Qwen3.5-27B")
LLAMA = str(FIXTURES / "hub" / "meta-llama" / "Llama-3.1-8B-Instruct")
GEMMA4 = str(FIXTURES / "hub" / "google" / "gemma-4-26B-A4B")


def rule_set_with(key: str) -> str:
    versions = common.load_engine_data("vllm")["versions"]
    return min((v for v, table in versions.items() if table.get(key) is True), key=common.version_key)


def before(version: str) -> str:
    versions = common.load_engine_data("vllm")["versions"]
    return max((v for v in versions if common.version_key(v) < common.version_key(version)), key=common.version_key)


def compare(source: str, engines: str, *args: str):
    done = run_hfvram("check", source, "--gpu", "h100", "--context", "32k", "--engine", engines, *args, "--json")
    return done, (json.loads(done.stdout) if done.stdout.strip() else None)


def test_two_releases_show_the_hybrid_kv_loss_and_name_the_rule():
    """vllm#50780: a hybrid Gated DeltaNet model loses KV pool from the release of the profiling transient; the
    change between the rows names that rule set, its keys and what its release changed."""
    new = rule_set_with("cudagraph_hybrid_transient")
    old = before(new)
    done, document = compare(QWEN27, f"vllm@{old},vllm@{new}")
    assert done.returncode == 0, done.stderr
    validate(document, "engines")
    first, second = document["rows"]
    assert (first["rules"], second["rules"]) == (old, new)
    assert second["kv_pool_bytes"] < first["kv_pool_bytes"] and second["cuda_graph_bytes"] > first["cuda_graph_bytes"]
    change = document["changes"][0]
    moved = {term["term"]: term for term in change["terms"]}
    assert moved["kv_pool_bytes"]["delta"] == second["kv_pool_bytes"] - first["kv_pool_bytes"]
    [rule] = change["rules"]
    release = releases.release_for_rule_set("vllm", new)
    assert release is not None
    assert rule["rule_set"] == new and "cudagraph_hybrid_transient" in rule["keys"]
    assert rule["changes"] == release.changes and "vllm#50780" in rule["changes"]
    table = run_hfvram("check", QWEN27, "--gpu", "h100", "--context", "32k", "--engine", f"vllm@{old},vllm@{new}")
    assert table.returncode == 0
    named = next(line for line in table.stdout.splitlines() if f"rule set {new} (" in line)
    assert "cudagraph_hybrid_transient" in named
    assert "KV pool" in table.stdout and "CUDA graphs" in table.stdout


def test_a_release_without_a_change_says_the_rule_set_is_the_same():
    newest = releases.newest_reviewed("vllm")
    assert newest is not None
    in_force = max(common.load_engine_data("vllm")["versions"], key=common.version_key)
    done, document = compare(LLAMA, f"vllm@{in_force},vllm@{newest.version}")
    assert done.returncode == 0
    change = document["changes"][0]
    assert change["terms"] == [] and change["rules"] == []
    assert f"the same vllm rule set ({in_force})" in change["why"]
    assert not [w for row in document["rows"] for w in row["warnings"] if w.startswith("--engine vllm@")]


def test_gemma4_says_the_reported_kv_change_is_not_modelled():
    """vllm#49878 (Gemma-4 KV need per request ~+40 % from 0.25.1 to 0.26): reported, its cause not read; the comparison
    shows the rule set between the releases and says the Gemma-4 change is not modelled."""
    new = rule_set_with("cudagraph_hybrid_transient")
    done, document = compare(GEMMA4, f"vllm@{before(new)},vllm@{new}")
    assert done.returncode == 0, done.stderr
    notes = " ".join(rule["changes"] or "" for rule in document["changes"][0]["rules"])
    assert "Gemma-4" in notes and "not modelled" in notes


def test_engines_side_by_side_across_engines():
    done, document = compare(LLAMA, "vllm,sglang,llama.cpp")
    assert done.returncode == 0, done.stderr
    validate(document, "engines")
    assert [row["engine"] for row in document["rows"]] == ["vllm", "sglang", "llama.cpp"]
    assert all("another engine" in change["why"] for change in document["changes"])
    assert all(row["weights_bytes"] and row["kv_tokens"] for row in document["rows"])


def test_exit_codes_and_usage_errors():
    # none fits: 1
    big = str(FIXTURES / "hub" / "Qwen" / "Qwen2.5-72B")
    none_fit = run_hfvram("check", big, "--gpu", "rtx3060", "--engine", "vllm@0.21,sglang", "--json")
    assert none_fit.returncode == 1
    assert all(row["verdict"] == "does_not_fit" for row in json.loads(none_fit.stdout)["rows"])
    # one setting only, or a GPU list as well: usage errors (2), one line each
    single = run_hfvram("check", LLAMA, "--gpu", "h100", "--engine", "vllm,")
    assert single.returncode == 2 and "at least two engine settings" in single.stderr
    both = run_hfvram("check", LLAMA, "--gpu", "h100,rtx4090", "--engine", "vllm,sglang")
    assert both.returncode == 2 and "not both lists" in both.stderr
    unknown = run_hfvram("check", LLAMA, "--gpu", "h100", "--engine", "vllm,nosuch")
    assert unknown.returncode == 2 and "unknown engine 'nosuch'" in unknown.stderr
