"""The staged engine contract (hfvram/engines/contract.py): typed constants that fail when they load, and the one run.

Every engine on the contract builds a frozen Constants dataclass from its rules.toml for each rule version; a key the
dataclass does not declare, a declared key the table lacks, or a value of the wrong type fails at load with the file
named. The figures of the engines moved onto the contract are unchanged (benchmarks/estimate_grid.py, zero diff
over 6,930 checks, measured when they moved); here the load checks themselves are held.
"""

from __future__ import annotations

import copy
from dataclasses import fields

import pytest
from spec_support import derived_spec

from hfvram.engines import get_profile, load_engine_data, registry
from hfvram.engines.contract import Constants, StagedProfile
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload

STAGED = [name for name in registry() if isinstance(get_profile(name), StagedProfile)]


def test_every_registered_engine_implements_the_contract():
    """All nine moved onto it (TensorRT-LLM first, the issue's order; then LMDeploy, ExLlamaV2, MLX, transformers,
    SGLang, vLLM, llama.cpp and Ollama): a new engine must implement the five steps, not its own orchestration."""
    assert list(registry()) == STAGED
    assert len(STAGED) == 9


@pytest.mark.parametrize("name", STAGED)
def test_every_rule_version_loads_into_the_engines_constants(name):
    profile = get_profile(name)
    assert isinstance(profile, StagedProfile)
    declared = {field.name for field in fields(profile.constants_type)}
    for version in profile.rule_versions:
        resolved, constants = profile.constants(version)
        assert isinstance(constants, profile.constants_type)
        # the dataclass declares exactly the keys the merged table holds: nothing in the TOML is silently ignored
        assert declared == set(profile.rules(resolved)[1]), (name, version)
        assert constants.measured, name


def _profile_with(name: str, edit) -> StagedProfile:
    data = copy.deepcopy(dict(load_engine_data(name)))
    edit(data)
    profile = type(get_profile(name))(data)
    assert isinstance(profile, StagedProfile)
    return profile


@pytest.mark.parametrize("name", STAGED)
def test_an_unknown_key_fails_at_load_naming_the_file(name):
    profile = _profile_with(name, lambda data: data["defaults"].update(renamed_constant=1))
    with pytest.raises(ValueError, match=r"hfvram/engines/.*rules\.toml.*does not declare \['renamed_constant'\]"):
        profile.constants(None)


@pytest.mark.parametrize("name", STAGED)
def test_a_missing_key_fails_at_load(name):
    def drop_first(data):
        first = next(key for key in data["defaults"] if key != "measured")
        del data["defaults"][first]
        for table in data.get("versions", {}).values():
            table.pop(first, None)

    profile = _profile_with(name, drop_first)
    with pytest.raises(ValueError, match="declared keys missing"):
        profile.constants(None)


def test_a_value_of_the_wrong_type_fails_at_load():
    profile = _profile_with("tensorrt-llm", lambda data: data["defaults"].update(tokens_per_block="32"))
    with pytest.raises(ValueError, match=r"tokens_per_block = '32' is not of type"):
        profile.constants(None)
    # a bool is not a whole number, though Python's bool subclasses int
    profile = _profile_with("tensorrt-llm", lambda data: data["defaults"].update(tokens_per_block=True))
    with pytest.raises(ValueError, match="tokens_per_block = True"):
        profile.constants(None)


def test_a_float_constant_takes_a_whole_number():
    """TOML writes 1 and 1.0 differently; a fraction given as 1 is still a fraction."""
    profile = _profile_with("tensorrt-llm", lambda data: data["defaults"].update(free_gpu_memory_fraction=1))
    assert profile.constants(None)[1].free_gpu_memory_fraction == 1


def test_a_changed_constant_moves_the_figure_through_the_one_run():
    """TensorRT-LLM's tokens_per_block rounds the pool's tokens: the TOML value, read through the typed constants,
    reaches the figure (32 by default, docs/engines/trtllm.md#trtllm-kv-fraction)."""
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct", use_transformers=False)
    hardware = parse_gpu_spec("h100")
    workload = Workload(context=8192)
    default = get_profile("tensorrt-llm").estimate(spec, hardware, EngineChoice("tensorrt-llm"), workload)
    edited = _profile_with("tensorrt-llm", lambda data: data["defaults"].update(tokens_per_block=1000))
    changed = edited.estimate(spec, hardware, EngineChoice("tensorrt-llm"), workload)
    assert default.capacity.kv_tokens % 32 == 0 and default.engine["tokens_per_block"] == 32
    assert changed.capacity.kv_tokens % 1000 == 0 and changed.engine["tokens_per_block"] == 1000
    assert changed.capacity.kv_tokens != default.capacity.kv_tokens


def test_constants_of_a_profile_built_from_its_own_table_are_its_own():
    """A profile handed a test's table keeps its own constants: the shared profile's are not replaced."""
    edited = _profile_with("tensorrt-llm", lambda data: data["defaults"].update(max_batch_size=7))
    assert edited.constants(None)[1].max_batch_size == 7
    shared = get_profile("tensorrt-llm")
    assert isinstance(shared, StagedProfile)
    assert shared.constants(None)[1].max_batch_size == 2048


def test_constants_base_declares_what_every_engine_has():
    assert [field.name for field in fields(Constants)] == ["measured"]


def test_the_runs_hooks_reach_the_estimate():
    """The hooks of the one run (contract.py): vLLM's ``finished`` gives a set-up it refuses at start-up as the
    refusal (MTP on a model with no MTP layers, docs/engines/vllm.md#vllm-features), and SGLang's / vLLM's
    ``measurements`` add no explain line yet, where the other engines' add theirs."""
    spec = derived_spec("meta-llama/Llama-3.1-8B-Instruct", use_transformers=False)
    hardware = parse_gpu_spec("h100")
    mtp = EngineChoice("vllm", settings={"speculative-config": '{"method": "mtp", "num_speculative_tokens": 1}'})
    refused = get_profile("vllm").estimate(spec, hardware, mtp, Workload(context=8192))
    assert refused.refusal is not None and refused.refusal.startswith("vLLM refuses speculative decoding (mtp")
    plain = get_profile("vllm").estimate(spec, hardware, EngineChoice("vllm"), Workload(context=8192))
    assert plain.refusal is None
    for name in ("vllm", "sglang", "tensorrt-llm"):
        explained = get_profile(name).estimate(spec, hardware, EngineChoice(name), Workload(context=8192))
        assert ("measurements" in explained.explain) is (name == "tensorrt-llm"), name
