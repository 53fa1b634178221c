"""vLLM's launch line: ``vllm serve MODEL --max-model-len N --gpu-memory-utilization F --max-num-seqs S -tp T``
(docs/engines/launch.md#launch-vllm)."""

from __future__ import annotations

from hfvram.estimate.launch import Launch, ModelRef, carried, env_settings, join, number
from hfvram.estimate.types import EngineChoice, Estimate

ENGINE = "vllm"


def kv_cache_flag(est: Estimate) -> str | None:
    """``--kv-cache-dtype`` when the cache is not the model's own dtype (vLLM's ``auto``): the fp8 kinds."""
    kind = str(est.engine.get("kv_cache_dtype") or "")
    return kind if kind.startswith("fp8") else None


def launch(est: Estimate, choice: EngineChoice, ref: ModelRef) -> Launch:
    engine = est.engine
    words = ["vllm", "serve", ref.name]
    if ref.hub and ref.revision:
        words += ["--revision", ref.revision]
    words += ["--max-model-len", number(engine.get("max_model_len"))]
    words += ["--gpu-memory-utilization", number(engine.get("gpu_util"))]
    if engine.get("max_num_seqs") is not None:
        words += ["--max-num-seqs", number(engine["max_num_seqs"])]
    written = ["max-model-len", "gpu-memory-utilization", "max-num-seqs", "revision"]
    for flag, key in (
        ("tensor-parallel-size", "tensor_parallel_size"),
        ("pipeline-parallel-size", "pipeline_parallel_size"),
        ("data-parallel-size", "data_parallel_size"),
    ):
        value = engine.get(key)
        written.append(flag)
        if isinstance(value, int) and value > 1:
            words += [f"--{flag}", str(value)]
    kv = kv_cache_flag(est)
    written.append("kv-cache-dtype")
    if kv:
        words += ["--kv-cache-dtype", kv]
    words += carried(choice, ENGINE, written)
    env = env_settings(choice)
    return Launch("vllm", join(words, env), env=env)
