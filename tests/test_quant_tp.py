"""The tensor-parallel rule of group-quantized (GPTQ / AWQ) checkpoints, vLLM and SGLang
(hfvram/estimate/engine_rules.py ``quant_tp_refusal``; docs/engines/vllm.md#vllm-quant-tp,
docs/engines/sglang.md#sglang-quant-tp), through the real CLI against the local test Hub.

What the engines' code does at the pinned commits (vLLM 9aaf83ef, SGLang 8905cbd4):
- vLLM AWQ: a layer Marlin declines (per-GPU inputs % 128, outputs % 64, inputs % group) falls back to
  ``AWQLinearMethod``, which raises "The input size is not aligned with the quantized weight shape" when the per-GPU
  input is not whole groups;
- vLLM GPTQ: ``choose_mp_linear_kernel`` raises only when Marlin, Machete (sm_90) and Exllama (float16
  activations, no act order on a split input) all decline the layer;
- SGLang AWQ: Marlin is picked on the full sizes and ``verify_marlin_supports_shape`` raises on the per-GPU ones;
  SGLang GPTQ does not act on its shape check at load (a warning, no refusal);
- MoE experts: Marlin MoE, else ``MoeWNA16Method`` asserts a group size >= 32 divides the per-GPU experts.

Golden source of the failure: QwenLM/Qwen3-VL#831 (and vllm-project/vllm#13980): vLLM serving
Qwen2.5-VL-72B-Instruct-AWQ raises "The input size is not aligned with the quantized weight shape. This can be
caused by too large tensor parallel size." at --tensor-parallel-size 2 and 4. Its language model has the sizes of
the Qwen/Qwen2.5-72B fixture (hidden 8192, intermediate_size 29568 = 231 groups of 128, 64 heads, 8 KV heads),
sized here with the ``--quant awq`` what-if (AutoAWQ's group size 128).
"""

from __future__ import annotations

import json
import shutil

import pytest
from cli_support import FIXTURES, validate
from click.testing import CliRunner

from hfvram.cli import cli

runner = CliRunner()
GPTQ_REPO = "TheBloke/Llama-2-13B-chat-GPTQ"
AWQ_ERROR = "The input size is not aligned with the quantized weight shape"


def check(*args: str) -> dict:
    result = runner.invoke(cli, ["check", *args, "--json"])
    assert result.exit_code in (0, 1), result.output  # 1: the verdict is does_not_fit
    document = json.loads(result.stdout)
    validate(document, "check")
    return document


def refusal(document: dict) -> str | None:
    reason = document.get("verdict_reason") or ""
    return reason if "quantized linear layers under tensor parallelism" in reason else None


def notes(document: dict) -> list[str]:
    return [w for w in document["warnings"] if "vllm-quant-tp" in w or "sglang-quant-tp" in w]


# ---- a real GPTQ checkpoint: TheBloke/Llama-2-13B-chat-GPTQ ---------------------------------------------------


def test_the_gptq_fixture_states_group_128_float16_no_act_order(hub):
    document = runner.invoke(cli, ["inspect", GPTQ_REPO, "--json"])
    assert document.exit_code == 0, document.output
    model = json.loads(document.stdout)["model"]
    # fixtures/hub/TheBloke/Llama-2-13B-chat-GPTQ/config.json quantization_config: bits 4, group_size 128, desc_act
    # false; torch_dtype float16; intermediate_size 13824 = 108 groups of 128
    assert model["quantization"]["method"] == "gptq" and model["quantization"]["group_size"] == 128
    assert model["dtype"] == "float16"


@pytest.mark.parametrize("tp", [2, 4])
def test_gptq_tp_2_and_4_split_13824_into_whole_groups(hub, tp):
    """13824 / 2 = 6912 = 54 x 128, 13824 / 4 = 3456 = 27 x 128: every slice suits Marlin, nothing is said."""
    document = check(GPTQ_REPO, "--gpu", f"a100x{tp}", "--engine", "vllm", "--tp", str(tp))
    assert refusal(document) is None and notes(document) == []
    assert document["verdict"] == "fits"


def test_gptq_tp_8_loads_on_a_fallback_kernel_at_the_pinned_vllm(hub):
    """13824 / 8 = 1728 = 13.5 groups of 128: Marlin declines down_proj (1728 % 128), and vLLM's kernel choice
    then takes Machete on an H100 (sm_90: 1728 % 64 == 0, 5120 % 128 == 0) or Exllama elsewhere (float16
    activations, 13824 % 128 == 0): no refusal, a warning naming the kernel."""
    on_a100 = check(GPTQ_REPO, "--gpu", "a100x8", "--engine", "vllm", "--tp", "8")
    assert refusal(on_a100) is None and on_a100["verdict"] == "fits"
    (note,) = notes(on_a100)
    assert "down_proj (intermediate_size 13824): 1728 inputs per GPU" in note and "Exllama" in note
    on_h100 = check(GPTQ_REPO, "--gpu", "h100x8", "--engine", "vllm", "--tp", "8")
    assert refusal(on_h100) is None and "Machete" in notes(on_h100)[0]


