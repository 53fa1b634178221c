"""The config.json reader on real corpus files (fixtures/hub, sources in fixtures/README.md) and on
malformed variants of them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hfvram.errors import MalformedFileError
from hfvram.readers.config import COMPANION_FILES, load_json_tolerant, read_config, read_config_files
from hfvram.spec import LayerKind, ModelSpec

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
GIB = 1024**3


def raw(repo: str, name: str = "config.json") -> bytes:
    return (HUB / repo / name).read_bytes()


def config(repo: str, name: str = "config.json") -> dict:
    return load_json_tolerant(raw(repo, name), name)


def spec(repo: str, use_transformers: bool = True, **companions: str) -> ModelSpec:
    files = {name: config(repo, name) for name in companions.values()}
    return read_config(config(repo), companions=files, use_transformers=use_transformers)


both_paths = pytest.mark.parametrize("use_transformers", [True, False], ids=["transformers", "rules"])


# ---- load_json_tolerant ----------------------------------------------------------------------


def test_loads_crlf_file():
    data = raw("meta-llama/Llama-3.2-1B")
    assert b"\r\n" in data  # the corpus copy keeps its Windows line endings (fixtures/README.md)
    s = read_config(load_json_tolerant(data, "config.json"))
    assert s.num_layers == 16 and s.head_dim == 64 and s.tie_word_embeddings is True
    assert s.rope_scaling["rope_type"] == "llama3" and s.rope_scaling["factor"] == 32.0
    assert (s.vocab_size, s.max_position_embeddings, s.dtype) == (128256, 131072, "bfloat16")


def test_loads_infinity_literal():
    data = raw("nvidia/Nemotron-H-56B-Base-8K")
    assert b"Infinity" in data
    assert load_json_tolerant(data, "config.json")["time_step_limit"][1] == float("inf")


def test_loads_file_without_trailing_newline_and_with_bom():
    data = raw("meta-llama/Meta-Llama-3.1-8B")
    assert not data.endswith(b"\n")
    assert load_json_tolerant(b"\xef\xbb\xbf" + data, "config.json")["hidden_size"] == 4096


@pytest.mark.parametrize("data", [b"{", b"[1, 2]", b"42", b"\xff\xfe{}", b"", b'{"a": 1,}'])
def test_bad_json_is_malformed(data: bytes):
    with pytest.raises(MalformedFileError) as err:
        load_json_tolerant(data, "config.json")
    assert err.value.file == "config.json" and err.value.exit_code == 3


# ---- golden figures --------------------------------------------------------------------------


@both_paths
def test_llama3_8b_kv_per_token(use_transformers: bool):
    """shared/sources/000 (article): "O Llama-3-8B armazena 128 KiB por token", 16.0 GiB at 128k in FP16."""
    s = spec("meta-llama/Meta-Llama-3.1-8B", use_transformers)
    assert s.kv_bytes_per_token(2) == 131072
    assert s.kv_bytes_per_sequence(131072, 2) == 16 * GIB
    assert s.provenance["num_kv_heads"] == "config.json: num_key_value_heads"


@both_paths
def test_deepseek_v3_mla_at_128k(use_transformers: bool):
    """shared/sources/000: MLA keeps ~576 elements per token per layer; a 671B model serves 128k with ~8.6 GiB."""
    s = spec("deepseek-ai/DeepSeek-V3", use_transformers)
    assert s.layer_census()["mla"] == 61
    assert all(layer.kv_elems_per_token == 576 for layer in s.layers)
    assert s.kv_bytes_per_token(2) == 61 * 576 * 2
    assert s.kv_bytes_per_token(2) * 131072 / GIB == pytest.approx(8.6, abs=0.05)
    assert s.num_mtp_layers == 1 and len(s.layers) == 61  # the MTP layer is counted, not a decoder layer
    assert (s.num_experts, s.num_shared_experts, s.experts_per_token) == (256, 1, 8)
    assert sum(layer.moe for layer in s.layers) == 61 - 3  # first_k_dense_replace = 3


@both_paths
def test_gemma2_alternates_even_layers_sliding(use_transformers: bool):
    """Gemma-2: even layers slide over 4096 tokens, odd layers are global (docs/engines/llamacpp.md#llamacpp-swa / Gemma2Config)."""
    s = spec("google/gemma-2-9b-it", use_transformers)
    kinds = [layer.kind for layer in s.layers]
    assert kinds[0::2] == [LayerKind.SLIDING] * 21 and kinds[1::2] == [LayerKind.FULL] * 21
    assert {layer.window for layer in s.layers if layer.kind is LayerKind.SLIDING} == {4096}
    assert s.head_dim == 256  # explicit head_dim, not hidden 3584 / 16 heads = 224


@both_paths
def test_gemma3_five_local_one_global(use_transformers: bool):
    """docs/engines/llamacpp.md#llamacpp-swa: Gemma 3 set_swa_pattern(6) — 5 of 6 layers sliding (medgemma-27b = gemma-3-27b)."""
    s = spec("google/medgemma-27b-it", use_transformers)
    assert s.multimodal
    assert s.layer_census()["full_attention"] == 10 and s.layer_census()["sliding_attention"] == 52
    assert [i for i, layer in enumerate(s.layers) if layer.kind is LayerKind.FULL][:2] == [5, 11]


@both_paths
def test_gpt_oss_layer_types(use_transformers: bool):
    s = spec("openai/gpt-oss-120b", use_transformers)
    assert [layer.kind for layer in s.layers[:2]] == [LayerKind.SLIDING, LayerKind.FULL]
    assert s.layer_census()["sliding_attention"] == 18
    assert {layer.window for layer in s.layers if layer.window} == {128}
    assert s.quantization.method == "mxfp4"
    assert "model.layers.*.self_attn" in s.quantization.details["modules_to_not_convert"]
    assert (s.num_experts, s.experts_per_token) == (128, 4)


@both_paths
def test_llama4_chunked_layers(use_transformers: bool):
    """Llama-4 Scout: no_rope_layers is empty, so every 4th layer is NoPE global, the rest chunked over 8192."""
    s = spec("meta-llama/Llama-4-Scout-17B-16E-Instruct", use_transformers)
    assert s.multimodal and s.extra["text_model_type"] == "llama4_text"
    assert [i for i, layer in enumerate(s.layers) if layer.kind is LayerKind.FULL] == list(range(3, 48, 4))
    assert {layer.window for layer in s.layers if layer.kind is LayerKind.CHUNKED} == {8192}
    assert (s.num_experts, s.experts_per_token) == (16, 1)


@both_paths
def test_qwen3_next_linear_layers(use_transformers: bool):
    """Qwen3-Next: 3 of 4 layers Gated DeltaNet; state per docs/engines/vllm.md#vllm-mamba-state."""
    s = spec("Qwen/Qwen3-Next-80B-A3B-Thinking", use_transformers)
    kinds = [layer.kind for layer in s.layers]
    assert kinds[:4] == [LayerKind.LINEAR] * 3 + [LayerKind.FULL]
    assert s.layer_census()["linear_attention"] == 36
    linear = s.layers[0]
    assert linear.conv_state_elems == (4 - 1) * (2 * 16 * 128 + 32 * 128)
    assert linear.ssm_state_elems == 32 * 128 * 128
    assert (s.num_experts, s.experts_per_token, s.num_shared_experts) == (512, 10, 1)


def test_qwen35_ssm_dtype_and_mtp():
    s = spec("Qwen/Qwen3.5-27B")
    assert s.multimodal and s.num_mtp_layers == 1
    assert {layer.state_dtype_bytes for layer in s.layers if layer.kind is LayerKind.LINEAR} == {4.0}
    assert "mamba_ssm_dtype" in s.provenance["state_dtype_bytes"]


@both_paths
def test_nemotron_h_mamba_census(use_transformers: bool):
    """Nemotron-H-56B hybrid_override_pattern: 54 M, 10 *, 54 -; Mamba2 state fp32 (docs/engines/vllm.md#vllm-mamba-state)."""
    s = spec("nvidia/Nemotron-H-56B-Base-8K", use_transformers)
    census = {kind: count for kind, count in s.layer_census().items() if count}
    assert census == {"mamba": 54, "full_attention": 10, "none": 54}
    mamba = next(layer for layer in s.layers if layer.kind is LayerKind.MAMBA)
    assert mamba.conv_state_elems == 3 * (256 * 64 + 2 * 8 * 256)
    assert mamba.ssm_state_elems == 256 * 64 * 256
    assert mamba.state_dtype_bytes == 4 and mamba.state_heads == 256
    attention = next(layer for layer in s.layers if layer.kind is LayerKind.FULL)
    assert (attention.num_kv_heads, attention.head_dim_k) == (8, 128)  # attention_head_dim alias


def test_nemotron_nano_moe_blocks():
    s = spec("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert sum(layer.moe for layer in s.layers) == 23
    assert (s.num_experts, s.num_shared_experts, s.experts_per_token) == (128, 1, 6)


@both_paths
def test_nemotron_super_per_layer_heads(use_transformers: bool):
    s = spec("nvidia/Llama-3_3-Nemotron-Super-49B-v1", use_transformers)
    assert s.decided_by == "hfvram rules"  # transformers does not know nemotron-nas
    assert s.layer_census()["none"] == 31 and s.layer_census()["full_attention"] == 49
    assert {layer.num_kv_heads for layer in s.layers if layer.kind is LayerKind.FULL} == {64 // 8}
    assert s.intermediate_size is None and any(w.startswith("intermediate_size") for w in s.warnings)


@pytest.mark.parametrize(
    "repo, experts, shared, per_token, moe_layers",
    [
        ("mistralai/Mixtral-8x7B-v0.1", 8, 0, 2, 32),
        ("Qwen/Qwen3-30B-A3B", 128, 0, 8, 48),
        ("deepseek-ai/DeepSeek-V2-Lite", 64, 2, 6, 26),
        ("moonshotai/Kimi-K2-Instruct", 384, 1, 8, 60),
        ("zai-org/GLM-5", 256, 1, 8, 75),
        ("google/gemma-4-26B-A4B", 128, 0, 8, 30),
    ],
)
def test_moe_expert_counts(repo: str, experts: int, shared: int, per_token: int, moe_layers: int):
    s = spec(repo)
    assert (s.num_experts, s.num_shared_experts, s.experts_per_token) == (experts, shared, per_token)
    assert sum(layer.moe for layer in s.layers) == moe_layers


def test_dense_model_has_no_experts():
    s = spec("meta-llama/Llama-2-7b-hf")
    assert s.num_experts is None and not any(layer.moe for layer in s.layers)
    assert s.layer_census()["full_attention"] == 32 and s.layers[0].num_kv_heads == 32  # MHA: kv = heads


def test_qwen2_sliding_window_only_when_switched_on():
    cfg = config("Qwen/Qwen2.5-7B")
    assert cfg["use_sliding_window"] is False and cfg["sliding_window"]
    assert read_config(cfg).layer_census()["sliding_attention"] == 0
    cfg.update(use_sliding_window=True, max_window_layers=20)
    for use_transformers in (True, False):
        kinds = [layer.kind for layer in read_config(cfg, use_transformers=use_transformers).layers]
        assert kinds == [LayerKind.FULL] * 20 + [LayerKind.SLIDING] * 8


def test_mistral_sliding_window_on_every_layer():
    s = spec("mistralai/Mistral-7B-v0.1")
    assert s.layer_census()["sliding_attention"] == 32 and s.kv_bytes_per_token(2) == 0
    assert s.kv_fixed_bytes_per_sequence(2, 1000) == 32 * 8 * 256 * 2 * 1000


def test_head_dim_null_is_derived_and_explicit_head_dim_wins():
    cfg = config("meta-llama/Llama-3.1-8B-Instruct")
    cfg["head_dim"] = None
    s = read_config(cfg, use_transformers=False)
    assert s.head_dim == 128 and s.provenance["head_dim"] == "derived: hidden_size / num_attention_heads"
    assert spec("Qwen/Qwen3-0.6B").head_dim == 128  # explicit 128, hidden 1024 / 16 heads would be 64


def test_deepseek_v32_indexer_and_glm5():
    s = spec("deepseek-ai/DeepSeek-V3.2")
    assert s.extra["indexer_elems_per_token"] == 61 * 128
    assert "index_head_dim" in s.provenance["indexer_elems_per_token"]
    glm = spec("zai-org/GLM-5")
    assert glm.layer_census()["mla"] == 78 and glm.kv_bytes_per_token(2) == 78 * 576 * 2


@both_paths
def test_deepseek_v4_reading_is_recorded(use_transformers: bool):
    s = spec("deepseek-ai/DeepSeek-V4-Flash", use_transformers)
    assert s.layer_census()["sliding_attention"] == 2  # compress ratio 0: sliding window only
    assert s.extra["deepseek_v4_compressed_layers"] == {
        "compressed_sparse_attention": 21,
        "heavily_compressed_attention": 20,
    }
    assert s.kv_bytes_per_token(2) == (21 * 512 // 4 + 20 * 512 // 128) * 2
    assert any("DeepSeek-V4" in w for w in s.warnings) and "deepseek_v4_layers" in s.provenance


def test_gemma4_global_layers_use_global_head_dim():
    s = spec("google/gemma-4-26B-A4B")
    full = [layer for layer in s.layers if layer.kind is LayerKind.FULL]
    sliding = [layer for layer in s.layers if layer.kind is LayerKind.SLIDING]
    assert {(layer.num_kv_heads, layer.head_dim_k) for layer in full} == {(2, 512)}
    assert {(layer.num_kv_heads, layer.head_dim_k, layer.window) for layer in sliding} == {(8, 256, 1024)}


def test_gemma4_layers_match_transformers_per_layer_config():
    """transformers 5.x Gemma4TextConfig.per_layer_config holds each layer's head_dim and KV heads; the llama.cpp
    gemma-4 vocab GGUF (shared corpus headers/) agrees: head_count_kv 8 / 2, key_length_swa 256 / key_length 512."""
    from hfvram.readers.config_hf import load_hf_config

    cfg = config("google/gemma-4-26B-A4B")
    per_layer = load_hf_config(cfg).text_config.per_layer_config
    s = read_config(cfg, use_transformers=False)
    assert [(layer.num_kv_heads, layer.head_dim_k) for layer in s.layers] == [
        (per_layer[i].num_key_value_heads, per_layer[i].head_dim) for i in range(s.num_layers)
    ]


def test_encoder_has_no_generation_cache():
    s = spec("sentence-transformers/all-MiniLM-L6-v2")
    assert s.layer_census()["none"] == 6 and s.kv_bytes_per_token(2) == 0


# ---- quantization ----------------------------------------------------------------------------


def test_fp8_block_quantization():
    q = spec("deepseek-ai/DeepSeek-V3").quantization
    assert (q.method, q.bits) == ("fp8", 8.0) and q.details["weight_block_size"] == [128, 128]
    assert q.source == "config.json: quantization_config.quant_method"


def test_gptq_with_quantize_config():
    q = spec("TheBloke/Llama-2-13B-chat-GPTQ", quant="quantize_config.json").quantization
    assert (q.method, q.bits, q.group_size) == ("gptq", 4.0, 128)
    cfg = config("TheBloke/Llama-2-13B-chat-GPTQ")
    del cfg["quantization_config"]
    q = read_config(
        cfg, companions={"quantize_config.json": config("TheBloke/Llama-2-13B-chat-GPTQ", "quantize_config.json")}
    ).quantization
    assert (q.method, q.bits, q.group_size) == ("gptq", 4.0, 128) and q.source.startswith("quantize_config.json")


def test_compressed_tensors_fp8_and_int4():
    q = spec("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic").quantization
    assert (q.method, q.bits) == ("compressed-tensors", 8.0) and q.details["schemes"][0]["type"] == "float"
    q = spec("moonshotai/Kimi-K2.5").quantization  # quantization_config nested in text_config
    assert (q.method, q.bits, q.group_size) == ("compressed-tensors", 4.0, 32)


def test_bitsandbytes_nf4():
    q = spec("reubzdubz/Molmo7B_D_NF4Quant").quantization
    assert (q.method, q.bits) == ("bitsandbytes", 4.0) and q.details["bnb_4bit_quant_type"] == "nf4"


def test_bitsandbytes_8bit():
    cfg = config("reubzdubz/Molmo7B_D_NF4Quant")
    cfg["quantization_config"].update(load_in_4bit=False, _load_in_4bit=False, load_in_8bit=True)
    assert read_config(cfg).quantization.bits == 8.0


def test_modelopt_fp8_and_nvfp4():
    q = spec("nvidia/Llama-3.1-70B-Instruct-FP8", quant="hf_quant_config.json").quantization
    assert (q.method, q.bits, q.details["kv_cache_quant_algo"]) == ("fp8", 8.0, "FP8")
    q = spec("nvidia/Qwen3-30B-A3B-NVFP4", quant="hf_quant_config.json").quantization
    assert (q.method, q.bits, q.group_size) == ("nvfp4", 4.0, 16)
    assert q.source == "hf_quant_config.json: quantization.quant_algo"


def test_awq_and_unknown_methods():
    """No AWQ checkpoint is in the corpus: the GPTQ repo's config is rewritten in AutoAWQ's field names."""
    cfg = config("TheBloke/Llama-2-13B-chat-GPTQ")
    cfg["quantization_config"] = {
        "quant_method": "awq",
        "w_bit": 4,
        "q_group_size": 128,
        "version": "gemm",
        "zero_point": True,
    }
    q = read_config(cfg).quantization
    assert (q.method, q.bits, q.group_size, q.details["version"]) == ("awq", 4.0, 128, "gemm")
    cfg["quantization_config"] = {"quant_method": "hqq", "bits": 3}
    s = read_config(cfg)
    assert (s.quantization.method, s.quantization.bits) == ("hqq", 3.0)
    assert any(w.startswith("quantization") for w in s.warnings)


def test_transformers_supplies_defaults_the_file_leaves_out():
    cfg = config("google/gemma-2-9b-it")
    del cfg["sliding_window"], cfg["sliding_window_size"]
    s = read_config(cfg)
    assert {layer.window for layer in s.layers if layer.kind is LayerKind.SLIDING} == {4096}
    assert s.provenance["sliding_window"].startswith("transformers 5.") and s.provenance["sliding_window"].endswith(
        "(default)"
    )


def test_read_config_files_takes_the_companions_from_a_folder():
    folder = HUB / "nvidia" / "Qwen3-30B-A3B-NVFP4"
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert set(files) - {"config.json"} <= set(COMPANION_FILES)
    assert read_config_files(files).quantization.method == "nvfp4"
    with pytest.raises(MalformedFileError):
        read_config_files({"hf_quant_config.json": files["hf_quant_config.json"]})


def test_unquantized_model_has_none():
    assert spec("Qwen/Qwen3-8B").quantization is None


# ---- malformed input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("num_hidden_layers", "32"),
        ("num_hidden_layers", None),
        ("num_hidden_layers", -1),
        ("num_hidden_layers", True),
        ("num_hidden_layers", 32.5),
        ("num_key_value_heads", "8"),
        ("hidden_size", float("inf")),
        ("num_attention_heads", 0),
        ("vocab_size", [128256]),
        ("tie_word_embeddings", "false"),
        ("torch_dtype", 16),
        ("architectures", "LlamaForCausalLM"),
    ],
)
def test_wrong_types_name_the_field(field: str, value: object):
    cfg = config("meta-llama/Meta-Llama-3.1-8B")
    cfg[field] = value
    for use_transformers in (True, False):
        with pytest.raises(MalformedFileError) as err:
            read_config(cfg, use_transformers=use_transformers)
        assert err.value.field == field and err.value.file == "config.json" and err.value.exit_code == 3


def test_missing_layer_count_is_malformed():
    cfg = config("meta-llama/Meta-Llama-3.1-8B")
    del cfg["num_hidden_layers"]
    with pytest.raises(MalformedFileError, match="num_hidden_layers"):
        read_config(cfg, use_transformers=False)


def test_nested_field_errors_carry_the_path():
    cfg = config("google/medgemma-27b-it")
    cfg["text_config"]["sliding_window"] = "1024"
    with pytest.raises(MalformedFileError) as err:
        read_config(cfg)
    assert err.value.field == "text_config.sliding_window"
    bad = config("nvidia/Nemotron-H-56B-Base-8K")
    bad["hybrid_override_pattern"] = bad["hybrid_override_pattern"].replace("M", "X", 1)
    with pytest.raises(MalformedFileError, match="hybrid_override_pattern"):
        read_config(bad)
    bad_quant = config("TheBloke/Llama-2-13B-chat-GPTQ")
    bad_quant["quantization_config"]["bits"] = "4"
    with pytest.raises(MalformedFileError, match=r"quantization_config\.bits"):
        read_config(bad_quant)


def test_wrong_length_layer_types():
    cfg = config("openai/gpt-oss-20b")
    cfg["layer_types"] = cfg["layer_types"][:5]
    with pytest.raises(MalformedFileError, match="layer_types"):
        read_config(cfg, use_transformers=False)


# ---- properties ------------------------------------------------------------------------------

CORPUS = sorted(str(p.parent.relative_to(HUB)) for p in HUB.glob("*/*/config.json"))
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 300), st.floats(allow_nan=False), st.text(max_size=6))
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
KEYS = [
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "sliding_window",
    "layer_types",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "full_attention_interval",
    "hybrid_override_pattern",
    "quantization_config",
    "text_config",
    "torch_dtype",
    "block_configs",
    "compress_ratios",
    "use_sliding_window",
    "max_window_layers",
    "model_type",
    "attention_chunk_size",
]


