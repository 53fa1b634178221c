"""What engines refuse before memory is counted (hfvram/estimate/engine_rules.py), on real fixture configs.

Rules and their sources:
- vLLM ``ModelConfig.verify_with_parallel_config``: "Total number of attention heads (..) must be divisible by
  tensor parallel size (..)"; ``QKVParallelLinear`` divides the KV heads by TP or replicates them (TP divisible by
  them). SGLang's ``QKVParallelLinear`` (a port of vLLM's) asserts the same.
- KV dtypes: docs/engines/common.md#kv-dtype-sizes (vLLM ``CacheDType``, LMDeploy quant_policy, ExLlamaV2 cache modes, llama.cpp
  ``kv_cache_types``), SGLang's ``--kv-cache-dtype`` choices, TRT-LLM ``KvCacheConfig.dtype``.
- Platforms: TensorRT-LLM is NVIDIA-only; ExLlamaV2 is CUDA/ROCm; vLLM/SGLang/LMDeploy have no Metal backend.
- Hybrid CUDA graphs: article 003 (3.4 GB per card for the 64-layer, hidden-5120 Qwen3.6-27B).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from spec_support import derived_spec

from hfvram.errors import UsageError
from hfvram.estimate import common, engine_rules, releases
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import find_gpu, parse_gpu_spec
from hfvram.estimate.inverse import smallest_gpu_count
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.spec import LayerKind

GiB = 1 << 30


def run(
    repo: str,
    gpu: str | None,
    engine: str = "vllm",
    *,
    tp: int | None = None,
    context: int = 8192,
    kv: str = "auto",
    version: str | None = None,
    **settings: str,
):
    choice = EngineChoice(engine, version, dict(settings), tp=tp)
    return estimate(
        derived_spec(repo), parse_gpu_spec(gpu) if gpu else None, choice, Workload(context=context, kv_dtype=kv)
    )


# ---- 1. tensor-parallel sizes --------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_tp_that_does_not_divide_the_attention_heads_is_refused(engine):
    """Qwen2.5-7B has 28 heads: TP=8 (the default for 8 GPUs) is refused, not silently replaced."""
    result = run("Qwen/Qwen2.5-7B", "h100x8", engine)
    assert result.tp == 8
    assert result.verdict == "does_not_fit"
    assert result.refusal is not None and "28 attention heads" in result.refusal
    assert "no --tp was set" in result.refusal and "1, 2, 4" in result.refusal
    assert result.refusal in result.warnings


def test_tp_that_divides_the_heads_keeps_the_memory_verdict():
    result = run("Qwen/Qwen2.5-7B", "h100x8", tp=4)
    assert result.refusal is None
    assert result.verdict == "fits"


def test_tp_six_splits_twelve_heads_and_replicates_two_kv_heads():
    """Qwen2.5-1.5B: 12 heads, 2 KV heads. TP=8 refused (12 % 8); TP=6 accepted (12 % 6 == 0, 6 % 2 == 0)."""
    spec = derived_spec("Qwen/Qwen2.5-1.5B")
    assert spec.num_attention_heads == 12
    assert engine_rules.tp_refusal("vllm", spec, 8) is not None
    assert engine_rules.tp_refusal("vllm", spec, 6) is None
    assert engine_rules.tp_accepted(spec, 6) and not engine_rules.tp_accepted(spec, 8)


def test_tp_rule_is_not_applied_to_engines_without_it():
    spec = derived_spec("Qwen/Qwen2.5-7B")
    assert engine_rules.tp_refusal("llama.cpp", spec, 8) is None


def test_without_hardware_an_invalid_tp_is_a_warning_not_a_verdict():
    result = run("Qwen/Qwen2.5-7B", None, tp=8)
    assert result.verdict is None and result.refusal is None
    assert any("28 attention heads" in warning for warning in result.warnings)


def test_smallest_gpu_count_only_returns_sizes_the_engine_accepts():
    spec = derived_spec("Qwen/Qwen2.5-72B")
    count = smallest_gpu_count(spec, find_gpu("l40s"), EngineChoice("vllm"), Workload(context=8192))
    assert count is not None
    assert engine_rules.tp_accepted(spec, count)
    assert (
        estimate(spec, parse_gpu_spec(f"l40sx{count}"), EngineChoice("vllm", tp=count), Workload(context=8192)).refusal
        is None
    )


# ---- 2. KV dtypes ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "engine,kv",
    [
        ("vllm", "q4_0"),
        ("vllm", "int4"),
        ("sglang", "q8_0"),
        ("tensorrt-llm", "q4_0"),
        ("lmdeploy", "q4_0"),
        ("mlx", "fp8_e5m2"),
    ],
)
def test_kv_dtype_the_engine_lacks_is_a_usage_error_listing_its_own(engine, kv):
    with pytest.raises(UsageError) as caught:
        run("Qwen/Qwen2.5-7B", "h100", engine, kv=kv)
    assert caught.value.exit_code == 2
    assert "accepts:" in str(caught.value) and "auto" in str(caught.value)


@pytest.mark.parametrize(
    "engine,kv",
    [
        ("vllm", "fp8"),
        ("vllm", "fp8_e5m2"),
        ("vllm", "bf16"),
        ("sglang", "fp8_e4m3"),
        ("tensorrt-llm", "fp8"),
        ("lmdeploy", "int4"),
        ("mlx", "q4_0"),
    ],
)
def test_kv_dtype_the_engine_has_is_accepted(engine, kv):
    gpu = "m3-max-128" if engine == "mlx" else "h100"
    assert run("Qwen/Qwen2.5-7B", gpu, engine, kv=kv).verdict is not None


def test_kv_dtype_given_as_the_engines_own_setting_is_checked_too():
    with pytest.raises(UsageError):
        run("Qwen/Qwen2.5-7B", "h100", "vllm", **{"kv-cache-dtype": "q4_0"})


# ---- 3. setting names -----------------------------------------------------------------------------------------


def test_unknown_setting_is_warned_with_the_closest_known_name():
    result = run("Qwen/Qwen2.5-7B", "h100", **{"max-num-seq": "8", "foo": "bar"})
    assert any("'max-num-seq'" in w and "did you mean 'max-num-seqs'" in w for w in result.warnings)
    assert any("'foo'" in w and "ignored" in w for w in result.warnings)


@pytest.mark.parametrize(
    "engine,settings",
    [
        ("vllm", {"max-num-seqs": "8", "gpu_memory_utilization": "0.8", "enforce-eager": "true"}),
        ("sglang", {"mem-fraction-static": "0.8", "chunked-prefill-size": "4096"}),
        ("llama.cpp", {"ctx-size": "8192", "ngl": "99", "flash-attn": "on"}),
        ("lmdeploy", {"cache-max-entry-count": "0.5", "session-len": "8192"}),
    ],
)
def test_known_settings_raise_no_warning(engine, settings):
    repo = "Qwen/Qwen2.5-7B"
    result = run(repo, "h100", engine, **settings)
    assert not [w for w in result.warnings if "setting hfvram knows" in w]


# ---- 4. hardware ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tensorrt-llm", "lmdeploy", "exllamav2"])
def test_cuda_engines_are_refused_on_apple_silicon(engine):
    result = run("Qwen/Qwen2.5-7B", "m3-max-128", engine)
    assert result.verdict == "does_not_fit"
    assert result.refusal is not None and "does not run on" in result.refusal


@pytest.mark.parametrize("engine", ["mlx", "llama.cpp", "ollama"])
def test_mac_engines_run_on_apple_silicon(engine):
    result = run("Qwen/Qwen2.5-7B", "m3-max-128", engine)
    assert result.refusal is None and result.verdict != "does_not_fit"


def test_tensorrt_llm_is_refused_on_amd_but_vllm_and_exllamav2_run_on_rocm():
    assert "NVIDIA" in (run("Qwen/Qwen2.5-7B", "mi300x", "tensorrt-llm").refusal or "")
    assert run("Qwen/Qwen2.5-7B", "mi300x", "vllm").refusal is None
    assert run("Qwen/Qwen2.5-7B", "mi300x", "exllamav2").refusal is None


# ---- 5. explain text ------------------------------------------------------------------------------------------


def test_vllm_explain_states_the_shortfall_instead_of_a_negative_pool():
    result = run("01-ai/Yi-34B", "rtx4090x2", context=16384)
    per_gpu = result.per_gpu
    short = (per_gpu.weights + per_gpu.activations + per_gpu.overhead - per_gpu.usable) / GiB
    assert short > 0
    assert f"short by {short:.2f} GiB" in result.explain["budget"]
    assert "= -" not in " ".join(result.explain.values())


def test_lmdeploy_explain_has_no_negative_free_memory():
    result = run("01-ai/Yi-34B", "rtx4090x2", "lmdeploy", context=16384)
    assert result.verdict == "does_not_fit"
    assert "exceed the free memory by" in result.explain["budget"]
    assert " -" not in result.explain["budget"]


def test_sglang_explain_never_prints_none():
    result = run("01-ai/Yi-34B", "rtx4090x2", "sglang", context=16384)
    assert all("None" not in text for text in result.explain.values())


# ---- 6/7. encoder-only models ---------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang", "lmdeploy", "transformers", "llama.cpp"])
def test_encoder_has_no_decode_speed_and_is_not_refused_for_kv_memory(engine):
    """all-MiniLM-L6-v2 (BertModel) keeps no cache in any layer: no token is decoded, no KV pool is needed."""
    spec = derived_spec("sentence-transformers/all-MiniLM-L6-v2")
    assert all(layer.kind is LayerKind.NONE for layer in spec.layers)
    result = estimate(spec, parse_gpu_spec("h100"), EngineChoice(engine), Workload(context=256))
    assert result.decode_tokens_per_second is None
    assert any("does not generate tokens" in w for w in result.warnings)
    assert result.verdict == "fits", result.warnings


def test_decoder_keeps_its_bandwidth_bound_with_the_weights_read():
    result = run("Qwen/Qwen2.5-7B", "h100")
    by_component = result.spec.weights.bytes_by_component
    # Qwen2.5-7B has its own lm_head: a token gathers one row of embed_tokens and streams every other weight once,
    # so the bound is never faster than the bandwidth over those bytes (H100: 3350 GB/s)
    assert by_component["lm_head"] and by_component["embeddings"]
    read = result.spec.weights.total_bytes - by_component["embeddings"]
    assert 0 < result.decode_tokens_per_second <= 3350e9 / read


# ---- 9. releases ------------------------------------------------------------------------------------------------


def test_unmodelled_releases_are_said_in_the_estimate_warnings():
    older = run("Qwen/Qwen2.5-7B", "h100", version="0.1")
    newer = run("Qwen/Qwen2.5-7B", "h100", version="9.9")
    exact = run("Qwen/Qwen2.5-7B", "h100", version="0.19")
    assert any(w.startswith("--engine vllm@0.1: older than any vllm release") and "0.6" in w for w in older.warnings)
    # above the newest release hfvram reviewed (read from vllm.toml [releases]): its rules and a warning naming it
    newest = releases.newest_reviewed("vllm")
    assert newest is not None
    said = [w for w in newer.warnings if w.startswith("--engine vllm@9.9: newer than vllm ")]
    assert said and f"vllm {newest.version} ({newest.date_text})" in said[0]
    assert newer.engine["version"] == max(common.load_engine_data("vllm")["versions"], key=common.version_key)
    assert not [w for w in exact.warnings if w.startswith("--engine vllm@")]
    # a reviewed release between rule sets uses the rule set in force at it, without a note
    at_newest = run("Qwen/Qwen2.5-7B", "h100", version=newest.version)
    assert not [w for w in at_newest.warnings if w.startswith("--engine vllm@")]


# ---- 12. hybrid CUDA graphs -----------------------------------------------------------------------------------


def test_hybrid_cuda_graphs_scale_with_mixer_blocks_not_mlp_blocks():
    """Article 003: 3.4 GB per card for Qwen3.6-27B (64 layers × hidden 5120), i.e. 10376 B per layer × hidden.
    Qwen3.5-27B (same shape) keeps that; Nemotron-H-56B lists 118 blocks of which 54 are MLP-only, so only its
    64 mixer blocks (54 Mamba + 10 attention) count."""
    qwen = run("Qwen/Qwen3.5-27B", "h100x2")
    assert qwen.engine["cudagraph_bytes"] == pytest.approx(3.4e9, rel=0.01)
    nemotron = run("nvidia/Nemotron-H-56B-Base-8K", "h100x8")
    assert nemotron.engine["cudagraph_bytes"] == int(10376.0 * 64 * 8192)


# ---- 13. one table per fact ---------------------------------------------------------------------------------

ESTIMATE_SOURCES = Path(__file__).resolve().parent.parent / "hfvram" / "estimate"
ENGINE_SOURCES = ESTIMATE_SOURCES.parent / "engines"
# every key of an engine's rules.toml is read by code: tests/test_engine_contract.py (rules_problems), per engine


def test_ggml_type_table_matches_the_gguf_package():
    """hfvram/data/ggml_types.json (read at start-up without numpy) is gguf's GGML_QUANT_SIZES, type by type."""
    gguf = pytest.importorskip("gguf")
    from hfvram.estimate import dtypes

    expected = {qtype.name.lower(): (int(qtype), block, size) for qtype, (block, size) in gguf.GGML_QUANT_SIZES.items()}
    assert dict(dtypes.ggml_types()) == expected


