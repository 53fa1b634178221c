"""The Hub formats of the ``--quant`` what-if (hfvram/quant/hub_formats.py, docs/engines/quantization.md).

Judges: vLLM's published "Model loading took" lines for real quantized checkpoints
(benchmarks/data/groundtruth_cases.jsonl, each case with its URL; docs/engines/quantization.md#quant-judges), against
the what-if applied to the base model's real config (fixtures/hub); and the tensor layouts the real quantized
checkpoints' own quantization configs declare (fixtures/hub: nvidia/Qwen3-30B-A3B-NVFP4, Qwen/Qwen3-30B-A3B-FP8,
deepseek-ai/DeepSeek-V3, nvidia/Llama-3.1-70B-Instruct-FP8).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from cli_support import ROOT, run_hfvram, validate

from hfvram import quant
from hfvram.engines import get_profile
from hfvram.errors import UsageError
from hfvram.estimate.hardware import catalog_row, load_catalog, parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.quant import hub_formats
from hfvram.readers.config import read_config
from hfvram.readers.shapes import derived_weights
from hfvram.spec import ModelSpec

HUB = ROOT / "fixtures" / "hub"
CASES = ROOT / "benchmarks" / "data" / "groundtruth_cases.jsonl"
COMPANIONS = ("quantize_config.json", "hf_quant_config.json")
GiB = 1 << 30


@cache
def load(repo: str) -> ModelSpec:
    folder = HUB / repo
    config = json.loads((folder / "config.json").read_text())
    companions = {name: json.loads((folder / name).read_text()) for name in COMPANIONS if (folder / name).exists()}
    return read_config(config, companions=companions, use_transformers=False)


@cache
def case(case_id: str) -> dict:
    for line in CASES.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["id"] == case_id:
            return entry
    raise KeyError(case_id)


def logged_gib(text: str) -> float:
    """A vLLM weights figure as logged ("8.49 GiB"; the V0 "Loading model weights took 5.2032 GB" is GiB too)."""
    match = re.fullmatch(r"\s*([\d.]+)\s*(GiB|GB)\s*", text)
    assert match, text
    return float(match.group(1))


def what_if(repo: str, name: str) -> ModelSpec:
    choice = hub_formats.parse(name)
    assert choice is not None, name
    return hub_formats.apply(load(repo), choice)


# ---- names -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("awq", "awq"),
        ("AWQ", "awq"),
        ("awq-g64", "awq-g64"),
        ("gptq", "gptq-int4-g128"),
        ("gptq-int8", "gptq-int8-g128"),
        ("GPTQ_INT4_G32", "gptq-int4-g32"),
        ("gptq-4bit-g-1-act", "gptq-int4-g-1-act"),
        ("gptq-int4-g128-desc-act", "gptq-int4-g128-act"),
        ("fp8", "fp8"),
        ("fp8-dynamic", "fp8"),
        ("fp8-block", "fp8-block"),
        ("FP8-128x128", "fp8-block"),
        ("fp8-tensor", "fp8-tensor"),
        ("nvfp4", "nvfp4"),
        ("mxfp4", "mxfp4"),
        ("nf4", "bnb-nf4"),
        ("bnb-4bit", "bnb-nf4"),
        ("bnb-int8", "bnb-int8"),
        ("w8a8", "w8a8-int8"),
    ],
)
def test_names_and_aliases_parse_to_their_canonical_name(text, canonical):
    choice = hub_formats.parse(text)
    assert choice is not None and choice.name == canonical
    assert hub_formats.parse(canonical) == choice


@pytest.mark.parametrize("text", ["Q4_K_M", "gptq-int4-g100", "gptq-int3", "awq-g96", "fp16", "", "x" * 500])
def test_other_names_are_not_hub_formats(text):
    assert hub_formats.parse(text) is None


def test_every_listed_name_parses_to_itself():
    for name in (*hub_formats.NAMES, *hub_formats.AUTO):
        choice = hub_formats.parse(name)
        assert choice is not None and choice.name == name


def test_mxfp4_is_the_hub_format_under_vllm_and_the_gguf_type_under_llamacpp():
    """``MXFP4`` is spelled by both families (llama.cpp's MXFP4_MOE): the engine decides."""
    assert quant.parse("mxfp4", "vllm").family == "hub_formats"
    assert quant.parse("mxfp4", "sglang").family == "hub_formats"
    assert quant.parse("mxfp4", "llama.cpp").family != "hub_formats"
    assert quant.parse("awq").family == "hub_formats"


# ---- bytes against real quantized checkpoints, as vLLM loaded them -----------------------------------------------

JUDGES = [
    # (groundtruth case, the real checkpoint it logged, base model in fixtures/hub, what-if, GPU, TP)
    (
        "gt-0105",
        "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
        "meta-llama/Llama-3.1-8B-Instruct",
        "w8a8-int8",
        "h100",
        1,
    ),
    ("gt-0106", "RedHatAI/Qwen2.5-7B-Instruct-quantized.w8a8", "Qwen/Qwen2.5-7B-Instruct", "w8a8-int8", "h100", 1),
    ("gt-0050", "RedHatAI/Qwen2.5-7B-Instruct-fp8-dynamic", "Qwen/Qwen2.5-7B-Instruct", "fp8", "h100", 1),
    ("gt-0048", "RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic", "meta-llama/Llama-3.3-70B-Instruct", "fp8", "h100x2", 2),
    (
        "gt-0102",
        "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16",
        "meta-llama/Llama-3.1-8B-Instruct",
        "gptq-int4-g128",
        "h100",
        1,
    ),
    ("gt-0010", "unsloth/Qwen2.5-7B-Instruct-bnb-4bit", "Qwen/Qwen2.5-7B-Instruct", "bnb-nf4", "rtx4060", 1),
    ("gt-0085", "openai/gpt-oss-20b", "openai/gpt-oss-20b", "mxfp4", "h100", 1),
    ("gt-0086", "openai/gpt-oss-20b", "openai/gpt-oss-20b", "mxfp4", "h100x2", 2),
]


@pytest.mark.parametrize(("case_id", "real_repo", "base", "name", "gpu", "tp"), JUDGES)
def test_what_if_weights_within_one_percent_of_vllm_logs_of_real_checkpoints(case_id, real_repo, base, name, gpu, tp):
    entry = case(case_id)
    assert entry["engine"] == "vllm" and entry["model"]["id"].startswith(real_repo)
    measured = entry["measured"]
    logged = logged_gib(measured.get("model_loading") or measured["model_weights"])
    spec = what_if(base, name)
    est = get_profile("vllm").estimate(spec, parse_gpu_spec(gpu), EngineChoice("vllm", tp=tp), Workload(context=8192))
    hfvram_gib = est.per_gpu.weights / GiB
    error = (hfvram_gib - logged) / logged
    print(f"{case_id} {real_repo} as --quant {name} on {gpu}: {hfvram_gib:.3f} GiB vs {logged} GiB ({error:+.2%})")
    assert abs(error) < 0.01


def test_awq_on_qwen25_32b_against_the_initial_memory_of_its_vllm_log():
    """gt-0022 (Qwen/Qwen2.5-32B-Instruct-AWQ, vLLM 0.6.4) logs only initial_memory_usage 18.60 GiB, weights plus
    0.44 GiB non-torch memory: the AWQ what-if of Qwen2.5-32B (same architecture) is within 1 % of the difference."""
    entry = case("gt-0022")
    assert entry["model"]["id"] == "Qwen/Qwen2.5-32B-Instruct-AWQ"
    initial = logged_gib(entry["measured"]["initial_memory_usage"])
    non_torch = logged_gib(entry["measured"]["non_torch_memory"])
    weights = what_if("Qwen/Qwen2.5-32B", "awq").weights
    assert weights is not None
    assert abs(weights.total_bytes / GiB - (initial - non_torch)) / (initial - non_torch) < 0.01


# ---- layouts against the real quantized checkpoints' own quantization configs ------------------------------------


@pytest.mark.parametrize(
    ("base", "name", "real"),
    [
        ("Qwen/Qwen3-30B-A3B", "nvfp4", "nvidia/Qwen3-30B-A3B-NVFP4"),
        ("Qwen/Qwen3-30B-A3B", "fp8-block", "Qwen/Qwen3-30B-A3B-FP8"),
        ("Qwen/Qwen3-32B", "fp8-block", "Qwen/Qwen3-32B-FP8"),
        ("deepseek-ai/DeepSeek-V3", "fp8-block", "deepseek-ai/DeepSeek-V3"),
        ("meta-llama/Llama-3.1-70B-Instruct", "fp8-tensor", "nvidia/Llama-3.1-70B-Instruct-FP8"),
    ],
)
def test_what_if_equals_the_layout_a_real_quantized_config_declares(base, name, real):
    """The what-if leaves in 16 bits what the real checkpoint's config excludes (ModelOpt's exclude_modules: lm_head
    and every mlp.gate; Qwen3-FP8's modules_to_not_convert; DeepSeek-V3's FP8 with its MTP block)."""
    got = what_if(base, name).weights
    declared = derived_weights(load(real))
    assert got is not None and declared is not None
    assert got.total_bytes == declared.total_bytes
    assert got.bytes_by_component == declared.bytes_by_component
    assert got.params_total == declared.params_total


def test_one_awq_linear_is_autoawqs_gemm_layout():
    """AutoAWQ WQLinear_GEMM (docs/engines/quantization.md#quant-layouts): qweight [in, out/8], qzeros [in/g, out/8],
    scales fp16 [in/g, out] = in·out/2 + (in/g)·out·2.5 bytes."""
    choice = hub_formats.parse("awq")
    tensors = hub_formats.quantized_linear(choice, "x", 14336, 4096, "BF16")
    assert [(t.name, t.dtype, t.shape) for t in tensors] == [
        ("x.qweight", "I32", (4096, 1792)),
        ("x.qzeros", "I32", (32, 1792)),
        ("x.scales", "F16", (32, 14336)),
    ]
    assert sum(t.nbytes for t in tensors) == 4096 * 14336 // 2 + 32 * 14336 * 5 // 2


# ---- what stays in 16 bits ---------------------------------------------------------------------------------------


def _sixteen_bit(spec: ModelSpec, component: str) -> bool:
    weights = spec.weights
    assert weights is not None
    return weights.bytes_by_component[component] == 2 * weights.params_by_component[component]


@pytest.mark.parametrize("name", ["awq", "gptq-int4-g128", "fp8", "nvfp4", "bnb-nf4", "w8a8-int8"])
def test_embeddings_lm_head_routers_and_norms_keep_16_bits(name):
    spec = what_if("Qwen/Qwen3-30B-A3B", name)
    for component in ("embeddings", "lm_head", "router", "norms"):
        assert _sixteen_bit(spec, component), component
    assert not _sixteen_bit(spec, "experts") and not _sixteen_bit(spec, "attention")
    base = derived_weights(replace(load("Qwen/Qwen3-30B-A3B"), quantization=None))
    assert base is not None and spec.weights is not None
    assert spec.weights.params_total == base.params_total  # quantization stores the parameters, adds none
    assert spec.weights.exact is False and spec.weights.source.startswith("what-if: ")
    assert (
        spec.quantization is not None and spec.quantization.source == f"what-if: --quant {hub_formats.parse(name).name}"
    )


def test_mxfp4_quantizes_only_the_experts_and_refuses_a_dense_model():
    spec = what_if("Qwen/Qwen3-30B-A3B", "mxfp4")
    assert _sixteen_bit(spec, "attention") and not _sixteen_bit(spec, "experts")
    with pytest.raises(UsageError, match="only the experts"):
        what_if("meta-llama/Llama-3.1-8B-Instruct", "mxfp4")


def test_the_vision_tower_stays_16_bit_except_under_bitsandbytes():
    """llm-compressor's and AutoAWQ's VLM recipes keep the vision tower; transformers' bitsandbytes converts every
    nn.Linear but lm_head (docs/engines/quantization.md#quant-kept-modules)."""
    assert _sixteen_bit(what_if("google/medgemma-27b-it", "awq"), "vision")
    assert not _sixteen_bit(what_if("google/medgemma-27b-it", "bnb-nf4"), "vision")


def test_mtp_layers_are_dropped_by_transformers_based_quantizers_and_kept_by_fp8_block():
    awq = what_if("deepseek-ai/DeepSeek-V3", "awq")
    assert awq.weights is not None and "mtp" not in awq.weights.bytes_by_component
    assert any("multi-token-prediction" in w for w in awq.warnings)
    fp8 = what_if("deepseek-ai/DeepSeek-V3", "fp8-block")
    assert fp8.weights is not None and fp8.weights.bytes_by_component["mtp"] > 0


def test_every_other_fact_is_read_from_the_real_files():
    real = load("meta-llama/Llama-3.3-70B-Instruct")
    spec = what_if("meta-llama/Llama-3.3-70B-Instruct", "awq")
    for field in (
        "layers",
        "num_layers",
        "hidden_size",
        "vocab_size",
        "max_position_embeddings",
        "dtype",
        "rope_scaling",
    ):
        assert getattr(spec, field) == getattr(real, field), field
    assert spec.provenance["weights"].startswith("what-if: AWQ")
    assert spec.quantization is not None and spec.quantization.method == "awq" and spec.quantization.group_size == 128


# ---- engine rules ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "engine", "gpu", "expect"),
    [
        ("nvfp4", "vllm", "rtx5090", "ok"),
        ("nvfp4", "vllm", "b200", "ok"),
        ("nvfp4", "vllm", "rtx4090", "warn:FP4 Marlin"),
        ("nvfp4", "sglang", "rtx4090", "refused:sm_89"),
        ("nvfp4", "sglang", "b200", "ok"),
        ("nvfp4", "tensorrt-llm", "h100", "refused:sm_90"),
        ("nvfp4", "lmdeploy", "rtx5090", "refused:TurboMind"),
        ("fp8", "vllm", "rtx3090", "warn:W8A16"),
        ("fp8", "vllm", "h100", "ok"),
        ("fp8", "vllm", "v100-32g", "refused:sm_70"),
        ("fp8-tensor", "vllm", "a100-80g-sxm", "refused:sm_80"),
        ("fp8", "sglang", "rtx2080ti", "refused:sm_75"),
        ("fp8-block", "sglang", "rtx3090", "warn:Marlin"),
        ("fp8-block", "lmdeploy", "h100", "ok"),
        ("awq", "vllm", "v100-16g", "refused:sm_70"),
        ("awq", "vllm", "t4", "ok"),
        ("awq", "tensorrt-llm", "rtx5090", "refused:sm_120"),
        ("awq", "tensorrt-llm", "rtx4090", "ok"),
        ("awq", "lmdeploy", "rtx4090", "ok"),
        ("awq-g64", "lmdeploy", "rtx4090", "refused:group size"),
        ("gptq-int4-g128-act", "lmdeploy", "rtx4090", "refused:desc_act"),
        ("gptq-int8", "lmdeploy", "rtx4090", "refused:4-bit"),
        ("gptq-int4-g128", "exllamav2", "rtx3090", "ok"),
        ("awq", "exllamav2", "rtx3090", "refused:EXL2"),
        ("bnb-nf4", "vllm", "p40", "refused:sm_61"),
        ("bnb-nf4", "vllm", "rtx3090", "ok"),
        ("bnb-nf4", "lmdeploy", "rtx4090", "refused:TurboMind"),
        ("w8a8-int8", "tensorrt-llm", "h100", "refused:support matrix"),
        ("mxfp4", "vllm", "a100-80g-sxm", "warn:Marlin"),
        ("mxfp4", "vllm", "b200", "ok"),
        ("mxfp4", "vllm", "rtx2080ti", "refused:sm_75"),
        ("awq", "llama.cpp", "rtx4090", "refused:GGUF"),
        ("awq", "ollama", "rtx4090", "refused:GGUF"),
        ("awq", "vllm", "mi300x", "refused:AMD"),
        ("fp8", "vllm", "mi300x", "ok"),
        ("awq", "transformers", "rtx4090", "warn:autoawq"),
    ],
)
def test_engine_rules(name, engine, gpu, expect):
    choice = hub_formats.parse(name)
    reason, warnings = hub_formats.engine_rule(choice, engine, parse_gpu_spec(gpu))
    kind, _, needle = expect.partition(":")
    if kind == "ok":
        assert reason is None and warnings == ()
    elif kind == "warn":
        assert reason is None and any(needle in w for w in warnings), warnings
    else:
        assert reason is not None and needle in reason, reason
        assert "docs/engines/quantization.md#" in reason


