"""SGLang's SWA pool capped with the chunk cache (docs/engines/sglang.md#sglang-swa-chunk-cap): sglang#28755's
``SWAChunkCapPoolConfigurator``, read at sgl-project/sglang@003fca80 (python/sglang/srt/model_executor/
pool_configurator.py). With ``--max-running-requests``, ``--disable-radix-cache`` and a chunked prefill, a hybrid-SWA
model's SWA pool holds ``reqs × (window + SGLANG_SWA_EVICTION_INTERVAL + page + page) + chunks ×
chunked_prefill_size + page`` tokens (chunks = 2 with the overlap scheduler, 1 without; the interval's EnvInt(128)
default in environ.py) and the full pool takes the rest, in place of the ``swa_full_tokens_ratio`` split.
The rule set that turns it on is read from rules.toml (no release is typed here)."""

from __future__ import annotations

import json

import pytest
from cli_support import FIXTURES, run_hfvram, validate
from spec_support import derived_spec

from hfvram.estimate import common
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload

OSS = "openai/gpt-oss-20b"
# gpt-oss-20b (fixtures/hub config.json): 24 layers alternating sliding (window 128) and full attention, 8 KV heads
# × 64; bf16 KV: 12 layers × 8 × 64 × 2 (K, V) × 2 B = 24,576 B per token for each kind
PER_KIND = 12 * 8 * 64 * 2 * 2
WINDOW, INTERVAL, PAGE = 128, 128, 1
# SGLang's chunked_prefill_size on an 80 GB H100 (docs/engines/sglang.md#sglang-mem-fraction tiers)
CHUNK = 8192


def cap_version() -> str:
    versions = common.load_engine_data("sglang")["versions"]
    return min((v for v, t in versions.items() if t.get("swa_chunk_cap") is True), key=common.version_key)


def before(version: str) -> str:
    versions = common.load_engine_data("sglang")["versions"]
    return max((v for v in versions if common.version_key(v) < common.version_key(version)), key=common.version_key)


def run(version: str, **settings: str):
    choice = EngineChoice("sglang", version, {k.replace("_", "-"): v for k, v in settings.items()})
    return estimate(derived_spec(OSS), parse_gpu_spec("h100"), choice, Workload(context=8192, kv_dtype="bf16"))


CHUNK_CACHE = {"max_running_requests": "64", "disable_radix_cache": "true"}


def test_the_cap_moves_the_ratio_split_into_the_full_pool():
    new = cap_version()
    old = run(before(new), **CHUNK_CACHE)
    capped = run(new, **CHUNK_CACHE)
    # the ratio rule: cell = F + 0.8 × S per token, so the pool's bytes are tokens × cell (to one cell)
    ratio_cell = PER_KIND + 0.8 * PER_KIND
    rest = old.capacity.kv_tokens * ratio_cell
    cap = 64 * (WINDOW + INTERVAL + PAGE + PAGE) + 2 * CHUNK + PAGE
    expected = (rest - cap * PER_KIND) / PER_KIND
    assert cap == 32_897
    assert capped.capacity.kv_tokens == pytest.approx(expected, abs=2)
    assert capped.capacity.kv_tokens > old.capacity.kv_tokens * 1.3
    assert any("capped at 32897 tokens" in line for line in capped.explain.values())


def test_one_chunk_in_flight_without_the_overlap_scheduler():
    new = cap_version()
    overlap = run(new, **CHUNK_CACHE)
    serial = run(new, **CHUNK_CACHE, disable_overlap_schedule="true")
    # one prefill chunk fewer in the SWA pool: CHUNK × S more bytes for the full pool, CHUNK more full tokens
    assert serial.capacity.kv_tokens - overlap.capacity.kv_tokens == pytest.approx(CHUNK, abs=1)


@pytest.mark.parametrize(
    "settings",
    [{"max_running_requests": "64"}, {"disable_radix_cache": "true"}],
    ids=["radix-cache-on", "max-running-requests-unset"],
)
def test_no_cap_without_the_chunk_cache_and_a_request_limit(settings):
    new = cap_version()
    assert run(new, **settings).capacity.kv_tokens == run(before(new), **settings).capacity.kv_tokens


def test_speculative_decoding_keeps_the_ratio_and_says_the_cap_is_not_modelled():
    new = cap_version()
    result = run(new, **CHUNK_CACHE, speculative_algorithm="EAGLE")
    assert (
        result.capacity.kv_tokens == run(before(new), **CHUNK_CACHE, speculative_algorithm="EAGLE").capacity.kv_tokens
    )
    assert any("SWAChunkCapPoolConfigurator" in w and "does not model" in w for w in result.warnings)


def test_side_by_side_names_the_rule():
    new = cap_version()
    source = str(FIXTURES / "hub" / "openai" / "gpt-oss-20b")
    done = run_hfvram(
        "check", source, "--gpu", "h100", "--context", "8k", "--engine", f"sglang@{before(new)},sglang@{new}",
        "--set", "max-running-requests=64", "--set", "disable-radix-cache=true", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    validate(document, "engines")
    first, second = document["rows"]
    assert second["kv_tokens"] > first["kv_tokens"]
    [rule] = document["changes"][0]["rules"]
    assert rule["rule_set"] == new and "swa_chunk_cap" in rule["keys"] and "sglang#28755" in rule["changes"]
