"""TensorRT-LLM's launch line: ``trtllm-serve MODEL --backend pytorch --max_seq_len N --max_batch_size B
--max_num_tokens T --kv_cache_free_gpu_memory_fraction F --tp_size T`` (click options, underscores;
docs/engines/launch.md#launch-trtllm)."""

from __future__ import annotations

from hfvram.estimate.launch import Launch, ModelRef, carried, join, number
from hfvram.estimate.types import EngineChoice, Estimate

OPTIONS_FILE = "extra_llm_api_options.yaml"

ENGINE = "tensorrt-llm"


def launch(est: Estimate, choice: EngineChoice, ref: ModelRef) -> Launch:
    engine = est.engine
    words = ["trtllm-serve", ref.name]
    if engine.get("backend"):
        words += ["--backend", str(engine["backend"])]
    words += ["--max_seq_len", number(engine.get("max_seq_len"))]
    words += ["--max_batch_size", number(engine.get("max_batch_size"))]
    words += ["--max_num_tokens", number(engine.get("max_num_tokens"))]
    words += ["--kv_cache_free_gpu_memory_fraction", number(engine.get("free_gpu_memory_fraction"))]
    written = [
        "backend",
        "max-seq-len",
        "max-batch-size",
        "max-num-tokens",
        "kv-cache-free-gpu-memory-fraction",
        "free-gpu-memory-fraction",
        "tp-size",
        "pp-size",
        "kv-cache-dtype",
    ]
    for flag, key in (("tp_size", "tp_size"), ("pp_size", "pp_size")):
        value = engine.get(key)
        if isinstance(value, int) and value > 1:
            words += [f"--{flag}", str(value)]
    files: dict[str, tuple[str, ...]] = {}
    notes: list[str] = []
    kv = str(engine.get("kv_cache_dtype") or "")
    if kv.startswith("fp8"):
        # the KV cache type is an LLM API option, not a trtllm-serve flag: it goes in the options file
        files[OPTIONS_FILE] = ("kv_cache_config:", "  dtype: fp8")
        words += ["--extra_llm_api_options", OPTIONS_FILE]
        notes.append(f"the KV cache type is in {OPTIONS_FILE}: pasting the line back, add --kv-dtype {kv}")
    words += carried(choice, ENGINE, written, underscores=True)
    return Launch("tensorrt-llm", join(words), files=files, notes=tuple(notes))
