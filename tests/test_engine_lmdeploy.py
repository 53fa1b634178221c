"""LMDeploy profile rules (docs/engines/lmdeploy.md, docs/engines/common.md#kv-dtype-sizes), pinned to the formulas read in LMDeploy's source
(executor/base.py::_get_runtime_size, schema.py::build_quant_cache_descs, utils.py::get_max_batch_size)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spec_support import derived_spec

from hfvram.engines import get_profile
from hfvram.engines.lmdeploy import profile as lmdeploy
from hfvram.errors import UsageError
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.readers.config import read_config
from hfvram.spec import ModelSpec

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
GiB = 1 << 30


def spec_of(repo: str) -> ModelSpec:
    return derived_spec(repo, use_transformers=False)


def rules(version: str = "0.2.1"):
    """LMDeploy's typed constants at ``version``, as its profile loads them from rules.toml."""
    return lmdeploy.PROFILE.constants(version)[1]


def run(spec, gpu, context=8192, concurrency=1, kv="auto", version=None, gpu_util=None, **settings):
    choice = EngineChoice(
        "lmdeploy", version, {k.replace("_", "-"): str(v) for k, v in settings.items()}, gpu_util=gpu_util
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


def test_profile_is_registered():
    assert get_profile("lmdeploy") is lmdeploy.PROFILE


def test_runtime_reserve_and_block_pool_pytorch_engine(llama8b):
    # lmdeploy.md#lmdeploy-pytorch: runtime = (max_prefill_token_num 8192 + 2 x max_batches) x vocab x 2; A100 -> max_batch_size 384
    result = run(llama8b, "a100-80g-sxm", backend="pytorch")
    assert result.engine["max_batch_size"] == 384
    assert result.engine["runtime_bytes"] == (8192 + 2 * 384) * 128256 * 2
    # blocks = floor((free - runtime) x 0.8 / block_bytes); block = 64 tokens x 32 layers x 8 heads x 256 x 2 B
    block_bytes = 64 * 32 * 8 * 256 * 2
    free = result.per_gpu.memory - result.per_gpu.overhead - result.per_gpu.weights
    assert result.engine["num_gpu_blocks"] == int((free - result.engine["runtime_bytes"]) * 0.8 // block_bytes)
    assert result.capacity.kv_tokens == result.engine["num_gpu_blocks"] * 64
    # activations = runtime + the other 0.2 of (free - runtime) (common.md#reserve-summary)
    assert result.per_gpu.activations == pytest.approx(
        result.engine["runtime_bytes"] + 0.2 * (free - result.engine["runtime_bytes"]), abs=1
    )


def test_runtime_halves_prefill_until_16_blocks_fit():
    # lmdeploy.md#lmdeploy-pytorch: "halves max_prefill_token_num until >= 16 blocks fit"
    block_bytes = 8 * 2**20
    free = 0.5 * GiB
    runtime, prefill = lmdeploy.runtime_bytes(rules(), free, block_bytes, 128, 128256, 0.8)
    assert prefill < 8192
    assert int((free - runtime) * 0.8) // block_bytes >= 16
    assert runtime == (prefill + 256) * 128256 * 2


def test_turbomind_has_no_runtime_term(llama8b):
    # lmdeploy.md#lmdeploy-turbomind TurboMind: cache = free after weights x cache_max_entry_count; LlamaForCausalLM is a TurboMind arch
    result = run(llama8b, "rtx4090")
    assert result.engine["backend"] == "turbomind"
    assert result.engine["max_batch_size"] == 128  # not an A100/H100/H200 name
    free = result.per_gpu.memory - result.per_gpu.overhead - result.per_gpu.weights
    assert result.engine["runtime_bytes"] == 0
    assert result.engine["num_gpu_blocks"] == int(free * 0.8 // (64 * 32 * 8 * 256 * 2))


def test_int8_and_int4_kv_carry_scale_and_zero():
    # lmdeploy.md#lmdeploy-kv-quant: quant_policy 8 / 4 -> 1 / 0.5 B per element plus scale+zero (2 x model dtype) per token-head, K and V.
    # Qwen3-8B: 36 layers, 8 KV heads x 128
    spec = spec_of("Qwen/Qwen3-8B")
    int8 = run(spec, "h100", backend="pytorch", quant_policy=8)
    per_token = 36 * (8 * 128 * 2 * 1 + 2 * 8 * 2 * 2)
    assert int8.engine["kv_cache_dtype"] == "int8"
    assert int8.per_gpu.kv_cache == 128 * 64 * per_token  # 8192 tokens = 128 blocks
    int4 = run(spec, "h100", backend="pytorch", quant_policy=4)
    assert int4.per_gpu.kv_cache == 128 * 64 * 36 * (8 * 128 * 2 * 0.5 + 2 * 8 * 2 * 2)
    assert int8.engine["max_batch_size"] == 1024  # H100 (utils.py::get_max_batch_size)


def test_large_head_dim_uses_32_token_blocks():
    # executor/base.py::_adjust_block_size: block_size 32 when k_head_dim >= 512 (PyTorch engine)
    config = json.loads((HUB / "deepseek-ai/DeepSeek-V4-Flash/config.json").read_text(encoding="utf-8"))
    spec = read_config(config, use_transformers=False)
    assert (spec.head_dim or 0) >= 512
    hardware = parse_gpu_spec("h200x8")
    settings = lmdeploy.resolve_settings(
        spec,
        hardware,
        EngineChoice("lmdeploy", settings={"backend": "pytorch"}),
        Workload(context=8192),
        rules(),
        "0.2.1",
    )
    assert settings.block_size == 32
    turbomind = lmdeploy.resolve_settings(
        spec,
        hardware,
        EngineChoice("lmdeploy", settings={"backend": "turbomind"}),
        Workload(context=8192),
        rules(),
        "0.2.1",
    )
    assert turbomind.block_size == 64


def test_kv_heads_must_divide_tp():
    # lmdeploy.md#lmdeploy-pytorch: "KV heads must be divisible by TP (asserted)" - Qwen3-Next has 2 KV heads
    spec = spec_of("Qwen/Qwen3-Next-80B-A3B-Thinking")
    result = run(spec, "h100x4")
    assert result.verdict == "does_not_fit"
    assert any("divide by tp=4" in w for w in result.warnings)
    # its linear-attention state is reserved first: (max_batches + 2) slots
    assert result.engine["state_cache_bytes"] > 0
    assert run(spec, "h100x2").engine["state_cache_bytes"] == pytest.approx(
        2 * result.engine["state_cache_bytes"], rel=1e-6
    )


def test_cache_ratio_is_a_fraction(llama8b):
    with pytest.raises(UsageError):
        run(llama8b, "h100", gpu_util=1.5)
    lower = run(llama8b, "h100", gpu_util=0.5)
    default = run(llama8b, "h100")
    assert lower.capacity.kv_tokens < default.capacity.kv_tokens


def test_old_release_takes_half_of_total(llama8b):
    # lmdeploy.md#lmdeploy-cache-fraction: 0.5 of *total* memory in v0.2.0
    result = run(llama8b, "h100", version="0.2.0")
    assert result.engine["cache_max_entry_count"] == 0.5
    assert result.engine["num_gpu_blocks"] == int(result.per_gpu.memory * 0.5 // (64 * 32 * 8 * 256 * 2))


def test_verdicts_and_capacity(llama8b):
    fits = run(llama8b, "h100", context=32768, concurrency=8)
    assert fits.verdict == "fits"
    assert fits.capacity.max_concurrency >= 8
    over = run(llama8b, "rtx4090", context=131072, concurrency=4)
    assert over.verdict == "does_not_fit"
    assert over.capacity.max_concurrency < 4
    assert {"weights", "kv_cache", "activations", "overhead", "budget"} <= set(fits.explain)