def test_without_a_gpu_only_the_format_rules_apply():
    assert hub_formats.engine_rule(hub_formats.parse("nvfp4"), "sglang", None) == (None, ())
    reason, _ = hub_formats.engine_rule(hub_formats.parse("nvfp4"), "lmdeploy", None)
    assert reason is not None


def test_a_gpu_of_unknown_capability_is_warned_about_not_refused():
    reason, warnings = hub_formats.engine_rule(hub_formats.parse("nvfp4"), "sglang", parse_gpu_spec("24GB"))
    assert reason is None and any("not checked" in w for w in warnings)


def test_every_nvidia_gpu_of_the_catalogue_has_a_compute_capability():
    """docs/engines/quantization.md#quant-compute-capability: NVIDIA's table, from each row's chip."""
    capability = {
        gpu.id: hub_formats.compute_capability(catalog_row(gpu.id).get("architecture"))
        for gpu in load_catalog()
        if gpu.vendor == "nvidia"
    }
    assert all(sm is not None and hub_formats.family_of(sm) for sm in capability.values()), capability
    expected = {"p40": 61, "v100-16g": 70, "t4": 75, "a100-80g-sxm": 80, "rtx3090": 86, "rtx4090": 89}
    expected |= {"h100-sxm": 90, "b200": 100, "b300": 103, "rtx5090": 120, "dgx-spark": 121}
    assert {gpu: capability[gpu] for gpu in expected} == expected


