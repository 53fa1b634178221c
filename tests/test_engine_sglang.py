"""SGLang profile rules (docs/engines/sglang.md) on real fixture configs and published start-up logs
(ids of benchmarks/data/groundtruth_cases.jsonl named in each test)."""

from __future__ import annotations

from pathlib import Path

import pytest
from spec_support import derived_spec

from hfvram.engines import get_profile
from hfvram.engines.sglang import pool as sglang_pool
from hfvram.engines.sglang import profile as sglang
from hfvram.engines.sglang import settings as sglang_settings
from hfvram.errors import UsageError
from hfvram.estimate import common
from hfvram.estimate.common import load_engine_data
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.spec import ModelSpec, Weights

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
GiB = 1 << 30
H100 = 81559  # MiB, nvidia-smi total (gpus/README.md)
H200 = 143771


def spec_of(repo: str) -> ModelSpec:
    return derived_spec(repo, use_transformers=False)


def rules(version: str = "0.5.10"):
    """SGLang's typed constants at ``version`` (hfvram/engines/sglang/constants.py)."""
    return sglang.PROFILE.constants(version)[1]


def run(spec, gpu, context=None, concurrency=1, version=None, gpu_util=None, kv="auto", **settings):
    choice = EngineChoice(
        "sglang", version, {k.replace("_", "-"): str(v) for k, v in settings.items()}, gpu_util=gpu_util
    )
    return estimate(
        spec,
        parse_gpu_spec(gpu) if gpu else None,
        choice,
        Workload(context=context, concurrency=concurrency, kv_dtype=kv),
    )


def test_profile_is_registered():
    assert get_profile("sglang") is sglang.PROFILE
    # the newest rule set is the one the data lists last (rules.toml [versions]), not a release typed here
    newest = max(load_engine_data("sglang")["versions"], key=common.version_key)
    assert sglang.PROFILE.rule_versions[-1] == newest


def test_prefill_graph_count_matches_sglang_log():
    # SGLang's ServerArgs log: 58 piecewise_cuda_graph_tokens up to 8192 ("Compiling num tokens … 0/58"),
    # 42 up to 2048
    assert sglang_settings.prefill_graph_count(rules(), 8192) == 58
    assert sglang_settings.prefill_graph_count(rules(), 2048) == 42


def test_default_fraction_h100_tp4_gqa():
    # sglang.md#sglang-mem-fraction: <90 GiB tier -> chunked 8192, decode bs 512 at tp>=4;
    # reserved = 512 + 1.5*8192 + 4/8*1024 + 2*512 + 8*58 = 14800 MiB -> round((81559-14800)/81559, 3)
    reserved, _ = sglang_settings.reserved_mib(rules(), H100, 4, 1, 8192, 512, mla=False)
    assert reserved == 14800
    fraction, _, _ = sglang_settings.default_mem_fraction(rules(), H100, 4, 1, 8192, 512, False)
    assert fraction == 0.819


def test_default_fraction_h200_tp8_mla():
    # sglang.md#sglang-mem-fraction MLA: 1536 MiB for prefill graphs; 512 + 12288 + 1024 + 1024 + 1536 = 16384 MiB
    fraction, _, _ = sglang_settings.default_mem_fraction(rules(), H200, 8, 1, 8192, 512, True)
    assert fraction == round((H200 - 16384) / H200, 3) == 0.886
    result = run(spec_of("deepseek-ai/DeepSeek-V3"), "h200x8")
    assert result.engine["mem_fraction_static"] == 0.886
    assert result.engine["chunked_prefill_size"] == 8192 and result.engine["cuda_graph_max_bs"] == 512


def test_reserve_floor_on_large_gpus_and_not_on_small():
    # sglang.md#sglang-mem-fraction: reserved >= 10240 MiB when the GPU has more than 60 GiB
    small_chunk, _ = sglang_settings.reserved_mib(rules(), 81920, 1, 1, 2048, 0, mla=False)
    assert small_chunk == 10240
    # RTX 4090 (24564 MiB): tier <35 GiB -> 2048 / 24; 512 + 3072 + 128 + 48 + 8*42 = 4096, no floor
    fraction, _, _ = sglang_settings.default_mem_fraction(rules(), 24564, 1, 1, 2048, 24, False)
    assert fraction == round((24564 - 4096) / 24564, 3) == 0.833
    result = run(spec_of("Qwen/Qwen3-8B"), "rtx4090", context=8192)
    assert result.engine["mem_fraction_static"] == 0.833


