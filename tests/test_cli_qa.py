"""Regressions found by using hfvram as its users do (round 2 QA): each test drives the real command line
(click's runner, or a subprocess) on real fixture files and the embedded catalogue, and checks what a person
reads, not only the JSON."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys

import pytest
from cli_support import FIXTURES, ROOT, SMOLLM_GGUF, validate
from click.testing import CliRunner

from hfvram.cli import cli
from hfvram.report.units import gib

runner = CliRunner()
NARROW = {"COLUMNS": "80"}
GIB = 1024**3


def invoke(*args: str, env: dict | None = None):
    return runner.invoke(cli, list(args), env=env)


def as_json(*args: str) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(document)
    return document


def lines_fit(text: str, width: int = 80) -> bool:
    return all(len(line.rstrip()) <= width for line in text.splitlines())


# ---- --engine-args: secrets never printed ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cmdline", "secret"),
    [
        ("HF_TOKEN=plainsecret42 vllm serve Qwen/Qwen3-8B", "plainsecret42"),
        ('vllm serve Qwen/Qwen3-8B --api-key "two words"', "words"),
        ("vllm serve Qwen/Qwen3-8B --hf-token=opaque-value-9", "opaque-value-9"),
        (
            "docker run -e MY_API_KEY=launchersecret vllm/vllm-openai:latest python3 -m vllm.entrypoints.openai."
            "api_server --model Qwen/Qwen3-8B",
            "launchersecret",
        ),
        ("vllm serve Qwen/Qwen3-8B --served-model-name hf_abcdefgh12345", "hf_abcdefgh12345"),
    ],
)
def test_engine_args_secrets_hidden_in_table_and_json(cmdline, secret):
    table = invoke("check", "--gpu", "h100", "--offline", "--engine-args", cmdline)
    document = as_json("check", "--gpu", "h100", "--offline", "--engine-args", cmdline)
    assert table.exit_code in (0, 1), table.output
    assert secret not in table.output and secret not in json.dumps(document)
    assert any("--engine-args: ignored" in warning and "***" in warning for warning in document["warnings"])


def test_engine_args_keeps_harmless_values_visible():
    """--tokenizer and --max-num-batched-tokens contain 'token' but are not secrets."""
    document = as_json(
        "check",
        "--gpu",
        "h100",
        "--offline",
        "--engine-args",
        "llama-server -hf Qwen/Qwen3-8B --port 8080 --tokenizer-file tok.json",
    )
    ignored = [w for w in document["warnings"] if "--engine-args: ignored" in w]
    assert any("--port 8080" in w for w in ignored), ignored


# ---- --unified-fraction -----------------------------------------------------------------------------------------


def test_unified_fraction_sets_the_gpu_share_of_ram():
    """gpus/README.md "Apple Silicon: GPU-addressable memory": macOS gives the GPU 3/4 of RAM above 32 GiB by
    default; `--unified-fraction` replaces that share (sysctl iogpu.wired_limit_mb on a real Mac)."""
    ram = json.loads(invoke("gpus", "m3-max-128", "--json").stdout)[0]["memory_bytes"]
    default = as_json("check", "Qwen/Qwen3-32B", "--gpu", "m3-max-128", "--offline", "--engine", "mlx")
    raised = as_json(
        "check", "Qwen/Qwen3-32B", "--gpu", "m3-max-128", "--offline", "--engine", "mlx", "--unified-fraction", "0.9"
    )
    assert default["hardware"]["memory_bytes"] == ram * 3 // 4
    assert raised["hardware"]["memory_bytes"] == int(ram * 0.9)
    assert raised["per_gpu"]["usable"] > default["per_gpu"]["usable"]
    assert not any("--unified-fraction" in w for w in raised["warnings"])


def test_unified_fraction_on_a_discrete_gpu_is_a_warning_and_out_of_range_a_usage_error():
    discrete = as_json("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--unified-fraction", "0.9")
    plain = as_json("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline")
    assert discrete["per_gpu"] == plain["per_gpu"]
    assert any("--unified-fraction ignored: rtx4090" in w for w in discrete["warnings"])
    assert (
        invoke("check", "Qwen/Qwen3-8B", "--gpu", "m3-max-128", "--offline", "--unified-fraction", "1.5").exit_code == 2
    )
    assert (
        invoke("check", "Qwen/Qwen3-8B", "--gpu", "m3-max-128", "--offline", "--unified-fraction", "0").exit_code == 2
    )
    assert "--unified-fraction" in invoke("check", "--help").output
    scanned = runner.invoke(
        cli,
        ["scan", "-", "--gpu", "m3-max-128", "--offline", "--unified-fraction", "0.5", "--json"],
        input="Qwen/Qwen3-0.6B\n",
    )
    assert json.loads(scanned.stdout.splitlines()[0])["hardware"]["memory_bytes"] == 64 * GIB


# ---- verdicts and capacity that read right ------------------------------------------------------------------


def test_engine_rule_verdict_says_why_it_contradicts_the_percentage():
    """LMDeploy asserts KV heads % tp == 0 (docs/engines/lmdeploy.md#lmdeploy-pytorch): Qwen3-30B-A3B has 4 KV heads, so TP 8 cannot start,
    although the terms take under a third of an H100's memory."""
    args = ("check", "Qwen/Qwen3-30B-A3B", "--gpu", "h100x8", "--engine", "lmdeploy", "--offline")
    document = as_json(*args)
    assert document["verdict"] == "does_not_fit"
    assert document["utilization"] < 0.9
    assert document["verdict_reason"].startswith("engine rule: ")
    text = invoke(*args).stdout
    assert "would not start" in text and "DOES NOT FIT" in text
    assert invoke(*args).exit_code == 1


def test_memory_verdict_reason_matches_the_numbers():
    document = as_json("check", "Qwen/Qwen3-8B", "--gpu", "h100", "--offline", "--context", "8k")
    share = document["per_gpu"]["total"] / document["per_gpu"]["usable"]
    assert document["verdict"] == "fits" and share <= 0.9
    assert (
        document["verdict_reason"] == f"memory: the four terms take {share * 100:.0f}% of usable memory "
        "(fits up to 90%, tight up to 100%)"
    )
    assert as_json("check", "Qwen/Qwen3-8B", "--offline")["verdict_reason"] is None


def test_nothing_fits_says_none_not_zero_tokens_and_no_decode_speed():
    result = invoke("check", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "rtx4090", "--offline", "--context", "8k")
    assert result.exit_code == 1
    assert "KV cache pool: none" in result.stdout
    assert "Longest context at concurrency 1: none" in result.stdout
    assert "0 tokens" not in result.stdout
    assert "Decode:" not in result.stdout


def test_llamacpp_pool_and_room_are_named_apart():
    """llama.cpp allocates -c tokens (8k for SmolLM2's GGUF), while memory has room for many such requests."""
    result = invoke("check", str(SMOLLM_GGUF), "--gpu", "rtx4090", "--context", "8k")
    document = as_json("check", str(SMOLLM_GGUF), "--gpu", "rtx4090", "--context", "8k")
    pool = document["capacity"]["kv_tokens"]
    room = document["capacity"]["max_concurrency"]
    assert pool == 8192 and room > 1
    assert (
        f"KV cache pool: {pool:,} tokens (sized by the context: 1.0 × 8k) · memory has room for {room:.1f} such requests"
        in result.stdout
    )
    assert "checkpoint " + gib(document["model"]["weights_bytes"]) in result.stdout


def test_longest_context_at_the_model_limit_says_so():
    result = invoke("check", "Qwen/Qwen3-0.6B", "--gpu", "h100", "--offline")
    assert "Longest context at concurrency 1: 40,960 tokens (the model's limit)" in result.stdout


# ---- narrow terminals ------------------------------------------------------------------------------------------


def test_scan_table_at_80_columns_keeps_every_number_whole():
    sources = ["Qwen/Qwen3-8B", "meta-llama/Llama-3.3-70B-Instruct", "openai/gpt-oss-20b", str(SMOLLM_GGUF)]
    stdin = "\n".join(sources) + "\n"
    table = runner.invoke(
        cli, ["scan", "-", "--gpu", "rtx4090", "--offline", "--context", "8k"], input=stdin, env=NARROW
    )
    reports = [
        json.loads(line)
        for line in runner.invoke(
            cli, ["scan", "-", "--gpu", "rtx4090", "--offline", "--context", "8k", "--json"], input=stdin
        ).stdout.splitlines()
    ]
    assert lines_fit(table.stdout)
    for report in reports:
        assert gib(report["per_gpu"]["total"]) in table.stdout
        assert f"{report['capacity']['kv_tokens']:,}" in table.stdout
    assert "DOES NOT FIT" in table.stdout and "…" in table.stdout  # the long GGUF path gives way, not numbers


def test_gpus_table_at_80_columns_one_line_per_gpu():
    result = invoke("gpus", "--vendor", "apple", env=NARROW)
    ids = [gpu["id"] for gpu in json.loads(invoke("gpus", "--vendor", "apple", "--json").stdout)]
    assert lines_fit(result.stdout)
    rows = [line for line in result.stdout.splitlines() if line.strip().split(" ")[0] in ids]
    assert len(rows) == len(ids)  # no row wraps onto a second line
    assert "unified memory: the share of RAM the GPU may use" in result.stdout
    assert invoke("gpus", "4090").stdout.startswith("1 accelerator\n")
    none = invoke("gpus", "no-such-card-at-all")
    assert none.exit_code == 2 and "accelerator" not in none.stdout


def test_warnings_wrap_under_their_own_text():
    result = invoke("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", env=NARROW)
    block = result.stdout.split("Warnings:\n", 1)[1]
    assert lines_fit(block)
    assert all(line.startswith(("  • ", "    ")) for line in block.splitlines() if line.strip())


# ---- fit -------------------------------------------------------------------------------------------------------


def test_fit_when_nothing_fits_names_the_limit_and_skips_the_empty_table():
    args = ("fit", "--gpu", "rtx4090", "deepseek-ai/DeepSeek-V3", "--offline")
    text = invoke(*args).stdout
    document = json.loads(invoke(*args, "--json").stdout)
    assert document["max_context"] == 0 and document["smallest_gpu_count"] is None
    assert document["max_gpu_count_tried"] == 64
    assert document["verdict"] == "does_not_fit" and document["verdict_reason"].startswith("memory: ")
    assert "none (nothing is left for the KV cache)" in text
    assert "none up to 64" in text and "DOES NOT FIT" in text
    assert "Concurrent full-length requests" not in text
    markdown = invoke(*args, "--markdown").stdout
    assert "none up to 64" in markdown and "| context |" not in markdown


# ---- --explain, Markdown -------------------------------------------------------------------------------------


def test_explain_splits_file_and_field_and_lists_engine_settings_without_none():
    result = invoke("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--explain")
    out = result.stdout
    assert re.search(r"num_kv_heads\s+config\.json\s+num_key_value_heads", out)
    assert "Engine settings the estimate assumed" in out
    settings = out.split("Engine settings the estimate assumed", 1)[1]
    assert re.search(r"gpu_memory_utilization\s+0\.92", settings) or "gpu_util" in settings
    assert " None" not in settings
    markdown = invoke("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--explain", "--markdown").stdout
    assert "| term | how |" in markdown and "| figure | file | field / rule |" in markdown
    assert "| num_kv_heads | config.json | num_key_value_heads |" in markdown


def test_markdown_flag_and_its_conflict_with_json():
    assert invoke("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--markdown").stdout.startswith("### ")
    conflict = invoke("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--markdown", "--json")
    assert conflict.exit_code == 2 and "exclusive" in conflict.output


def test_markdown_scan_escapes_pipes_in_error_messages():
    result = runner.invoke(
        cli, ["scan", "-", "--gpu", "rtx4090", "--offline", "--markdown"], input="./no|such/repo\nQwen/Qwen3-0.6B\n"
    )
    assert result.exit_code == 3
    error_row = next(line for line in result.stdout.splitlines() if line.startswith("| ./no"))
    assert "no\\|such/repo" in error_row
    assert len(re.split(r"(?<!\\)\|", error_row)) == 8  # 6 cells, the escaped pipes not splitting them


# ---- calibrate ---------------------------------------------------------------------------------------------------


def test_calibrate_failed_v0_start_shows_no_negative_kv():
    """gt-0010 (vLLM issue #13882): 'the rest of the memory reserved for KV Cache is -1.05GiB' — no cache at all."""
    log = str(FIXTURES / "logs" / "gt-0010-vllm-v0.7-qwen25-7b-bnb-rtx4060.log")
    result = invoke("calibrate", log)
    assert result.exit_code == 0
    assert "-1.05 GiB (negative: no KV cache)" in result.stdout
    assert re.search(r"^│ KV cache\s+│\s+0\.00 GiB │", result.stdout, flags=re.MULTILINE)
    assert "no memory for the KV cache" in result.stdout


def test_calibrate_points_at_the_checkpoint_when_weights_are_far_apart():
    """gt-0016: a Q4_K_M GGUF with the experts on the CPU (0.63 GiB on CUDA1) against the bf16 repo."""
    log = str(FIXTURES / "logs" / "gt-0016-llamacpp-qwen3-30b-a3b-2gpu.log")
    document = json.loads(
        invoke("calibrate", log, "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "rtx4090x2", "--offline", "--json").stdout
    )
    assert document["measured"]["weights"] < document["predicted"]["weights"] / 10
    assert any("is --model the checkpoint that ran" in w for w in document["warnings"])
    matching = str(FIXTURES / "logs" / "gt-0062-vllm-v0.19-llama31-8b-h100.log")
    close = json.loads(
        invoke(
            "calibrate", matching, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100", "--offline", "--json"
        ).stdout
    )
    assert not any("is --model the checkpoint that ran" in w for w in close["warnings"])


def test_explain_terms_are_paragraphs_readable_at_80_columns():
    result = invoke(
        "check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--context", "32k", "--explain", env=NARROW
    )
    document = as_json("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--context", "32k", "--explain")
    section = result.stdout.split("How each term was computed\n", 1)[1].split("Where each input figure", 1)[0]
    assert lines_fit(section)
    for key, label in (
        ("weights", "weights"),
        ("kv_cache", "KV cache"),
        ("activations", "activations"),
        ("overhead", "overhead"),
    ):
        assert f"\n  {label}: " in "\n" + section
        first_words = " ".join(document["explain"]["terms"][key].split()[:3])
        assert first_words in " ".join(section.split())
    # docs/engines/vllm.md#vllm-cuda-graphs: 36 layers x 51 capture sizes (256 sequences) x the per-layer bytes
    from hfvram.estimate.common import load_engine_data, rules_for_version, version_key

    versions = load_engine_data("vllm")["versions"]
    per = rules_for_version(load_engine_data("vllm"), max(versions, key=version_key))["cudagraph_bytes_per_layer_size"]
    graphs = document["engine"]["cudagraph_bytes"]
    assert graphs == int(per * 36 * 51)
    assert f"cudagraph_bytes          {graphs / 2**30:.2f} GiB ({graphs:,} B)" in result.stdout


def test_inspect_gguf_says_not_stated_and_f16_kv():
    """A GGUF header has no compute dtype (general.file_type is the quantization); llama.cpp's KV default is f16."""
    header = FIXTURES / "headers" / "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf-header.gguf"
    text = invoke("inspect", str(header)).stdout
    document = json.loads(invoke("inspect", str(header), "--json").stdout)
    validate(document, "inspect")
    assert "None" not in text and "— (not stated)" in text
    assert document["model"]["kv_dtype"] == "f16" and "KV per token (f16)" in text
    # qwen2 7B: 28 layers × 4 KV heads × 128 × 2 (K and V) × 2 B = 57,344 B per token
    assert document["model"]["kv_bytes_per_token"] == 57_344


def test_scan_engine_refusal_is_not_called_unreadable():
    result = runner.invoke(
        cli,
        ["scan", "-", "--gpu", "rtx4090", "--engine", "exllamav2", "--offline"],
        input="deepseek-ai/DeepSeek-V2-Lite\nQwen/Qwen3-0.6B\n",
    )
    assert "Could not be estimated:" in result.stdout and "Could not be read:" not in result.stdout
    assert "ExLlamaV2 needs a standard attention model" in result.stdout


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_scan_progress_lines_go_above_the_bar_on_a_terminal():
    """On a terminal, each finished model is printed through the progress bar's console: before the fix the
    lines were written onto the bar's own line ('scanning ━━ 0/3 0:00:00  FITS  Qwen/…')."""
    master, slave = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "hfvram", "scan", "-", "--gpu", "rtx4090", "--offline", "--context", "8k", "-j", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
    )
    os.close(slave)
    process.stdin.write(b"Qwen/Qwen3-0.6B\nQwen/Qwen3-8B\nnobody/nothing\n")
    process.stdin.close()
    raw = b""
    while select.select([master], [], [], 60)[0]:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    process.wait(timeout=60)
    os.close(master)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw.decode("utf-8", "replace"))
    segments = [segment for segment in re.split(r"[\r\n]", text) if segment.strip()]
    # the figures before the name, so that a narrow terminal cuts the name, never a figure
    assert any(re.match(r"  FITS  [\d.]+ GiB  Qwen/Qwen3-0.6B", segment) for segment in segments), segments
    assert not any("scanning" in segment and ("FITS" in segment or "ERROR" in segment) for segment in segments)


