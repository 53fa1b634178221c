"""Ollama profile (docs/engines/ollama.md, docs/engines/common.md#kv-dtype-sizes, docs/engines/common.md#cuda-context): Ollama's own defaults on top of llama.cpp, and the legacy
``@0.12`` estimator checked against Ollama's published pre-load estimate (groundtruth gt-0045)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from hfvram.errors import UsageError
from hfvram.estimate.core import estimate
from hfvram.estimate.engines import ollama
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.readers.config import read_config
from hfvram.spec import ModelSpec, Weights

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
MiB, GiB = 1 << 20, 1 << 30


def spec_of(repo: str, weights_gib: float = 5.0) -> ModelSpec:
    spec = read_config(json.loads((HUB / repo / "config.json").read_text(encoding="utf-8")))
    total = int(weights_gib * GiB)
    embd = (spec.vocab_size or 0) * (spec.hidden_size or 0)
    return spec.with_weights(
        Weights(
            total_bytes=total,
            params_total=0,
            bytes_by_component={"embeddings": embd, "lm_head": embd, "mlp": total - 2 * embd},
        )
    )


def run(spec, gpu, version=None, workload=Workload(), **settings):
    return estimate(spec, parse_gpu_spec(gpu) if gpu else None, EngineChoice("ollama", version, settings), workload)


def test_default_num_ctx_is_tiered_by_total_vram():
    # docs/engines/ollama.md#ollama-defaults (server/routes.go, since 2026-02-02): >= 47 GiB -> 262144, >= 23 GiB -> 32768, else 4096
    spec = spec_of("Qwen/Qwen3-30B-A3B", 17.3)  # n_ctx_train 40960
    assert run(spec, "rtx3060").engine["num_ctx"] == 4096
    assert run(spec, "rtx4090").engine["num_ctx"] == 32768
    big = run(spec, "rtx4090x2")  # 48 GiB in total -> 262144, lowered to the model's 40960
    assert big.engine["num_ctx"] == 40960
    assert any("n_ctx_train" in w for w in big.warnings)


def test_ollama_defaults_on_llama_server():
    # docs/engines/ollama.md#ollama-defaults: num_parallel 1, KV f16, num_batch 512; flash attention from the architecture list
    qwen = run(spec_of("Qwen/Qwen3-30B-A3B", 17.3), "rtx4090")
    assert (qwen.engine["num_parallel"], qwen.engine["kv_cache_type"], qwen.engine["num_batch"]) == (1, "f16", 512)
    assert qwen.engine["flash_attention"] is True  # qwen3moe is in fs/ggml/ggml.go::FlashAttention
    llama = run(spec_of("meta-llama/Llama-3.1-8B-Instruct", 4.6), "rtx4090")
    assert llama.engine["flash_attention"] is False
    assert llama.engine["ubatch-size"] == 512


def test_minimum_memory_per_gpu_is_the_overhead():
    # docs/engines/common.md#cuda-context: Ollama reserves 457 MiB per CUDA/ROCm GPU (ml/device.go MinimumMemory), 512 MiB on Metal
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct", 4.6)
    assert run(spec, "rtx4090").per_gpu.overhead == 457 * MiB
    assert run(spec, "rtx4090", OLLAMA_GPU_OVERHEAD=str(100 * MiB)).per_gpu.overhead == 557 * MiB


def test_current_kv_is_llama_cpp_exact():
    # current Ollama = llama-server: q8_0 is 34/32 B per element (docs/engines/common.md#kv-dtype-sizes), num_ctx × num_parallel cells
    spec = spec_of("Qwen/Qwen3-30B-A3B", 17.3)
    result = run(spec, "rtx4090", num_ctx="8192", num_parallel="2", OLLAMA_KV_CACHE_TYPE="q8_0")
    per_token_layer = 4 * 128 * 2 * 34 / 32
    assert result.per_gpu.kv_cache == int(48 * per_token_layer * 8192 * 2)


def test_quantized_kv_without_flash_attention_falls_back_to_f16():
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct", 4.6)
    result = run(spec, "rtx4090", num_ctx="8192", OLLAMA_KV_CACHE_TYPE="q8_0")
    assert result.engine["kv_cache_type"] == "f16"
    with pytest.raises(UsageError):
        run(spec, "rtx4090", OLLAMA_KV_CACHE_TYPE="q5_1")


def test_legacy_estimate_matches_ollama_preload_log():
    # gt-0045 (ollama #10615, May 2025): mistral-small3.1 24B, num_ctx 131072 -> memory.required.kv="20.0 GiB",
    # memory.graph.full="13.3 GiB" (mistral3 has no GraphSize case: memory.go's gqa × kvTotal / 6).
    # Devstral-Small-2507 has the same text shape (40 layers, 8 KV heads × 128, 32 heads, hidden 5120).
    spec = spec_of("mistralai/Devstral-Small-2507", 13.1)
    spec = replace(spec, extra={**spec.extra, "gguf_arch": "mistral3"})
    result = run(spec, "rtx4090", "0.12", num_ctx="131072")
    assert result.engine["kv_total"] / GiB == pytest.approx(20.0, abs=0.05)
    assert result.engine["graph_full"] / GiB == pytest.approx(13.3, abs=0.05)
    assert result.verdict == "does_not_fit"


def test_legacy_kv_uses_approximate_quant_sizes():
    # docs/engines/common.md#kv-dtype-sizes: the legacy estimator takes q8_0 = 1.0 and q4_0 = 0.5 B per element (not 34/32, 18/32)
    spec = spec_of("Qwen/Qwen3-30B-A3B", 17.3)
    legacy = run(spec, "rtx4090", "0.12", num_ctx="8192", OLLAMA_KV_CACHE_TYPE="q8_0", OLLAMA_FLASH_ATTENTION="1")
    assert legacy.engine["kv_total"] == 48 * 4 * 256 * 8192
    current = run(spec, "rtx4090", "0.13", num_ctx="8192", OLLAMA_KV_CACHE_TYPE="q8_0")
    assert current.per_gpu.kv_cache == legacy.engine["kv_total"] * 34 // 32


def test_legacy_llama_graph_formula():
    # fs/ggml/ggml.go GraphSize, llama: fullOffload = max(4b(1 + 4e + c(1 + h)), 4b(e + V))
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct", 4.6)
    partial, full, _ = ollama.legacy_graph(spec, "llama", 8192, 1, 512, 1 << 30, flash=False)
    assert full == max(4 * 512 * (1 + 4 * 4096 + 8192 * 33), 4 * 512 * (4096 + 128256))
    assert partial > full


def test_gpt_oss_legacy_flash_attention_graph():
    # GraphSize gpt-oss with flash attention: (4·numParallel + ctx/1024 + 110) MiB
    spec = spec_of("openai/gpt-oss-20b", 12.0)
    partial, _, _ = ollama.legacy_graph(spec, "gpt-oss", 8192, 1, 512, 0, flash=True)
    assert partial == (4 + 8 + 110) * MiB
    # without flash attention: 2 × heads / kv_heads × KV total / 6 (64 heads, 8 KV heads)
    no_fa, _, _ = ollama.legacy_graph(spec, "gpt-oss", 8192, 1, 512, 6 * GiB, flash=False)
    assert no_fa == 2 * 64 // 8 * 6 * GiB // 6
