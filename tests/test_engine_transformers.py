"""Plain transformers profile: weights + DynamicCache + one prefill forward + CUDA context, no memory fraction.
Golden figures from article 000 (docs/methodology.md, Sources): Llama-3-8B keeps 128 KiB of KV per token,
16.0 GiB at 128k, batch 1, bf16."""

from __future__ import annotations

from pathlib import Path

import pytest
from spec_support import derived_spec

from hfvram.engines import get_profile
from hfvram.engines.transformers import profile as transformers_engine
from hfvram.errors import UsageError
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
        "transformers", None, {k.replace("_", "-"): str(v) for k, v in settings.items()}, gpu_util=gpu_util
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
    assert get_profile("transformers") is transformers_engine.PROFILE
    assert get_profile("hf") is transformers_engine.PROFILE


def test_dynamic_cache_is_16_gib_at_128k(llama8b):
    # README: Llama-3-8B, 128 KiB per token -> 16.0 GiB at 128k, batch 1, bf16
    result = run(llama8b, "h100", context=131072)
    assert result.per_gpu.kv_cache == 131072 * 131072
    assert result.per_gpu.kv_cache / GiB == 16.0
    assert run(llama8b, "h100", context=131072, concurrency=2).per_gpu.kv_cache / GiB == 32.0


def test_no_memory_fraction(llama8b):
    result = run(llama8b, "h100")
    assert result.per_gpu.usable == result.per_gpu.memory and result.per_gpu.reserve == 0
    with pytest.raises(UsageError):
        run(llama8b, "h100", gpu_util=0.9)
    with pytest.raises(UsageError):
        run(llama8b, "h100", kv="fp8")  # DynamicCache keeps the model dtype


def test_logits_of_the_prefill(llama8b):
    # generate() keeps the last position only; a plain forward keeps all: 8192 x 128256 x 4 B (fp32 upcast).
    # Peak = residual stream (2 x hidden) + the largest transient (here logits, else the MLP's 3 x 14336)
    residual = 8192 * 4096 * 2 * 2
    plain = run(llama8b, "h100", logits_to_keep=0)
    assert plain.per_gpu.activations == residual + 8192 * 128256 * 4
    generate = run(llama8b, "h100")
    assert generate.per_gpu.activations == residual + 8192 * 14336 * 3 * 2
    assert "logits" in plain.explain["activations"] and "approximation" in plain.explain["activations"]


def test_eager_attention_materialises_the_scores(llama8b):
    # eager: batch x heads x context^2 in bf16 plus the fp32 softmax: 32 x 8192^2 x (2 + 4) B = 12 GiB
    eager = run(llama8b, "h100", attn_implementation="eager")
    assert eager.per_gpu.activations >= 32 * 8192 * 8192 * 6
    sdpa = run(llama8b, "h100")
    assert sdpa.per_gpu.activations < 1 * GiB
    assert eager.capacity.max_context < sdpa.capacity.max_context


def test_mla_is_cached_decompressed():
    # transformers' DeepSeek-V2 attention caches K (heads x 192) and V (heads x 128), not the 576-wide latent:
    # 27 layers x 16 heads x 320 x 2 B = 276,480 B per token (the latent would be 31,104 B)
    lite = spec_of("deepseek-ai/DeepSeek-V2-Lite")
    result = run(lite, "h100", context=8192)
    assert result.per_gpu.kv_cache == 8192 * 27 * 16 * 320 * 2
    assert "decompressed" in result.explain["kv_cache"]


def test_sliding_layers_keep_their_window_less_one_token():
    # Gemma 2: 21 full + 21 sliding (window 4096) layers, 8 KV heads x 256 x 2 x 2 B = 8192 B per layer-token;
    # DynamicSlidingWindowLayer keeps the last window - 1 tokens (measured: benchmarks/data/transformers_truth.jsonl,
    # a gemma-2 window of 64 holds 63 after generate, transformers 5.24.0)
    gemma = spec_of("google/gemma-2-9b-it")
    result = run(gemma, "h100", context=8192)
    assert result.per_gpu.kv_cache == 21 * 8192 * 8192 + 21 * 8192 * 4095


def test_device_map_auto_splits_layers(llama8b):
    seventy = spec_of("meta-llama/Llama-3.1-70B-Instruct")
    assert run(seventy, "h100").verdict == "does_not_fit"
    split = run(seventy, "h100x2")
    assert split.engine["layer_split"] == 2 and split.pp == 2
    assert split.per_gpu.weights < 0.55 * seventy.weights.total_bytes
    assert split.verdict in ("fits", "tight")


def test_capacity_is_consistent_with_the_terms(llama8b):
    result = run(llama8b, "rtx4090", context=8192)
    assert result.capacity.kv_tokens is None  # no pool
    n = int(result.capacity.max_concurrency)
    assert run(llama8b, "rtx4090", context=8192, concurrency=n).per_gpu.total <= result.per_gpu.memory
    assert run(llama8b, "rtx4090", context=8192, concurrency=n + 1).per_gpu.total > result.per_gpu.memory
    longest = result.capacity.max_context
    assert run(llama8b, "rtx4090", context=longest).per_gpu.total <= result.per_gpu.memory
    assert run(llama8b, "rtx4090", context=longest + 64).per_gpu.total > result.per_gpu.memory


def test_verdicts(llama8b):
    assert run(llama8b, "rtx4090", context=8192).verdict == "fits"
    assert run(llama8b, "rtx4090", context=131072).verdict == "does_not_fit"
