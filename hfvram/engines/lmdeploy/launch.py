"""LMDeploy's launch line: ``lmdeploy serve api_server MODEL --backend B --session-len N --cache-max-entry-count F
--max-batch-size S --tp T --quant-policy Q`` (docs/engines/launch.md#launch-lmdeploy)."""

from __future__ import annotations

from hfvram.estimate.launch import Launch, ModelRef, carried, join, number
from hfvram.estimate.types import EngineChoice, Estimate

#: the KV cache type -> ``--quant-policy`` (lmdeploy/messages.py QuantPolicy)
QUANT_POLICY = {"int4": "4", "int8": "8", "fp8": "16", "fp8_e4m3": "16", "fp8_e5m2": "17"}

ENGINE = "lmdeploy"


def launch(est: Estimate, choice: EngineChoice, ref: ModelRef) -> Launch:
    engine = est.engine
    words = ["lmdeploy", "serve", "api_server", ref.name]
    if ref.hub and ref.revision:
        words += ["--revision", ref.revision]
    words += ["--backend", str(engine.get("backend"))]
    words += ["--session-len", number(engine.get("session_len"))]
    words += ["--cache-max-entry-count", number(engine.get("cache_max_entry_count"))]
    words += ["--max-batch-size", number(engine.get("max_batch_size"))]
    tp = engine.get("tp")
    if isinstance(tp, int) and tp > 1:
        words += ["--tp", str(tp)]
    policy = QUANT_POLICY.get(str(engine.get("kv_cache_dtype") or ""))
    if policy:
        words += ["--quant-policy", policy]
    written = ["backend", "session-len", "cache-max-entry-count", "max-batch-size", "tp", "quant-policy", "revision"]
    words += carried(choice, ENGINE, written)
    return Launch("lmdeploy", join(words))
