"""ExLlamaV2 profile (docs/engines/exllamav2.md, exllamav2/cache.py): cache classes, Q-cache block rounding, the FP16
temporaries of one layer per device, layer split over GPUs — on real fixture configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hfvram.engines.exllamav2 import profile as exllamav2
from hfvram.errors import UsageError
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.readers.config import read_config
from hfvram.spec import ModelSpec, Weights

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
MiB, GiB = 1 << 20, 1 << 30


@pytest.fixture(scope="module")
def llama8b() -> ModelSpec:
    spec = read_config(json.loads((HUB / "meta-llama/Llama-3.1-8B-Instruct/config.json").read_text()))
    total = int(5.6 * GiB)  # an EXL2 ~5 bpw checkpoint
    return spec.with_weights(
        Weights(
            total_bytes=total,
            params_total=0,
            bytes_by_component={"embeddings": 525336576, "lm_head": 525336576, "mlp": total - 2 * 525336576},
        )
    )


def run(spec, gpu="rtx4090", context=32768, **settings):
    return estimate(spec, parse_gpu_spec(gpu), EngineChoice("exllamav2", settings=settings), Workload(context=context))


def test_fp16_cache_is_128_kib_per_token_for_llama3_8b(llama8b):
    # docs/engines/exllamav2.md#exllamav2-cache: FP16 cache 2d + 2d bytes per token per layer, d = 8 × 128 -> 32 layers × 4096 = 128 KiB
    result = run(llama8b)
    assert result.per_gpu.kv_cache == 32 * 4096 * 32768
    assert result.per_gpu.activations == 0  # no temporaries for the FP16 cache


@pytest.mark.parametrize(
    "mode, per_token_layer",
    [
        ("Q4", 1024 * 0.5 * 2 + 2 * 2 * 1024 // 32),  # 0.5625 B per element of K and of V incl. scales
        ("Q6", 1024 * 1.0 + 1024 * 0.5 + 2 * 2 * 1024 // 32),
        ("Q8", 1024 * 2 + 2 * 2 * 1024 // 32),
        ("FP8", 1024 * 2),
    ],
)
def test_quantized_cache_classes(llama8b, mode, per_token_layer):
    # docs/engines/exllamav2.md#exllamav2-cache table: K/V bytes per class, fp16 scale per 32 elements for the Q caches
    result = run(llama8b, cache_mode=mode)
    assert result.per_gpu.kv_cache == int(32 * per_token_layer * 32768)
    # one layer of FP16 K and V kept per device for dequantization
    assert result.per_gpu.activations == 2 * 2 * 32768 * 1024


def test_q_cache_block_rounding():
    # cache.py: q_block grows until kv_dim × q_block is a multiple of 512 elements
    assert exllamav2.q_block(1024, 512) == 1
    assert exllamav2.q_block(768, 512) == 2
    assert exllamav2.q_block(640, 512) == 4


def test_batch_multiplies_the_static_cache(llama8b):
    one = run(llama8b, context=8192)
    four = run(llama8b, context=8192, max_batch_size="4")
    assert four.per_gpu.kv_cache == 4 * one.per_gpu.kv_cache


def test_gpu_split_places_layers_in_order(llama8b):
    two = estimate(
        llama8b,
        parse_gpu_spec("rtx4090x2"),
        EngineChoice("exllamav2", settings={"gpu_split": "1,1"}),
        Workload(context=32768),
    )
    assert two.per_gpu.kv_cache == 16 * 4096 * 32768
    with pytest.raises(UsageError):
        estimate(
            llama8b, parse_gpu_spec("rtx4090x2"), EngineChoice("exllamav2", settings={"gpu_split": "1,1,1"}), Workload()
        )


def test_unknown_cache_mode_is_a_usage_error(llama8b):
    with pytest.raises(UsageError):
        run(llama8b, cache_mode="Q3")
