"""Pasted engine command lines, --set options and sizes (hfvram/estimate/engine_args.py).

Flag names and meanings come from each engine's own argument parser as named in its
hfvram/engines/<engine>/settings.toml; the numbers in the command lines are the settings of real reports in
benchmarks/data/groundtruth_cases.jsonl (e.g. gt-0038: SGLang tp 1, mem_fraction_static 0.911).
"""

from __future__ import annotations

import pytest

from hfvram.errors import UsageError
from hfvram.estimate.engine_args import (
    parse_bytes,
    parse_engine_args,
    parse_set_options,
    parse_size_tokens,
    vllm_human_readable_int,
)


def test_vllm_serve_with_short_and_equals_flags():
    parsed = parse_engine_args(
        "vllm serve Qwen/Qwen3-8B --max-model-len 32768 -tp 2 --gpu-memory-utilization=0.85 "
        "--kv-cache-dtype fp8 --enforce-eager --port 8000 --max_num_batched_tokens 8192"
    )
    assert parsed.engine == "vllm"
    assert parsed.model == "Qwen/Qwen3-8B"
    assert (parsed.tp, parsed.pp, parsed.gpu_util, parsed.context, parsed.kv_dtype) == (2, None, 0.85, 32768, "fp8")
    assert parsed.settings["max-num-batched-tokens"] == "8192"
    assert parsed.settings["enforce-eager"] == "true"
    assert parsed.ignored == ["--port 8000: not read (hfvram reads the flags that change memory only)"]


def test_vllm_module_entry_point_with_env_and_line_continuations():
    parsed = parse_engine_args(
        "CUDA_VISIBLE_DEVICES=0,1 python -m vllm.entrypoints.openai.api_server \\\n"
        "  --model meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 \\\n  --max-model-len 20000"
    )
    assert (parsed.engine, parsed.model, parsed.tp, parsed.context) == (
        "vllm",
        "meta-llama/Llama-3.1-8B-Instruct",
        2,
        20000,
    )
    assert any("CUDA_VISIBLE_DEVICES" in line for line in parsed.ignored)


def test_vllm_reads_k_as_vllm_does():
    # vllm/engine/arg_utils.py::human_readable_int: lower-case suffixes are decimal, upper-case binary
    assert parse_engine_args("vllm serve m --max-model-len 32k").context == 32000
    assert parse_engine_args("vllm serve m --max-model-len 32K").context == 32768
    assert vllm_human_readable_int("25.6k") == 25600
    with pytest.raises(UsageError):
        vllm_human_readable_int("1.5K")


def test_llama_server_short_flags():
    parsed = parse_engine_args(
        "./build/bin/llama-server -m /models/Qwen3-30B-A3B-Q4_K_M.gguf -c 32768 -ub 512 -fa on -ctk q8_0 "
        "-ctv q8_0 -ngl 99 -np 4 --host 0.0.0.0 --jinja -t 8"
    )
    assert parsed.engine == "llama.cpp"
    assert parsed.model == "/models/Qwen3-30B-A3B-Q4_K_M.gguf"
    assert parsed.settings == {
        "ctx-size": "32768",
        "ubatch-size": "512",
        "flash-attn": "on",
        "cache-type-k": "q8_0",
        "cache-type-v": "q8_0",
        "n-gpu-layers": "99",
        "parallel": "4",
    }
    assert parsed.context == 32768 and parsed.kv_dtype == "q8_0" and parsed.tp is None
    assert len(parsed.ignored) == 3


def test_llama_server_bare_boolean_and_zero_context():
    parsed = parse_engine_args("llama-server.exe -hf unsloth/Qwen3-8B-GGUF:Q4_K_M -c 0 -fa --swa-full -ngl 99")
    assert parsed.model == "unsloth/Qwen3-8B-GGUF:Q4_K_M"
    assert parsed.settings["flash-attn"] == "true" and parsed.settings["swa-full"] == "true"
    assert parsed.context is None
    assert any("model's own maximum length" in line for line in parsed.ignored)


def test_sglang_launch_server():
    # gt-0038 settings: tp 1, mem_fraction_static 0.911, bf16 KV
    parsed = parse_engine_args(
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B-Instruct-2507 --tp 1 "
        "--mem-fraction-static 0.911 --context-length 32768 --kv-cache-dtype bfloat16 --trust-remote-code"
    )
    assert (parsed.engine, parsed.model, parsed.tp, parsed.gpu_util, parsed.context, parsed.kv_dtype) == (
        "sglang",
        "Qwen/Qwen3-30B-A3B-Instruct-2507",
        1,
        0.911,
        32768,
        "bfloat16",
    )
    assert "tp-size" in parsed.settings and "mem-fraction-static" in parsed.settings


def test_sglang_inside_docker():
    parsed = parse_engine_args(
        "docker run --gpus all --ipc=host lmsysorg/sglang:latest python3 -m sglang.launch_server --model-path X --tp 2"
    )
    assert (parsed.engine, parsed.model, parsed.tp) == ("sglang", "X", 2)
    assert any(line.startswith("docker run") for line in parsed.ignored)


