"""The llama.cpp profile against real llama.cpp (issue 6): benchmarks/data/llamacpp_truth.jsonl holds what
llama.cpp (vendored by llama-cpp-python, commit in each row) sized when loading sparse GGUFs written from real
configs / real GGUF headers (benchmarks/llamacpp_truth.py). No llama.cpp is needed here: each model is read back
from its stored header with hfvram's GGUF reader and the profile's functions are compared term by term.

Stated tolerances (docs/accuracy.md): KV cache, recurrent state and output buffer exact to the printed
0.01 MiB; model buffer within 1 %; compute buffer within 10 % on at least 97 % of the settings and never
off by more than 15 % (measured: 188 of 189 within 10 %, worst −10.8 %)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy_llamacpp as acc  # noqa: E402

from hfvram.errors import UsageError  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return acc.load_rows()


@pytest.fixture(scope="module")
def comparisons(rows):
    return acc.all_comparisons(rows)


def test_truth_file_parses_and_records_versions_and_settings(rows):
    assert len(rows) >= 100
    keys = {
        "n_ctx",
        "n_batch",
        "n_ubatch",
        "flash_attn",
        "type_k",
        "type_v",
        "swa_full",
        "n_seq_max",
        "kv_unified",
        "no_alloc",
    }
    for row in rows:
        assert keys <= set(row["settings"])
        if row["rc"] != 0:
            continue  # loads llama.cpp refused: see test_refused_loads_are_refused_by_the_estimator
        assert row["measured"]["llama_cpp_python"] and row["llama_cpp_commit"]
        assert (ROOT / row["header"]).is_file()
        assert row["measured"]["compute_buffer_mib"], row["model"]


def test_refused_loads_are_refused_by_the_estimator(rows):
    refused = [r for r in rows if r["rc"] != 0]
    assert len(refused) <= 2
    _, constants, _ = acc.llamacpp.constants_for(acc.EngineChoice(name="llama.cpp"))
    for row in refused:
        with pytest.raises(UsageError):
            acc.llamacpp.resolve_settings(
                acc.spec_for_row(row), acc.choice_for(row["settings"]), acc.Workload(), constants
            )


def test_grid_covers_the_settings_that_matter(rows):
    settings = [r["settings"] for r in rows]
    assert {32768, 131072} <= {s["n_ctx"] for s in settings}
    assert {"on", "off"} <= {s["flash_attn"] for s in settings}
    assert {"f16", "q8_0", "q4_0", "q5_1"} <= {s["type_k"] for s in settings}
    assert any(s["swa_full"] for s in settings) and any(s["kv_unified"] for s in settings)
    assert any(s["n_seq_max"] > 1 and not s["kv_unified"] for s in settings)
    assert any(not s["no_alloc"] for s in settings)  # real allocations next to the dry runs
    archs = {r["facts"]["arch"] for r in rows}
    assert {"llama", "qwen3moe", "gemma2", "gemma3", "gpt-oss", "deepseek2", "nemotron_h"} <= archs


def test_kv_cache_is_exact_for_every_setting(comparisons):
    kv = [c for c in comparisons if c.term in ("kv_k", "kv_v")]
    assert len(kv) >= 200
    bad = [(c.model, c.setting, c.term, c.predicted_mib, c.measured_mib) for c in kv if not c.within()]
    assert not bad


def test_recurrent_state_and_output_buffer_are_exact(comparisons):
    rs = [c for c in comparisons if c.term == "recurrent"]
    assert rs and all(c.within() for c in rs)
    out = [c for c in comparisons if c.term == "output"]
    assert out and all(c.within() for c in out)


def test_model_buffer_within_one_percent(comparisons):
    model = [c for c in comparisons if c.term == "model"]
    assert model and all(abs(c.relative) <= acc.MODEL_TOLERANCE for c in model)


def test_compute_buffer_within_stated_tolerance(comparisons):
    compute = [c for c in comparisons if c.term == "compute"]
    within = sum(abs(c.relative) <= acc.COMPUTE_TOLERANCE for c in compute)
    assert within >= 0.97 * len(compute), f"{within} of {len(compute)} within 10 %"
    worst = max(compute, key=lambda c: abs(c.relative))
    assert abs(worst.relative) <= 0.15, (worst.model, worst.setting, worst.predicted_mib, worst.measured_mib)