# ---- the CLI -----------------------------------------------------------------------------------------------------


def check_json(*args: str):
    result = run_hfvram("check", *args, "--offline", "--json")
    document = json.loads(result.stdout) if result.stdout.strip() else None
    return result, document


@pytest.mark.parametrize("name", ["awq", "fp8", "nvfp4"])
def test_would_awq_fp8_or_nvfp4_let_llama33_70b_fit_two_4090s_under_vllm(name):
    """Issue 10: "Would AWQ (or FP8, or NVFP4) let Llama-3.3-70B fit two 4090s under vLLM?" At vLLM's defaults
    (0.9 of memory, 8k context here), no: AWQ's 37 GiB and NVFP4's 40 GiB of weights leave no room for the KV cache
    after vLLM's per-GPU overhead, FP8's 68 GiB is twice what two cards hold. NVFP4 also runs weight-only on Ada."""
    result, document = check_json(
        "meta-llama/Llama-3.3-70B-Instruct",
        "--gpu",
        "rtx4090x2",
        "--engine",
        "vllm",
        "--context",
        "8k",
        "--quant",
        name,
    )
    assert document is not None, result.stderr
    validate(document)
    assert result.returncode == 1 and document["verdict"] == "does_not_fit"
    assert document["verdict_reason"].startswith("memory: ")
    expected = what_if("meta-llama/Llama-3.3-70B-Instruct", name).weights
    assert expected is not None
    what = document["what_if"]
    assert what["quant"] == name and what["family"] == "hub_formats"
    assert what["weights_bytes"] == expected.total_bytes
    assert what["weights_source"].startswith("what-if: ")
    per_gpu = document["per_gpu"]
    assert per_gpu["total"] > 0.9 * per_gpu["usable"]
    assert (name == "nvfp4") == any("FP4 Marlin" in w for w in document["warnings"])
    if name == "fp8":
        assert per_gpu["weights"] > per_gpu["memory"]


