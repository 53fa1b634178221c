"""Per-layer sums once per distinct layer: the config reader makes one Layer object per distinct layer, the
estimator sums each distinct object once times its count (``common.layer_counts`` / ``layer_summary``), and
vLLM's longest context past the layout's saturation is in closed form. None of it may change a figure: the
estimates of every fixture config are compared with those of the same spec whose layers are all separate objects
(equal values, so every per-layer sum runs once per layer)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from spec_support import HUB, derived_spec

from hfvram.engines.vllm import kv as vllm_kv
from hfvram.errors import HfvramError
from hfvram.estimate import common
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.spec import ModelSpec

REPOS = sorted(f"{path.parent.parent.name}/{path.parent.name}" for path in HUB.glob("*/*/config.json"))


def separate_layers(spec: ModelSpec) -> ModelSpec:
    """The spec with every layer its own object (the same values)."""
    return replace(spec, layers=tuple(replace(layer) for layer in spec.layers))


def test_the_reader_makes_one_layer_object_per_distinct_layer():
    llama = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    assert len(llama.layers) == 32
    assert common.layer_counts(llama.layers) == [(llama.layers[0], 32)]
    gemma = derived_spec("google/gemma-2-9b-it")  # sliding and full layers alternate
    counts = common.layer_counts(gemma.layers)
    assert [(layer.kind.value, count) for layer, count in counts] == [("sliding_attention", 21), ("full_attention", 21)]


@pytest.mark.parametrize("repo", REPOS)
def test_layer_counts_cover_every_layer_in_order_of_first_appearance(repo):
    spec = derived_spec(repo)
    counts = common.layer_counts(spec.layers)
    assert sum(count for _, count in counts) == len(spec.layers)
    firsts = [next(i for i, layer in enumerate(spec.layers) if layer is distinct) for distinct, _ in counts]
    assert firsts == sorted(firsts)
    # equal layers held apart are counted apart: one entry per layer
    assert len(common.layer_counts(separate_layers(spec).layers)) == len(spec.layers)


def test_the_layer_summary_belongs_to_one_tuple_not_to_its_values():
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    summary = common.layer_summary(spec.layers)
    assert common.layer_summary(spec.layers) is summary
    copy = tuple(list(spec.layers))
    assert copy == spec.layers and copy is not spec.layers
    assert common.layer_summary(copy) is not summary
    assert common.layer_summary(copy) == summary


ENGINE_CASES = [
    ("vllm", "h100x2", 32768, 1, "auto", {}),
    ("vllm", "rtx4090", 8192, 8, "fp8", {}),
    ("vllm", "a100-80gbx4", 131072, 1, "auto", {"pipeline-parallel-size": "2", "tensor-parallel-size": "2"}),
    ("sglang", "h100x2", 32768, 1, "auto", {}),
    ("llamacpp", "rtx4090", 32768, 1, "q8_0", {}),
]


def _estimate_or_error(spec, engine, gpu, context, concurrency, kv, settings):
    try:
        return estimate(
            spec, parse_gpu_spec(gpu), EngineChoice(engine, None, settings), Workload(context, concurrency, kv)
        )
    except HfvramError as error:
        return f"{type(error).__name__}: {error}"


@pytest.mark.parametrize("repo", REPOS)
def test_shared_layer_objects_change_no_figure(repo):
    spec = derived_spec(repo)
    apart = separate_layers(spec)
    for case in ENGINE_CASES:
        shared, separate = _estimate_or_error(spec, *case), _estimate_or_error(apart, *case)
        # every field: the terms, verdict, capacity, KV figures, warnings and explain lines
        assert shared == separate, (repo, case)


def _random_spec(rng: random.Random, block: int) -> vllm_kv.KVCacheSpec:
    kind = rng.choice(["full", "mla", "sliding", "chunked", "mamba"])
    if kind == "sliding":
        return vllm_kv.SlidingWindowSpec(
            block, 4096, sliding_window=rng.choice([0, 1, 128, 4096, rng.randint(1, 20000)])
        )
    if kind == "chunked":
        return vllm_kv.ChunkedLocalAttentionSpec(
            block, 4096, attention_chunk_size=rng.choice([0, 8192, rng.randint(1, 9999)])
        )
    return {"full": vllm_kv.FullAttentionSpec, "mla": vllm_kv.MLAAttentionSpec, "mamba": vllm_kv.MambaSpec}[kind](
        block, 4096
    )


def test_the_longest_context_in_closed_form_is_what_the_search_finds():
    """Past the layout's saturation only the full-attention groups grow: the closed form there, the binary search
    below it, equal to the binary search over the whole range for layouts of every kind of group."""
    rng = random.Random(16)
    for _ in range(20000):
        block = rng.choice([1, 7, 16, 64, 128, 256])
        groups = tuple((_random_spec(rng, block), rng.randint(1, 6)) for _ in range(rng.randint(1, 4)))
        layout = vllm_kv.KVGroupLayout(4096, 3, len(groups), block, groups, rng.choice([1, 512, 2048, 8192]))
        blocks, concurrency = rng.choice([rng.randint(0, 300), rng.randint(0, 50_000)]), rng.randint(1, 16)
        cap = rng.choice([0, 1, 2, 100, 4096, 131072, rng.randint(1, 1 << 20)])
        if concurrency * layout.blocks_per_request(1) > blocks:
            assert vllm_kv._longest_context(layout, blocks, concurrency, cap) == 0
            continue
        expected = vllm_kv._longest_context_search(layout, blocks, concurrency, cap)
        assert vllm_kv._longest_context(layout, blocks, concurrency, cap) == expected


def test_the_saturation_of_a_layout():
    full, sliding = vllm_kv.FullAttentionSpec(16, 4096), vllm_kv.SlidingWindowSpec(16, 4096, sliding_window=4096)
    assert vllm_kv.KVGroupLayout(4096, 1, 1, 16, ((full, 3),), 2048).saturation() == (1, 3)
    assert vllm_kv.KVGroupLayout(4096, 1, 2, 16, ((full, 1), (sliding, 1)), 2048).saturation() == (4096 - 1 + 2048, 1)
    # a group of another block size: no closed form
    assert (
        vllm_kv.KVGroupLayout(4096, 1, 2, 16, ((full, 1), (vllm_kv.FullAttentionSpec(32, 4096), 1)), 2048).saturation()
        is None
    )


@pytest.mark.parametrize(
    "repo", ["google/gemma-2-9b-it", "meta-llama/Llama-2-7b-hf", "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B"]
)
def test_the_longest_context_reusing_the_checks_own_estimate_is_the_same(repo):
    """``max_context(known=...)`` takes the check's forward estimate where its search asks for the check's context
    again (the model's own limit asked for, or the closed form's candidate): the answer is the one computed anew."""
    from hfvram.estimate import inverse
    from hfvram.estimate.core import estimate_memory

    spec = derived_spec(repo)
    for gpu, context in (("rtx4090", 4096), ("rtx4090", spec.max_position_embeddings), ("h100x2", 32768)):
        hardware, choice = parse_gpu_spec(gpu), EngineChoice("vllm")
        workload = Workload(context=context)
        first = estimate_memory(spec, hardware, choice, workload)
        assert inverse.max_context(spec, hardware, choice, workload, known=first) == inverse.max_context(
            spec, hardware, choice, workload
        )
