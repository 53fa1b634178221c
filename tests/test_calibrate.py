"""Start-up log parsing and calibration files.

Every log is a verbatim copy of a published log from the ground-truth corpus (fixtures/logs/README.md names the
case and the source); the expected figures are the ``measured`` values the corpus recorded for that case.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hfvram import calibrate as cal
from hfvram.cli import cli
from hfvram.errors import MalformedFileError, UsageError
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload

LOGS = Path(__file__).parent.parent / "fixtures" / "logs"
GIB = 1024**3
MIB = 1024**2
ROUNDING = 0.005 * GIB  # engines print GiB rounded to 0.01


def read(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def test_vllm_v1_debug_log_gt0062():
    """gt-0062 (llm-d-planner v0.19.0 log, Llama-3.1-8B on H100, util 0.95, fp8 KV)."""
    measured = cal.parse_log(read("gt-0062-vllm-v0.19-llama31-8b-h100.log"))
    assert measured.engine == "vllm"
    assert measured.engine_version == "0.19.0"
    assert abs(measured.weights - 14.99 * GIB) < ROUNDING
    assert abs(measured.kv_cache - 58.11 * GIB) < ROUNDING
    assert abs(measured.activations - 1.89 * GIB) < ROUNDING
    # v0.19 does not deduct CUDA graphs from the budget (75.23 − 14.99 − 1.89 − 0.25 − 58.11 ≈ 0), so the
    # overhead inside the budget is the non-torch forward increase alone
    assert abs(measured.overhead - 0.25 * GIB) < ROUNDING
    assert measured.details["CUDA graphs captured"] == "0.91 GiB"
    assert measured.kv_tokens == 952_032
    assert measured.max_concurrency == pytest.approx(116.21)
    assert measured.context == 8192
    assert measured.gpu_util == pytest.approx(0.95)
    assert measured.kv_dtype == "fp8"
    assert measured.tp == 1


def test_vllm_v1_identity_holds_on_parsed_figures():
    """docs/engines/common.md#calibration-logs-vllm recipe: util × total − (weights + activations + non-torch) = KV, ±0.02 GiB (gt-0062;
    CUDA graphs are not deducted in v0.19)."""
    measured = cal.parse_log(read("gt-0062-vllm-v0.19-llama31-8b-h100.log"))
    non_kv = measured.weights + measured.activations + measured.overhead
    assert abs(measured.gpu_util * measured.total_memory - non_kv - measured.kv_cache) < 0.02 * GIB


def test_vllm_consumed_usage_line_books_the_graphs_once_club3090_1087():
    """noonghunna/club-3090#1087 (2 x RTX 5090, TP 2, Qwen3.8-27B FP8, 2026-08-22; rank TP1's lines): vLLM's INFO line
    prints a peak activation that holds the CUDA-graph estimate (28.88 − 15.05 − 1.59 = 12.24, the KV cache in use)
    and, beside it, the pool captured afterwards. The graphs are booked once, as the 0.13 GiB estimate the budget
    deducted: the activations are 1.59 − 0.13."""
    measured = cal.parse_log(read("club3090-1087-vllm-qwen38-27b-fp8-2x5090.log"))
    assert measured.engine == "vllm" and measured.engine_generation == "v1"
    assert abs(measured.activations - (1.59 - 0.13) * GIB) < ROUNDING
    assert abs(measured.kv_cache - 12.24 * GIB) < ROUNDING
    assert measured.gpu_util == pytest.approx(0.92)
    assert abs(measured.total_memory - 31.4 * GIB) < ROUNDING
    consumed, estimate, requested = 15.05 * GIB, 0.13 * GIB, 28.88 * GIB
    # the budget closes with the graphs counted once; peak as printed plus the captured 0.09 GiB would overrun it
    assert abs(consumed + measured.activations + estimate + measured.kv_cache - requested) < 0.02 * GIB
    assert consumed + 1.59 * GIB + 0.09 * GIB + measured.kv_cache > requested + 0.05 * GIB
    # no "Model loading took" line: weights and non-torch memory stay one figure, so the overhead is not guessed
    assert measured.weights is None and measured.overhead is None
    assert any("printed as one figure" in warning for warning in measured.warnings)


def test_vllm_consumed_usage_line_estimate_nearly_the_whole_peak_vllm_backport_34():
    """wtdcode/vllm-backport#34 (DeepSeek-V4-Flash, PP 2 x TP 4 on 8 x RTX 3090, util 0.935, 2026-08-31; rank PP1_TP2):
    the 0.58 GiB estimate is nearly all of the 0.6 GiB printed peak, so the transient left is 0.02 GiB."""
    measured = cal.parse_log(read("vllm-backport-34-vllm-dsv4-flash-8x3090.log"))
    assert abs(measured.activations - (0.6 - 0.58) * GIB) < ROUNDING
    assert abs(measured.kv_cache - 1.95 * GIB) < ROUNDING
    assert measured.gpu_util == pytest.approx(0.935)


def test_vllm_v031_usage_line_without_the_estimate_keeps_the_budget_closed():
    """A vLLM v0.31.0 start-up (vllm/vllm-openai:v0.31.0, Llama-3.1-8B-Instruct on an A100 80GB, defaults; a stored
    public notes file, fixtures/logs/README.md): the log quotes no graph estimate, so the peak (1.44 GiB) cannot be
    split; the activations keep it whole, the overhead is the non-torch memory alone (15.26 − 15.0), and the
    budget still closes: 72.91 − 15.0 − 1.44 − 0.26 = 56.21."""
    measured = cal.parse_log(read("vllm-v0.31-llama31-8b-a100.log"))
    assert abs(measured.weights - 15.0 * GIB) < ROUNDING
    assert abs(measured.activations - 1.44 * GIB) < ROUNDING
    assert abs(measured.overhead - 0.26 * GIB) < 0.02 * GIB
    assert abs(measured.kv_cache - 56.21 * GIB) < ROUNDING
    assert measured.kv_tokens == 460_496 and measured.context == 131_072
    budget = measured.gpu_util * measured.total_memory
    assert abs(budget - measured.weights - measured.activations - measured.overhead - measured.kv_cache) < 0.03 * GIB
    assert any("does not print" in warning for warning in measured.warnings)
    assert measured.details["CUDA graphs inside the budget"].startswith("in the printed peak activation")


def test_vllm_older_usage_line_books_the_estimate_not_the_capture_vllm_50722():
    """vllm-project/vllm#50722 (Qwen3.5-35B-A3B, 4 x H100, TP 4, util 0.85, 2026-08-14; rank TP2): the older INFO
    line prints the peak without the graphs (67.43 − 16.92 − 5.66 − 0.13 − 43.4 = 1.32, the estimate), so the
    overhead is the non-torch memory plus the 1.32 GiB the budget deducted, not the 1.34 GiB pool captured later."""
    measured = cal.parse_log(read("vllm-50722-vllm-qwen35-35b-a3b-4xh100.log"))
    assert abs(measured.weights - 16.92 * GIB) < ROUNDING
    assert abs(measured.activations - 5.66 * GIB) < ROUNDING
    assert abs(measured.overhead - (0.13 + 1.32) * GIB) < 0.02 * GIB
    assert abs(measured.kv_cache - 43.4 * GIB) < ROUNDING
    assert measured.details["CUDA graphs inside the budget"].startswith("1.32 GiB")


def test_vllm_v0_profile_line_gt0004():
    """gt-0004 (vLLM issue #10517, V0, RTX 3090): peak_torch 17.98 GiB includes the 14.9888 GiB of weights."""
    measured = cal.parse_log(read("gt-0004-vllm-v0-llama31-8b-rtx3090.log"))
    assert abs(measured.weights - 14.9888 * GIB) < 0.0001 * GIB
    assert abs(measured.activations - (17.98 - 14.9888) * GIB) < ROUNDING
    assert abs(measured.overhead - 0.35 * GIB) < ROUNDING
    assert abs(measured.kv_cache - 2.89 * GIB) < ROUNDING
    assert measured.kv_tokens == 1478 * 16 == 23_648  # the log's own "maximum number of tokens" figure
    assert measured.context == 29_000
    assert any("GPU blocks" in warning for warning in measured.warnings)


def test_vllm_v0_budget_lines_with_negative_kv_gt0010():
    """gt-0010 (vLLM issue #13882, RTX 4060, util 0.70): the KV budget is −1.05 GiB, a start-up failure."""
    measured = cal.parse_log(read("gt-0010-vllm-v0.7-qwen25-7b-bnb-rtx4060.log"))
    assert measured.total_memory == 8 * GIB
    assert measured.gpu_util == pytest.approx(0.70)
    # the log's −1.05 GiB is kept in the details; the KV term is 0 (no cache), never a negative size
    assert measured.kv_cache == 0
    assert "-1.05 GiB" in measured.details["rest of the budget for the KV cache"]
    assert any("no memory for the KV cache" in warning for warning in measured.warnings)
    assert abs(measured.activations - 1.42 * GIB) < ROUNDING
    assert abs(measured.overhead - 0.03 * GIB) < ROUNDING
    assert measured.kv_tokens == 0


def test_llamacpp_two_gpus_reports_the_busier_device_gt0016():
    """gt-0016 (llama.cpp build 5622, RTX 4090 + RTX 5090, experts on CPU): CUDA1 holds 648.66 MiB of weights,
    1152 MiB of KV and a 1080 MiB compute buffer; host buffers (CPU_Mapped, CUDA_Host) are not GPU memory."""
    measured = cal.parse_log(read("gt-0016-llamacpp-qwen3-30b-a3b-2gpu.log"))
    assert measured.engine == "llama.cpp"
    assert measured.weights == round(648.66 * MIB)
    assert measured.kv_cache == 1152 * MIB
    assert measured.activations == 1080 * MIB
    assert measured.overhead is None  # no memory-breakdown table in this log
    assert measured.kv_tokens == 16384
    assert measured.context == 16384
    assert measured.kv_dtype == "f16"
    assert measured.details["worst device"] == "CUDA1"


def test_llamacpp_old_spelling_gt0043():
    """gt-0043 (ik_llama.cpp PR #370): the old `llm_load_tensors: CUDA0 buffer size` spelling."""
    measured = cal.parse_log(read("gt-0043-ik-llamacpp-qwen3-30b-a3b-3090ti.log"))
    assert measured.weights == round(17787.83 * MIB)
    assert measured.kv_cache == 3072 * MIB
    assert measured.activations == round(304.75 * MIB)


def test_unrecognised_log_is_a_usage_error():
    with pytest.raises(UsageError):
        cal.parse_log("hello\nworld\n")


def test_calibration_file_round_trip_and_use(tmp_path, monkeypatch):
    """Save the gt-0062 measurement for (vllm, h100), find it again, and apply it to an estimate: the
    activation and overhead terms become the measured ones and the verdict follows from them."""
    monkeypatch.setenv("HFVRAM_CONFIG_DIR", str(tmp_path))
    measured = cal.parse_log(read("gt-0062-vllm-v0.19-llama31-8b-h100.log"))
    record = cal.calibration_record(measured, "h100", "gt-0062.log")
    path = cal.save_calibration(record)
    assert path.parent == tmp_path / "calibration"
    found = cal.find_calibration("vllm", "h100")
    assert found is not None and found[1]["activations"] == measured.activations
    assert cal.find_calibration("vllm", "rtx4090") is None

    spec = llama31_8b_spec()
    est = estimate(spec, parse_gpu_spec("h100"), EngineChoice("vllm"), Workload(context=8192))
    calibrated = cal.apply_calibration(est, found[1], str(path))
    assert calibrated.per_gpu.activations == measured.activations
    assert calibrated.per_gpu.overhead == measured.overhead
    assert calibrated.per_gpu.weights == est.per_gpu.weights
    assert calibrated.per_gpu.total == (
        est.per_gpu.weights + est.per_gpu.kv_cache + measured.activations + measured.overhead
    )
    assert "calibrated" in calibrated.explain["activations"]


def test_malformed_calibration_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": cal.CALIBRATION_SCHEMA, "overhead": -5}))
    with pytest.raises(MalformedFileError) as error:
        cal.load_calibration_file(bad)
    assert error.value.field == "overhead"
    with pytest.raises(UsageError):
        cal.load_calibration_file(tmp_path / "missing.json")


def test_cli_calibrate_json_and_save(tmp_path, monkeypatch):
    monkeypatch.setenv("HFVRAM_CONFIG_DIR", str(tmp_path))
    runner = CliRunner()
    log = str(LOGS / "gt-0062-vllm-v0.19-llama31-8b-h100.log")
    result = runner.invoke(cli, ["calibrate", log, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["measured"]["kv_tokens"] == 952_032
    saved = runner.invoke(cli, ["calibrate", log, "--gpu", "h100", "--save"])
    assert saved.exit_code == 0, saved.output
    assert (tmp_path / "calibration" / "vllm--h100-sxm.json").is_file()  # the alias resolves to its catalogue id
    assert "952,032" in saved.output


def test_cli_calibrate_failures():
    runner = CliRunner()
    missing = runner.invoke(cli, ["calibrate", "/nonexistent/vllm.log"])
    assert missing.exit_code == 2
    assert "not found" in missing.output and "Traceback" not in missing.output
    needs_gpu = runner.invoke(cli, ["calibrate", str(LOGS / "gt-0062-vllm-v0.19-llama31-8b-h100.log"), "--save"])
    assert needs_gpu.exit_code == 2


def test_calibrate_as_subprocess():
    result = subprocess.run(
        [sys.executable, "-m", "hfvram", "calibrate", str(LOGS / "gt-0016-llamacpp-qwen3-30b-a3b-2gpu.log"), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["measured"]["activations"] == 1080 * MIB


def llama31_8b_spec():
    """Llama-3.1-8B as its files state it: 32 layers of 8 KV heads × 128 (fixtures/hub/meta-llama config),
    16,060,522,496 bytes of bf16 weights and 8,030,261,248 parameters (total_size of its fixtures/hub model.safetensors.index.json)."""
    from hfvram.spec import Layer, LayerKind, ModelSpec, Weights

    layers = tuple(Layer(LayerKind.FULL, num_kv_heads=8, head_dim_k=128, head_dim_v=128) for _ in range(32))
    return ModelSpec(
        architecture="LlamaForCausalLM",
        model_type="llama",
        dtype="bfloat16",
        num_layers=32,
        layers=layers,
        hidden_size=4096,
        intermediate_size=14336,
        num_attention_heads=32,
        vocab_size=128256,
        max_position_embeddings=131072,
        weights=Weights(total_bytes=16_060_522_496, params_total=8_030_261_248),
    )


def test_llama_spec_kv_matches_article():
    """Article figure (article 000, docs/methodology.md Sources): Llama-3-8B holds 128 KiB of KV per token at bf16."""
    assert llama31_8b_spec().kv_bytes_per_token(2) == 131072
    assert math.isclose(llama31_8b_spec().kv_bytes_per_token(2) * 131072 / GIB, 16.0)


def test_cli_calibrate_against_prediction_gt0062():
    """gt-0062 (llm-d-planner, vLLM v0.19.0, Llama-3.1-8B-Instruct on H100, util 0.95, fp8 KV, 8192 tokens):
    the prediction for the same run sits next to the measurement, term by term. Measured: weights 14.99 GiB,
    952,032 KV tokens; hfvram's rules must land within a few percent of both."""
    log = str(LOGS / "gt-0062-vllm-v0.19-llama31-8b-h100.log")
    result = CliRunner().invoke(
        cli,
        [
            "calibrate",
            log,
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--offline",
            "--gpu",
            "h100",
            "--engine",
            "vllm@0.19",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    measured, predicted = document["measured"], document["predicted"]
    assert abs(predicted["weights"] - measured["weights"]) / measured["weights"] < 0.01
    assert abs(predicted["kv_tokens"] - 952_032) / 952_032 < 0.03
    table = CliRunner().invoke(
        cli,
        [
            "calibrate",
            log,
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--offline",
            "--gpu",
            "h100",
            "--engine",
            "vllm@0.19",
        ],
    )
    assert "measured" in table.stdout and "hfvram" in table.stdout and "difference" in table.stdout


# ---- issue 17 case 5: hostile log lines (the patterns run in linear time) --------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

#: real logs of every parser (fixtures/logs/README.md)
REAL_LOGS = [
    "gt-0062-vllm-v0.19-llama31-8b-h100.log",
    "gt-0004-vllm-v0-llama31-8b-rtx3090.log",
    "gt-0010-vllm-v0.7-qwen25-7b-bnb-rtx4060.log",
    "gt-0016-llamacpp-qwen3-30b-a3b-2gpu.log",
    "gt-0043-ik-llamacpp-qwen3-30b-a3b-3090ti.log",
]
#: (head, repeated body): lines that start like a pattern's line but never complete one; each repeated to 100 KB+
#: they made the old patterns (``\w+:\s+…``, two ``.*?``, ``llama_kv_cache\w*``) quadratic
HOSTILE = [
    ("", "a"),
    ("", "a: "),
    ("", "llama_kv_cache"),
    ("Model loading took ", "1"),
    ("x:", " "),
    ("Memory profiling results: total_gpu_memory=1GiB ", "peak_torch_memory=1GiB "),
    ("", "Load weight end. "),
    ("", "common_memory_breakdown_print: | - X (yyyyyyyy"),
    ("GPU KV cache size: ", "1,"),
    ("", "llm_load_tensors: "),
    ("", "KV self size = "),
]
PARSERS = (cal.parse_vllm_log, cal.parse_llamacpp_log, cal.parse_sglang_log)


def _hostile_line(head: str, body: str, size: int) -> str:
    return head + body * (size // len(body) + 1)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    log=st.sampled_from(REAL_LOGS),
    hostile=st.sampled_from(HOSTILE),
    size=st.integers(min_value=100_000, max_value=300_000),
    where=st.floats(min_value=0, max_value=1),
    prefix_word=st.integers(min_value=0, max_value=8_000),
)
def test_hostile_lines_do_not_change_what_a_real_log_says(log, hostile, size, where, prefix_word):
    """A real log with a 100–300 KB hostile line inserted (and every real line behind a long word) parses to
    exactly the figures of the log alone, with every parser."""
    lines = read(log).splitlines()
    expected = [cal.measured_dict(parse(read(log))) for parse in PARSERS]
    at = int(where * len(lines))
    noisy = [*lines[:at], _hostile_line(*hostile, size), *lines[at:]]
    assert [cal.measured_dict(parse("\n".join(noisy))) for parse in PARSERS] == expected
    assert cal.parse_log("\n".join(noisy)).engine == cal.parse_log(read(log)).engine
    # a long word before each real line (a prefix the engine did not write) keeps the figures too
    word = "w" * prefix_word
    prefixed = "\n".join(f"{word} {line}" if line else line for line in lines)
    assert [cal.measured_dict(parse(prefixed)) for parse in PARSERS] == expected


def test_megabyte_lines_are_read_in_linear_time_without_the_line_cap():
    """1 MB hostile lines with the line cap lifted, in a child process whose timeout is only a guard (the old
    patterns took ~48 minutes on one such line): the figures are those of the real log alone."""
    script = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
from hfvram.calibrate import logs as cal
cal.MAX_LINE = 10**9
hostile = {HOSTILE!r}
out = []
for name in {REAL_LOGS!r}:
    text = open({str(LOGS)!r} + "/" + name, encoding="utf-8").read()
    want = [cal.measured_dict(p(text)) for p in (cal.parse_vllm_log, cal.parse_llamacpp_log, cal.parse_sglang_log)]
    for head, body in hostile:
        line = head + body * (1_000_000 // len(body) + 1)
        got = [cal.measured_dict(p(line + "\\n" + text)) for p in (cal.parse_vllm_log, cal.parse_llamacpp_log, cal.parse_sglang_log)]
        out.append(got == want)
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert len(results) == len(REAL_LOGS) * len(HOSTILE) and all(results)


def test_lines_are_cut_at_the_cap():
    line = "x" * (cal.MAX_LINE * 3)
    assert [len(part) for part in cal.log_lines(line + "\nModel loading took 1.50 GiB")] == [cal.MAX_LINE, 27]
    assert cal.parse_vllm_log(line + "\nModel loading took 1.50 GiB").weights == round(1.5 * GIB)


def test_the_package_re_exports_each_public_name_from_its_module():
    """``from hfvram import calibrate; calibrate.X`` keeps working after the split into logs / files / apply: every
    re-exported name is the object its module defines, and the list matches the lazy table."""
    import importlib

    from hfvram.calibrate import _HOME

    assert sorted(cal.__all__) == sorted(_HOME)
    for name, home in _HOME.items():
        assert getattr(cal, name) is getattr(importlib.import_module(f"hfvram.calibrate.{home}"), name)
    assert cal.parse_log is cal.logs.parse_log and cal.calibration_files is cal.files.calibration_files
    with pytest.raises(AttributeError):
        _ = cal.VLLM_WEIGHTS  # the patterns stay in hfvram.calibrate.logs


# ---- issue 17 case 6 (the calibrate side): logs that are not regular files, or endless ------------------------

import os  # noqa: E402


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_calibrate_dev_zero_is_one_line_exit_2():
    from cli_support import run_hfvram

    result = run_hfvram("calibrate", "/dev/zero", timeout=120)
    assert result.returncode == 2 and "not a regular file" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_calibrate_fifo_does_not_wait_for_a_writer(tmp_path):
    from cli_support import run_hfvram

    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    result = run_hfvram("calibrate", str(fifo), timeout=120)
    assert result.returncode == 2 and "not a regular file" in result.stderr, result.stderr