def test_a_format_the_engine_cannot_run_is_an_engine_rule_refusal():
    result, document = check_json(
        "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "rtx4090x2", "--engine", "sglang", "--quant", "nvfp4"
    )
    assert document is not None, result.stderr
    assert result.returncode == 1 and document["verdict"] == "does_not_fit"
    assert document["verdict_reason"].startswith("engine rule: SGLang runs nvfp4 only on Blackwell")
    assert "sm_89" in document["verdict_reason"]


def test_an_unknown_quant_lists_the_hub_formats_and_exits_2():
    result = run_hfvram("check", "meta-llama/Llama-3.1-8B-Instruct", "--offline", "--quant", "awq5")
    assert result.returncode == 2
    assert "unknown quant 'awq5'" in result.stderr and "gptq-int4-g128" in result.stderr and "nvfp4" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_mxfp4_on_a_dense_model_is_bad_input():
    result = run_hfvram(
        "check", "meta-llama/Llama-3.1-8B-Instruct", "--offline", "--engine", "vllm", "--quant", "mxfp4"
    )
    assert result.returncode == 2 and "only the experts" in result.stderr


def test_the_what_if_on_real_safetensors_headers(tmp_path):
    """A local folder with real headers (fixtures/hub/meta-llama/Llama-3.1-8B-Instruct): the what-if re-stores the
    derived tensor list, and the report says the weights are not the folder's files."""
    folder = HUB / "meta-llama" / "Llama-3.1-8B-Instruct"
    result, document = check_json(str(folder), "--gpu", "rtx4090", "--engine", "vllm", "--quant", "w8a8-int8")
    assert document is not None, result.stderr
    assert (
        document["what_if"]["weights_bytes"]
        == what_if("meta-llama/Llama-3.1-8B-Instruct", "w8a8-int8").weights.total_bytes
    )
    assert any("what-if" in w for w in document["warnings"])


def test_hub_formats_import_nothing_heavy():
    source = Path(hub_formats.__file__).read_text(encoding="utf-8")
    assert not re.search(r"^\s*(import|from)\s+(torch|numpy|transformers)\b", source, re.M)


def test_quant_auto_under_vllm_picks_the_largest_hub_format_that_fits():
    """`--quant auto --engine vllm`: the Hub formats vLLM loads (not its experimental GGUF loader), largest first;
    without --engine the GGUF types (tests/test_cli_quant.py)."""
    result, document = check_json(
        "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--engine", "vllm", "--context", "8k", "--quant", "auto"
    )
    assert document is not None, result.stderr
    what = document["what_if"]
    assert what["family"] == "hub_formats"
    candidates = what["auto"]["candidates"]
    assert {c["quant"] for c in candidates} <= set(hub_formats.AUTO)
    chosen = next(c for c in candidates if c["quant"] == what["quant"])
    assert document["verdict"] == chosen["verdict"] == "fits"
    assert all(c["verdict"] != "fits" for c in candidates if c["weights_bytes"] > chosen["weights_bytes"])