def test_vllm_docker_image_takes_the_arguments():
    parsed = parse_engine_args(
        "docker run --gpus all -p 8000:8000 vllm/vllm-openai:v0.19.0 --model Qwen/Qwen3-8B -tp 2"
    )
    assert (parsed.engine, parsed.model, parsed.tp) == ("vllm", "Qwen/Qwen3-8B", 2)


def test_lmdeploy_api_server_quant_policy_is_the_kv_dtype():
    parsed = parse_engine_args(
        "lmdeploy serve api_server internlm/internlm2_5-7b-chat --tp 2 --cache-max-entry-count 0.5 "
        "--quant-policy 8 --session-len 8192 --server-port 23333"
    )
    assert (parsed.engine, parsed.model, parsed.tp, parsed.gpu_util, parsed.context, parsed.kv_dtype) == (
        "lmdeploy",
        "internlm/internlm2_5-7b-chat",
        2,
        0.5,
        8192,
        "int8",
    )
    assert parse_engine_args("lmdeploy serve api_server m --quant-policy 0").kv_dtype is None
    with pytest.raises(UsageError):
        parse_engine_args("lmdeploy serve api_server m --quant-policy 3")


def test_trtllm_serve_underscored_flags():
    parsed = parse_engine_args(
        "trtllm-serve meta-llama/Llama-3.1-8B --tp_size 2 --kv_cache_free_gpu_memory_fraction 0.8 "
        "--max_num_tokens 4096 --max_seq_len 8192 --port 8000"
    )
    assert (parsed.engine, parsed.model, parsed.tp, parsed.gpu_util, parsed.context) == (
        "tensorrt-llm",
        "meta-llama/Llama-3.1-8B",
        2,
        0.8,
        8192,
    )
    assert parsed.settings["max-num-tokens"] == "4096"


def test_ollama_reads_its_environment():
    parsed = parse_engine_args(
        "OLLAMA_CONTEXT_LENGTH=8192 OLLAMA_KV_CACHE_TYPE=q8_0 OLLAMA_FLASH_ATTENTION=1 ollama run llama3.1:8b"
    )
    assert (parsed.engine, parsed.model, parsed.context, parsed.kv_dtype) == ("ollama", "llama3.1:8b", 8192, "q8_0")
    assert parsed.settings["flash-attention"] == "1"


def test_unknown_program_is_read_by_flag_names():
    parsed = parse_engine_args("python my_script.py --max-model-len 4096 --model foo/bar")
    assert parsed.engine is None
    assert (parsed.model, parsed.context) == ("foo/bar", 4096)
    with pytest.raises(UsageError):
        parsed.to_choice()


def test_to_choice_merges_set_options():
    parsed = parse_engine_args("vllm serve m -tp 2 --max-num-seqs 64")
    choice = parsed.to_choice("0.19", {"max-num-seqs": "128"})
    assert (choice.name, choice.version, choice.tp, choice.settings["max-num-seqs"]) == ("vllm", "0.19", 2, "128")


@pytest.mark.parametrize(
    "bad", ["", "vllm serve m --max-model-len lots", "vllm serve 'unbalanced", "sglang serve --tp two"]
)
def test_bad_command_lines_are_usage_errors(bad):
    with pytest.raises(UsageError):
        parse_engine_args(bad)


def test_parse_set_options():
    assert parse_set_options(
        ["max-num-batched-tokens=8192", "--flash_attn=on", "swa-full=true", "max-num-batched-tokens=4096"]
    ) == {"max-num-batched-tokens": "4096", "flash-attn": "on", "swa-full": "true"}
    for bad in (["max-num-batched-tokens"], ["=3"], ["a="], ["a b=1"]):
        with pytest.raises(UsageError):
            parse_set_options(bad)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("8k", 8192),
        ("32k", 32768),
        ("128k", 131072),
        ("131072", 131072),
        ("1m", 1048576),
        ("32K", 32768),
        ("131,072", 131072),
        ("1.5k", 1536),
    ],
)
def test_parse_size_tokens(text, tokens):
    assert parse_size_tokens(text) == tokens


@pytest.mark.parametrize("text", ["12q", "", "0", "-5", "1.3k", "k", "8 k x"])
def test_parse_size_tokens_rejects(text):
    with pytest.raises(UsageError):
        parse_size_tokens(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("24GiB", 24 << 30),
        ("80GB", 80 * 10**9),
        ("512MiB", 512 << 20),
        ("24g", 24 << 30),
        ("1024", 1024),
        ("1.5 TiB", 3 << 39),
    ],
)
def test_parse_bytes(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["24 parsecs", "GiB", "", "-1GB"])
def test_parse_bytes_rejects(text):
    with pytest.raises(UsageError):
        parse_bytes(text)


def test_short_flags_with_attached_values():
    # argparse accepts "-O3" (vLLM optimization level) and "-tp2"; llama.cpp users write "-c8192" too
    vllm = parse_engine_args("vllm serve m -O3 -tp2")
    assert vllm.settings["optimization-level"] == "3" and vllm.tp == 2
    llama = parse_engine_args("llama-server -m x.gguf -c8192 -np4")
    assert llama.context == 8192 and llama.settings["parallel"] == "4"


