"""TensorRT-LLM profile rules (docs/engines/trtllm.md#trtllm-kv-fraction: free_gpu_memory_fraction 0.9 of the memory left after the
profiling peak, tokens_per_block 32, max_num_tokens 8192; llm_args.py max_batch_size 2048)."""

from __future__ import annotations

from pathlib import Path

import pytest
from spec_support import derived_spec

from hfvram.engines import get_profile
from hfvram.engines.trtllm import profile as trtllm
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.spec import ModelSpec

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
GiB = 1 << 30


def spec_of(repo: str) -> ModelSpec:
    return derived_spec(repo, use_transformers=False)


def run(spec, gpu, context=8192, concurrency=1, kv="auto", gpu_util=None, **settings):
    choice = EngineChoice(
        "tensorrt-llm", None, {k.replace("_", "-"): str(v) for k, v in settings.items()}, gpu_util=gpu_util
    )
    return estimate(
        spec,
        parse_gpu_spec(gpu) if gpu else None,
        choice,
        Workload(context=context, concurrency=concurrency, kv_dtype=kv),
    )


@pytest.fixture(scope="module")
def llama8b() -> ModelSpec:
    return spec_of("meta-llama/Llama-3.1-8B-Instruct")


def test_profile_is_registered_under_its_aliases():
    assert get_profile("trtllm") is trtllm.PROFILE
    assert get_profile("tensorrt-llm") is trtllm.PROFILE


def test_pool_is_the_fraction_of_memory_after_the_peak(llama8b):
    result = run(llama8b, "h100")
    per_gpu = result.per_gpu
    peak = per_gpu.weights + per_gpu.activations + per_gpu.overhead
    assert result.engine["peak_bytes"] == peak
    pool = (per_gpu.memory - peak) * 0.9
    assert result.engine["kv_pool_bytes"] == int(pool)
    # the other 10 % is held back: usable = peak + pool
    assert per_gpu.reserve == pytest.approx((per_gpu.memory - peak) * 0.1, abs=2)
    # Llama-3-8B: 128 KiB of KV per token (shared README); tokens in whole blocks of 32
    assert result.engine["kv_bytes_per_token"] == 131072
    assert result.capacity.kv_tokens == int(pool // 131072) // 32 * 32
    assert result.capacity.kv_tokens % 32 == 0


def test_defaults_from_llm_args(llama8b):
    engine = run(llama8b, "h100").engine
    assert (
        engine["free_gpu_memory_fraction"],
        engine["tokens_per_block"],
        engine["max_num_tokens"],
        engine["max_batch_size"],
    ) == (0.9, 32, 8192, 2048)


def test_fraction_and_max_tokens_caps(llama8b):
    default = run(llama8b, "h100")
    half = run(llama8b, "h100", gpu_util=0.45)
    assert half.engine["kv_pool_bytes"] == pytest.approx(default.engine["kv_pool_bytes"] / 2, abs=2)
    # KvCacheConfig.max_tokens and the fraction: "the minimum will be used"
    capped = run(llama8b, "h100", max_tokens=100_000)
    assert capped.capacity.kv_tokens == 100_000 // 32 * 32


def test_max_num_tokens_drives_the_activation_peak(llama8b):
    small = run(llama8b, "h100", max_num_tokens=2048)
    large = run(llama8b, "h100", max_num_tokens=16384)
    assert large.per_gpu.activations == pytest.approx(8 * small.per_gpu.activations, rel=0.01)
    assert large.capacity.kv_tokens < small.capacity.kv_tokens
    assert "approximation" in small.explain["activations"]


def test_max_batch_size_bounds_concurrency(llama8b):
    assert run(llama8b, "h100", context=1024, max_batch_size=4).capacity.max_concurrency == 4


def test_tp_splits_gqa_heads_but_not_mla():
    llama = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    assert run(llama, "h100x2").engine["kv_bytes_per_token"] == 131072 / 2
    # common.md#kv-bytes-per-token MLA keeps one latent per token on every rank: (512 + 64) x 27 layers x 2 B
    lite = spec_of("deepseek-ai/DeepSeek-V2-Lite")
    assert run(lite, "h100").engine["kv_bytes_per_token"] == 576 * 27 * 2
    assert run(lite, "h100x2").engine["kv_bytes_per_token"] == 576 * 27 * 2


def test_fp8_kv_halves_the_bytes(llama8b):
    assert run(llama8b, "h100", kv="fp8").engine["kv_bytes_per_token"] == 65536


def test_weights_over_memory_do_not_fit():
    result = run(spec_of("meta-llama/Llama-3.1-70B-Instruct"), "rtx4090")
    assert result.verdict == "does_not_fit"
    assert any("no memory for the KV cache" in w for w in result.warnings)


def test_verdict_follows_the_workload(llama8b):
    assert run(llama8b, "rtx4090", context=8192, concurrency=2).verdict == "fits"
    over = run(llama8b, "rtx4090", context=131072, concurrency=4)
    assert over.verdict == "does_not_fit" and over.capacity.max_concurrency < 4
