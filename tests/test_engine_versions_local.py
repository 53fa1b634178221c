"""llama.cpp's semantic versions mapped onto its build numbers, and Ollama's rule sets 0.5 -> newest each producing a
plan, with the llama-server build each release ships (issues 24 and 28). Versions and builds are read from the data
files (hfvram/engines/{llamacpp,ollama}/rules.toml), never typed into the test."""

from __future__ import annotations

import json

import pytest
from cli_support import FIXTURES, run_hfvram

from hfvram.estimate import common, releases
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import VERDICT_DOES_NOT_FIT, EngineChoice, Workload
from hfvram.readers.gguf import read_gguf_file, spec_from_gguf

GGUF = FIXTURES / "gguf-derived" / "qwen3-30b-a3b.gguf"
OLLAMA = common.load_engine_data("ollama")
TAGS = releases.semver_tags("llama.cpp")


@pytest.fixture(scope="module")
def moe():
    return spec_from_gguf([read_gguf_file(GGUF)], filename=GGUF.name)


def test_semver_tags_map_to_builds_both_ways():
    assert TAGS, "rules.toml [semver] lists the tags"
    for tag in TAGS:
        assert releases.as_build("llama.cpp", f"v{tag.version}") == (f"b{tag.build}", None)
        assert releases.tag_of_build("llama.cpp", tag.build) == tag
        assert tag.source
    # tags and builds order alike; the newest tag is newer than the cap build the newest rule set starts at
    assert [t.build for t in TAGS] == sorted(t.build for t in TAGS)
    cap = common.load_engine_data("llama.cpp")["defaults"]["server_outputs_cap_build"]
    assert TAGS[-1].build > cap
    # a tag the table lacks is a lower bound, said in a note
    newest = TAGS[-1]
    later = f"v{common.version_key(newest.version)[0]}.{common.version_key(newest.version)[1] + 1}.0"
    build, note = releases.as_build("llama.cpp", later)
    assert build == f"b{newest.build}" and note and "lower" not in note and later in note


def _compute(spec, version):
    est = estimate(spec, parse_gpu_spec("h100"), EngineChoice("llama.cpp", version), Workload(context=8192))
    return est.engine["rules"], est.engine["n_outputs_max"], est.per_gpu.activations


def test_a_tag_and_its_build_give_the_same_rules_and_an_older_build_the_older_reserve(moe):
    newest = TAGS[-1]
    by_tag = _compute(moe, f"v{newest.version}")
    assert by_tag == _compute(moe, f"b{newest.build}")
    # no version: the newest rule set hfvram models, the same as the newest tag
    assert _compute(moe, None) == by_tag
    cap = common.load_engine_data("llama.cpp")["defaults"]["server_outputs_cap_build"]
    older = _compute(moe, f"b{cap - 1}")
    assert older[0] != by_tag[0] and older[2] > by_tag[2]  # one logits row per ubatch token before the cap


def test_engines_lists_the_tags_and_the_ollama_releases():
    result = run_hfvram("engines", "--json")
    doc = json.loads(result.stdout)
    rows = {row["engine"]: row for row in doc["engines"]}
    assert [t["version"] for t in rows["llama.cpp"]["semver_tags"]] == [t.version for t in TAGS]
    newest_set = max(OLLAMA["rule_versions"], key=common.version_key)
    assert rows["ollama"]["rule_sets"][-1]["version"] == newest_set
    assert rows["ollama"]["rule_sets"][-1]["date"]
    text = run_hfvram("engines").stdout
    assert f"v{TAGS[-1].version} = b{TAGS[-1].build}" in text


@pytest.mark.parametrize("version", OLLAMA["rule_versions"])
def test_every_ollama_rule_set_produces_a_plan(moe, version):
    # Qwen3-30B-A3B Q4_K_M (17 GiB of weights) on an 8 GB card: every release places part of it in RAM
    est = estimate(moe, parse_gpu_spec("rtx4060ti-8g"), EngineChoice("ollama", version), Workload(context=4096))
    assert est.verdict != VERDICT_DOES_NOT_FIT, (version, est.verdict)
    assert est.engine["rules"] == version


def test_ollama_releases_follow_their_bundled_llama_server_build(moe):
    # the rule sets that set llama_server_build: before the cap build, one logits row per ubatch token; after, slots
    cap = common.load_engine_data("llama.cpp")["defaults"]["server_outputs_cap_build"]
    sets = [v for v, t in OLLAMA["versions"].items() if t.get("llama_server_build")]
    before = [v for v in sets if OLLAMA["versions"][v]["llama_server_build"] < cap]
    after = [v for v in sets if OLLAMA["versions"][v]["llama_server_build"] >= cap]
    assert before and after

    def activations(version):
        choice = EngineChoice("ollama", version, {"num_parallel": "12", "num_ctx": "4096"})
        return estimate(moe, parse_gpu_spec("h100"), choice, Workload(context=4096)).per_gpu.activations

    assert activations(before[-1]) > activations(after[0])
    assert activations(None) == activations(max(after, key=common.version_key))