def test_calibration_from_another_release_or_gpu_is_said(tmp_path):
    """gt-0062 is a vLLM 0.19.0 log on an H100: applied to the 0.21 rules or to an RTX 4090 it is flagged."""
    log = str(FIXTURES / "logs" / "gt-0062-vllm-v0.19-llama31-8b-h100.log")
    saved = tmp_path / "cal.json"
    assert invoke("calibrate", log, "--gpu", "h100", "--save", "--output", str(saved)).exit_code == 0
    base = ("check", "meta-llama/Llama-3.1-8B-Instruct", "--offline", "--context", "8k", "--calibration", str(saved))
    other = as_json(*base, "--gpu", "rtx4090")["warnings"]
    same = as_json(*base, "--gpu", "h100", "--engine", "vllm@0.19")["warnings"]
    from hfvram.estimate.common import load_engine_data, version_key

    newest = max(load_engine_data("vllm")["versions"], key=version_key)
    assert any(f"measured on vllm 0.19.0; this estimate follows the {newest} rules" in w for w in other)
    assert any("measured on h100-sxm, this estimate is for rtx4090" in w for w in other)
    assert not any("the calibration was measured" in w for w in same)
    assert any("calibrated from" in w for w in same)


@pytest.mark.parametrize("name", ["llama.cpp-ggml-vocab-llama-spm.gguf", "llama.cpp-ggml-vocab-phi-3.gguf"])
def test_vocabulary_only_gguf_is_flagged(name):
    """llama.cpp's ggml-vocab-*.gguf files carry a tokenizer and hyper-parameters but no tensors: inspect shows the
    metadata with null weights and says why; check cannot size a model without weights (exit 3, one line)."""
    path = str(FIXTURES / "headers" / name)
    inspected = invoke("inspect", path, "--json")
    assert inspected.exit_code == 0, inspected.output
    document = json.loads(inspected.stdout)
    assert document["model"]["weights_bytes"] is None
    assert any("no tensors" in w for w in document["warnings"])
    checked = invoke("check", path, "--gpu", "rtx4090")
    assert checked.exit_code == 3
    assert "Traceback" not in checked.output and len(checked.output.strip().splitlines()) == 1