def test_history_of_the_default_fraction():
    # sglang.md#sglang-mem-fraction history: before 2025-06-10 a fixed table by tp*pp; #7054 H100 (12 + tp*pp/2) GiB; #10975 base 1024, tp*pp/4
    assert sglang_settings.default_mem_fraction(rules("0.4.0"), H100, 4, 1, 8192, 512, False)[0] == 0.85
    assert sglang_settings.default_mem_fraction(rules("0.4.0"), H100, 8, 1, 8192, 512, False)[0] == 0.81
    fraction, _, warnings = sglang_settings.default_mem_fraction(rules("0.4.7"), H100, 4, 1, 8192, 512, False)
    assert fraction == round((H100 - 14 * 1024) / H100, 3)
    assert warnings
    assert sglang_settings.default_mem_fraction(rules("0.5.3"), H100, 4, 1, 8192, 512, False)[0] == round(
        (H100 - (1024 + 12288 + 1024 + 1024 + 464)) / H100, 3
    )
    spec = spec_of("Qwen/Qwen3-8B")
    assert run(spec, "h100x4", version="0.4.9").engine["version"] == "0.4.7"


def test_token_pool_reproduces_gt0038():
    # gt-0038 (SGLang, MI-class GPU, Qwen3-30B-A3B bf16, mfs 0.911): "avail mem=230.20 GB, mem usage=56.98 GB"
    # after loading, AITER workspace 51.75 GB taken from the rest; "#tokens: 1669816, K size: 76.44 GB"
    cell = sglang_pool.cell_size(spec_of("Qwen/Qwen3-30B-A3B"), 1, 1, 2.0, 0.8, True)
    assert cell.cell == 98304  # 48 layers x 4 KV heads x 128 x (K+V) x 2 B (common.md#kv-bytes-per-token check)
    tokens, _ = sglang_pool.token_pool((230.20 + 56.98) * GiB, 230.20 * GiB, 0.911, cell.cell, 1, 51.75 * GiB)
    assert tokens == pytest.approx(1_669_816, rel=2e-4)
    assert tokens * cell.cell / 2 / GiB == pytest.approx(76.44, abs=0.01)


def test_gt0038_weights_and_pool_through_the_profile():
    # the same run on a 288 GiB MI355X: weights per GPU 56.98 GB as logged; without the AITER workspace (a
    # backend buffer hfvram does not model) the pool is that much larger
    spec = spec_of("Qwen/Qwen3-30B-A3B")
    result = run(spec, "mi355x", gpu_util=0.911, kv="bf16")
    assert result.per_gpu.weights / GiB == pytest.approx(56.98, rel=0.01)
    pool_bytes = result.capacity.kv_tokens * 98304
    assert pool_bytes / GiB == pytest.approx(2 * 76.44 + 51.75, rel=0.01)


def test_qwen3_235b_fp8_on_4xh100_against_gt0001():
    # gt-0001/0002 (README "cross-engine"): Qwen3-235B-A22B-FP8 on 4 x H100, SGLang 367,404 tokens.
    # Its settings are not in this copy of the cases; mem_fraction_static 0.9 assumed. Cell: 94 layers x
    # 1 KV head per rank x 256 x 2 B = 48,128 B.
    spec = spec_of("Qwen/Qwen3-235B-A22B-FP8")
    result = run(spec, "h100x4", gpu_util=0.9)
    assert result.engine["cell_size"] == 48128
    assert result.capacity.kv_tokens == pytest.approx(367_404, rel=0.06)
    default = run(spec, "h100x4")  # the current default (0.819) gives a smaller pool
    assert default.engine["mem_fraction_static"] == 0.819
    assert default.capacity.kv_tokens < result.capacity.kv_tokens


