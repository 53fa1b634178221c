"""Several models on one GPU set (``check A B --gpu h100``, docs/engines/launch.md#launch-pack), through the real
CLI on the offline catalogue. Each model's figures are check's own (tests/test_check*.py hold their sources); the
figures asserted here are the pack's arithmetic over them: each vLLM instance's fraction is the smallest 0.01 step
whose budget ceil(total × u) holds its terms at 90 %, and the fractions with what each process holds outside them
stay within the device (docs/engines/vllm.md#vllm-colocated)."""

from __future__ import annotations

import json
import math

from cli_support import run_hfvram, validate

PAIR = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-0.6B")


def _json(*args: str) -> tuple[int, dict]:
    result = run_hfvram("check", *args, "--offline", "--json")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def _single(source: str, *args: str) -> dict:
    result = run_hfvram("check", source, "--gpu", "h100", "--offline", "--json", *args)
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def test_two_models_pack_on_one_h100_with_a_verdict_and_two_launch_lines():
    result = run_hfvram("check", *PAIR, "--gpu", "h100", "--offline")
    assert result.returncode == 0, result.stderr
    assert "2 models on one h100" in result.stdout and "Set: fits" in result.stdout
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("vllm serve ")]
    assert [line.split()[2] for line in lines] == list(PAIR)
    assert all("--gpu-memory-utilization" in line for line in lines)


def test_the_vllm_fractions_are_what_each_estimate_needs_and_sum_within_the_device():
    code, pack = _json(*PAIR, "--gpu", "h100")
    assert code == 0
    validate(pack, "pack")
    assert pack["schema"] == "hfvram.pack/1" and pack["verdict"] == "fits" and pack["set"]["margin"] == 0.1
    fractions = []
    for row, source in zip(pack["models"], PAIR, strict=True):
        alone = _single(source)  # the model's own check at vLLM's default fraction: the same four terms
        memory, need = alone["per_gpu"]["memory"], alone["per_gpu"]["total"]
        util = row["gpu_memory_utilization"]
        # the smallest step of 0.01 whose budget holds the terms at 90 %, and not one step less
        assert need <= 0.9 * math.ceil(memory * util) and need > 0.9 * memory * (util - 0.01)
        assert row["need_bytes"] == need and row["verdict"] == "fits"
        assert f"--gpu-memory-utilization {util}" in row["launch"]["command"]
        assert row["outside_bytes"] == alone["engine"]["outside_budget_bytes"] > 0
        fractions.append(util)
    whole = pack["set"]
    assert whole["vllm_utilization_sum"] == round(sum(fractions), 2)
    assert whole["vllm_utilization_sum"] <= whole["vllm_utilization_limit"] < 1
    assert whole["takes_bytes"] == sum(row["takes_bytes"] for row in pack["models"]) <= pack["memory_bytes"]


def test_a_launch_line_of_the_pack_round_trips_to_the_same_instance():
    _, pack = _json(*PAIR, "--gpu", "h100")
    row = pack["models"][0]
    again = _single(PAIR[0], "--engine-args", row["launch"]["command"])
    assert again["engine"]["gpu_util"] == row["gpu_memory_utilization"]
    assert again["per_gpu"]["total"] == row["need_bytes"] and again["verdict"] == row["verdict"]