@pytest.mark.parametrize(
    "cmdline",
    [
        "sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2 --mem-fraction-static 0.8",
        "python sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2 --mem-fraction-static 0.8",
    ],
)
def test_sglang_module_named_without_python_m(cmdline):
    """QA round 3: the module name pasted without `python -m` still names SGLang (sglang/launch_server.py)."""
    parsed = parse_engine_args(cmdline)
    assert parsed.engine == "sglang"
    assert parsed.model == "Qwen/Qwen3-8B"
    assert parsed.tp == 2
    assert parsed.settings["mem-fraction-static"] == "0.8"


# ---- issue 17 case 12: settings the engines refuse are refused here too (limits in data/engine_args.toml) -------

from cli_support import LLAMA_FOLDER, run_hfvram  # noqa: E402

from hfvram.estimate.engine_args import check_setting  # noqa: E402


@pytest.mark.parametrize(
    "option", ["max-model-len=0", "block-size=0", "ubatch-size=0", "ctx-size=-1", "max-num-seqs=0", "ub=0", "c=-1"]
)
def test_settings_below_the_engines_minimum_are_usage_errors(option):
    with pytest.raises(UsageError, match="the engine refuses it"):
        parse_set_options([option])


@pytest.mark.parametrize(
    "option",
    ["max-model-len=-1", "ctx-size=0", "max-model-len=32k", "block-size=16", "ubatch-size=512", "flash-attn=on"],
)
def test_settings_with_a_meaning_are_kept(option):
    """vLLM max-model-len -1 = auto-fit; llama.cpp -c 0 = the model's own length."""
    name, _, value = option.partition("=")
    assert parse_set_options([option]) == {name: value}


@pytest.mark.parametrize("value", ["1" + "0" * 500, "1" + "0" * 5000, "9" * 20, "-" + "9" * 20])
def test_implausible_numbers_are_usage_errors(value):
    with pytest.raises(UsageError, match="implausible"):
        check_setting("max-num-partial-prefills", value)


def test_number_too_large_for_a_float_is_a_usage_error():
    """'1e999' is not a whole number the limits read; the engines' own reading refuses it in one line."""
    from hfvram.estimate.common import parse_int

    with pytest.raises(UsageError, match="is not a number"):
        parse_int("1e999", "max-num-partial-prefills")


def test_pasted_command_line_settings_are_checked():
    with pytest.raises(UsageError, match="ctx-size=-1"):
        parse_engine_args("llama-server -m model.gguf -c -1")
    with pytest.raises(UsageError, match="block-size=0"):
        parse_engine_args("vllm serve org/model --block-size 0")
    assert parse_engine_args("llama-server -m model.gguf -c 0").settings["ctx-size"] == "0"


@pytest.mark.parametrize(
    ("engine", "option"),
    [
        ("vllm", "max-model-len=0"),
        ("vllm", "block-size=0"),
        ("llama.cpp", "ubatch-size=0"),
        ("llama.cpp", "ctx-size=-1"),
    ],
)
def test_refused_settings_exit_2_with_one_line(engine, option):
    result = run_hfvram("check", str(LLAMA_FOLDER), "--gpu", "h100", "--engine", engine, "--set", option)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], result.stderr


def test_huge_setting_is_one_line_exit_2():
    result = run_hfvram(
        "check", str(LLAMA_FOLDER), "--gpu", "h100", "--engine", "vllm", "--set", "max-model-len=1" + "0" * 5000
    )
    assert result.returncode == 2 and "implausible" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and len(result.stderr) < 300


def test_memory_flags_of_issue_12_are_read_not_ignored():
    """vLLM ``-dp`` (arg_utils: ``--data-parallel-size/-dp``), LoRA, speculative decoding, block override and
    multimodal limits; SGLang ``--dp`` / LoRA / speculative flags: kept as settings for the profiles, which model
    them or name them in a warning."""
    vllm = parse_engine_args(
        "vllm serve m -dp 2 --enable-lora --max-loras 4 --max-lora-rank 64 --max-cpu-loras 8 "
        "--num-gpu-blocks-override 512 --limit-mm-per-prompt '{\"image\": 0}' "
        '--speculative-config \'{"method": "ngram", "num_speculative_tokens": 4}\' --quantization bitsandbytes'
    )
    assert vllm.ignored == []
    assert vllm.settings["data-parallel-size"] == "2" and vllm.settings["enable-lora"] == "true"
    assert vllm.settings["num-gpu-blocks-override"] == "512" and vllm.settings["max-cpu-loras"] == "8"
    sglang = parse_engine_args(
        "python -m sglang.launch_server --model-path m --dp 2 --enable-lora --max-loras-per-batch 4 "
        "--max-lora-rank 16 --speculative-algorithm EAGLE3 --speculative-draft-model-path d"
    )
    assert sglang.ignored == []
    assert sglang.settings["dp-size"] == "2" and sglang.settings["enable-lora"] == "true"
    assert sglang.settings["speculative-draft-model-path"] == "d"
