"""Derived tensor lists (hfvram.readers.shapes) against real checkpoint indexes and the articles' figures.

Real data: fixtures/hub/*/model.safetensors.index.json (metadata.total_size = real bytes; weight_map = real
tensor names), see fixtures/README.md. Figures: article 000
("LLM Calculadora de VRAM para Auto-Hospedagem", docs/methodology.md Sources).
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from hfvram.readers.config import read_config
from hfvram.readers.safetensors import weights_from_tensors
from hfvram.readers.shapes import DERIVED_SOURCE, derive_warnings, derived_weights, tensors_from_spec
from hfvram.readers.tensors import params_active
from hfvram.spec import Layer, LayerKind, ModelSpec, Quantization

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
COMPANIONS = ("quantize_config.json", "hf_quant_config.json")


@cache
def load(repo: str) -> tuple[ModelSpec, dict]:
    folder = HUB / repo
    config = json.loads((folder / "config.json").read_text())
    companions = {name: json.loads((folder / name).read_text()) for name in COMPANIONS if (folder / name).exists()}
    return read_config(config, companions=companions, use_transformers=False), config


def index_of(repo: str) -> dict:
    return json.loads((HUB / repo / "model.safetensors.index.json").read_text())


@pytest.mark.parametrize("repo", ["google/gemma-2-9b-it", "google/medgemma-27b-it", "mistralai/Devstral-Small-2507"])
def test_derived_total_within_one_percent_of_real_index(repo):
    spec, config = load(repo)
    weights = derived_weights(spec, config)
    real = index_of(repo)["metadata"]["total_size"]
    assert weights.exact is False and weights.source == DERIVED_SOURCE
    assert abs(weights.total_bytes - real) / real < 0.01
    # and the tensor names are the checkpoint's own
    names = {t.name for t in tensors_from_spec(spec, config)}
    assert names == set(index_of(repo)["weight_map"])


def test_medgemma_vision_tower_is_in_the_vision_component():
    spec, config = load("google/medgemma-27b-it")
    weights = derived_weights(spec, config)
    # SigLIP-So400m tower (~0.42 B parameters) + projector; index total_parameters 28,842,036,848 counts the
    # tied lm_head a second time (262,208 × 5,376)
    assert 0.40e9 < weights.params_by_component["vision"] < 0.45e9
    assert weights.params_total + 262_208 * 5_376 == index_of("google/medgemma-27b-it")["metadata"]["total_parameters"]


def test_devstral_parameters_match_index_total_parameters():
    spec, config = load("mistralai/Devstral-Small-2507")
    assert (
        derived_weights(spec, config).params_total
        == index_of("mistralai/Devstral-Small-2507")["metadata"]["total_parameters"]
    )


def test_gptq_int4_bytes_per_parameter():
    """Article 000: GPTQ / AWQ int4 take 0.52–0.55 bytes per parameter (not 0.5)."""
    spec, config = load("TheBloke/Llama-2-13B-chat-GPTQ")
    tensors = tensors_from_spec(spec, config)
    weights = weights_from_tensors(tensors, quantization=spec.quantization, num_layers=spec.num_layers)
    assert {t.dtype for t in tensors if t.name.endswith(".qweight")} == {"I32"}
    quantized_bytes = weights.bytes_by_component["attention"] + weights.bytes_by_component["mlp"]
    quantized_params = weights.params_by_component["attention"] + weights.params_by_component["mlp"]
    assert 0.52 <= quantized_bytes / quantized_params <= 0.55
    assert 13.0e9 < weights.params_total < 13.1e9  # Llama-2-13B
    # fp16 embeddings and lm_head lift the whole checkpoint a little above that
    assert 0.55 < weights.total_bytes / weights.params_total < 0.57


def test_gpt_oss_120b_mxfp4_is_about_63_gb_and_bf16_would_be_about_234():
    """Article 000: gpt-oss-120b ships MXFP4 experts (4.25 bits): ~63 GB, one 80 GB card; BF16 ~234 GB."""
    spec, config = load("openai/gpt-oss-120b")
    weights = derived_weights(spec, config)
    assert weights.total_bytes == pytest.approx(63e9, rel=0.05)
    assert weights.total_bytes < 80e9
    # expert biases are BF16 parameters too, hence a hair under 4.25 bits over all expert parameters
    assert weights.bytes_by_dtype["U8"] / weights.params_by_component["experts"] * 8 == pytest.approx(4.25, rel=1e-3)
    from dataclasses import replace

    bf16 = derived_weights(replace(spec, quantization=None), config)
    assert bf16.total_bytes == pytest.approx(234e9, rel=0.02)
    assert bf16.params_total == weights.params_total


def test_moe_counts_every_expert():
    """Article 000: Mixtral-8x7B has 46.7B total parameters (not the 13B active)."""
    spec, config = load("mistralai/Mixtral-8x7B-v0.1")
    weights = derived_weights(spec, config)
    assert weights.params_total == pytest.approx(46.7e9, rel=0.005)
    active = params_active(weights, spec)
    assert active == pytest.approx(12.9e9, rel=0.02)
    qwen, qwen_config = load("Qwen/Qwen3-30B-A3B")
    qwen_weights = derived_weights(qwen, qwen_config)
    assert qwen_weights.params_total == pytest.approx(30.5e9, rel=0.01)  # "30B-A3B": 30.5B total, 3.3B active
    assert params_active(qwen_weights, qwen) == pytest.approx(3.3e9, rel=0.03)


def test_deepseek_v3_fp8_block_scales_and_mtp():
    """DeepSeek-V3: 671B main-model parameters plus the MTP block, FP8 weights with 128×128 block scales."""
    spec, config = load("deepseek-ai/DeepSeek-V3")
    tensors = tensors_from_spec(spec, config)
    by_name = {t.name: t for t in tensors}
    q_b = by_name["model.layers.0.self_attn.q_b_proj.weight"]
    assert q_b.dtype == "F8_E4M3" and q_b.shape == (128 * 192, 1536)
    assert by_name["model.layers.0.self_attn.q_b_proj.weight_scale_inv"].shape == (192, 12)
    assert by_name["model.embed_tokens.weight"].dtype == "BF16"
    assert "model.layers.61.eh_proj.weight" in by_name and "model.layers.3.mlp.experts.255.down_proj.weight" in by_name
    assert "model.layers.2.mlp.gate_proj.weight" in by_name  # first_k_dense_replace = 3 dense layers
    weights = derived_weights(spec, config)
    main = weights.params_total - weights.params_by_component["mtp"]
    assert main == pytest.approx(671e9, rel=0.005)


def test_fp8_per_tensor_nvfp4_and_compressed_tensors_layouts():
    fp8, fp8_config = load("nvidia/Llama-3.1-70B-Instruct-FP8")
    names = {t.name: t for t in tensors_from_spec(fp8, fp8_config)}
    assert names["model.layers.0.mlp.up_proj.weight"].dtype == "F8_E4M3"
    assert names["model.layers.0.mlp.up_proj.weight_scale"].shape == ()
    assert names["lm_head.weight"].dtype == "BF16"  # exclude_modules: lm_head
    nvfp4, nvfp4_config = load("nvidia/Qwen3-30B-A3B-NVFP4")
    weights = derived_weights(nvfp4, nvfp4_config)
    bf16, _ = load("Qwen/Qwen3-30B-A3B")
    assert weights.params_total == derived_weights(bf16, nvfp4_config).params_total  # U8 unpacked 2 per byte
    names = {t.name: t for t in tensors_from_spec(nvfp4, nvfp4_config)}
    assert names["model.layers.0.mlp.gate.weight"].dtype == "BF16"  # router excluded
    assert names["model.layers.0.mlp.experts.0.up_proj.weight"].shape == (768, 1024)


def test_hand_built_spec_and_warnings():
    layer = Layer(LayerKind.FULL, num_kv_heads=2, head_dim_k=8, head_dim_v=8)
    spec = ModelSpec(
        architecture="LlamaForCausalLM",
        model_type="llama",
        dtype=None,
        num_layers=2,
        layers=(layer, Layer(LayerKind.MAMBA)),
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        vocab_size=100,
        tie_word_embeddings=False,
        quantization=Quantization(method="awq", bits=4, group_size=32),
    )
    tensors = {t.name: t for t in tensors_from_spec(spec)}
    # AWQ (docs/engines/common.md#hf-quant-formats): qweight int32 [in, out/8], qzeros [in/g, out/8], scales fp16 [in/g, out]
    assert tensors["model.layers.0.mlp.up_proj.qweight"].shape == (32, 8)
    assert tensors["model.layers.0.mlp.up_proj.scales"].shape == (1, 64)
    assert tensors["model.embed_tokens.weight"].dtype == "BF16"
    warnings = derive_warnings(spec)
    assert any("dtype" in w for w in warnings) and any("mamba" in w for w in warnings)
    empty = ModelSpec(architecture=None, model_type=None, dtype="bfloat16", num_layers=0, layers=())
    assert tensors_from_spec(empty) == [] and derive_warnings(empty)


def test_hybrid_recurrent_models_derive_their_mixers():
    """Sizes the model names state: Qwen3-Next-80B-A3B (80B total, ~3B active), Nemotron-H-56B (56B),
    NVIDIA-Nemotron-3-Nano-30B-A3B (~31.6B total with its Mamba-2 / attention / MoE blocks, ~3B active)."""
    nxt, nxt_config = load("Qwen/Qwen3-Next-80B-A3B-Thinking")
    weights = derived_weights(nxt, nxt_config)
    assert weights.params_total == pytest.approx(80e9, rel=0.01)
    # "A3B" counts the transformer blocks: active parameters less the embedding and the output head
    embeddings = weights.params_by_component["embeddings"] + weights.params_by_component["lm_head"]
    assert 3.0e9 < params_active(weights, nxt) - embeddings < 3.5e9
    names = {t.name: t for t in tensors_from_spec(nxt, nxt_config)}
    # Gated DeltaNet: q/k (16 heads × 128) twice + v/z (32 heads × 128) twice
    assert names["model.layers.0.linear_attn.in_proj_qkvz.weight"].shape == (2 * 2048 + 2 * 4096, 2048)
    assert names["model.layers.3.self_attn.q_proj.weight"].shape == (2 * 16 * 256, 2048)  # gated attention
    assert not derive_warnings(nxt, nxt_config)
    nemo, nemo_config = load("nvidia/Nemotron-H-56B-Base-8K")
    assert derived_weights(nemo, nemo_config).params_total == pytest.approx(56e9, rel=0.01)
    nano, nano_config = load("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    nano_weights = derived_weights(nano, nano_config)
    assert nano_weights.params_total == pytest.approx(31.6e9, rel=0.01)
    assert 3.0e9 < params_active(nano_weights, nano) < 4.0e9


def test_llama4_scout_fused_experts_and_shared_expert():
    """Llama-4-Scout-17B-16E: 16 routed experts + one shared expert per layer, ~17B active (the name)."""
    spec, config = load("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    names = {t.name: t for t in tensors_from_spec(spec, config)}
    assert names["language_model.model.layers.0.feed_forward.experts.gate_up_proj"].shape == (16, 5120, 2 * 8192)
    assert "language_model.model.layers.0.feed_forward.shared_expert.down_proj.weight" in names
    weights = derived_weights(spec, config)
    # config.json leaves tie_word_embeddings unstated; transformers' Llama4TextConfig default (False, kept in
    # data/config_rules.toml for when transformers is not asked) gives Scout its separate lm_head: vocab × hidden
    assert spec.tie_word_embeddings is False and "tie_word_embeddings" in spec.provenance
    assert weights.params_by_component["lm_head"] == 202_048 * 5_120
    assert "language_model.lm_head.weight" in names
    # the vision tower + pixel-shuffle adapter + projector (transformers Llama4VisionModel): 34 layers of width
    # 1408, counted in the vision component; with it the total is the Hub's safetensors parameter count of the
    # repository, 108,641,793,536 ("109B")
    assert names["vision_model.model.layers.33.mlp.fc1.weight"].shape == (5632, 1408)
    assert names["multi_modal_projector.linear_1.weight"].shape == (5120, 4096)
    assert weights.params_total == 108_641_793_536
    vision = weights.params_by_component["vision"]
    assert vision == 871_932_416
    assert 16.5e9 < params_active(weights, spec) - vision < 17.5e9  # the name's 17B active: the text model


def test_nemotron_super_block_configs_set_each_layer():
    """Llama-3_3-Nemotron-Super-49B-v1 (DeciLM / nemotron-nas): 49B parameters (the name), from per-layer
    block_configs — 31 layers without attention, FFN width int(2·ffn_mult·hidden/3) rounded up to a multiple of 256
    (modeling_decilm._ffn_mult_to_intermediate_size)."""
    spec, config = load("nvidia/Llama-3_3-Nemotron-Super-49B-v1")
    weights = derived_weights(spec, config)
    assert weights.params_total == pytest.approx(49e9, rel=0.02)
    names = {t.name: t for t in tensors_from_spec(spec, config)}
    blocks = config["block_configs"]
    assert blocks[0]["ffn"]["ffn_mult"] == 2.625 and blocks[0]["attention"]["n_heads_in_group"] == 8
    assert names["model.layers.0.mlp.up_proj.weight"].shape == (14_336, 8_192)  # 2·2.625·8192/3 = 14336
    assert names["model.layers.0.self_attn.k_proj.weight"].shape == (8 * 128, 8_192)  # 64 heads / 8 per group
    no_attention = [i for i, b in enumerate(blocks) if b["attention"]["no_op"]]
    assert len(no_attention) == 31 == spec.layer_census()["none"]
    for i in no_attention:
        assert f"model.layers.{i}.self_attn.q_proj.weight" not in names
        assert f"model.layers.{i}.input_layernorm.weight" not in names
    widths = {names[f"model.layers.{i}.mlp.up_proj.weight"].shape[0] for i in range(len(blocks))}
    assert widths == {1_024 * n // 4 for n in (11, 22, 28, 56, 70, 112)}  # ffn_mult 0.5 (2730 → 2816) … 5.25
    assert "lm_head.weight" in names  # tie_word_embeddings: false


@pytest.mark.parametrize("repo", sorted(f"{p.parent.parent.name}/{p.parent.name}" for p in HUB.glob("*/*/config.json")))
def test_the_spec_alone_derives_what_the_config_does(repo):
    """read_config keeps what the tensor list needs (spec.extra["shape_config"]): no raw config needed."""
    spec, config = load(repo)
    assert derived_weights(spec) == derived_weights(spec, config)
    assert derive_warnings(spec) == derive_warnings(spec, config)


@pytest.mark.parametrize(
    "repo",
    [
        "mistralai/Mixtral-8x7B-v0.1",
        "Qwen/Qwen3-30B-A3B",
        "nvidia/Qwen3-30B-A3B-NVFP4",
        "deepseek-ai/DeepSeek-V3",
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    ],
)
def test_counted_experts_sum_like_the_full_tensor_list(repo):
    """derived_weights counts each layer's experts instead of listing them: the same sums as the listed tensors."""
    spec, _config = load(repo)
    tensors = tensors_from_spec(spec)
    listed = weights_from_tensors(tensors, quantization=spec.quantization, num_layers=spec.num_layers)
    counted = derived_weights(spec)
    assert len({t.name for t in tensors}) == len(tensors) == counted.num_tensors
    for field in ("total_bytes", "params_total", "bytes_by_component", "params_by_component", "bytes_by_dtype"):
        assert getattr(counted, field) == getattr(listed, field), field


