"""Engine releases (issue 28): the rule sets of the newer vLLM releases, the CUDA-graph term from the capture
sizes, the releases table and ``hfvram engines``. Every release and rule read here comes from the data files
(hfvram/engines/*/rules.toml), never from a version typed into the test."""

from __future__ import annotations

import json

import pytest
from cli_support import run_hfvram, validate
from spec_support import derived_spec

from hfvram.engines import engine_names
from hfvram.engines.vllm import memory as vllm_memory
from hfvram.engines.vllm import profile as vllm
from hfvram.estimate import common, releases
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload

GiB = 1024**3


def spec_of(repo: str):
    return derived_spec(repo, use_transformers=False)


def run(spec, gpu, version, context=8192, **settings):
    choice = EngineChoice("vllm", version, {k.replace("_", "-"): str(v) for k, v in settings.items()})
    return estimate(spec, parse_gpu_spec(gpu), choice, Workload(context=context))


def first_rule_set_with(key: str, value: object) -> str:
    versions = common.load_engine_data("vllm")["versions"]
    return min((v for v, table in versions.items() if table.get(key) == value), key=common.version_key)


def rule_set_before(version: str) -> str:
    """The newest rule set older than ``version`` (the release just before a change)."""
    versions = common.load_engine_data("vllm")["versions"]
    return max((v for v in versions if common.version_key(v) < common.version_key(version)), key=common.version_key)


# ---- CUDA graphs from the capture sizes -----------------------------------------------------------------------


def _settings(max_num_seqs: int, batched: int = 8192, eager: bool = False):
    llama = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    _, rules = vllm.PROFILE.constants(None)
    settings = vllm.resolve_settings(
        llama,
        parse_gpu_spec("h100"),
        EngineChoice(
            "vllm",
            settings={
                "max-num-seqs": str(max_num_seqs),
                "max-num-batched-tokens": str(batched),
                "enforce-eager": str(eager).lower(),
            },
        ),
        Workload(context=8192),
        rules,
        "newest",
    )[0]
    return settings, rules


def test_capture_sizes_follow_max_num_seqs_as_vllm_sets_them():
    """vllm/config/vllm.py ``_set_cudagraph_sizes``: largest = min(max_num_seqs x 2, 512, max_num_batched_tokens);
    sizes [1, 2, 4] + range(8, 256, 8) + range(256, largest + 1, 16) up to it."""
    settings, rules = _settings(1024)
    sizes = vllm_memory.capture_sizes(settings, rules)
    assert len(sizes) == 51 and sizes[:4] == [1, 2, 4, 8] and sizes[-1] == 512
    assert vllm_memory.capture_sizes(*_settings(16)) == [1, 2, 4, 8, 16, 24, 32]
    assert vllm_memory.capture_sizes(*_settings(8)) == [1, 2, 4, 8, 16]
    assert vllm_memory.capture_sizes(*_settings(256, batched=64)) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert vllm_memory.capture_sizes(*_settings(1024, eager=True)) == []


def test_graph_memory_scales_with_the_capture_sizes():
    """The flat 1.5 GiB reserve is gone: 16 sequences capture 7 sizes of the default 51 (issue 23: vLLM prints
    0.15 GiB at max_num_seqs 16 where hfvram booked 1.5)."""
    llama = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    full = run(llama, "h100", None).engine["cudagraph_bytes"]
    small = run(llama, "h100", None, max_num_seqs=16).engine["cudagraph_bytes"]
    assert small == pytest.approx(full * 7 / 51, rel=1e-6)
    assert small / GiB < 0.2


def test_graph_estimate_of_llama_8b_matches_its_log():
    """gt-0069 (vLLM 0.19.0, H100, Llama-3.1-8B, defaults: 51 sizes): "Estimated CUDA graph memory: 0.84 GiB
    total". One of the 33 dense start-ups the per-layer constant was fitted on (vllm.toml), so within 10 %."""
    llama = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    graphs = run(llama, "h100", first_rule_set_with("cudagraph_in_budget", True)).engine["cudagraph_bytes"]
    assert graphs / GiB == pytest.approx(0.84, rel=0.10)


def test_graph_estimate_of_a_hybrid_before_the_transient():
    """Held out (not in the fit): noonghunna/club-3090#104, Qwen3.6-27B (the Qwen3.5-27B shape, 64 layers) on two
    RTX 3090 at TP 2 before v0.26: "Profiling CUDA graph memory: PIECEWISE=5 (largest=16)" then "Estimated CUDA
    graph memory: 0.13 GiB total". Five sizes up to 16 are what max_num_seqs 8 captures; that run had
    speculative decoding (hfvram: +18 %), so within 25 %."""
    qwen = spec_of("Qwen/Qwen3.5-27B")
    before = rule_set_before(first_rule_set_with("cudagraph_hybrid_transient", True))
    result = run(qwen, "rtx3090x2", before, tp=2, max_num_seqs=8)
    assert result.engine["cudagraph_bytes"] / GiB == pytest.approx(0.13, rel=0.25)