def _read_or_malformed(cfg: object, use_transformers: bool) -> None:
    try:
        result = read_config(cfg, use_transformers=use_transformers)  # type: ignore[arg-type]
    except MalformedFileError:
        return
    assert isinstance(result, ModelSpec) and len(result.layers) == result.num_layers


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), json_value, max_size=8))
def test_random_objects_read_or_raise_malformed(cfg: dict):
    _read_or_malformed(cfg, use_transformers=False)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CORPUS), st.sampled_from(KEYS), json_value, st.booleans())
def test_mutated_real_configs_read_or_raise_malformed(repo: str, key: str, value: object, nested: bool):
    cfg = copy.deepcopy(config(repo))
    target = cfg["text_config"] if nested and isinstance(cfg.get("text_config"), dict) else cfg
    target[key] = value
    json.dumps(cfg)  # still a JSON document
    _read_or_malformed(cfg, use_transformers=True)


@pytest.mark.parametrize(
    "extra, field, message",
    [
        ({"layer_types": ["full_attention", "bogus"]}, "layer_types[1]", "unknown layer type 'bogus'"),
        ({"layer_types": ["full_attention"]}, "layer_types", "has 1 entries for 2 layers"),
        ({"compress_ratios": [0, 7]}, "compress_ratios[1]", "unknown compress ratio 7 (known: 0, 4, 128)"),
        ({"compress_ratios": [4]}, "compress_ratios", "has 1 entries for 2 layers"),
    ],
)
def test_per_layer_lists_name_the_bad_entry(extra, field, message):
    """A per-layer list (layer_types, DeepSeek-V4 compress_ratios) too short or with an unknown entry fails
    on that entry's path rather than guessing a layer kind."""
    config = {
        "architectures": ["FooForCausalLM"],
        "model_type": "foo",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 100,
        **extra,
    }
    with pytest.raises(MalformedFileError) as raised:
        read_config(config, use_transformers=False)
    assert raised.value.field == field and message in str(raised.value)
