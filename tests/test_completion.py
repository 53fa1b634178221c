"""Shell completion of --gpu, --engine and --kv-dtype values (hfvram/completion.py), through the real console
entry point and click's bash protocol (what `eval "$(_HFVRAM_COMPLETE=bash_source hfvram)"` installs)."""

from __future__ import annotations

import pytest
from cli_support import run_hfvram


def complete(*words: str) -> list[str]:
    line = ["hfvram", *words]
    done = run_hfvram(
        env={"_HFVRAM_COMPLETE": "bash_complete", "COMP_WORDS": " ".join(line), "COMP_CWORD": str(len(line) - 1)}
    )
    assert done.returncode == 0, done.stderr
    return [item.split(",", 1)[1] for item in done.stdout.splitlines() if item]


def test_bash_source_registers_the_completion():
    done = run_hfvram(env={"_HFVRAM_COMPLETE": "bash_source"})
    assert done.returncode == 0
    assert "_HFVRAM_COMPLETE=bash_complete" in done.stdout
    assert "complete " in done.stdout and "hfvram" in done.stdout


def test_gpu_ids_aliases_and_counts():
    found = complete("check", "org/model", "--gpu", "rtx40")
    assert "rtx4090" in found and "rtx4080" in found
    assert all(name.startswith("rtx40") for name in found)
    assert complete("check", "org/model", "--gpu", "h100x") == ["h100x2", "h100x4", "h100x8"]
    assert "rtx4090" in complete("fit", "--gpu", "rtx409")
    assert "rtx4090" in complete("calibrate", "log.txt", "--gpu", "rtx409")


def test_gpu_lists_and_mixed_sets_complete_their_last_item():
    found = complete("check", "org/model", "--gpu", "rtx4090,rtx309")
    assert "rtx4090,rtx3090" in found and all(name.startswith("rtx4090,rtx309") for name in found)
    assert complete("check", "org/model", "--gpu", "rtx4090+rtx3060x") == [
        "rtx4090+rtx3060x2",
        "rtx4090+rtx3060x4",
        "rtx4090+rtx3060x8",
    ]


def test_engine_names_then_rule_versions():
    assert complete("check", "x", "--engine", "") == sorted(complete("check", "x", "--engine", ""))
    assert {"vllm", "sglang", "llama.cpp", "ollama"} <= set(complete("check", "x", "--engine", ""))
    assert complete("scan", "-", "--engine", "sg") == ["sglang"]
    versions = complete("check", "x", "--engine", "vllm@")
    assert versions and all(item.startswith("vllm@") for item in versions)
    assert "vllm@0.21" in versions
    assert complete("check", "x", "--engine", "nope@") == []


@pytest.mark.parametrize("command", [["check", "x"], ["inspect", "x"]])
def test_kv_dtypes(command):
    found = complete(*command, "--kv-dtype", "q")
    assert "q8_0" in found and "q4_0" in found
    assert "auto" in complete(*command, "--kv-dtype", "")


def test_quant_names_and_auto():
    words = complete("check", "Qwen/Qwen3-8B", "--quant", "Q4_K")
    assert "Q4_K_M" in words and "Q4_K_S" in words and "auto" not in words
    assert "auto" in complete("fit", "Qwen/Qwen3-8B", "--quant", "au")
    assert "gptq-int4-g128" in complete("check", "Qwen/Qwen3-8B", "--quant", "gptq")


def test_host_memory_names():
    words = complete("check", "Qwen/Qwen3-8B", "--host-memory", "ddr5")
    assert words and all(word.startswith("ddr5") for word in words) and "ddr5-5600x2" in words


def test_family_completes_the_catalogues_model_types():
    """issue 23: completion for every option with values; --family takes the model types the catalogue holds."""
    found = complete("models", "--gpu", "rtx4090", "--family", "qwen")
    assert "qwen3" in found and "qwen3_moe" in found
    assert all(name.startswith("qwen") for name in found)
    assert "llama" in complete("models", "--gpu", "rtx4090", "--family", "ll")