def test_kv_dtype_sizes_come_from_the_dtype_tables():
    from hfvram.engines.llamacpp.settings import GGML_BLOCKS
    from hfvram.estimate import common, dtypes

    blocks = dtypes.ggml_types()
    for name in ("q8_0", "q4_0", "q5_1", "iq4_nl"):
        _, block, size = blocks[name]
        assert common.kv_dtype_bytes(name) == size / block
        assert GGML_BLOCKS[name] == (block, size)
    assert common.kv_dtype_bytes("bfloat16") == 2.0 and common.kv_dtype_bytes("fp8_e4m3") == 1.0


def test_ggml_table_loads_without_numpy():
    """The CLI's start-up path must not import numpy: the ggml table is plain JSON."""
    import subprocess
    import sys

    code = (
        "import sys; from hfvram.estimate import dtypes, common; dtypes.ggml_types(); common.kv_dtype_bytes('q8_0'); "
        "print('numpy' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(ESTIMATE_SOURCES.parent.parent)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, check=True)
    assert out.stdout.strip() == "False"


#: the most functions of hfvram that may run over 60 lines, each with its reason: a ceiling, so that the list cannot
#: grow silently (lower it when one is split; raising it wants a reason as good as those of the ones on the list)
MAX_REASONED_LONG_FUNCTIONS = 14


def test_functions_stay_short_or_say_why():
    """Every function of hfvram (every module: the estimator, the engines, the readers, the sources, the pipeline,
    the quantization what-ifs, the reports, the commands) keeps to 60 lines; a longer one says why in its docstring
    ("Longer than 60 lines ..."), and there are at most MAX_REASONED_LONG_FUNCTIONS of those."""
    import ast

    package = ESTIMATE_SOURCES.parent
    paths = sorted(package.rglob("*.py"))
    assert ENGINE_SOURCES / "vllm" / "profile.py" in paths and ESTIMATE_SOURCES / "inverse.py" in paths
    assert package / "readers" / "gguf.py" in paths and package / "commands" / "check.py" in paths
    long, reasoned = [], []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            is_function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if not is_function or node.end_lineno - node.lineno < 60:
                continue
            where = f"{path.relative_to(package)}:{node.lineno} {node.name}"
            (reasoned if "Longer than 60 lines" in (ast.get_docstring(node) or "") else long).append(where)
    assert not long, f"functions over 60 lines without a reason: {long}"
    assert len(reasoned) <= MAX_REASONED_LONG_FUNCTIONS, (
        f"{len(reasoned)} functions over 60 lines (at most {MAX_REASONED_LONG_FUNCTIONS}): split one rather than add "
        f"one: {reasoned}"
    )


#: flags of an engine's settings.toml that change no GPU memory: no warning (and the output says nothing about them)
MEMORY_NEUTRAL_FLAGS = {
    # prefix caching reuses blocks of the same pool (docs/engines/vllm.md#vllm-kv-groups)
    "vllm": {"no-enable-prefix-caching"},
    # the radix cache is the token pool's bookkeeping, not memory of its own (docs/engines/sglang.md#sglang-token-pool)
    "sglang": {"disable-radix-cache"},
}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_memory_flag_is_modelled_or_named_in_a_warning(engine):
    """Issue 12: every flag of the engine that hfvram keeps (its settings.toml ``settings``) is read by the profile
    (named in its code), listed in the engine TOML's ``unmodelled_flags`` (a warning names it) or memory-neutral."""
    import re

    import tomllib

    flags = tomllib.loads((ENGINE_SOURCES / engine / "settings.toml").read_text(encoding="utf-8"))["command_line"]
    engine_toml = tomllib.loads((ENGINE_SOURCES / engine / "rules.toml").read_text(encoding="utf-8"))
    source = "\n".join(
        path.read_text(encoding="utf-8")
        for path in (
            *sorted((ENGINE_SOURCES / engine).glob("*.py")),
            *(ESTIMATE_SOURCES / name for name in ("common.py", "engine_rules.py", "multimodal.py")),
        )
    )
    named = set(re.findall(r"""["']([A-Za-z0-9_.\-]+)["']""", source))
    warned = set(engine_toml["defaults"]["unmodelled_flags"])
    fields = set(flags["fields"].values())
    silent = [flag for flag in flags["settings"] if flag not in named | warned | fields | MEMORY_NEUTRAL_FLAGS[engine]]
    assert not silent, f"{engine}: flags read from a command line but neither modelled nor warned about: {silent}"