def test_gt0037_weights_leave_no_kv_memory():
    # gt-0037: DeepSeek-V4-Pro on 8 x H200, mfs 0.88, "mem usage=125.65 GB" per GPU ->
    # "Loaded weights leave no GPU memory for the KV cache"; engine's minimum viable mfs 0.9113
    spec = spec_of("deepseek-ai/DeepSeek-V4-Pro")
    total = int(8 * 125.65 * GiB)
    spec = spec.with_weights(Weights(total_bytes=total, params_total=total, bytes_by_component={"experts": total}))
    failed = run(spec, "h200x8", gpu_util=0.88, context=8192)
    assert failed.capacity.kv_tokens == 0
    assert failed.verdict == "does_not_fit"
    assert any("no memory for the KV cache" in w for w in failed.warnings)
    started = run(spec, "h200x8", gpu_util=0.93, context=8192)
    assert started.capacity.kv_tokens > 0 and started.verdict != "does_not_fit"


def test_cell_sizes_mla_and_hybrid_swa():
    # sglang.md#sglang-token-pool MLA: (512 + 64) x 61 layers x 2 B on every rank, not split by TP
    deepseek = spec_of("deepseek-ai/DeepSeek-V3")
    assert sglang_pool.cell_size(deepseek, 8, 1, 2.0, 0.8, True).cell == 576 * 61 * 2
    # sglang.md#sglang-token-pool hybrid SWA (Gemma 2): 21 full + 0.8 x 21 sliding layers, 8 KV heads x 256 x 2 x 2 B each
    gemma = spec_of("google/gemma-2-9b-it")
    cell = sglang_pool.cell_size(gemma, 1, 1, 2.0, 0.8, True)
    assert cell.cell == pytest.approx(21 * 8192 + 0.8 * 21 * 8192)
    assert sglang_pool.cell_size(gemma, 1, 1, 2.0, 0.8, False).cell == 42 * 8192


def test_hybrid_swa_pool_and_capacity():
    # docs/engines/sglang.md#sglang-swa-list: GptOssForCausalLM is on is_hybrid_swa_model's list: its sliding
    # layers keep a pool of their own at swa_full_tokens_ratio
    oss = spec_of("openai/gpt-oss-20b")
    result = run(oss, "h100", context=8192, kv="bf16")
    assert result.engine["swa_full_tokens_ratio"] == 0.8
    tokens = result.capacity.kv_tokens
    # the full pool bounds concurrency at context 8192 (window 128 < 0.8 x 8192)
    assert result.capacity.max_concurrency == pytest.approx(tokens / 8192, rel=1e-3)


def test_hybrid_swa_pool_only_for_listed_architectures():
    # Gemma2ForCausalLM is not on the list (python/sglang/srt/configs/model_config.py is_hybrid_swa_model): SGLang
    # caches its 21 sliding layers at full length, 42 x 8 KV heads x 256 x 2 x 2 B per token, and says nothing
    gemma = spec_of("google/gemma-2-9b-it")
    result = run(gemma, "h100", context=8192, kv="bf16")
    assert result.engine["swa_full_tokens_ratio"] is None
    assert any("no separate sliding-window pool for Gemma2ForCausalLM" in w for w in result.warnings)
    listed = load_engine_data("sglang")["defaults"]["hybrid_swa_architectures"]
    assert "Gemma2ForCausalLM" not in listed and "GptOssForCausalLM" in listed


def test_hybrid_linear_attention_mamba_budget():
    # sglang.md#sglang-mamba-state: mamba budget = rest x r/(1+r), r = 0.9; running requests <= max_mamba_cache_size // 3
    spec = spec_of("Qwen/Qwen3-Next-80B-A3B-Thinking")
    result = run(spec, "h100x4", context=32768)
    cell = sglang_pool.cell_size(spec, 4, 1, 2.0, 0.8, True)
    assert cell.cell == 12 * 1 * 256 * 2 * 2  # only the 12 full-attention layers (2 KV heads / 4 ranks -> 1)
    assert cell.state_bytes_per_request > 0
    mamba = result.engine["max_mamba_cache_size"]
    assert mamba > 0
    assert result.engine["max_running_requests"] <= mamba // 3
    assert result.capacity.max_concurrency <= mamba