def test_an_exclusion_naming_single_experts_builds_them_one_by_one():
    """A quantization ignore list may keep some experts unquantized (here experts 0–9 of every layer, by regex);
    those experts then differ from the rest and are derived one by one."""
    spec, _ = load("Qwen/Qwen3-30B-A3B")
    ignore = ["lm_head", r"re:.*mlp\.experts\.\d\..*"]
    quant = Quantization(method="fp8", bits=8, details={"weight_block_size": [128, 128], "ignore": ignore})
    fp8 = replace(spec, quantization=quant)
    names = {t.name: t for t in tensors_from_spec(fp8)}
    assert names["model.layers.0.mlp.experts.9.up_proj.weight"].dtype == "BF16"
    assert names["model.layers.0.mlp.experts.10.up_proj.weight"].dtype == "F8_E4M3"
    listed = weights_from_tensors(names.values(), quantization=quant, num_layers=fp8.num_layers)
    assert derived_weights(fp8).bytes_by_dtype == listed.bytes_by_dtype


def test_largest_corpus_model_derives_quickly():
    """Kimi-K2.5 (61 layers × 384 experts, ~208k tensors listed): the counted derivation stays far under a second."""
    import time

    spec, _ = load("moonshotai/Kimi-K2.5")
    start = time.perf_counter()
    weights = derived_weights(spec)
    assert time.perf_counter() - start < 1.0
    assert weights.num_tensors > 200_000


def test_implausible_deci_ffn_mult_is_not_derived():
    """issue 17: a block_configs ffn_mult of 1e308 (Nemotron-Super's config otherwise, fixtures/hub) was an
    internal OverflowError; the MLP of those blocks is now not derived, with a warning."""
    config = json.loads((HUB / "nvidia" / "Llama-3_3-Nemotron-Super-49B-v1" / "config.json").read_text())
    for block in config["block_configs"]:
        if block.get("ffn", {}).get("ffn_mult"):
            block["ffn"]["ffn_mult"] = 1e308
    spec = read_config(config, use_transformers=False)
    weights = derived_weights(spec, config)
    assert weights is not None and 0 < weights.total_bytes < 10**15
    assert any("ffn_mult missing or implausible" in w for w in derive_warnings(spec, config))
