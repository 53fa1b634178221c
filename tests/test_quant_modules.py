"""Per-module quantization of config-derived weights (issue 23: "weights derived from config shapes ignore a config's
per-module quantization ... read quantization_config for every module it names").

A compressed-tensors checkpoint may hold several ``config_groups``, each with its own targets and format: NVFP4
experts beside FP8 attention (the "mixed-precision" format llm-compressor writes). Each Linear is stored in the
format of the group that targets it, chosen as vLLM's ``find_matched_target`` chooses (name or ``re:`` regex first,
then the module's class), and a module no group targets stays in the model dtype. The layouts are vLLM's
``create_weights`` of each scheme (docs/engines/common.md#hf-quant-formats):

- NVFP4 (``CompressedTensorsW4A4Fp4``): ``weight_packed`` uint8 [out, in/2], ``weight_scale`` fp8 [out, in/16],
  ``weight_global_scale`` and ``input_global_scale`` fp32;
- FP8 channel-wise (``float-quantized``): ``weight`` fp8 [out, in] and a scale per output row.

The configs here are the real Qwen3-30B-A3B config.json (fixtures/hub) with its quantization_config replaced by the
groups under test: a what-if of its shapes, not a recorded checkpoint.
"""

from __future__ import annotations

import copy

import pytest
from spec_support import config_of

from hfvram.readers.config import read_config
from hfvram.readers.quant_modules import compressed_tensors_scheme
from hfvram.readers.shapes import derived_weights, tensors_from_spec

NVFP4 = {
    "format": "nvfp4-pack-quantized",
    "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": True},
}
FP8_CHANNEL = {
    "format": "float-quantized",
    "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
}


def qwen3_moe_with(quantization: dict | None):
    config = copy.deepcopy(config_of("Qwen/Qwen3-30B-A3B"))
    if quantization is None:
        config.pop("quantization_config", None)
    else:
        config["quantization_config"] = quantization
    return read_config(config, use_transformers=False)


def mixed(groups: dict, ignore: list[str] | None = None) -> dict:
    return {
        "quant_method": "compressed-tensors",
        "format": "mixed-precision",
        "quantization_status": "compressed",
        "config_groups": groups,
        "ignore": ignore or ["lm_head"],
    }


def tensors_by_name(spec):
    return {tensor.name: tensor for tensor in tensors_from_spec(spec)}


def test_each_module_is_stored_in_the_format_of_the_group_that_targets_it():
    spec = qwen3_moe_with(
        mixed(
            {
                "group_0": {**FP8_CHANNEL, "targets": ["re:.*self_attn.*"]},
                "group_1": {**NVFP4, "targets": ["re:.*mlp.experts.*"]},
            }
        )
    )
    tensors = tensors_by_name(spec)
    hidden, expert = spec.hidden_size, spec.moe_intermediate_size
    up = tensors["model.layers.0.mlp.experts.0.up_proj.weight_packed"]
    assert (up.dtype, up.shape) == ("U8", (expert, hidden // 2))
    scale = tensors["model.layers.0.mlp.experts.0.up_proj.weight_scale"]
    assert (scale.dtype, scale.shape) == ("F8_E4M3", (expert, hidden // 16))
    assert tensors["model.layers.0.mlp.experts.0.up_proj.weight_global_scale"].shape == (1,)
    q = tensors["model.layers.0.self_attn.q_proj.weight"]
    assert q.dtype == "F8_E4M3" and tensors["model.layers.0.self_attn.q_proj.weight_scale"].shape == (q.shape[0], 1)
    # the router is targeted by neither group: it stays in the model dtype, as does the ignored lm_head
    assert tensors["model.layers.0.mlp.gate.weight"].dtype == "BF16"
    assert tensors["lm_head.weight"].dtype == "BF16"


def test_the_nvfp4_experts_weigh_about_4_5_bits_where_one_scheme_for_all_was_8():
    """The bug the issue names: an FP4 expert checkpoint sized as if every Linear took the first group's format."""
    bf16 = derived_weights(qwen3_moe_with(None))
    nvfp4_experts = derived_weights(
        qwen3_moe_with(
            mixed(
                {
                    "group_0": {**FP8_CHANNEL, "targets": ["re:.*self_attn.*"]},
                    "group_1": {**NVFP4, "targets": ["re:.*mlp.experts.*"]},
                }
            )
        )
    )
    fp8_all = derived_weights(qwen3_moe_with(mixed({"group_0": {**FP8_CHANNEL, "targets": ["Linear"]}})))
    assert bf16 is not None and nvfp4_experts is not None and fp8_all is not None
    # experts are ~97 % of Qwen3-30B-A3B: NVFP4 (4.5 bits) lands near 0.3 of BF16, FP8 everywhere near 0.5
    assert 0.27 < nvfp4_experts.total_bytes / bf16.total_bytes < 0.33
    assert 0.49 < fp8_all.total_bytes / bf16.total_bytes < 0.53


def test_a_group_naming_the_module_wins_over_a_group_naming_its_class():
    schemes = [
        {"group": "all", "targets": ["Linear"], "num_bits": 4.0},
        {"group": "attention", "targets": ["re:.*self_attn.*"], "num_bits": 8.0},
    ]
    assert compressed_tensors_scheme(schemes, "model.layers.3.self_attn.o_proj")["group"] == "attention"
    assert compressed_tensors_scheme(schemes, "model.layers.3.mlp.down_proj")["group"] == "all"


@pytest.mark.parametrize(
    ("targets", "name", "matched"),
    [
        (["model.layers.0.mlp.down_proj"], "model.layers.0.mlp.down_proj", True),
        (["model.layers.0.mlp.down_proj"], "model.layers.1.mlp.down_proj", False),
        # re: targets match at the start of the name (re.match), as vLLM's _is_equal_or_regex_match
        (["re:mlp.*"], "model.layers.0.mlp.down_proj", False),
        (["re:.*mlp.*"], "model.layers.0.mlp.down_proj", True),
        # vLLM holds routed experts in FusedMoE: a group targeting that class holds the experts, not the rest
        (["FusedMoE"], "model.layers.0.mlp.experts.7.up_proj", True),
        (["FusedMoE"], "model.layers.0.self_attn.q_proj", False),
        (["re:[unclosed"], "model.layers.0.mlp.down_proj", False),
    ],
)
def test_targets_match_as_vllm_matches_them(targets, name, matched):
    assert (compressed_tensors_scheme([{"targets": targets}], name) is not None) == matched


def test_a_group_without_targets_quantizes_every_linear():
    assert compressed_tensors_scheme([{"num_bits": 4.0}], "model.layers.0.mlp.down_proj") is not None
