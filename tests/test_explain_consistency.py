"""Every figure and its --explain line come from the same rule value.

Each test builds an engine profile from a copy of its packaged TOML with one constant changed (no hfvram
function is replaced) and checks that the figure moves and that the explanation now states the new value.
The fixture configs are real Hub config.json files (fixtures/hub).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import pytest
from spec_support import derived_spec

from hfvram.engines.vllm import profile as vllm
from hfvram.estimate import common
from hfvram.estimate.types import GPU, EngineChoice, Hardware, Workload

GiB = 1 << 30
H100 = Hardware(GPU(id="h100", name="NVIDIA H100 80GB HBM3", vendor="nvidia", memory_bytes=int(79.19 * GiB)))


def with_constant(engine: str, key: str, value: Any) -> dict[str, Any]:
    """The engine's packaged TOML table with ``key`` set to ``value`` in its defaults and in every release
    table that sets it (so the value holds at every rule version)."""
    data = copy.deepcopy(dict(common.load_engine_data(engine)))
    data["defaults"][key] = value
    for table in data.get("versions", {}).values():
        if key in table:
            table[key] = value
    return data


def gib_figures(text: str) -> list[float]:
    return [float(number) for number in re.findall(r"(\d+\.\d+) GiB", text)]


def vllm_estimate(data: Mapping[str, Any] | None, version: str = "0.19", **settings: str):
    profile = vllm.VllmProfile(data)
    spec = derived_spec("Qwen/Qwen3-14B")
    return profile.estimate(spec, H100, EngineChoice("vllm", version, settings), Workload(context=8192))


def test_packaged_vllm_015_explains_the_sampler_constant_it_uses():
    # vllm@0.15 profiles 38.9 B per logit (vllm.toml [versions."0.15"]); the text once said 15.3
    text = vllm_estimate(None, "0.15").explain["activations"]
    assert "sampler 38.9 B" in text
    assert "sampler 15.3 B" in vllm_estimate(None, "0.19").explain["activations"]


@pytest.mark.parametrize("version", ["0.15", "0.19", "0.21"])
def test_vllm_sampler_constant_moves_figure_and_text(version):
    base = vllm_estimate(None, version)
    changed = vllm_estimate(with_constant("vllm", "sampler_bytes_per_logit", 99.5), version)
    assert "sampler 99.5 B" in changed.explain["activations"]
    assert changed.per_gpu.activations > base.per_gpu.activations
    # the GiB the text gives for the sampler is the term's own figure
    sampler_gib = gib_figures(changed.explain["activations"])[0]
    assert sampler_gib == pytest.approx(changed.per_gpu.activations / GiB, abs=0.01)


def test_vllm_cuda_context_constant_moves_figure_and_text():
    base = vllm_estimate(None)
    changed = vllm_estimate(with_constant("vllm", "cuda_context_gib", 1.75))
    assert "CUDA context + NCCL 1.75 GiB" in changed.explain["overhead"]
    assert "CUDA context + NCCL 0.50 GiB" in base.explain["overhead"]
    assert changed.engine["outside_budget_bytes"] - base.engine["outside_budget_bytes"] == int(1.25 * GiB)


def test_vllm_non_torch_constant_moves_figure_and_text():
    # the one-GPU V1 row of vllm.toml's [[non_torch]] table (docs/engines/vllm.md#vllm-non-torch) set to 0.8 GiB
    data = copy.deepcopy(dict(common.load_engine_data("vllm")))
    row = next(r for r in data["non_torch"] if (r["engine"], r.get("parallel"), r.get("since")) == ("v1", "tp1", None))
    row["gib"], row["source"] = 0.8, "a changed row"
    changed = vllm_estimate(data, enforce_eager="true")
    assert changed.per_gpu.overhead == int(0.8 * GiB)
    assert "non-torch memory 0.80 GiB" in changed.explain["overhead"]
    assert "a changed row" in changed.explain["overhead"]


def test_vllm_release_of_a_rule_change_is_read_from_the_toml():
    data = copy.deepcopy(dict(common.load_engine_data("vllm")))
    del data["versions"]["0.21"]["cudagraph_in_budget"]
    data["versions"]["0.19"]["cudagraph_in_budget"] = True
    result = vllm_estimate(data, "0.19")
    assert result.engine["cudagraph_in_budget"] is True
    assert "(deducted from the budget since v0.19)" in result.explain["overhead"]
    graphs = result.engine["cudagraph_bytes"] / GiB
    assert f"CUDA graphs {graphs:.2f} GiB" in result.explain["overhead"]


def test_vllm_utilization_constant_moves_budget_and_text():
    changed = vllm_estimate(with_constant("vllm", "gpu_memory_utilization", 0.5))
    assert "gpu_memory_utilization 0.5)" in changed.explain["budget"]
    assert changed.per_gpu.usable == pytest.approx(0.5 * H100.gpu.memory_bytes, abs=1)


# ---- SGLang ------------------------------------------------------------------------------------------------


def sglang_estimate(data: Mapping[str, Any] | None, hardware: Hardware | None = H100):
    from hfvram.engines.sglang import profile as sglang

    spec = derived_spec("Qwen/Qwen3-14B")
    return sglang.SglangProfile(data).estimate(spec, hardware, EngineChoice("sglang"), Workload(context=8192))


def test_sglang_req_to_token_constant_moves_figure_and_text():
    base = sglang_estimate(None)
    changed = sglang_estimate(with_constant("sglang", "req_to_token_bytes", 8))
    assert changed.engine["req_to_token_bytes"] == 2 * base.engine["req_to_token_bytes"]
    assert "× 8 B = " in changed.explain["activations"] and "× 4 B = " in base.explain["activations"]
    table_gib = changed.engine["req_to_token_bytes"] / GiB
    assert f"= {table_gib:.2f} GiB" in changed.explain["activations"]


def test_sglang_cuda_context_constant_moves_figure_and_text():
    changed = sglang_estimate(with_constant("sglang", "cuda_context_gib", 1.25))
    assert changed.per_gpu.overhead == int(1.25 * GiB)
    assert changed.explain["overhead"].startswith("CUDA context 1.25 GiB")


def test_sglang_unknown_gpu_fraction_is_the_toml_value():
    changed = sglang_estimate(with_constant("sglang", "fraction_unknown_gpu", 0.77), hardware=None)
    assert changed.engine["mem_fraction_static"] == 0.77
    assert "SGLang's fallback 0.77" in changed.engine["mem_fraction_static_source"]


# ---- LMDeploy ----------------------------------------------------------------------------------------------


def test_lmdeploy_runtime_constant_moves_figure_and_text():
    from hfvram.engines.lmdeploy import profile as lmdeploy

    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    choice = EngineChoice("lmdeploy", settings={"backend": "pytorch"})

    def run(data):
        return lmdeploy.LmdeployProfile(data).estimate(spec, H100, choice, Workload(context=8192))

    base = run(None)
    changed = run(with_constant("lmdeploy", "runtime_bytes_per_logit", 4))
    assert changed.engine["runtime_bytes"] == 2 * base.engine["runtime_bytes"]
    assert "× 4 B = " in changed.explain["runtime"] and "× 2 B = " in base.explain["runtime"]
    assert f"{changed.engine['runtime_bytes'] / GiB:.2f} GiB" in changed.explain["runtime"]


# ---- llama.cpp -----------------------------------------------------------------------------------------------


def test_llamacpp_overhead_constant_moves_figure_and_text():
    from hfvram.engines.llamacpp import profile as llamacpp

    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    choice = EngineChoice("llama.cpp")
    workload = Workload(context=8192)

    def run(overhead_mib):
        data = with_constant("llama.cpp", "cuda_overhead_mib", overhead_mib)
        return llamacpp.LlamaCppProfile(data).estimate(spec, H100, choice, workload)

    base, changed = run(512), run(900)
    assert changed.per_gpu.overhead - base.per_gpu.overhead == (900 - 512) << 20
    assert "backend memory pool 900 MiB" in changed.explain["overhead"]
    assert "backend memory pool 512 MiB" in base.explain["overhead"]


def test_llamacpp_cell_padding_constant_moves_figure_and_text():
    from hfvram.engines.llamacpp import profile as llamacpp

    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    choice = EngineChoice("llama.cpp", settings={"ctx-size": "5000", "binary": "llama-cli"})
    profile = llamacpp.LlamaCppProfile(with_constant("llama.cpp", "n_ctx_pad", 1024))
    result = profile.estimate(spec, H100, choice, Workload())
    assert result.engine["ctx-size"] == 5120
    assert "(ctx-size 5120, padded to 1024)" in result.explain["kv_cache"]


# ---- every profile's fixed overhead ----------------------------------------------------------------------------

M3_MAX = Hardware(GPU(id="m3-max", name="Apple M3 Max", vendor="apple", memory_bytes=128 * GiB, unified_memory=True))


@pytest.mark.parametrize(
    ("module", "profile", "key", "value", "text", "hardware"),
    [
        ("sglang", "SglangProfile", "cuda_context_gib", 0.75, "CUDA context 0.75 GiB", H100),
        ("lmdeploy", "LmdeployProfile", "cuda_context_gib", 0.75, "CUDA context 0.75 GiB", H100),
        ("trtllm", "TrtllmProfile", "cuda_context_gib", 0.75, "CUDA context 0.75 GiB", H100),
        ("transformers", "TransformersProfile", "cuda_context_gib", 0.75, "CUDA context 0.75 GiB", H100),
        ("exllamav2", "ExLlamaV2Profile", "cuda_context_mib", 700, "CUDA context 700 MiB", H100),
        ("mlx", "MlxProfile", "metal_overhead_mib", 700, "Metal context 700 MiB", M3_MAX),
    ],
)
def test_overhead_constant_moves_figure_and_text(module, profile, key, value, text, hardware):
    import importlib

    engine_module = importlib.import_module(f"hfvram.engines.{module}.profile")
    engine = engine_module.ENGINE
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct")
    choice = EngineChoice(engine)

    def run(data):
        return getattr(engine_module, profile)(data).estimate(spec, hardware, choice, Workload(context=8192))

    base, changed = run(None), run(with_constant(engine, key, value))
    unit = GiB if key.endswith("_gib") else 1 << 20
    packaged = common.load_engine_data(engine)["defaults"][key]
    assert changed.per_gpu.overhead - base.per_gpu.overhead == pytest.approx((value - packaged) * unit, abs=1)
    assert text in changed.explain["overhead"]