def test_max_running_requests_and_req_to_token():
    # sglang.md#sglang-token-pool: min(clamp(int(tokens/context*512), 2048, 4096), tokens // 2); table (n+1) x (ctx+4) x 4 B
    assert sglang_pool.max_running_requests(rules(), 367_404, 40_960) == 4096
    assert sglang_pool.max_running_requests(rules(), 200_000, 40_960) == 2500
    assert sglang_pool.max_running_requests(rules(), 3_000, 32_768) == 1500
    assert sglang_pool.req_to_token_bytes(rules(), 2048, 32_768) == 2049 * 32_772 * 4


def test_estimate_terms_and_verdicts():
    spec = spec_of("Qwen/Qwen3-8B")
    fits = run(spec, "h100", context=32768, concurrency=4)
    assert fits.verdict == "fits"
    # the activations term is the share outside mem_fraction_static of the free memory
    pre = fits.per_gpu.memory - fits.per_gpu.overhead
    assert fits.per_gpu.activations == pytest.approx(pre * (1 - fits.engine["mem_fraction_static"]), rel=1e-6)
    assert fits.per_gpu.kv_cache == 4 * 32768 * 36 * 8 * 256 * 2  # Qwen3-8B: 36 layers, 8 KV heads x 128
    assert {"weights", "kv_cache", "activations", "overhead", "budget", "cell_size"} <= set(fits.explain)
    too_many = run(spec, "rtx4090", context=32768, concurrency=64)
    assert too_many.verdict == "does_not_fit"
    assert too_many.capacity.max_concurrency < 64


def test_fp8_kv_halves_the_cell():
    spec = spec_of("Qwen/Qwen3-8B")
    bf16 = run(spec, "h100", context=8192)
    fp8 = run(spec, "h100", context=8192, kv="fp8_e4m3")
    assert fp8.engine["cell_size"] == bf16.engine["cell_size"] / 2
    assert fp8.capacity.kv_tokens == pytest.approx(2 * bf16.capacity.kv_tokens, rel=1e-4)


def test_without_gpu_reports_footprint_only():
    result = run(spec_of("Qwen/Qwen3-8B"), None, context=8192)  # weights derived from the config shapes
    assert result.verdict is None and result.capacity.kv_tokens is None
    assert result.per_gpu.weights > 15 * GiB
    assert "derived" in result.explain["weights"]
    assert "approximation" in result.explain["budget"]


# ---- the start condition (docs/engines/sglang.md#sglang-start) --------------------------------------------------


def test_a_pool_shorter_than_the_default_context_still_starts():
    """SGLang starts with any positive pool and caps requests at max_req_len = min(context_len − 1,
    max_total_num_tokens − 1) (tp_worker.py). A published start-up log (2026-05-28) shows it: "max_total_num_tokens=20480
    ... context_len=131072", then the server up. Llama-3.1-8B on an H100 with --max-total-tokens 20480 and no --context
    is the same server: not does_not_fit, with a warning that one full-length request would not fit."""
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    result = run(spec, "h100", max_total_tokens=20480)
    assert result.engine["max_total_num_tokens"] == 20480 and result.engine["context_length"] == 131072
    assert result.verdict != "does_not_fit"
    assert result.engine["max_req_len"] == 20479
    assert any(
        "would not fit the KV pool of 20,480 tokens" in w and "at most 20,479 tokens" in w for w in result.warnings
    )
    # asked about a length, the verdict is for that length (the largest --context that is not does_not_fit)
    assert run(spec, "h100", context=131072, max_total_tokens=20480).verdict == "does_not_fit"
    assert run(spec, "h100", context=20480, max_total_tokens=20480).verdict != "does_not_fit"


def test_a_pool_too_small_for_one_input_token_is_refused():
    """tp_worker.py: max_req_input_len = max_req_len − 5 must be positive ("Memory pool size is too small"): a pool
    of 6 tokens stops SGLang, one of 7 starts."""
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    refused = run(spec, "h100", max_total_tokens=6)
    assert refused.verdict == "does_not_fit"
    assert any("Memory pool size is too small" in w for w in refused.warnings)
    assert run(spec, "h100", max_total_tokens=7).verdict != "does_not_fit"


def test_mem_fraction_static_one_is_accepted():
    """server_args.py takes any float; 1.0 leaves nothing outside the static fraction."""
    result = run(spec_of("Qwen/Qwen3-8B"), "h100", context=8192, gpu_util=1.0)
    assert result.engine["mem_fraction_static"] == 1.0
    assert result.per_gpu.activations == 0
    with pytest.raises(UsageError):
        run(spec_of("Qwen/Qwen3-8B"), "h100", context=8192, gpu_util=1.01)


