"""MLX / mlx-lm profile (docs/engines/mlx.md#mlx-wired-limit): wired limit = the GPU-addressable share of unified memory, the
0.9 × max_recommended warning, KV in the model dtype in 256-token steps, mlx-lm's quantized KV option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hfvram.engines.mlx import profile as mlx
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.readers.config import read_config
from hfvram.spec import ModelSpec, Weights

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
MiB, GiB = 1 << 20, 1 << 30


def spec_of(repo: str, weights_gib: float) -> ModelSpec:
    spec = read_config(json.loads((HUB / repo / "config.json").read_text()))
    total = int(weights_gib * GiB)
    return spec.with_weights(Weights(total_bytes=total, params_total=0, bytes_by_component={"mlp": total}))


def run(spec, gpu, context=8192, kv="auto", **settings):
    return estimate(
        spec, parse_gpu_spec(gpu), EngineChoice("mlx", settings=settings), Workload(context=context, kv_dtype=kv)
    )


def test_usable_is_the_wired_limit_of_unified_memory():
    # README / article 000: a 128 GB Mac exposes ~96 GB to the GPU by default
    result = run(spec_of("meta-llama/Llama-3.1-8B-Instruct", 16.0), "m3-max-128")
    assert result.per_gpu.usable == 96 * GiB
    assert result.per_gpu.memory == 128 * GiB
    raised = run(spec_of("meta-llama/Llama-3.1-8B-Instruct", 16.0), "m3-max-128", wired_limit_mb="120000")
    assert raised.per_gpu.usable == 120000 * MiB


def test_warns_above_nine_tenths_of_the_wired_limit():
    # mlx_lm/generate.py::wired_limit warns when model bytes > 0.9 × max_recommended_working_set_size
    big = run(spec_of("meta-llama/Llama-3.1-70B-Instruct", 90.0), "m3-max-128")
    assert any("wired limit" in w for w in big.warnings)
    small = run(spec_of("meta-llama/Llama-3.1-8B-Instruct", 16.0), "m3-max-128")
    assert not any("wired limit" in w for w in small.warnings)


def test_kv_in_model_dtype_grows_in_256_token_steps():
    # Llama-3-8B: 128 KiB per token in bf16 (article 000); mlx-lm KVCache grows its buffer 256 tokens at a time
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct", 16.0)
    assert run(spec, "m3-max-128", context=8192).per_gpu.kv_cache == 128 * 1024 * 8192
    assert run(spec, "m3-max-128", context=1000).per_gpu.kv_cache == 128 * 1024 * 1024


def test_quantized_kv_adds_scale_and_bias_per_group():
    # mlx-lm --kv-bits 8 --kv-group-size 64: 1 B + 2 × 2 B / 64 per element; 4 bits: 0.5 + 0.0625
    assert mlx.kv_element_bytes(2.0, 8, 64) == pytest.approx(1.0625)
    assert mlx.kv_element_bytes(2.0, 4, 64) == pytest.approx(0.5625)
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct", 16.0)
    assert run(spec, "m3-max-128", kv_bits="4").per_gpu.kv_cache == int(
        64 * 1024 * 0.5625 * 8192
    )  # 65536 K+V elements per token


def test_sliding_layers_rotate_at_their_window():
    # gemma-2: every other layer keeps a 4096-token window at most
    spec = spec_of("google/gemma-2-9b-it", 18.0)
    long = run(spec, "m3-max-128", context=8192).per_gpu.kv_cache
    per_layer_token = 8 * 256 * 2 * 2
    assert long == 21 * per_layer_token * 8192 + 21 * per_layer_token * 4096


def test_small_mac_does_not_fit_a_70b():
    result = run(spec_of("meta-llama/Llama-3.1-70B-Instruct", 40.0), "m1-16")
    assert result.verdict == "does_not_fit"
    # 2/3 of 16 GB (docs/engines/mlx.md#mlx-wired-limit)
    assert result.per_gpu.usable == pytest.approx(10.67 * GiB, rel=0.01)


def test_linear_attention_state_is_float32_conv_state_in_model_dtype():
    # mlx_lm/models/gated_delta.py (ml-explore/mlx-lm d78bf58e) creates the Gated DeltaNet state as
    # mx.zeros((B, Hv, Dv, Dk), dtype=mx.float32); qwen3_next.py's conv state is in the input dtype.
    # Qwen3-Next-80B (fixture config): 36 linear layers, conv 3 x (2 x 16 x 128 + 32 x 128), state 32 x 128 x 128;
    # 12 full-attention layers with 2 KV heads of 256.
    spec = spec_of("Qwen/Qwen3-Next-80B-A3B-Thinking", 40.0)
    linear = 36 * (3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 4)
    full = 12 * 2 * 2 * 256 * 2 * 256
    assert run(spec, "m3-max-128", context=200).per_gpu.kv_cache == linear + full
