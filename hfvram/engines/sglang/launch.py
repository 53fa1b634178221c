"""SGLang's launch line: ``python -m sglang.launch_server --model-path MODEL --context-length N
--mem-fraction-static F --tp-size T`` (docs/engines/launch.md#launch-sglang)."""

from __future__ import annotations

from hfvram.estimate.launch import Launch, ModelRef, carried, join, number
from hfvram.estimate.types import EngineChoice, Estimate

ENGINE = "sglang"


def launch(est: Estimate, choice: EngineChoice, ref: ModelRef) -> Launch:
    engine = est.engine
    words = ["python", "-m", "sglang.launch_server", "--model-path", ref.name]
    if ref.hub and ref.revision:
        words += ["--revision", ref.revision]
    words += ["--context-length", number(engine.get("context_length"))]
    words += ["--mem-fraction-static", number(engine.get("mem_fraction_static"))]
    written = ["context-length", "mem-fraction-static", "revision", "tp-size", "pp-size", "dp-size", "kv-cache-dtype"]
    for flag, key in (("tp-size", "tp_size"), ("pp-size", "pp_size"), ("dp-size", "dp_size")):
        value = engine.get(key)
        if isinstance(value, int) and value > 1:
            words += [f"--{flag}", str(value)]
    kv = str(engine.get("kv_cache_dtype") or "")
    if kv.startswith("fp8"):
        words += ["--kv-cache-dtype", kv]
    words += carried(choice, ENGINE, written)
    return Launch("sglang", join(words))
