"""Multimodal models on vLLM (hfvram/estimate/multimodal.py, docs/engines/vllm.md#vllm-multimodal): the encoder tower
under TP, --limit-mm-per-prompt text-only serving, --mm-encoder-tp-mode, the dummy encoder outputs in the profile
peak, and the rotary cos/sin cache every rank holds. Golden figures: the llm-d vLLM v0.19.0 H100 logs (gt-0076
Llama-4-Scout TP 4, gt-0069 Llama-3.1-8B), copied in benchmarks/data/groundtruth_cases.jsonl."""

from __future__ import annotations

from dataclasses import replace

import pytest
from spec_support import derived_spec

from hfvram.errors import UsageError
from hfvram.estimate import multimodal
from hfvram.estimate.core import estimate
from hfvram.estimate.types import GPU, EngineChoice, Hardware, Workload
from hfvram.spec import Weights

GiB = 1 << 30
SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def h100s(count: int) -> Hardware:
    # "total_memory=79.19GiB" as the llm-d v0.19.0 logs print it
    return Hardware(
        GPU(id="h100-logged", name="NVIDIA H100 80GB HBM3", vendor="nvidia", memory_bytes=int(79.19 * GiB)),
        count=count,
    )


def run(spec, tp, **settings):
    choice = EngineChoice("vllm", "0.19", {k.replace("_", "-"): str(v) for k, v in settings.items()}, tp=tp)
    return estimate(spec, h100s(tp), choice, Workload(context=8192))


@pytest.fixture(scope="module")
def scout():
    return derived_spec(SCOUT)


def test_llama4_scout_tp4_from_its_published_start_up(scout):
    """gt-0076 (llm-d, vLLM v0.19.0, 4 × H100, util 0.95, max_model_len 8192): "Model loading took 53.12 GiB",
    "Available KV cache memory: 16.75 GiB", "GPU KV cache size: 365,968 tokens". Before the rotary cache and the
    vision tower were counted hfvram said 50.19 GiB (−5.5 %) and 433,648 tokens (+18.5 %)."""
    result = run(scout, 4, gpu_memory_utilization=0.95, enable_prefix_caching="false")
    assert result.per_gpu.weights / GiB == pytest.approx(53.12, rel=0.01)
    assert result.engine["kv_pool_bytes"] / GiB == pytest.approx(16.75, rel=0.02)
    assert result.capacity.kv_tokens == pytest.approx(365_968, rel=0.02)
    explain = result.explain["weights"]
    # the 10,485,760-position rotary cache (2.5 GiB in bf16) sits whole on every rank; the tower is split
    assert "rotary cos/sin cache 10,485,760 positions × 128" in explain and "2.50 GiB" in explain
    assert "encoder tower (1.62 GiB) split over TP=4" in explain
    assert "dummy encoder outputs" in result.explain["activations"]


def test_text_only_serving_skips_the_tower_and_its_profiling(scout):
    """--limit-mm-per-prompt with every modality at 0: vLLM builds no tower (SupportsMultiModal._mark_tower_model)."""
    served = run(scout, 4, limit_mm_per_prompt='{"image": 2}')
    text = run(scout, 4, limit_mm_per_prompt='{"image": 0}')
    vision = scout.weights.bytes_by_component["vision"]
    assert served.per_gpu.weights - text.per_gpu.weights == pytest.approx(vision / 4, rel=0.01)
    assert served.per_gpu.activations - text.per_gpu.activations == 8192 * 5120 * 2  # the encoder budget's outputs
    assert any("text-only serving" in note for note in [text.explain["weights"]])
    # the older key=value spelling reads the same
    legacy = run(scout, 4, limit_mm_per_prompt="image=0")
    assert legacy.per_gpu == text.per_gpu


def test_encoder_tp_mode_data_keeps_the_tower_whole(scout):
    split = run(scout, 4)
    whole = run(scout, 4, mm_encoder_tp_mode="data")
    vision = scout.weights.bytes_by_component["vision"]
    assert whole.per_gpu.weights - split.per_gpu.weights == pytest.approx(vision * 3 / 4, rel=0.01)
    assert "kept whole on every GPU (--mm-encoder-tp-mode data)" in whole.explain["weights"]
    with pytest.raises(UsageError, match="mm-encoder-tp-mode must be one of"):
        run(scout, 4, mm_encoder_tp_mode="pipeline")


def test_an_encoder_built_from_plain_linear_layers_is_whole_on_every_rank(scout):
    """Qwen2-Audio: vLLM builds transformers' Qwen2AudioEncoder and an nn.Linear projector (multimodal.toml)."""
    audio = replace(scout, model_type="qwen2_audio")
    placement = multimodal.tower_placement(audio, "vllm", 4, multimodal.MultimodalSettings())
    assert placement.replicated_bytes == scout.weights.bytes_by_component["vision"]
    assert multimodal.text_only(multimodal.families()["qwen2_audio"], multimodal.MultimodalSettings({"audio": 0}))
    # image=0 does not switch off an audio model
    assert not multimodal.text_only(multimodal.families()["qwen2_audio"], multimodal.MultimodalSettings({"image": 0}))


def test_a_family_not_in_the_table_is_split_with_a_warning(scout):
    unknown = replace(scout, model_type="some_new_vlm")
    result = run(unknown, 4)
    assert any("some_new_vlm" in w and "not in hfvram's table" in w for w in result.warnings)