# ---- 0.25.1: Model Runner V2 for dense models -------------------------------------------------------------------


def test_model_runner_v2_reserves_nothing_for_the_graphs_of_dense_models():
    """vllm#49224 / #49233: from 0.25.1 dense models run on Model Runner V2, whose profile_cudagraph_memory()
    returns 0: the KV pool takes the graphs' share and the graphs are captured outside the budget."""
    mrv2 = first_rule_set_with("cudagraph_mrv2_dense", True)
    before = rule_set_before(mrv2)
    llama = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    old, new = run(llama, "h100", before), run(llama, "h100", mrv2)
    assert old.engine["cudagraph_in_budget"] and not new.engine["cudagraph_in_budget"]
    gained = new.engine["kv_pool_bytes"] - old.engine["kv_pool_bytes"]
    assert gained == pytest.approx(old.engine["cudagraph_bytes"], rel=0.01)
    assert "docs/engines/vllm.md#vllm-mrv2" in new.explain["overhead"]
    # a MoE model stays on the legacy runner: its estimate is still deducted
    moe = run(spec_of("Qwen/Qwen3-30B-A3B"), "h100", mrv2)
    assert moe.engine["cudagraph_in_budget"]


# ---- 0.26: the hybrid profiling transient -------------------------------------------------------------------------


def test_hybrid_models_lose_kv_pool_from_the_transient_release():
    """vllm#50780: from v0.26.0 the graph profiler of hybrid Gated DeltaNet models charges a profiling transient
    as graph memory and the KV pool shrinks (the thread: -18 to -24 %); a dense model is unchanged."""
    transient = first_rule_set_with("cudagraph_hybrid_transient", True)
    before = rule_set_before(transient)
    qwen = spec_of("Qwen/Qwen3.5-27B")
    old, new = run(qwen, "h100", before), run(qwen, "h100", transient)
    assert new.engine["cudagraph_bytes"] > 2 * old.engine["cudagraph_bytes"]
    lost = old.engine["kv_pool_bytes"] - new.engine["kv_pool_bytes"]
    assert lost == pytest.approx(new.engine["cudagraph_bytes"] - old.engine["cudagraph_bytes"], rel=0.01)
    llama = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    assert (
        run(llama, "h100", before).engine["cudagraph_bytes"] == run(llama, "h100", transient).engine["cudagraph_bytes"]
    )


# ---- the releases table ---------------------------------------------------------------------------------------------


def test_every_reviewed_vllm_release_runs_without_a_fallback_note():
    """Each release vllm.toml lists as reviewed is estimated under the rule set in force at it, without the
    'hfvram uses the X rules' note; the newest reviewed one included."""
    llama = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    reviewed = [release for release in releases.releases("vllm") if release.reviewed]
    assert reviewed and reviewed[-1] == releases.newest_reviewed("vllm")
    for release in reviewed[-3:]:
        result = run(llama, "h100", release.version)
        assert not [w for w in result.warnings if w.startswith("--engine vllm@")], release.version


def test_above_the_newest_reviewed_release_a_warning_names_it_and_its_date():
    newest = releases.newest_reviewed("vllm")
    assert newest is not None and newest.date is not None
    key = common.version_key(newest.version)
    later = ".".join(map(str, (key[0], key[1] + 1, 0)))
    result = run(spec_of("meta-llama/Llama-3.1-8B-Instruct"), "h100", later)
    said = [w for w in result.warnings if w.startswith(f"--engine vllm@{later}: newer than vllm {newest.version}")]
    assert said and newest.date in said[0]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_an_unread_release_below_the_newest_reviewed_one_says_so(engine):
    """A release listed with reviewed = false under the newest reviewed one (SGLang 0.5.11 - 0.5.17 from PyPI) is
    estimated with the rules in force and a warning that its changes were not read; a reviewed release gets none."""
    newest = releases.newest_reviewed(engine)
    assert newest is not None
    listed = releases.releases(engine)
    unread = [
        r for r in listed if not r.reviewed and common.version_key(r.version) < common.version_key(newest.version)
    ]
    llama = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    for release in unread:
        choice = EngineChoice(engine, release.version)
        result = estimate(llama, parse_gpu_spec("h100"), choice, Workload(context=8192))
        said = [w for w in result.warnings if w.startswith(f"--engine {engine}@{release.version}: its memory")]
        assert said and release.changes[:40] in said[0], release.version
    choice = EngineChoice(engine, newest.version)
    result = estimate(llama, parse_gpu_spec("h100"), choice, Workload(context=8192))
    assert not [w for w in result.warnings if w.startswith(f"--engine {engine}@")]
    if engine == "sglang":
        assert unread, "the data lists the unread SGLang releases below the newest reviewed one"