def test_footprint_without_gpu_has_no_share_column():
    result = invoke("check", "Qwen/Qwen3-8B", "--offline", "--context", "8k")
    document = as_json("check", "Qwen/Qwen3-8B", "--offline", "--context", "8k")
    assert "Memory footprint per GPU" in result.stdout and "of usable" not in result.stdout
    assert gib(document["per_gpu"]["total"]) in result.stdout
    assert "no verdict (no --gpu)" in result.stdout and result.exit_code == 0


def test_engine_release_outside_the_modelled_ones_is_said():
    older = as_json("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--engine", "vllm@0.1")
    newer = as_json("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--engine", "vllm@9.9")
    exact = as_json("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--engine", "vllm@0.19.0")
    assert any(
        w.startswith("--engine vllm@0.1: older than any vllm release") and older["engine"]["version"] in w
        for w in older["warnings"]
    )
    from hfvram.estimate.releases import newest_reviewed

    reviewed = newest_reviewed("vllm")
    assert reviewed is not None
    assert any(w.startswith(f"--engine vllm@9.9: newer than vllm {reviewed.version}") for w in newer["warnings"])
    assert exact["engine"]["version"] == "0.19"
    assert not any(w.startswith("--engine") for w in exact["warnings"])


def test_default_engine_on_a_mac_is_mlx():
    """The contract's default for safetensors is vLLM, which has no Metal backend: on Apple Silicon the default is
    MLX, and the output says why; an explicit --engine is kept, and NVIDIA keeps vLLM."""
    default = as_json("check", "Qwen/Qwen3-8B", "--gpu", "m3-max-128", "--offline")
    chosen = as_json("check", "Qwen/Qwen3-8B", "--gpu", "m3-max-128", "--offline", "--engine", "llama.cpp")
    nvidia = as_json("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline")
    assert default["engine"]["name"] == "mlx" and default["verdict"] == "fits"
    assert any("MLX is the default on Apple Silicon" in w for w in default["warnings"])
    assert chosen["engine"]["name"] == "llama.cpp" and nvidia["engine"]["name"] == "vllm"
    assert not any("MLX is the default" in w for w in chosen["warnings"] + nvidia["warnings"])