def test_sglang_gptq_tp_8_is_a_warning_not_a_refusal(hub):
    """SGLang's GPTQ Marlin kernel drops its shape check's result at load: hfvram warns and does not refuse."""
    document = check(GPTQ_REPO, "--gpu", "a100x8", "--engine", "sglang", "--tp", "8")
    assert refusal(document) is None
    (note,) = notes(document)
    assert "1728 inputs per GPU" in note and "not modelled" in note


def gptq_copy(tmp_path, **changes) -> str:
    """The Llama-2-13B-chat-GPTQ fixture (config.json, quantize_config.json, header-only safetensors) in a folder,
    with ``changes`` to its quantization_config (``torch_dtype`` to the config itself)."""
    folder = tmp_path / "Llama-2-13B-chat-GPTQ-variant"
    shutil.copytree(FIXTURES / "hub" / GPTQ_REPO, folder)
    config = json.loads((folder / "config.json").read_text())
    if "torch_dtype" in changes:
        config["torch_dtype"] = changes.pop("torch_dtype")
    config["quantization_config"].update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "quantize_config.json").write_text(json.dumps(config["quantization_config"]))
    return str(folder)


def test_a_per_channel_gptq_config_has_no_group_constraint(tmp_path):
    """The same checkpoint with group_size -1 (one scale per output channel): at TP 4 (3456 inputs per GPU) it loads;
    at TP 8 the constraint left is Marlin's own min_thread_k (1728 % 128), not a group, and Exllama does not take
    per-channel weights: refused on an A100, Machete on an H100."""
    folder = gptq_copy(tmp_path, group_size=-1)
    four = check(folder, "--gpu", "a100x4", "--engine", "vllm", "--tp", "4")
    assert refusal(four) is None and notes(four) == []
    eight = check(folder, "--gpu", "a100x8", "--engine", "vllm", "--tp", "8")
    reason = refusal(eight)
    assert eight["verdict"] == "does_not_fit" and reason is not None
    assert "min_thread_k 128" in reason and "group size" not in reason
    assert "it accepts 1, 2, 4 below 8" in reason
    assert refusal(check(folder, "--gpu", "h100x8", "--engine", "vllm", "--tp", "8")) is None


# ---- the golden case: Qwen2.5-72B sizes as AWQ (QwenLM/Qwen3-VL#831, vllm-project/vllm#13980) ------------------


@pytest.mark.parametrize("tp", [2, 4])
def test_awq_qwen_72b_sizes_are_refused_at_tp_2_and_4_as_published(hub, tp):
    """29568 / 2 = 14784 = 115.5 x 128 and 29568 / 4 = 7392 = 57.75 x 128: vLLM's AWQ fallback raises, as
    QwenLM/Qwen3-VL#831 reports for Qwen2.5-VL-72B-Instruct-AWQ at --tensor-parallel-size 2 and 4."""
    document = check("Qwen/Qwen2.5-72B", "--quant", "awq", "--gpu", f"h100x{tp}", "--engine", "vllm", "--tp", str(tp))
    reason = refusal(document)
    assert document["verdict"] == "does_not_fit" and reason is not None
    per_gpu = 29568 // tp
    assert f"down_proj (intermediate_size 29568): {per_gpu} inputs per GPU = {per_gpu / 128:g} groups of 128" in reason
    assert AWQ_ERROR in reason and "docs/engines/vllm.md#vllm-quant-tp" in reason
    assert "it accepts 1 below" in reason


def test_awq_qwen_72b_sizes_load_on_one_gpu(hub):
    document = check("Qwen/Qwen2.5-72B", "--quant", "awq", "--gpu", "h100", "--engine", "vllm", "--context", "8k")
    assert refusal(document) is None and document["verdict"] != "does_not_fit"


def test_sglang_awq_checks_the_column_slices_too(hub):
    """SGLang verifies the per-GPU sizes of every Marlin layer: at TP 8 gate_up_proj's 2 x 29568 / 8 = 7392
    outputs are not a multiple of min_thread_n 64 (vLLM, which checks before choosing, falls back there)."""
    document = check("Qwen/Qwen2.5-72B", "--quant", "awq", "--gpu", "h100x8", "--engine", "sglang", "--tp", "8")
    reason = refusal(document)
    assert reason is not None and "gate_up_proj: 7392 outputs per GPU" in reason and "min_thread_n 64" in reason
    assert "docs/engines/sglang.md#sglang-quant-tp" in reason


def test_a_bfloat16_gptq_checkpoint_has_no_fallback_off_hopper(tmp_path):
    """The checkpoint with torch_dtype bfloat16: at TP 8 down_proj's 1728 inputs per GPU are declined by Marlin,
    Exllama needs float16 activations, Machete runs on sm_90 only: refused on an A100, loaded on an H100."""
    folder = gptq_copy(tmp_path, torch_dtype="bfloat16")
    a100 = check(folder, "--gpu", "a100x8", "--engine", "vllm", "--tp", "8")
    reason = refusal(a100) or ""
    assert "1728 inputs per GPU" in reason and "float16 activations only" in reason
    assert "Failed to find a kernel that can implement the WNA16 linear layer" in reason
    assert "it accepts 1, 2, 4 below 8" in reason
    h100 = check(folder, "--gpu", "h100x8", "--engine", "vllm", "--tp", "8")
    assert refusal(h100) is None and "Machete" in notes(h100)[0]


