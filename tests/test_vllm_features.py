"""vLLM features that cost memory (docs/engines/vllm.md#vllm-features): LoRA slots, speculative decoding, CPU weight
offload and prefix caching, checked from first principles on real fixture configs (fixtures/hub)."""

from __future__ import annotations

import json

import pytest
from cli_support import validate
from click.testing import CliRunner
from spec_support import config_of, derived_spec

from hfvram.cli import cli
from hfvram.engines.vllm import features as vllm_features
from hfvram.errors import UsageError
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload

GiB = 1 << 30
H100 = parse_gpu_spec("h100")


def run(repo_or_spec, hardware=H100, context=8192, version="0.19", **settings):
    spec = derived_spec(repo_or_spec) if isinstance(repo_or_spec, str) else repo_or_spec
    choice = EngineChoice("vllm", version, {k.replace("_", "-"): str(v) for k, v in settings.items()})
    return estimate(spec, hardware, choice, Workload(context=context))


def llama_lora_bytes(loras: int, rank: int, tp: int, fully_sharded: bool = False) -> int:
    """vLLM's LoRA buffers for Llama-3.1-8B on one rank, written out from config.json and the shapes of
    ``create_lora_weights`` (base_linear.py, column_parallel_linear.py, vocal_parallel_embedding.py,
    logits_processor.py at the pinned commit), in bfloat16."""
    config = config_of("meta-llama/Llama-3.1-8B-Instruct")
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv_heads, layers = config["num_attention_heads"], config["num_key_value_heads"], config["num_hidden_layers"]
    head_dim = hidden // heads
    rank_a = rank // tp if fully_sharded else rank
    kv_per_rank = max(1, kv_heads // tp) * head_dim
    # qkv_proj: MergedQKVParallelLinearWithLoRA, 3 slices of lora_a [loras, 1, rank, hidden] and lora_b
    # [loras, 1, q / kv shard, rank]
    qkv = 3 * loras * rank_a * hidden + loras * (heads * head_dim // tp + 2 * kv_per_rank) * rank
    # o_proj: RowParallelLinearWithLoRA, lora_a [loras, 1, rank, in / tp], lora_b [loras, 1, hidden, rank]
    o_proj = loras * rank * heads * head_dim // tp + loras * (hidden // tp if fully_sharded else hidden) * rank
    # gate_up_proj: MergedColumnParallelLinearWithLoRA, 2 slices
    gate_up = 2 * loras * rank_a * hidden + 2 * loras * (inter // tp) * rank
    down = loras * rank * inter // tp + loras * (hidden // tp if fully_sharded else hidden) * rank
    # embed_tokens: lora_a [loras, vocab, rank] + lora_b [loras, 1, hidden, rank]; logits: the transpose
    embeddings = 2 * loras * rank * (vocab + hidden)
    return 2 * (layers * (qkv + o_proj + gate_up + down) + embeddings)


# ---- LoRA ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loras,rank,tp", [(4, 16, 1), (4, 64, 1), (2, 32, 2), (1, 8, 16)])
def test_lora_slots_of_llama_8b_match_the_shapes(loras, rank, tp):
    """Llama-3.1-8B, max_loras 4 rank 16 at TP 1: 32 × 5,242,880 elements of layer slots + 16,941,056 of
    embeddings and lm_head, 2 B each = 369,426,432 B. TP 16 exceeds the 8 KV heads: one KV head per rank."""
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    lora = vllm_features.LoraSettings(max_loras=loras, max_lora_rank=rank, dtype_bytes=2.0)
    term = vllm_features.lora_term(spec, lora, tp, spec.layers, 8192, run_rules())
    assert term.bytes == llama_lora_bytes(loras, rank, tp)
    if (loras, rank, tp) == (4, 16, 1):
        assert term.bytes == 369_426_432
    assert not term.unmodelled


def test_fully_sharded_loras_split_lora_a_of_column_layers():
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    lora = vllm_features.LoraSettings(max_loras=4, max_lora_rank=64, dtype_bytes=2.0, fully_sharded_loras=True)
    term = vllm_features.lora_term(spec, lora, 4, spec.layers, 8192, run_rules())
    assert term.bytes == llama_lora_bytes(4, 64, 4, fully_sharded=True)
    assert term.bytes < llama_lora_bytes(4, 64, 4)


def test_estimate_adds_the_slots_to_the_weights_and_the_shrink_buffer_to_the_forward():
    base = run("meta-llama/Llama-3.1-8B-Instruct")
    lora = run("meta-llama/Llama-3.1-8B-Instruct", enable_lora="true", max_loras=4, max_lora_rank=64)
    assert lora.per_gpu.weights - base.per_gpu.weights == llama_lora_bytes(4, 64, 1) == 1_477_705_728
    assert lora.engine["lora_bytes"] == 1_477_705_728
    assert "4 slot(s) of rank 64" in lora.explain["lora"] and "+1.376 GiB LoRA slots" in lora.explain["weights"]
    # the profile run's float32 shrink buffer of qkv_proj: 3 slices × 8192 tokens × rank 64 × 4 B
    assert "LoRA shrink buffer 0.006 GiB" in lora.explain["activations"]
    assert lora.capacity.kv_tokens < base.capacity.kv_tokens
    # the flags are read, so no "not accounted for" warning remains
    assert not [w for w in lora.warnings if "--enable-lora" in w or "max-loras" in w]


def test_lora_defaults_and_dtype():
    """LoRAConfig defaults: max_loras 1, max_lora_rank 16; --lora-dtype float16 on a bfloat16 model: same bytes."""
    default = run("meta-llama/Llama-3.1-8B-Instruct", enable_lora="true")
    assert default.engine["lora_bytes"] == llama_lora_bytes(1, 16, 1)
    half = run("meta-llama/Llama-3.1-8B-Instruct", enable_lora="true", lora_dtype="float16")
    assert half.engine["lora_bytes"] == default.engine["lora_bytes"]
    # without --enable-lora vLLM reads none of the sizes
    assert run("meta-llama/Llama-3.1-8B-Instruct", max_loras=8).engine["lora_bytes"] is None


def test_lora_refuses_bad_sizes():
    with pytest.raises(UsageError, match="max-cpu-loras"):
        run("meta-llama/Llama-3.1-8B-Instruct", enable_lora="true", max_loras=4, max_cpu_loras=2)
    with pytest.raises(UsageError, match="lora-dtype"):
        run("meta-llama/Llama-3.1-8B-Instruct", enable_lora="true", lora_dtype="int8")


def test_a_class_without_embedding_modules_gets_no_embedding_slots():
    """Qwen2ForCausalLM lists no ``embedding_modules`` (qwen2.py): only its linear layers get slots."""
    spec = derived_spec("Qwen/Qwen2.5-7B")
    term = vllm_features.lora_term(spec, vllm_features.LoraSettings(4, 16, 2.0), 1, spec.layers, 8192, run_rules())
    assert {name for name, _ in term.parts} == {"attention", "mlp"}


def test_fused_moe_lora_slots_of_mixtral():
    """FusedMoEWithLoRA: w1 and w3 lora_a [loras, experts, rank, hidden] + lora_b [loras, experts, inter / tp, rank],
    w2 lora_a [loras, experts, rank, inter / tp] + lora_b [loras, experts, hidden, rank]; the router gate is a
    ReplicatedLinear ([rank, hidden] + [experts, rank])."""
    config = config_of("mistralai/Mixtral-8x7B-v0.1")
    hidden, inter, experts = config["hidden_size"], config["intermediate_size"], config["num_local_experts"]
    loras, rank, tp = 2, 16, 2
    spec = derived_spec("mistralai/Mixtral-8x7B-v0.1")
    term = vllm_features.lora_term(
        spec, vllm_features.LoraSettings(loras, rank, 2.0), tp, spec.layers, 8192, run_rules()
    )
    per_layer = 2 * loras * experts * (rank * hidden + inter // tp * rank) + loras * experts * (
        rank * inter // tp + hidden * rank
    )
    router = loras * rank * (hidden + experts)
    assert dict(term.parts)["experts + router"] == 2 * config["num_hidden_layers"] * (per_layer + router)


def extra_vocab_bytes(loras: int, rank: int, extra: int = 256) -> int:
    """What ``lora_extra_vocab_size`` added to Llama-3.1-8B at TP 1 before vllm#28545 (llama.py, the LoRA layers at
    df44df01, the parent of that change): embed_tokens grows by extra × max_loras rows (padded to 64), lm_head by
    extra rows with the vocabulary padded to 256 (128256 is a multiple of 256: + 256 rows), each LoRA wrapper keeps
    ``embeddings_tensors`` [max_loras, extra, hidden]; embed lora_a covers vocab + extra rows and the logits' lora_b
    pad256(vocab + extra) = 128512 rows."""
    hidden, vocab = 4096, 128256
    rows = 4 * 256 + 256 + 2 * loras * extra
    lora_rows = loras * rank * extra + loras * rank * (128512 - vocab)
    return 2 * (rows * hidden + lora_rows)


def test_releases_before_the_extra_vocab_removal_add_its_rows():
    """vllm@0.9 (V0) and vllm@0.10 (V1) still had lora_extra_vocab_size = 256; the newest has none."""
    for version, use_v1 in (("0.9", "0"), ("0.10", "1")):
        base = run("meta-llama/Llama-3.1-8B-Instruct", version=version, VLLM_USE_V1=use_v1)
        lora = run(
            "meta-llama/Llama-3.1-8B-Instruct", version=version, VLLM_USE_V1=use_v1, enable_lora="true", max_loras=4
        )
        assert lora.engine["engine_generation"] == ("v0" if use_v1 == "0" else "v1")
        assert lora.per_gpu.weights - base.per_gpu.weights == llama_lora_bytes(4, 16, 1) + extra_vocab_bytes(4, 16)
        assert "extra vocabulary" in lora.explain["lora"]
    newest = run("meta-llama/Llama-3.1-8B-Instruct", version=None, enable_lora="true", max_loras=4)
    assert newest.engine["lora_bytes"] == llama_lora_bytes(4, 16, 1)


def test_mla_layers_are_named_as_not_counted():
    result = run("deepseek-ai/DeepSeek-V2-Lite", enable_lora="true")
    assert any("the LoRA slots of 27 mla layer(s)" in w for w in result.warnings), result.warnings


# ---- speculative decoding --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config", ['{"method": "ngram", "num_speculative_tokens": 4}', '{"method": "suffix"}', '{"model": "[ngram]"}']
)
def test_ngram_and_suffix_cost_nothing_and_say_so(config):
    base = run("meta-llama/Llama-3.1-8B-Instruct")
    drafted = run("meta-llama/Llama-3.1-8B-Instruct", speculative_config=config)
    assert drafted.per_gpu == base.per_gpu
    assert any("no GPU memory" in w for w in drafted.warnings)


def test_mtp_draft_loads_its_layer_and_caches_in_the_same_pool():
    """DeepSeek-V3 with ``{"method": "deepseek_mtp"}`` (renamed "mtp" by SpeculativeConfig): the checkpoint's one MTP
    layer is loaded and its MLA attention caches in the pool: KV per token grows by 62 / 61."""
    base = run("deepseek-ai/DeepSeek-V3", parse_gpu_spec("h200x8"))
    mtp = run(
        "deepseek-ai/DeepSeek-V3",
        parse_gpu_spec("h200x8"),
        speculative_config='{"method": "deepseek_mtp", "num_speculative_tokens": 1}',
    )
    assert mtp.per_gpu.kv_cache == base.per_gpu.kv_cache * 62 // 61
    assert mtp.per_gpu.weights > base.per_gpu.weights
    assert mtp.engine["speculative_method"] == "mtp"
    assert "1 MTP layer(s)" in mtp.explain["speculative"]
    assert any("drafter's own profile-run activations and CUDA graphs are not" in w for w in mtp.warnings)


def test_mtp_without_mtp_layers_is_refused():
    """vLLM's SpeculativeConfig finds no ``n_predict`` for a model without MTP layers and does not start: the
    verdict is the refusal, with the engine's reason."""
    result = run(
        "meta-llama/Llama-3.1-8B-Instruct", speculative_config='{"method": "mtp", "num_speculative_tokens": 1}'
    )
    assert any("states no multi-token-prediction layers" in w for w in result.warnings)
    assert result.verdict == "does_not_fit"
    assert result.refusal.startswith("vLLM refuses speculative decoding (mtp, 1 tokens)")


@pytest.mark.parametrize(
    "settings,named",
    [
        ({"speculative_config": '{"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "method": "eagle3"}'}, "eagle3"),
        ({"speculative_config": '{"model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 5}'}, "draft_model"),
        ({"speculative_model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 5}, "draft_model"),
    ],
)
def test_a_draft_checkpoint_is_named_in_a_warning(settings, named):
    result = run("meta-llama/Llama-3.1-8B-Instruct", **settings)
    text = "\n".join(result.warnings)
    assert f"speculative decoding ({named}" in text and "is a second checkpoint hfvram has not read" in text


def test_speculative_config_must_be_a_json_object():
    with pytest.raises(UsageError, match="not JSON"):
        run("meta-llama/Llama-3.1-8B-Instruct", speculative_config="{method: ngram")
    with pytest.raises(UsageError, match="JSON object"):
        run("meta-llama/Llama-3.1-8B-Instruct", speculative_config="[1, 2]")


# ---- CPU offload and prefix caching -------------------------------------------------------------------------


def test_cpu_offload_moves_at_most_the_decoder_layers():
    """UVAOffloader walks the decoder layers only: embed_tokens and lm_head (2 × 128256 × 4096 bf16, padded to 64
    rows) stay on the GPU whatever --cpu-offload-gb asks, and so does the rotary cos/sin cache vLLM builds on every
    rank (131072 positions × head_dim 128 in bf16, docs/engines/vllm.md#vllm-multimodal)."""
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    base = run(spec)
    four = run(spec, cpu_offload_gb=4)
    assert base.per_gpu.weights - four.per_gpu.weights == 4 * GiB
    everything = run(spec, cpu_offload_gb=100)
    vocab_rows = 2 * 128256 * 4096 * 2
    rope_cache = 131072 * 128 * 2
    assert everything.per_gpu.weights == pytest.approx(vocab_rows + rope_cache, rel=0.001)
    assert "all " in everything.explain["weights"]


def test_prefix_caching_changes_nothing_and_says_so():
    base = run("meta-llama/Llama-3.1-8B-Instruct")
    for flag in ("enable_prefix_caching", "no_enable_prefix_caching"):
        other = run("meta-llama/Llama-3.1-8B-Instruct", **{flag: "true"})
        assert other.per_gpu == base.per_gpu and other.capacity == base.capacity
        assert any("prefix caching" in w and "changes no memory" in w for w in other.warnings)
    assert "no memory change" in base.explain["kv_cache"]


# ---- the CLI -------------------------------------------------------------------------------------------------


def test_cli_engine_args_show_the_lora_term(hub):
    result = CliRunner().invoke(
        cli,
        [
            "check",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--gpu",
            "h100",
            "--engine",
            "vllm",
            "--engine-args",
            "--enable-lora --max-loras 4 --max-lora-rank 64",
            "--json",
            "--explain",
        ],
    )
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(document)
    assert document["engine"]["lora_bytes"] == llama_lora_bytes(4, 64, 1)
    text = CliRunner().invoke(
        cli,
        [
            "check",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--gpu",
            "h100",
            "--engine",
            "vllm",
            "--engine-args",
            "--enable-lora --max-loras 4 --max-lora-rank 64",
            "--explain",
        ],
    )
    assert "LoRA: 4 slot(s) of rank 64" in text.output and "LoRA slots (--enable-lora)" in text.output


# ---- SGLang (the same rules where its code is the same) -----------------------------------------------------


def sglang(spec, hardware="h100", **settings):
    choice = EngineChoice("sglang", None, {k.replace("_", "-"): str(v) for k, v in settings.items()})
    return estimate(spec, parse_gpu_spec(hardware), choice, Workload(context=8192))


def test_sglang_lora_pool_for_all_target_modules():
    """SGLang LoRAMemoryPool (mem_pool.py ``get_lora_A_shape`` / ``get_lora_B_shape``): A [slots, r × stacked,
    in (/ tp for row layers)], B [slots, out per rank, r]: the layers as vLLM's; ``all`` adds embed_tokens (A
    [slots, r, vocab], B [slots, hidden, r]) and lm_head (A [slots, r, hidden], B [slots, vocab / tp, r])."""
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    loras, rank, tp = 4, 32, 2
    base = sglang(spec, "h100x2")
    pooled = sglang(
        spec, "h100x2", enable_lora="true", max_lora_rank=rank, lora_target_modules="all", max_loras_per_batch=loras
    )
    layers_and_embed = llama_lora_bytes(loras, rank, tp) - 2 * loras * rank * (128256 + 4096)  # vLLM's lm_head
    expected = layers_and_embed + 2 * loras * rank * (4096 + 128256 // tp)
    assert pooled.per_gpu.weights - base.per_gpu.weights == expected
    assert "LoRA pool (4 slots of rank 32" in pooled.explain["weights"]
    # without a rank and "all" the adapters decide: a warning, nothing counted
    unsized = sglang(spec, "h100x2", enable_lora="true", lora_paths="adapter")
    assert unsized.per_gpu.weights == base.per_gpu.weights
    assert any("--lora-paths, which hfvram does not read" in w for w in unsized.warnings)


def test_sglang_cpu_offload_is_the_same_rule():
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    assert sglang(spec).per_gpu.weights - sglang(spec, cpu_offload_gb=2).per_gpu.weights == 2 * GiB
    # read, not "unknown": the one line naming it is the offload verdict's (the weights cross PCIe every step)
    named = [w for w in sglang(spec, cpu_offload_gb=2).warnings if "cpu-offload" in w]
    assert all("cross PCIe" in w for w in named)


def run_rules():
    """vllm.toml's rules for the newest release (the LoRA constants are release-independent)."""
    from hfvram.engines.vllm import profile as vllm

    return vllm.PROFILE.constants(None)[1]