def test_a_malformed_release_row_is_refused():
    with pytest.raises(ValueError, match="date must be YYYY-MM-DD"):
        releases.parse_releases("x", {"1.0": {"date": "July 2026"}})
    with pytest.raises(ValueError, match="reviewed"):
        releases.parse_releases("x", {"1.0": {"reviewed": "yes"}})
    with pytest.raises(ValueError, match="at most"):
        releases.parse_releases("x", {f"1.{i}": {} for i in range(releases.MAX_RELEASES + 1)})
    rows = releases.parse_releases("x", {"1.10": {"reviewed": True}, "1.9": {"date": "2026-01-02", "date_bound": "by"}})
    assert [row.version for row in rows] == ["1.9", "1.10"] and rows[0].date_text == "by 2026-01-02"


def test_rule_sets_are_dated_by_the_release_they_were_filed_under():
    for version in common.load_engine_data("vllm")["versions"]:
        release = releases.release_for_rule_set("vllm", version)
        assert release is not None, version
        assert common.version_key(release.version)[: len(common.version_key(version))] == common.version_key(version)


# ---- hfvram engines ---------------------------------------------------------------------------------------------------


def test_engines_command_lists_every_engine_with_its_rule_sets_and_newest_releases():
    done = run_hfvram("engines", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    validate(document, "engine_list")
    by_name = {row["engine"]: row for row in document["engines"]}
    assert list(by_name) == list(engine_names())
    vllm_row = by_name["vllm"]
    assert [rule["version"] for rule in vllm_row["rule_sets"]] == list(vllm.PROFILE.rule_versions)
    newest = releases.newest_reviewed("vllm")
    assert newest is not None and vllm_row["newest_reviewed"]["version"] == newest.version
    known = releases.newest_known("vllm")
    assert known is not None and vllm_row["newest_known"]["version"] == known.version
    table = run_hfvram("engines")
    assert table.returncode == 0
    for name in engine_names():
        assert name in table.stdout
    assert f"newest reviewed: {newest.version} ({newest.date_text})" in table.stdout


def test_engine_list_schema_rejects_a_wrong_date():
    document = releases.engines_document()
    validate(document, "engine_list")
    import jsonschema

    broken = replace_first_date(document, "26 July")
    with pytest.raises(jsonschema.ValidationError):
        validate(broken, "engine_list")


def replace_first_date(document, text):
    copy = json.loads(json.dumps(document))
    for row in copy["engines"]:
        for rule in row["rule_sets"]:
            if rule["date"]:
                rule["date"] = text
                return copy
    raise AssertionError("no dated rule set")


# ---- scripts/engine_release_diff.py ---------------------------------------------------------------------------------


def _git(repo, *args):
    import subprocess

    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
        check=True,
        capture_output=True,
    )


def test_release_diff_lists_the_cited_files_that_changed_between_two_tags(tmp_path):
    """A repository with two tags: of the files docs/engines/vllm.md cites, the changed one is listed with the
    sections citing it; a changed file the note does not cite is not."""
    import subprocess
    import sys

    from cli_support import ROOT

    sys.path.insert(0, str(ROOT / "scripts"))
    import engine_release_diff

    cited = engine_release_diff.cited_paths(ROOT / "docs" / "engines" / "vllm.md")["vllm-project/vllm"]
    assert "vllm/v1/worker/gpu_worker.py" in cited and "vllm-budget" in cited["vllm/v1/worker/gpu_worker.py"]
    repo = tmp_path / "vllm"
    for path in ("vllm/v1/worker/gpu_worker.py", "vllm/config/cache.py", "vllm/unrelated.py"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("v1\n")
    _git(tmp_path, "init", "-q", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    _git(repo, "tag", "v1.0.0")
    (repo / "vllm/v1/worker/gpu_worker.py").write_text("v2\n")
    (repo / "vllm/unrelated.py").write_text("v2\n")
    _git(repo, "commit", "-qam", "two")
    _git(repo, "tag", "v1.1.0")
    script = ROOT / "scripts" / "engine_release_diff.py"
    done = subprocess.run(
        [sys.executable, str(script), "vllm", "v1.0.0", "v1.1.0", "--git", str(repo), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [row["path"] for row in document["changed"]] == ["vllm/v1/worker/gpu_worker.py"]
    assert "vllm-budget" in document["changed"][0]["sections"]
    missing = subprocess.run(
        [sys.executable, str(script), "vllm", "v1.0.0", "v9.9.9", "--git", str(repo)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 2 and "no tag or commit 'v9.9.9'" in missing.stderr