def test_two_70b_bf16_do_not_fit_on_one_h100_and_exit_1():
    result = run_hfvram(
        "check", "meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "h100", "--offline"
    )
    assert result.returncode == 1, result.stderr
    assert "Set: does not fit" in result.stdout
    code, pack = _json("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "h100")
    validate(pack, "pack")
    assert code == 1 and pack["verdict"] == "does_not_fit"
    assert all(row["gpu_memory_utilization"] > 1 for row in pack["models"])


def test_a_tight_pack_exits_0_and_1_with_fail_on_tight():
    # on a 24 GB card the 8B at 8k with the 0.6B holds only without the margin
    args = (*PAIR, "--gpu", "rtx4090", "--context", "8192")
    code, pack = _json(*args)
    validate(pack, "pack")
    assert pack["verdict"] == "tight" and code == 0 and pack["set"]["margin"] == 0
    assert pack["set"]["takes_bytes"] <= pack["memory_bytes"]
    assert run_hfvram("check", *args, "--offline", "--fail-on", "tight").returncode == 1


def test_ollama_models_add_up_with_a_reserve_each():
    code, pack = _json(*PAIR, "--gpu", "h100", "--engine", "ollama", "--context", "8192")
    validate(pack, "pack")
    assert code == 0 and pack["verdict"] == "fits"
    for row, source in zip(pack["models"], PAIR, strict=True):
        alone = _single(source, "--engine", "ollama", "--context", "8192")
        assert row["gpu_memory_utilization"] is None
        assert row["takes_bytes"] == alone["per_gpu"]["total"] + alone["per_gpu"]["reserve"]
        assert row["launch"]["env"]["OLLAMA_CONTEXT_LENGTH"] == "8192"
    assert pack["set"]["need_bytes"] + pack["set"]["outside_bytes"] == sum(r["takes_bytes"] for r in pack["models"])
    assert any("share one server" in note for note in pack["notes"])


def test_markdown_and_launch_only():
    result = run_hfvram("check", *PAIR, "--gpu", "h100", "--offline", "--markdown")
    assert result.returncode == 0 and result.stdout.count("| vllm |") == 2
    result = run_hfvram("check", *PAIR, "--gpu", "h100", "--offline", "--launch")
    assert result.returncode == 0
    assert [line.split()[2] for line in result.stdout.splitlines()] == list(PAIR)


def test_a_pack_needs_one_gpu_set():
    assert run_hfvram("check", *PAIR, "--offline").returncode == 2
    assert run_hfvram("check", *PAIR, "--gpu", "h100,rtx4090", "--offline").returncode == 2
    assert run_hfvram("check", *PAIR, "--gpu", "h100", "--gpu-util", "0.5", "--offline").returncode == 2


def test_a_llama_server_beside_a_vllm_instance_each_on_its_default_engine():
    gguf = "fixtures/headers/SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf"
    code, pack = _json(gguf, "Qwen/Qwen3-0.6B", "--gpu", "rtx4090", "--context", "8192")
    validate(pack, "pack")
    assert code == 0 and [row["engine"] for row in pack["models"]] == ["llama.cpp", "vllm"]
    server, instance = pack["models"]
    assert server["gpu_memory_utilization"] is None and server["launch"]["command"].startswith("llama-server ")
    assert server["takes_bytes"] == server["need_bytes"] + server["outside_bytes"]
    # the vLLM fraction may take only what the llama-server and every process's outside memory leave
    whole = pack["set"]
    left = 1 - (whole["outside_bytes"] + server["need_bytes"]) / pack["memory_bytes"]
    assert whole["vllm_utilization_limit"] == math.floor(left * 100) / 100
    assert instance["gpu_memory_utilization"] <= whole["vllm_utilization_limit"]


def test_an_instance_that_needs_more_than_the_default_fraction_gets_it():
    # the 70B at TP 2 and 32k needs more than vLLM's default 0.92 of an H100 per GPU (the single check says does not
    # fit), less than the fraction the pack gives it, which with its memory outside the fraction still starts
    args = ("meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100x2", "--context", "32768")
    alone = run_hfvram("check", *args, "--offline", "--json")
    assert alone.returncode == 1 and json.loads(alone.stdout)["engine"]["gpu_util"] == 0.92
    code, pack = _json(*args, "--pack")
    validate(pack, "pack")
    (row,) = pack["models"]
    assert code == 0 and pack["verdict"] == row["verdict"] == "tight"
    assert 0.92 < row["gpu_memory_utilization"] <= pack["set"]["vllm_utilization_limit"]
    assert "--tensor-parallel-size 2" in row["launch"]["command"] or "-tp 2" in row["launch"]["command"]
