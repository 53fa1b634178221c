"""An engine on hardware it does not run on is the verdict: does not fit, exit 1, ``verdict_reason`` "engine rule:
<engine> does not run on <device>: …", from the ``[[refused_on]]`` rows of each hfvram/engines/<engine>/engine.toml
(one row per vendor or device family, each with its source)."""

from __future__ import annotations

import json
import re

import pytest
from cli_support import run_hfvram

from hfvram import check
from hfvram.datafiles import data_table
from hfvram.engines import registry

ROWS = [(name, row) for name, entry in registry().items() for row in entry.refused_on]
GPUS = data_table("gpus.toml")["device"]


def test_every_row_names_a_known_vendor_and_its_source():
    vendors = {gpu["vendor"] for gpu in GPUS}
    assert {name for name, _ in ROWS} >= {"tensorrt-llm", "vllm", "sglang", "lmdeploy", "llama.cpp", "mlx"}
    for name, row in ROWS:
        assert row.vendor in vendors, (name, row)
        assert row.source.startswith("https://"), (name, row)
        assert row.reason and "\n" not in row.reason
        if row.architecture is not None:  # the pattern picks out some catalogue devices of that vendor, not all
            picked = [g for g in GPUS if g["vendor"] == row.vendor and re.search(row.architecture, g["architecture"])]
            assert picked and len(picked) < sum(g["vendor"] == row.vendor for g in GPUS), (name, row)


@pytest.mark.parametrize(
    "engine,gpu",
    [
        ("lmdeploy", "arc-a770"),
        ("lmdeploy", "mi300x"),
        ("lmdeploy", "gaudi2"),
        ("llama.cpp", "gaudi2"),
        ("ollama", "gaudi3"),
        ("mlx", "ryzen-ai-max-395-128"),
        ("mlx", "arc-b580"),
        ("tensorrt-llm", "mi300x"),
    ],
)
def test_an_engine_off_its_hardware_is_refused(engine, gpu):
    result = check("Qwen/Qwen3-8B", gpu=gpu, engine=engine, context="8k", offline=True)
    assert result.verdict == "does_not_fit"
    assert result.verdict_reason.startswith(f"engine rule: {engine} does not run on ")


@pytest.mark.parametrize(
    "engine,gpu,settings",
    [
        ("llama.cpp", "arc-a770", ()),  # SYCL
        ("llama.cpp", "ryzen-ai-max-395-128", ()),  # HIP / Vulkan
        ("lmdeploy", "mi300x", ("backend=pytorch",)),  # the row is TurboMind's
        ("vllm", "gaudi2", ()),
    ],
)
def test_an_engine_on_its_hardware_is_sized_by_memory(engine, gpu, settings):
    result = check("Qwen/Qwen3-8B", gpu=gpu, engine=engine, context="8k", settings=settings, offline=True)
    assert not (result.verdict_reason or "").startswith(f"engine rule: {engine} does not run on")


def test_the_cli_exits_1_with_the_engines_reason():
    result = run_hfvram("check", "Qwen/Qwen3-8B", "--gpu", "gaudi2", "--engine", "llama.cpp", "--offline", "--json")
    assert result.returncode == 1
    assert "include none for Intel Gaudi" in json.loads(result.stdout)["verdict_reason"]