# ---- flags: modelled or named in a warning (docs/engines/sglang.md#sglang-unmodelled-flags) -------------------


def test_dp_size_replicas_share_the_gpus_unless_dp_attention():
    """DataParallelController: each of dp_size replicas takes a whole TP group (base_gpu_id += tp_size); with
    --enable-dp-attention the DP ranks are inside the TP group."""
    spec = spec_of("Qwen/Qwen3-8B")
    replicas = run(spec, "h100x4", context=8192, dp_size=2)
    assert replicas.tp == 2 and replicas.engine["dp_size"] == 2
    assert replicas.per_gpu == run(spec, "h100x2", context=8192).per_gpu
    attention = run(spec, "h100x4", context=8192, dp_size=2, enable_dp_attention="true")
    assert attention.tp == 4 and attention.engine["dp_size"] == 1
    assert any("--enable-dp-attention: hfvram does not account for" in w for w in attention.warnings)
    with pytest.raises(UsageError, match="needs 8 GPUs"):
        run(spec, "h100x4", context=8192, dp_size=2, tp_size=4)


@pytest.mark.parametrize(
    "settings,named",
    [
        ({"enable_lora": "true", "max_loras_per_batch": "4"}, ("--enable-lora: SGLang sizes its LoRA pool",)),
        (
            {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "lmsys/sglang-EAGLE3-LLaMA3.1"},
            ("--speculative-algorithm EAGLE3 (draft lmsys/sglang-EAGLE3-LLaMA3.1)", "draft model's weights"),
        ),
        ({"quantization": "awq"}, ("--quantization awq: the checkpoint states no quantization",)),
        ({"quantization": "bitsandbytes"}, ("--quantization bitsandbytes",)),
    ],
)
def test_flags_hfvram_does_not_model_are_named_in_a_warning(settings, named):
    result = run(spec_of("meta-llama/Llama-3.1-8B-Instruct"), "h100", context=8192, **settings)
    text = "\n".join(result.warnings)
    for part in named:
        assert part in text, text


def test_ngram_speculation_is_not_warned_about():
    """n-gram drafting keeps no model: only a note that it costs no memory."""
    result = run(spec_of("meta-llama/Llama-3.1-8B-Instruct"), "h100", context=8192, speculative_algorithm="NGRAM")
    assert [w for w in result.warnings if "speculative" in w] == [
        "speculative decoding (NGRAM) drafts from the tokens already seen: no GPU memory"
    ]


def test_mla_latent_projections_are_whole_on_every_rank():
    """SGLang deepseek_v2.py: ``fused_qkv_a_proj_with_mqa`` is a ``ReplicatedLinear`` (q_lora_rank + kv_lora_rank +
    qk_rope_head_dim outputs): DeepSeek-V3 at TP 8 holds about 0.75 GiB per GPU more than an even split."""
    spec = spec_of("deepseek-ai/DeepSeek-V3")
    result = run(spec, "h200x8", context=8192)
    assert "0.86 GiB of attention kept whole on every rank" in result.explain["weights"]


def test_a_low_mem_fraction_static_books_sglangs_reserve_not_the_whole_slack():
    """SGLang sizes its pool from the free memory at start (``rest = post_load_free − pre_load_free × (1 − mfs)``,
    sglang.md#sglang-mem-fraction): at mem-fraction-static 0.2 Qwen3-0.6B on a 4090 starts with a pool of tens
    of thousands of tokens. The 0.8 of memory outside the fraction is not used but left free: only SGLang's own
    reserve is booked as activations, so a server that starts does not read DOES NOT FIT."""
    from hfvram import check

    low = check("Qwen/Qwen3-0.6B", gpu="rtx4090", engine="sglang", context="8k", settings=("mem-fraction-static=0.2",),
                offline=True)  # fmt: skip
    assert low.capacity.kv_tokens > 8192  # the pool holds a full request: the server starts
    assert low.verdict != "does_not_fit"
    assert low.per_gpu.activations < 0.8 * low.per_gpu.usable / 2
