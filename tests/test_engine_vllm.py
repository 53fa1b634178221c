"""vLLM profile rules (docs/engines/vllm.md) checked on real fixture configs and published start-up logs
(groundtruth cases, copied to benchmarks/data/groundtruth_cases.jsonl; ids named in each test)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from spec_support import derived_spec

from hfvram.engines.vllm import kv as vllm_kv
from hfvram.engines.vllm import settings as vllm_settings
from hfvram.errors import UsageError
from hfvram.estimate import common
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import GPU, EngineChoice, Hardware, Workload
from hfvram.spec import LayerKind, ModelSpec, Weights

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
GiB = 1 << 30
#: "total_gpu_memory_logged: 79.19 GiB" in the llm-d v0.19.0 H100 logs (gt-0046 … gt-0106)
H100_LOGGED = Hardware(
    GPU(
        id="h100-logged",
        name="NVIDIA H100 80GB HBM3",
        vendor="nvidia",
        memory_bytes=int(79.19 * GiB),
        memory_bandwidth_gbs=3350.0,
    )
)


def spec_of(repo: str) -> ModelSpec:
    return derived_spec(repo)


def with_loaded_weights(spec: ModelSpec, gib: float) -> ModelSpec:
    """A spec whose checkpoint weighs what vLLM's log says it loaded (to test the budget, not the reader)."""
    total = int(gib * GiB)
    vocab_rows = 2 * (spec.vocab_size or 0) * (spec.hidden_size or 0) * 2
    components = {"embeddings": vocab_rows // 2, "lm_head": vocab_rows // 2, "mlp": total - vocab_rows}
    return spec.with_weights(Weights(total_bytes=total, params_total=total // 2, bytes_by_component=components))


def run(spec, hardware, version="0.19", context=None, kv="auto", **settings):
    choice = EngineChoice("vllm", version, {k.replace("_", "-"): str(v) for k, v in settings.items()})
    return estimate(spec, hardware, choice, Workload(context=context, kv_dtype=kv))


@pytest.fixture(scope="module")
def llama8b() -> ModelSpec:
    # gt-0069: "Model loading took 14.99 GiB"
    return with_loaded_weights(spec_of("meta-llama/Llama-3.1-8B-Instruct"), 14.99)


def test_budget_identity_on_a_v019_log(llama8b):
    # gt-0069 (llm-d, vLLM v0.19.0, H100, util 0.95): Available KV cache memory 58.11 GiB, 476,016 tokens
    result = run(llama8b, H100_LOGGED, gpu_memory_utilization=0.95, max_model_len=8192)
    assert result.engine["kv_pool_bytes"] / GiB == pytest.approx(58.11, abs=0.1)
    assert result.capacity.kv_tokens == pytest.approx(476016, rel=0.005)
    assert result.capacity.max_concurrency == pytest.approx(58.11, rel=0.005)  # "58.11x for 8,192 tokens"
    assert result.per_gpu.activations / GiB == pytest.approx(1.89, abs=0.05)  # torch peak increase
    assert result.verdict == "fits"


def test_fp8_kv_doubles_the_tokens(llama8b):
    # gt-0062: same run with kv_cache_dtype fp8 -> 952,032 tokens (2 x 476,016)
    result = run(llama8b, H100_LOGGED, kv="fp8", gpu_memory_utilization=0.95, max_model_len=8192)
    assert result.capacity.kv_tokens == pytest.approx(952032, rel=0.005)
    assert result.workload.kv_dtype == "fp8"


def test_tensor_parallel_replicates_non_torch_memory_and_splits_kv(llama8b):
    # gt-0072 (TP=2): weights 7.51 GiB, non-torch 2.07 GiB, KV 63.76 GiB, 1,044,688 tokens
    result = run(llama8b, replace(H100_LOGGED, count=2), gpu_memory_utilization=0.95, max_model_len=8192)
    assert result.tp == 2
    assert result.per_gpu.weights / GiB == pytest.approx(7.51, abs=0.05)
    assert result.per_gpu.overhead / GiB == pytest.approx(2.1, abs=0.1)
    assert result.engine["kv_pool_bytes"] / GiB == pytest.approx(63.76, abs=0.3)
    assert result.capacity.kv_tokens == pytest.approx(1044688, rel=0.01)


def test_sliding_window_groups_and_old_token_formula():
    # gt-0053 gemma-2-9b-it: 21 full + 21 SWA layers, 2 groups of 21, 54.12 GiB -> 168,880 tokens (old formula)
    spec = with_loaded_weights(spec_of("google/gemma-2-9b-it"), 17.22)
    result = run(spec, H100_LOGGED, gpu_memory_utilization=0.95, max_model_len=8192)
    assert result.engine["kv_pool_bytes"] / GiB == pytest.approx(54.12, abs=0.15)
    assert result.capacity.kv_tokens == pytest.approx(168880, rel=0.005)
    layout = vllm_kv.kv_layout(
        spec,
        vllm_settings.resolve_settings(
            spec, H100_LOGGED, EngineChoice("vllm"), Workload(context=8192), _rules("0.19"), "0.19"
        )[0],
    )
    assert (layout.group_size, layout.num_groups) == (21, 2)


def _rules(version):
    """vLLM's typed constants at ``version`` (hfvram/engines/vllm/constants.py)."""
    from hfvram.engines.vllm.profile import PROFILE

    return PROFILE.constants(version)[1]


def test_sliding_window_reserves_window_plus_batched_tokens():
    # docs/engines/vllm.md#vllm-kv-specs: GPT-OSS window 128, max_num_batched_tokens 8192 -> 521 blocks of 16 per SWA layer
    spec = spec_of("openai/gpt-oss-20b")
    assert vllm_kv._blocks_for("sliding_attention", 16, 131072, 128, 8192) == 521
    assert vllm_kv._blocks_for("sliding_attention", 16, 100, 128, 8192) == 8  # capped by the request length
    layout = vllm_kv.kv_layout(
        spec,
        vllm_settings.resolve_settings(
            spec, H100_LOGGED, EngineChoice("vllm"), Workload(context=131072), _rules("0.21"), "0.21"
        )[0],
    )
    assert layout.blocks_per_request(131072) == 8192 + 521


def test_new_token_formula_is_concurrency_times_max_model_len(llama8b):
    # #41069 (~v0.21): GPU KV cache size = int(max_concurrency x max_model_len)
    new = run(llama8b, H100_LOGGED, version="0.21", gpu_memory_utilization=0.95, max_model_len=8192)
    assert new.capacity.kv_tokens == pytest.approx(new.capacity.max_concurrency * 8192, abs=8192 * 0.01)


def test_cuda_graphs_enter_the_budget_from_v021(llama8b):
    old = run(llama8b, H100_LOGGED, version="0.19", gpu_memory_utilization=0.95, max_model_len=8192)
    new = run(llama8b, H100_LOGGED, version="0.21", gpu_memory_utilization=0.95, max_model_len=8192)
    graphs = new.engine["cudagraph_bytes"]
    assert graphs > 0 and not old.engine["cudagraph_in_budget"] and new.engine["cudagraph_in_budget"]
    assert old.engine["kv_pool_bytes"] - new.engine["kv_pool_bytes"] == pytest.approx(graphs, abs=1 << 20)
    eager = run(
        llama8b, H100_LOGGED, version="0.21", gpu_memory_utilization=0.95, max_model_len=8192, enforce_eager="true"
    )
    assert eager.engine["cudagraph_bytes"] == 0


def test_default_utilization_changed_at_v021(llama8b):
    assert run(llama8b, H100_LOGGED, version="0.19", context=8192).engine["gpu_util"] == 0.90
    assert run(llama8b, H100_LOGGED, version="0.21", context=8192).engine["gpu_util"] == 0.92
    # a release between rule sets runs under the newest rule set at or before it (read from the data)
    versions = common.load_engine_data("vllm")["versions"]
    in_force = max((v for v in versions if common.version_key(v) <= (0, 27)), key=common.version_key)
    assert run(llama8b, H100_LOGGED, version="0.27", context=8192).engine["version"] == in_force


def test_default_context_is_the_model_max_and_start_up_fails_when_one_request_does_not_fit(llama8b):
    # gt-0004 shape: one request of max_model_len does not fit -> vLLM refuses to start
    card = Hardware(GPU(id="rtx4090", name="RTX 4090", vendor="nvidia", memory_bytes=24 * GiB))
    result = run(llama8b, card)
    assert result.workload.context == 131072 and result.engine["max_model_len"] == 131072
    assert result.verdict == "does_not_fit"
    message = next(w for w in result.warnings if w.startswith("To serve at least one request"))
    assert "(131072)" in message and "estimated maximum model length is" in message
    shorter = run(llama8b, card, max_model_len=8192)
    assert shorter.verdict in ("fits", "tight")


def test_small_gpu_class_defaults(llama8b):
    # docs/engines/vllm.md#vllm-batch-defaults: GPUs under 70 GiB (and A100s) get 2048 batched tokens / 256 seqs in the OpenAI server
    card = Hardware(GPU(id="a100-80gb", name="NVIDIA A100 80GB", vendor="nvidia", memory_bytes=80 * GiB))
    result = run(llama8b, card, context=8192)
    assert (result.engine["max_num_batched_tokens"], result.engine["max_num_seqs"]) == (2048, 256)
    big = run(llama8b, H100_LOGGED, context=8192)
    assert (big.engine["max_num_batched_tokens"], big.engine["max_num_seqs"]) == (8192, 1024)
    short = run(llama8b, H100_LOGGED, context=4, max_num_seqs=2)
    assert short.engine["max_num_batched_tokens"] == 8  # min(max_num_seqs x max_model_len, default)


def test_kv_cache_memory_bytes_replaces_the_budget(llama8b):
    result = run(llama8b, H100_LOGGED, context=8192, kv_cache_memory_bytes="4G")
    assert result.engine["kv_pool_bytes"] == 4 * GiB
    assert result.capacity.kv_tokens == 4 * GiB // 131072


def test_cpu_offload_moves_weights_off_the_gpu(llama8b):
    base = run(llama8b, H100_LOGGED, context=8192)
    offloaded = run(llama8b, H100_LOGGED, context=8192, cpu_offload_gb=4)
    assert base.per_gpu.weights - offloaded.per_gpu.weights == 4 * GiB


def test_mla_uses_block_64_and_whole_latent():
    spec = spec_of("deepseek-ai/DeepSeek-V2-Lite")
    result = run(with_loaded_weights(spec, 29.3), H100_LOGGED, context=8192)
    assert result.engine["block_size"] == 64
    assert result.per_gpu.kv_cache == spec.num_layers * 576 * 2 * 8192


def test_hybrid_linear_attention_raises_the_attention_block():
    # docs/engines/vllm.md#vllm-block-size: attention page >= one mamba state; Qwen3.5-27B logs block sizes of several hundred tokens
    spec = spec_of("Qwen/Qwen3.5-27B")
    settings = vllm_settings.resolve_settings(
        spec, None, EngineChoice("vllm", tp=2), Workload(context=8192, kv_dtype="fp8"), _rules("0.21"), "0.21"
    )[0]
    layout = vllm_kv.kv_layout(spec, settings)
    assert layout.min_block_size % 16 == 0 and layout.min_block_size > 512
    assert (layout.group_size, layout.num_groups) == (16, 4)  # 16 full + 48 linear -> 1 + 3 groups
    assert layout.blocks_per_request(8192) == -(-8192 // layout.min_block_size) + 3


def test_mxfp4_experts_are_padded_for_the_kernels():
    # docs/engines/vllm.md#vllm-weights (Marlin: hidden to 256, intermediate to 128): 2880 x 2880 -> 3072 x 2944
    spec = spec_of("openai/gpt-oss-20b")
    experts = 12 * GiB
    weights = Weights(
        total_bytes=experts + GiB, params_total=0, bytes_by_component={"experts": experts, "attention": GiB}
    )
    spec = spec.with_weights(weights)
    result = run(spec, H100_LOGGED, context=8192)
    assert result.per_gpu.weights == pytest.approx(experts * 3072 * 2944 / 2880**2 + GiB, rel=0.01)


def test_mxfp4_padding_is_per_tp_shard():
    """vLLM pads intermediate_size_per_partition (the TP shard) for the MXFP4 kernels: at TP 2 gpt-oss's 2880 is
    1440 per rank, padded to 1536 (Marlin, multiple of 128), not half of 2944. gt-0086 (gpt-oss-20b, TP 2, v0.19.0,
    H100): "Model loading took 7.01 GiB" (an even split of the padded whole says 6.83)."""
    spec = spec_of("openai/gpt-oss-20b")
    result = run(spec, replace(H100_LOGGED, count=2), context=8192, tensor_parallel_size=2)
    assert "2880×1440 per TP shard" in result.explain["weights"]
    assert result.per_gpu.weights / GiB == pytest.approx(7.01, rel=0.01)


def test_without_hardware_only_the_footprint(llama8b):
    result = estimate(llama8b, None, EngineChoice("vllm"), Workload(context=8192))
    assert result.verdict is None and result.capacity.kv_tokens is None
    assert result.per_gpu.kv_cache == 8192 * 131072
    assert result.per_gpu.weights > 0 and result.per_gpu.activations > 0


def test_startup_fails_when_the_budget_leaves_no_room_for_the_cuda_context(llama8b):
    card = Hardware(GPU(id="rtx4090", name="RTX 4090", vendor="nvidia", memory_bytes=24 * GiB))
    result = run(llama8b, card, context=4096, gpu_memory_utilization=0.995)
    assert result.verdict == "does_not_fit"
    assert any("outside its budget" in w for w in result.warnings)


def test_decode_speed_is_an_upper_bound_from_bandwidth(llama8b):
    result = run(llama8b, H100_LOGGED, context=8192)
    # every weight but the input embedding table (untied: one row gathered per token), plus 8,192 tokens of KV
    read = llama8b.weights.total_bytes - llama8b.weights.bytes_by_component["embeddings"]
    assert result.decode_tokens_per_second == pytest.approx(3350e9 / (read + 8192 * 131072), rel=1e-6)
    assert "upper bound" in result.explain["decode"]


def test_v0_profiles_a_whole_max_model_len_prompt(llama8b):
    # gt-0003/gt-0004 (V0, RTX 3090 23.58 GiB, util 0.9): chunked prefill off, so the profile run pushes
    # max_model_len tokens; peak torch memory grows 17.06 -> 17.98 GiB from 20000 to 29000 tokens and the
    # 29000-token start-up fails ("max seq len larger than KV capacity", 23,648 tokens fit)
    card = Hardware(GPU(id="rtx3090", name="RTX 3090", vendor="nvidia", memory_bytes=int(23.58 * GiB)))
    short = run(llama8b, card, version="0.6.4", max_model_len=20000, gpu_memory_utilization=0.9)
    long = run(llama8b, card, version="0.6.4", max_model_len=29000, gpu_memory_utilization=0.9)
    assert short.engine["max_num_batched_tokens"] == 20000 and long.engine["max_num_batched_tokens"] == 29000
    assert long.per_gpu.activations > short.per_gpu.activations
    assert short.verdict in ("fits", "tight")
    assert long.verdict == "does_not_fit"
    # "maximum number of tokens that can be stored in KV cache (23648)" (1478 blocks x 16)
    assert long.capacity.kv_tokens == pytest.approx(23648, rel=0.02)


def test_dtype_and_online_fp8_change_what_is_loaded():
    # gt-0066: --dtype float32 loads 29.98 GiB and stores fp32 KV (175,296 tokens);
    # gt-0064: --quantization fp8 loads 8.49 GiB (linear layers in one byte, embeddings and lm_head bf16)
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    bf16 = with_loaded_weights(spec, 14.99)
    fp32 = run(bf16, H100_LOGGED, gpu_memory_utilization=0.95, max_model_len=8192, dtype="float32")
    assert fp32.per_gpu.weights / GiB == pytest.approx(29.98, rel=0.01)
    assert fp32.workload.kv_dtype == "fp32"
    assert fp32.capacity.kv_tokens == pytest.approx(175296, rel=0.02)
    vocab_bytes = 2 * spec.vocab_size * spec.hidden_size * 2
    split = Weights(
        total_bytes=int(14.99 * GiB),
        params_total=0,
        bytes_by_component={
            "embeddings": vocab_bytes // 2,
            "lm_head": vocab_bytes // 2,
            "attention": int(14.99 * GiB) - vocab_bytes,
        },
    )
    fp8 = run(
        spec.with_weights(split), H100_LOGGED, gpu_memory_utilization=0.95, max_model_len=8192, quantization="fp8"
    )
    assert fp8.per_gpu.weights / GiB == pytest.approx(8.49, rel=0.01)


def test_a_model_without_kv_cache_has_no_kv_capacity():
    # sentence-transformers/all-MiniLM-L6-v2: encoder-only, nothing cached per sequence
    spec = with_loaded_weights(spec_of("sentence-transformers/all-MiniLM-L6-v2"), 0.09)
    result = run(spec, H100_LOGGED, context=256)
    assert result.per_gpu.kv_cache == 0
    assert result.capacity.kv_tokens is None and result.capacity.max_concurrency is None
    assert any("no per-sequence KV cache" in w for w in result.warnings)


def test_kv_cache_memory_bytes_larger_than_the_card_does_not_fit(llama8b):
    # vllm.md#vllm-budget: the setting replaces the budget, so nothing stops it asking for more than the GPU has
    result = run(llama8b, H100_LOGGED, context=8192, kv_cache_memory_bytes="70G")
    assert result.verdict == "does_not_fit"
    assert any("kv-cache-memory-bytes asks for" in w for w in result.warnings)


def test_hybrid_moe_overhead_gap_is_said():
    """Article 003 measured 13.3 GB of overhead for Qwen3.6-35B-A3B on 2 × RTX 4090 where the rule fitted on the
    dense hybrid predicts ≈ 8.8 GB (docs/methodology.md §2): the estimate says so for hybrid MoE models only."""
    from hfvram.estimate.hardware import parse_gpu_spec

    hardware = parse_gpu_spec("h100x2")
    moe = run(derived_spec("Qwen/Qwen3.6-35B-A3B"), hardware, version=None, context=32768)
    dense_hybrid = run(derived_spec("Qwen/Qwen3.5-27B"), hardware, version=None, context=32768)
    dense = run(derived_spec("meta-llama/Llama-3.1-8B-Instruct"), hardware, version=None, context=32768)
    assert any("hybrid linear-attention MoE" in w for w in moe.warnings)
    assert not any("hybrid linear-attention MoE" in w for w in dense_hybrid.warnings + dense.warnings)


def test_cache_kinds_are_typed_specs_with_their_own_per_request_need():
    # vllm/v1/kv_cache_interface.py: one spec per layer type, page size and max_memory_usage_bytes per request
    sliding = vllm_kv.SlidingWindowSpec(block_size=16, page_size_bytes=4096, sliding_window=128)
    assert (
        sliding.blocks_needed(131072, 8192) == 521
    )  # cdiv(127 + 8192, 16) + 1 (gpt-oss, docs/engines/vllm.md#vllm-kv-specs)
    assert sliding.max_memory_usage_bytes(131072, 8192) == 521 * 4096
    assert vllm_kv.FullAttentionSpec(16, 4096).blocks_needed(131072, 8192) == 8192
    assert vllm_kv.ChunkedLocalAttentionSpec(16, 4096, attention_chunk_size=8192).blocks_needed(131072, 8192) == 1024
    assert vllm_kv.MambaSpec(16, 4096).blocks_needed(131072, 8192) == 1  # one state per request
    assert isinstance(vllm_kv.MLAAttentionSpec(64, 4096), vllm_kv.FullAttentionSpec)
    # gemma-2: full and sliding layers make two groups, each with its own spec type
    spec = spec_of("google/gemma-2-9b-it")
    settings = vllm_settings.resolve_settings(
        spec, H100_LOGGED, EngineChoice("vllm"), Workload(context=8192), _rules("0.19"), "0.19"
    )[0]
    kinds = {type(cache).__name__ for cache, _ in vllm_kv.kv_layout(spec, settings).groups}
    assert kinds == {"FullAttentionSpec", "SlidingWindowSpec"}


def test_a_smaller_page_takes_a_larger_block_not_a_padded_page():
    """docs/engines/vllm.md#vllm-kv-groups: vLLM's ``unify_kv_cache_spec_page_size`` (vllm/v1/core/kv_cache_utils.py at
    001cabc1) "unif[ies] the page size by increasing the block size of layers with smaller page size". Gemma-4-26B-A4B:
    sliding layers 8 KV heads x 256, full layers 2 x 512 (K and V both cached): half the bytes per token, so the full
    layers get 32-token blocks and one request's blocks cost each layer its own bytes per token (25 sliding + 5 full
    layers fill 6 groups of 5, no padding layers)."""
    spec = spec_of("google/gemma-4-26B-A4B")
    context = 262144
    settings = vllm_settings.resolve_settings(
        spec, None, EngineChoice("vllm"), Workload(context=context), _rules("0.21"), "0.21"
    )[0]
    layout = vllm_kv.kv_layout(spec, settings)
    assert {type(cache).__name__: cache.block_size for cache, _ in layout.groups} == {
        "SlidingWindowSpec": 16,
        "FullAttentionSpec": 32,
    }
    batched = settings.max_num_batched_tokens
    expected = 0.0
    for layer in spec.layers:
        if layer.kind is LayerKind.SLIDING:
            tokens = (-(-min(layer.window - 1 + batched, context) // 16) + 1) * 16
        else:
            tokens = context
        expected += tokens * vllm_kv.layer_token_bytes(layer, 1, settings)
    assert layout.bytes_for(layout.blocks_per_request(context)) == expected


# ---- flags users pass: modelled or named in a warning (docs/engines/vllm.md#vllm-unmodelled-flags) --------------


def test_num_gpu_blocks_override_sets_the_pool_to_that_many_blocks():
    """A published experiment log (vLLM v0.26.0 at 568afb3a, Qwen3-0.6B on an A100 80GB PCIe, block_size 16,
    max_model_len 640, num_gpu_blocks_override 43): "Overriding num_gpu_blocks=13185 with
    num_gpu_blocks_override=43", "GPU KV cache size: 688 tokens", "Maximum concurrency for 640 tokens per
    request: 1.07x" (vLLM ``may_override_num_blocks``: the override replaces the profiled count)."""
    result = run(
        spec_of("Qwen/Qwen3-0.6B"),
        parse_gpu_spec("a100-80g-pcie"),
        max_model_len=640,
        num_gpu_blocks_override=43,
        block_size=16,
        gpu_memory_utilization=0.3,
    )
    assert result.capacity.kv_tokens == 688
    assert result.capacity.max_concurrency == pytest.approx(1.07, abs=0.005)
    assert result.engine["num_gpu_blocks_override"] == 43
    assert "num-gpu-blocks-override 43" in result.explain["budget"]
    assert result.verdict != "does_not_fit"


def test_num_gpu_blocks_override_too_small_for_one_request_does_not_start():
    """The same log's first run: max_model_len 2048 with 43 blocks (688 tokens) stopped at start-up, "the
    estimated maximum model length is 688"."""
    result = run(
        spec_of("Qwen/Qwen3-0.6B"),
        parse_gpu_spec("a100-80g-pcie"),
        max_model_len=2048,
        num_gpu_blocks_override=43,
        block_size=16,
        gpu_memory_utilization=0.3,
    )
    assert result.verdict == "does_not_fit"
    assert any("estimated maximum model length is 688" in w for w in result.warnings)


def test_num_gpu_blocks_override_larger_than_the_gpu_runs_out_of_memory():
    """The override is allocated whatever the budget (the blocks are tensors on the GPU): 10 million blocks of
    Llama-3.1-8B (2 MiB each) do not fit an H100."""
    result = run(spec_of("meta-llama/Llama-3.1-8B-Instruct"), H100_LOGGED, num_gpu_blocks_override=10_000_000)
    assert result.verdict == "does_not_fit"
    assert any("num-gpu-blocks-override 10000000 asks for" in w for w in result.warnings)


def test_data_parallel_replicas_share_the_gpus_and_keep_per_gpu_figures():
    """vLLM ParallelConfig: world_size = tp × pp per replica, world_size_across_dp = world_size × dp. On 4 GPUs,
    -dp 2 leaves TP 2 per replica, and each GPU holds what one TP-2 replica's GPU holds."""
    spec = spec_of("meta-llama/Llama-3.1-8B-Instruct")
    replicas = run(spec, parse_gpu_spec("h100x4"), data_parallel_size=2)
    alone = run(spec, parse_gpu_spec("h100x2"))
    assert replicas.tp == 2 and replicas.engine["data_parallel_size"] == 2
    assert replicas.per_gpu == alone.per_gpu
    assert "2 replicas of TP 2" in replicas.explain["parallel"]
    with pytest.raises(UsageError, match="data parallel 2 needs 8 GPUs, only 4 given"):
        run(spec, parse_gpu_spec("h100x4"), data_parallel_size=2, tensor_parallel_size=4)


@pytest.mark.parametrize(
    "settings,named",
    [
        ({"kv_transfer_config": '{"kv_connector": "OffloadingConnector"}'}, ("--kv-transfer-config", "KV connector")),
        ({"limit_mm_per_prompt": '{"image": 0}'}, ("--limit-mm-per-prompt: a text-only model has no encoder",)),
        (
            {"speculative_config": '{"model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "method": "eagle"}'},
            ("speculative decoding (eagle): the draft yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "its weights, its KV cache"),
        ),
        ({"quantization": "bitsandbytes"}, ("--quantization bitsandbytes", "counts the weights at the checkpoint")),
        ({"quantization": "awq"}, ("--quantization awq: the checkpoint states no quantization",)),
    ],
)
def test_flags_hfvram_does_not_model_are_named_in_a_warning(settings, named):
    result = run(spec_of("meta-llama/Llama-3.1-8B-Instruct"), H100_LOGGED, **settings)
    text = "\n".join(result.warnings)
    for part in named:
        assert part in text, text


def test_ngram_speculation_and_fp8_quantization_are_not_warned_about():
    """n-gram drafting keeps no model (a note says it costs no memory); --quantization fp8 is modelled (one byte per
    linear weight)."""
    result = run(
        spec_of("meta-llama/Llama-3.1-8B-Instruct"),
        H100_LOGGED,
        speculative_config='{"method": "ngram", "num_speculative_tokens": 4}',
        quantization="fp8",
    )
    assert not [w for w in result.warnings if "--quantization" in w]
    assert [w for w in result.warnings if "speculative" in w] == [
        "speculative decoding (ngram, 4 tokens) drafts from the tokens already seen: no GPU memory"
    ]


# ---- weights kept whole on every rank (docs/engines/vllm.md#vllm-parallelism) -----------------------------------


def test_mla_latent_projections_are_kept_whole_on_every_rank():
    """vLLM deepseek_v2.py: ``fused_qkv_a_proj`` (q_a_proj + kv_a_proj_with_mqa) is a
    ``MergedColumnParallelLinear(disable_tp=True)``: DeepSeek-V3 holds 61 × 7168 × (1536 + 512 + 64) FP8 weights of
    it whole on every GPU, about 0.86 GiB, 0.75 GiB more per GPU at TP 8 than an even split."""
    spec = spec_of("deepseek-ai/DeepSeek-V3")
    whole = common.mla_replicated_bytes(spec, 8)
    per_param = spec.weights.bytes_by_component["attention"] / spec.weights.params_by_component["attention"]
    assert whole == pytest.approx(61 * 7168 * 2112 * per_param)
    assert whole * 7 / 8 / GiB == pytest.approx(0.75, abs=0.01)
    result = run(spec, parse_gpu_spec("h200x8"), context=8192)
    assert "+0.75 GiB per GPU" in result.explain["weights"]
    assert common.mla_replicated_bytes(spec, 1) == 0
    # without q_lora_rank only kv_a_proj_with_mqa (ReplicatedLinear): DeepSeek-V2-Lite, 27 × 2048 × 576 BF16
    lite = spec_of("deepseek-ai/DeepSeek-V2-Lite")
    assert common.mla_replicated_bytes(lite, 2) == pytest.approx(27 * 2048 * 576 * 2, rel=0.01)


def test_deepseek_r1_tp8_weights_against_a_published_load():
    """HabanaAI/vllm-fork#809 (vLLM fork, DeepSeek-R1 FP8 at TP 8): "Pre-loading model weights on hpu:0 took
    79.41 GiB of device memory". The MTP layer is not loaded (``load_weights`` skips
    ``get_spec_layer_idx_from_weight_name``) and the MLA latent projections are whole on every rank: 79.29 GiB
    (an even split of every tensor would say 80.3)."""
    result = run(spec_of("deepseek-ai/DeepSeek-R1"), parse_gpu_spec("h200x8"), context=8192)
    assert result.per_gpu.weights / GiB == pytest.approx(79.41, rel=0.01)
    assert "multi-token-prediction layer(s)" in result.explain["weights"]
    mtp = run(
        spec_of("deepseek-ai/DeepSeek-R1"),
        parse_gpu_spec("h200x8"),
        context=8192,
        speculative_config='{"method": "deepseek_mtp", "num_speculative_tokens": 1}',
    )
    assert mtp.per_gpu.weights > result.per_gpu.weights + 1.5 * GiB  # 14.36 GiB of MTP layer over 8 GPUs