def test_the_gptq_kernel_choice_is_not_judged_off_nvidia(tmp_path):
    """vLLM's ROCm kernel list (Triton W4A16, Conch, Exllama) is not modelled: the bfloat16 copy at TP 8 on MI300X
    is a warning, not a refusal."""
    document = check(gptq_copy(tmp_path, torch_dtype="bfloat16"), "--gpu", "mi300xx8", "--engine", "vllm", "--tp", "8")
    assert refusal(document) is None
    assert any("off NVIDIA GPUs is not modelled" in note for note in notes(document))


def test_act_order_on_a_split_input_is_refused_on_every_gpu(tmp_path):
    """desc_act true: neither Exllama nor Machete takes act order on a row-parallel slice, whatever the GPU."""
    folder = gptq_copy(tmp_path, desc_act=True)
    for gpu in ("a100x8", "h100x8"):
        reason = refusal(check(folder, "--gpu", gpu, "--engine", "vllm", "--tp", "8")) or ""
        assert "act-order (desc_act) with a split input" in reason
    assert refusal(check(folder, "--gpu", "a100x4", "--engine", "vllm", "--tp", "4")) is None


def test_the_gptq_what_if_runs_as_the_float16_checkpoint_its_quantizer_writes(hub):
    """CodeLlama-34B (bfloat16; intermediate_size 22016 = 172 x 128) as --quant gptq-int4-g128 at TP 8: 2752
    inputs per GPU (21.5 groups) miss Marlin; GPTQModel writes float16 (hub_formats.toml kept_dtype F16), so
    Exllama takes the layer; with act order (gptq-int4-g128-act) nothing does."""
    args = ("codellama/CodeLlama-34b-Instruct-hf", "--engine", "vllm", "--tp", "8", "--gpu", "a100x8")
    plain = check(*args, "--quant", "gptq-int4-g128")
    assert refusal(plain) is None and any("2752 inputs per GPU" in n and "Exllama" in n for n in notes(plain))
    act = check(*args, "--quant", "gptq-int4-g128-act")
    assert "2752 inputs per GPU" in (refusal(act) or "") and "act-order" in refusal(act)


# ---- MoE experts -------------------------------------------------------------------------------------------------


def test_awq_moe_experts_need_a_group_of_at_least_32(hub):
    """Qwen3-30B-A3B (moe_intermediate_size 768): at TP 8, 96 experts' inputs per GPU miss Marlin MoE (96 % 128)
    and MoeWNA16 takes them with group 32; at TP 16, 48 per GPU: no group from 128 down to 32 divides 48."""
    args = ("Qwen/Qwen3-30B-A3B", "--quant", "awq", "--engine", "vllm")
    eight = check(*args, "--gpu", "h100x8", "--tp", "8")
    assert refusal(eight) is None and any("MoE WNA16" in note for note in notes(eight))
    sixteen = check(*args, "--gpu", "h100x16", "--tp", "16")
    reason = refusal(sixteen)
    assert reason is not None and "moe_intermediate_size 768 into 48 per GPU" in reason
    assert "it accepts 1, 2, 4, 8 below 16" in reason


# ---- fit does not propose a refused size ---------------------------------------------------------------------------


def test_fit_skips_the_tp_sizes_the_quant_rule_refuses(hub):
    """CodeLlama-34B as AWQ (22016 = 172 groups of 128): TP 8 leaves 21.5 groups per GPU, TP 16 10.75. On 8 GB
    RTX 4060s the weights need 8 GPUs, which vLLM would refuse: fit finds no count; on 12 GB RTX 3060s TP 4 (43
    groups) fits."""

    def smallest(gpu: str) -> int | None:
        args = ["codellama/CodeLlama-34b-Instruct-hf", "--quant", "awq", "--gpu", gpu, "--engine", "vllm"]
        result = runner.invoke(cli, ["fit", *args, "--context", "4k", "--json"])
        assert result.exit_code in (0, 1), result.output  # 1: does not fit on one GPU
        return json.loads(result.stdout)["smallest_gpu_count"]

    assert smallest("rtx4060") is None
    assert smallest("rtx3060") == 4
    refused = check(
        "codellama/CodeLlama-34b-Instruct-hf", "--quant", "awq", "--gpu", "rtx4060x8", "--engine", "vllm", "--tp", "8"
    )
    assert "2752 inputs per GPU = 21.5 groups of 128" in (refusal(refused) or "")


def test_engines_without_the_rule_are_not_refused(hub):
    document = check("Qwen/Qwen2.5-72B", "--quant", "awq", "--gpu", "h100x4", "--engine", "lmdeploy", "--tp", "4")
    assert refusal(document) is None
