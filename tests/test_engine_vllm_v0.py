"""vLLM's V0 engine rules (hfvram/engines/vllm/v0.py, docs/engines/vllm.md#vllm-v0) and the non-torch table
(docs/engines/vllm.md#vllm-non-torch), checked on published V0 start-up logs (benchmarks/data/groundtruth_cases.jsonl
ids and the threads they come from, named in each test)."""

from __future__ import annotations

import pytest
from spec_support import derived_spec

from hfvram.engines.vllm import v0 as vllm_v0
from hfvram.estimate.core import estimate
from hfvram.estimate.types import GPU, EngineChoice, Hardware, Workload
from hfvram.spec import LayerKind, ModelSpec, Weights

GiB = 1 << 30


def card(gib: float, gpu_id: str = "logged", name: str = "logged GPU", count: int = 1) -> Hardware:
    return Hardware(GPU(id=gpu_id, name=name, vendor="nvidia", memory_bytes=int(gib * GiB)), count=count)


def loaded(repo: str, gib: float, ranks: int = 1) -> ModelSpec:
    """The fixture model with the weights the log says one rank loaded (the budget is judged, not the reader)."""
    spec = derived_spec(repo)
    total = int(gib * GiB) * ranks
    return spec.with_weights(Weights(total_bytes=total, params_total=total // 2, bytes_by_component={"mlp": total}))


def run(spec, hardware, version, context=None, **settings):
    choice = EngineChoice("vllm", version, {k.replace("_", "-"): str(v) for k, v in settings.items()})
    return estimate(spec, hardware, choice, Workload(context=context))


def test_v0_rules_for_09_and_older_and_with_vllm_use_v1_0():
    spec = loaded("meta-llama/Llama-3.1-8B-Instruct", 14.99)
    h100 = card(79.19)

    def generation(version, **settings):
        result = run(spec, h100, version, max_model_len=8192, **settings)
        return result.engine["engine_generation"], result.warnings

    assert generation("0.6.4")[0] == "v0" and generation("0.9")[0] == "v0"
    assert generation("0.9", VLLM_USE_V1="1")[0] == "v1"
    assert generation("0.10")[0] == "v1" and generation("0.10", VLLM_USE_V1="0")[0] == "v0"
    newest, warnings = generation("0.19", VLLM_USE_V1="0")
    assert newest == "v1" and any("has no V0 engine (removed in v0.11)" in w for w in warnings)


def test_pr_10511_budget_sampler_and_non_torch_at_tp_1_and_2():
    # gt-0006 / gt-0007, vllm#10511 (v0.6.5 dev, V0): Meta-Llama-3-8B on a 79.22 GiB GPU, util 0.90:
    # TP 1 "model weights take 14.96GiB, non_torch_memory 1.79GiB, PyTorch activation peak memory 1.26GiB,
    # available_kv_cache_memory 53.29GiB"; TP 2 weights 7.48, non-torch 3.58, activation 1.26 GiB
    gpu = card(79.22)
    one = run(loaded("meta-llama/Meta-Llama-3.1-8B", 14.96), gpu, "0.6.5", max_model_len=8192)
    assert one.per_gpu.activations / GiB == pytest.approx(1.26, abs=0.02)
    assert one.per_gpu.overhead / GiB == pytest.approx(1.79, abs=0.01)
    assert one.engine["kv_pool_bytes"] / GiB == pytest.approx(53.29, rel=0.005)
    two = run(loaded("meta-llama/Meta-Llama-3.1-8B", 7.48, ranks=2), card(79.22, count=2), "0.6.5", max_model_len=8192)
    assert two.engine["max_num_seqs"] == 256 and two.engine["max_num_batched_tokens"] == 8192
    assert two.per_gpu.activations / GiB == pytest.approx(1.26, abs=0.02)  # the sampler: not split by TP
    assert two.per_gpu.overhead / GiB == pytest.approx(3.58, abs=0.01)
    assert two.engine["kv_pool_bytes"] / GiB == pytest.approx(71.29 - 7.48 - 3.58 - 1.26, rel=0.005)
    assert "non-torch memory 1.79 GiB" in one.explain["overhead"] and "vllm#10511" in one.explain["overhead"]


def test_issue_10517_whole_prompt_profile_blocks_and_refusal():
    # gt-0003 / gt-0004, vllm#10517 (V0, RTX 3090 23.58 GiB, util 0.90, Llama-3.1-8B 14.99 GiB):
    # max_model_len 20000: kv_cache_size 3.81GiB, 1952 GPU blocks; 29000: 2.89GiB, 1478 blocks and
    # "The model's max seq len (29000) is larger than the maximum number of tokens ... (23648)"
    spec = loaded("meta-llama/Llama-3.1-8B-Instruct", 14.99)
    short = run(spec, card(23.58, "rtx3090"), "0.6.4", max_model_len=20000)
    long = run(spec, card(23.58, "rtx3090"), "0.6.4", max_model_len=29000)
    assert short.engine["kv_pool_bytes"] / GiB == pytest.approx(3.81, rel=0.02)
    assert short.capacity.kv_tokens == pytest.approx(1952 * 16, rel=0.02)
    assert long.engine["kv_pool_bytes"] / GiB == pytest.approx(2.89, rel=0.02)
    assert long.capacity.kv_tokens == pytest.approx(23648, rel=0.02)
    assert short.verdict != "does_not_fit" and long.verdict == "does_not_fit"


def test_chunked_prefill_turns_on_above_32k():
    # _set_default_args_v0: chunked prefill on when max_model_len > 32768 (vllm#12529: a V0 v0.7.4 engine at
    # max_seq_len=65536 logs chunked_prefill_enabled=True); then 2048 batched tokens instead of the whole prompt,
    # so the 3090 of vllm#10517 that refuses 29000 tokens takes 37856
    spec = loaded("meta-llama/Llama-3.1-8B-Instruct", 14.99)
    gpu = card(23.58, "rtx3090")
    at_29k = run(spec, gpu, "0.9", max_model_len=29000)
    at_37k = run(spec, gpu, "0.9", max_model_len=37856)
    assert (at_29k.engine["enable_chunked_prefill"], at_29k.engine["max_num_batched_tokens"]) == (False, 29000)
    assert (at_37k.engine["enable_chunked_prefill"], at_37k.engine["max_num_batched_tokens"]) == (True, 2048)
    assert at_29k.verdict == "does_not_fit" and at_37k.verdict != "does_not_fit"
    off = run(spec, gpu, "0.9", max_model_len=37856, enable_chunked_prefill="false")
    assert off.engine["max_num_batched_tokens"] == 37856 and off.verdict == "does_not_fit"
    # a model whose every layer slides keeps chunked prefill off; interleaved windows (Gemma-2) do not count
    assert vllm_v0.uniform_sliding_window(derived_spec("mistralai/Mistral-7B-v0.1"))
    assert not vllm_v0.uniform_sliding_window(derived_spec("google/gemma-2-9b-it"))


def test_held_out_v0_logs_sampler_and_failure():
    # not fitted on: gt-0009 (vllm#13109, v0.7.2 dev, DeepSeek-Coder-V2-Lite AWQ at its 163840 default, 80 GB GPU):
    # "PyTorch activation peak memory takes 0.94GiB" (chunked prefill on: the 256-sequence sampler, vocab 102400);
    # gt-0010 (vllm#13882, v0.7.3 V0, RTX 4060 8.00 GiB, util 0.7, Qwen2.5-7B bnb-4bit "5.2032 GB", 4096 tokens):
    # activation 1.42GiB and "No available memory for the cache blocks" (kv -1.05GiB)
    lite = run(loaded("deepseek-ai/DeepSeek-V2-Lite", 10.45), card(79.19), "0.7.2")
    assert lite.engine["max_num_batched_tokens"] == 2048
    # +19 %: the 1.00 GiB sampler term plus a 0.11 GiB fused-MoE workspace the AWQ (moe_wna16) kernels may not take
    assert lite.per_gpu.activations / GiB == pytest.approx(0.94, rel=0.20)
    qwen = run(loaded("Qwen/Qwen2.5-7B-Instruct", 5.2032), card(8.00), "0.7.3", max_model_len=4096,
               gpu_memory_utilization=0.7)  # fmt: skip
    assert qwen.per_gpu.activations / GiB == pytest.approx(1.42, rel=0.10)
    assert qwen.verdict == "does_not_fit"
    assert any("No available memory for the cache blocks" in w for w in qwen.warnings)


def test_mla_entries_are_padded_to_256_bytes():
    # gt-0009: "the rest of the memory reserved for KV Cache is 59.75GiB", "# cuda blocks: 116023": 16 tokens x
    # 27 layers x 1280 B per block, the 576-element (1152 B) MLA entry padded by align_to_256bytes
    lite = run(loaded("deepseek-ai/DeepSeek-V2-Lite", 10.45), None, "0.7.2", kv_cache_memory_bytes=int(59.75 * GiB))
    assert lite.capacity.kv_tokens == pytest.approx(116023 * 16, rel=0.001)


def test_every_layer_is_cached_at_full_length():
    # CacheEngine.get_cache_block_size: num_attention_layers x block_size x (K + V) for every layer; Gemma-2's
    # interleaved window is known to the attention layers only (issue 12: V0 caches every Gemma layer in full)
    spec = loaded("google/gemma-2-9b-it", 17.22)
    pool = 40 * GiB
    v0 = run(spec, None, "0.9", context=32768, max_model_len=32768, kv_cache_memory_bytes=pool)
    v1 = run(spec, None, "0.19", context=32768, max_model_len=32768, kv_cache_memory_bytes=pool)
    layers = [layer for layer in spec.layers if layer.kv_elems_per_token]
    per_token = sum(layer.kv_elems_per_token for layer in layers) * 2
    assert v0.capacity.kv_tokens == pool // (16 * per_token) * 16
    # V1 holds only the 4096-token window of the sliding layers: more requests of 32k fit in the same pool
    assert v1.capacity.max_concurrency > 1.4 * v0.capacity.max_concurrency
    windowed = sum(1 for layer in layers if layer.kind is LayerKind.SLIDING)
    assert any(f"its {windowed} sliding-window" in w for w in v0.warnings)


def test_no_free_memory_check_at_start_up():
    # gt-0011 (vllm#14447, V0 0.8 dev): utilization 0.99 on 23.58 GiB cards (0.24 GiB outside the budget for the
    # CUDA context and graphs) started. V1 refuses such a start ("Free memory on device ... is less than desired
    # GPU memory utilization"); V0 has no such check: a warning, not a refusal
    spec = loaded("meta-llama/Llama-3.1-8B-Instruct", 14.99)
    gpu = card(23.58, "rtx3090")
    v1 = run(spec, gpu, "0.19", context=4096, max_model_len=4096, gpu_memory_utilization=0.99)
    v0 = run(spec, gpu, "0.9", context=4096, max_model_len=4096, gpu_memory_utilization=0.99)
    assert v1.verdict == "does_not_fit"
    assert v0.verdict != "does_not_fit"
    assert any("V0 does not check free memory" in w for w in v0.warnings)


def test_non_torch_memory_by_gpu_and_engine():
    # docs/engines/vllm.md#vllm-non-torch: V1 at TP >= 2 is 2.1 GiB on H100 (fitted, gt-0072: 2.07 GiB), 0.65 GiB on
    # A100 (issue 12, v0.10); V0 at TP >= 2 0.20 GiB (vllm#14447)
    spec = loaded("meta-llama/Llama-3.1-8B-Instruct", 7.51, ranks=2)
    h100 = run(spec, card(79.19, "h100-sxm", "NVIDIA H100 80GB HBM3", 2), "0.19", max_model_len=8192)
    a100 = run(spec, card(79.14, "a100-80g-sxm", "NVIDIA A100 80GB SXM4", 2), "0.10", max_model_len=8192)
    old = run(spec, card(23.58, "rtx3090", "RTX 3090", 2), "0.9", max_model_len=8192)
    assert h100.per_gpu.overhead / GiB == pytest.approx(2.1, abs=0.01) and "[fitted]" in h100.explain["overhead"]
    assert a100.per_gpu.overhead / GiB == pytest.approx(0.65, abs=0.01) and "[later]" in a100.explain["overhead"]
    assert old.per_gpu.overhead / GiB == pytest.approx(0.20, abs=0.01) and "vllm#14447" in old.explain["overhead"]


def test_vllm_budget_uses_the_cuda_total_engines_see():
    # gpus.toml cuda_total_gib: H100 80GB "total_memory 79.19 GiB" (llm-d v0.19 logs, gt-0046 ...), A100 80GB
    # "total capacity of 79.14 GiB" (lianqi1008/Control-GIC#6), RTX 3090 "total_gpu_memory=23.58GiB" (vllm#10517);
    # the RTX A6000 with ECC on was not observed: its nvidia-smi total (46068 MiB) stays the budget's base
    from hfvram.estimate.hardware import memory_provenance, parse_gpu_spec

    spec = loaded("meta-llama/Llama-3.1-8B-Instruct", 14.99)
    for name, gib in (("h100", 79.19), ("a100", 79.14), ("rtx3090", 23.58)):
        hardware = parse_gpu_spec(name)
        assert hardware.gpu.engine_visible_bytes == int(gib * GiB)
        assert hardware.gpu.engine_visible_bytes < hardware.gpu.memory_bytes
        assert f"cuda_total_gib {gib}" in memory_provenance(hardware.gpu)
        result = run(spec, hardware, "0.19", context=4096, max_model_len=4096)
        assert result.per_gpu.memory == int(gib * GiB)
        assert result.per_gpu.usable == pytest.approx(0.9 * gib * GiB, abs=1)
    a6000 = parse_gpu_spec("rtx-a6000").gpu
    assert a6000.cuda_total_bytes is None and a6000.engine_visible_bytes == 46068 * (1 << 20)


def test_v0_before_0_6_5_shows_no_sampler_peak():
    # gt-0201 (vllm#10517, same 3090 and model as gt-0003): max_model_len 35000 started where 29000 failed: above
    # 32768 chunked prefill is on, and "peak_torch_memory=15.05GiB" is 0.06 GiB over the 14.99 GiB of weights, the bf16
    # logits of 256 rows alone (the sort-path sampler peak appears from v0.6.5 on, gt-0006)
    spec = loaded("meta-llama/Llama-3.1-8B-Instruct", 14.9888)
    result = run(spec, card(23.58, "rtx3090"), "0.6.4", max_model_len=35000)
    assert result.engine["enable_chunked_prefill"] is True
    assert result.per_gpu.activations / GiB == pytest.approx(15.05 - 14.9888, abs=0.03)
    assert result.verdict != "does_not_fit"


def test_v1_pool_to_tokens_under_tp_4():
    # gt-0203 (vllm#21348, V1, Qwen3-235B-A22B-FP8 on 4 x H100, TP 4): "Available KV cache memory: 8.11 GiB",
    # "GPU KV cache size: 178,880 tokens" -- 94 layers x 1 KV head per rank x 128 x (K + V) x 2 B per token
    spec = derived_spec("Qwen/Qwen3-235B-A22B-FP8")
    result = run(spec, None, "0.19", max_model_len=40960, tensor_parallel_size=4, kv_cache_memory_bytes=int(8.11 * GiB))
    assert result.capacity.kv_tokens == pytest.approx(178880, rel=0.02)


def test_cli_picks_the_engine_from_the_release_and_vllm_use_v1():
    # the real CLI: --engine vllm@0.9 runs V0 (gt-0004: 29000 tokens on a 3090 fail); a pasted command line's
    # VLLM_USE_V1=1 (hfvram/engines/vllm/settings.toml [command_line.env]) selects V1 for the same release
    import json

    from cli_support import run_hfvram

    base = ("check", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "rtx3090", "--offline", "--json")
    v0 = run_hfvram(*base, "--engine", "vllm@0.9", "--set", "max-model-len=29000")
    assert v0.returncode in (0, 1), v0.stderr
    document = json.loads(v0.stdout)
    assert document["engine"]["engine_generation"] == "v0" and document["engine"]["max_num_seqs"] == 256
    assert document["verdict"] == "does_not_fit"
    pasted = "VLLM_USE_V1=1 vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 29000"
    v1 = run_hfvram(*base, "--engine", "vllm@0.9", "--engine-args", pasted)
    assert v1.returncode in (0, 1), v1.stderr
    assert json.loads(v1.stdout)["engine"]["engine_generation"] == "v1"