def test_the_rotary_cache_brings_llama31_weights_to_the_log():
    """gt-0069 (llm-d v0.19.0, H100): "Model loading took 14.99 GiB" for Llama-3.1-8B-Instruct; the checkpoint is
    14.96 GiB and the 131,072 × 128 bf16 rotary cache (32 MiB) is the difference."""
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    size, note = multimodal.rope_cache(spec, 2.0)
    assert size == 131_072 * 128 * 2 and "131,072 positions" in note
    result = run(spec, 1, gpu_memory_utilization=0.95)
    assert result.per_gpu.weights / GiB == pytest.approx(14.99, abs=0.01)


def test_rope_cache_lengths_by_scaling_type(scout):
    yarn = replace(scout, rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})
    assert multimodal.rope_cache(yarn, 2.0)[0] == 32768 * 4 * 128 * 2
    linear = replace(scout, max_position_embeddings=131072, rope_scaling={"rope_type": "linear", "factor": 8.0})
    assert multimodal.rope_cache(linear, 2.0)[0] == 131072 * 8 * 128 * 2
    other = replace(scout, rope_scaling={"rope_type": "longrope"})
    size, note = multimodal.rope_cache(other, 2.0)
    assert size == 0 and "not counted" in note
    assert multimodal.rope_cache(replace(scout, max_position_embeddings=None), 2.0) == (0, None)


@pytest.mark.parametrize(
    "text,limits",
    [
        ('{"image": 0, "video": 0}', {"image": 0, "video": 0}),
        ('{"video": {"count": 1, "num_frames": 32}}', {"video": 1}),
        ("image=3,video=0", {"image": 3, "video": 0}),
        ("", None),
        (None, None),
    ],
)
def test_limit_mm_per_prompt_forms(text, limits):
    assert multimodal.parse_limits(text) == limits


@pytest.mark.parametrize(
    "text,message",
    [
        ('{"image": -1}', "must be >= 0"),
        ('{"image": "many"}', "needs a whole count"),
        ("[1, 2]", "expected modality=count"),
        ('{"image": 1', "not valid JSON"),
        ("image", "expected modality=count"),
        ("x" * 5000, "longer than"),
        (",".join(f"m{i}=1" for i in range(40)), "more than 16"),
    ],
)
def test_limit_mm_per_prompt_bad_input_is_one_clear_error(text, message):
    with pytest.raises(UsageError, match=message):
        multimodal.parse_limits(text)


def test_a_text_model_given_multimodal_flags_says_they_change_nothing():
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    result = run(spec, 1, limit_mm_per_prompt='{"image": 0}', mm_encoder_tp_mode="data")
    assert any("--limit-mm-per-prompt: a text-only model has no encoder" in w for w in result.warnings)
    assert any("--mm-encoder-tp-mode: a text-only model has no encoder" in w for w in result.warnings)


def test_without_weights_of_a_tower_nothing_is_added(scout):
    bare = scout.with_weights(Weights(total_bytes=GiB, params_total=GiB // 2, bytes_by_component={"mlp": GiB}))
    placement = multimodal.tower_placement(bare, "vllm", 4, multimodal.MultimodalSettings(encoder_tp_mode="data"))
    assert placement.replicated_bytes == 0 and placement.notes == ()


def test_sglang_keeps_the_llama4_tower_whole(scout):
    """SGLang's mllama4.py builds transformers' Llama4VisionModel (plain nn.Linear): whole on every rank."""
    result = estimate(scout, h100s(4), EngineChoice("sglang", None, {}, tp=4), Workload(context=8192))
    vision = scout.weights.bytes_by_component["vision"]
    assert f"{vision / GiB:.2f} GiB of vision kept whole on every rank" in result.explain["weights"]
    split = multimodal.tower_placement(
        replace(scout, model_type="gemma3"), "sglang", 4, multimodal.MultimodalSettings()
    )
    assert split.replicated_bytes == 0 and any("not known" in w for w in split.warnings)


def test_text_only_serving_before_vllm_0_10_1_counts_the_tower(scout):
    """PR vllm-project/vllm#22299 (merged 2025-08-06, in 0.10.1) made `limit-mm-per-prompt` 0 skip the tower."""
    choice = EngineChoice("vllm", "0.9", {"limit-mm-per-prompt": '{"image": 0}'}, tp=4)
    old = estimate(scout, h100s(4), choice, Workload(context=8192))
    served = estimate(scout, h100s(4), replace(choice, settings={}), Workload(context=8192))
    assert old.per_gpu.weights == served.per_gpu.weights
    assert any("only from 0.10.1" in w for w in old.warnings)


def test_table_rows_cover_the_issue_families_and_say_their_caveats(scout):
    rows = multimodal.families()
    assert {"llama4", "gemma3", "qwen2_5_vl", "qwen3_vl", "mistral3", "internvl_chat", "qwen2_audio"} <= set(rows)
    assert all(row.vllm_source.startswith("https://github.com/vllm-project/vllm/blob/") for row in rows.values())
    data = multimodal.MultimodalSettings(encoder_tp_mode="data")
    pixtral = multimodal.tower_placement(replace(scout, model_type="mistral3"), "vllm", 2, data)
    assert pixtral.replicated_bytes == 0 and any("does not read it" in w for w in pixtral.warnings)
    intern = multimodal.tower_placement(
        replace(scout, model_type="internvl_chat"), "vllm", 2, multimodal.MultimodalSettings()
    )
    assert any("InternViT's attention is kept whole" in w for w in intern.warnings)


def test_partial_rotary_factor_narrows_the_rotary_cache():
    """Qwen3.5-27B: rope_parameters.partial_rotary_factor 0.25 of head_dim 256 -> 64 rotary dims over 262,144."""
    spec = derived_spec("Qwen/Qwen3.5-27B")
    assert multimodal.rope_cache(spec, 2.0)[0] == 262_144 * 64 * 2
