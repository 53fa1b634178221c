"""Inputs within the documented caps cost what the answer costs (issue 27: a 13 MB config.json took 374 MB, a 59 MB
calibrate log more than 300 MB in 3 s; a 100,000-character `models --list` argument came back as a 100 KB error).
The real CLI in a fresh interpreter; CPU time and peak memory from the child's own counters (test_hostile_round3)."""

from __future__ import annotations

import json

from cli_support import LLAMA_FOLDER, ROOT
from test_hostile_round3 import CPU_SECONDS, PEAK_BYTES, measured

LOG = ROOT / "fixtures" / "logs" / "gt-0062-vllm-v0.19-llama31-8b-h100.log"


def test_a_13_mb_config_json_is_read_within_the_goal(tmp_path):
    """A real config.json (fixtures/llama) with a 13 MB id2label table (300,000 labels), under the 16 MiB cap."""
    config = json.loads((LLAMA_FOLDER / "config.json").read_text())
    config["id2label"] = {str(i): f"LABEL_{i}_" + "x" * 24 for i in range(300_000)}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert 12_000_000 < (tmp_path / "config.json").stat().st_size < 16 * 1024 * 1024
    code, out, err, cpu, peak = measured("check", str(tmp_path), "--gpu", "h100", "--json")
    print(f"{cpu:.1f} s CPU, {peak / 2**20:.0f} MiB")
    assert code in (0, 1), err[-300:]
    assert json.loads(out)["model"]["num_layers"] == config["num_hidden_layers"]
    assert cpu <= CPU_SECONDS and peak <= PEAK_BYTES, (cpu, peak)


def test_a_59_mb_calibrate_log_is_read_within_the_goal(tmp_path):
    """The published log (fixtures/logs/gt-0062…) with 59 MB of unrelated lines before it, under the 64 MiB cap."""
    text = LOG.read_text()
    noise = "INFO 05-06 12:00:00 [engine.py:1] request 123 finished in 0.01 s, nothing to see here\n"
    log = tmp_path / "big.log"
    log.write_text(noise * (59_000_000 // len(noise)) + text)
    code, out, err, cpu, peak = measured("calibrate", str(log), "--gpu", "h100", "--json")
    print(f"{cpu:.1f} s CPU, {peak / 2**20:.0f} MiB")
    assert code == 0, err[-300:]
    assert json.loads(out)["measured"]
    assert cpu <= CPU_SECONDS and peak <= PEAK_BYTES, (cpu, peak)


def test_a_100k_character_models_list_argument_is_one_short_line():
    """No repo id holds it: exit 1 (README: "With --list: 0, or 1 when no repo id holds QUERY") and one line that
    quotes its first 80 characters."""
    code, out, err, cpu, peak = measured("models", "--list", "x" * 100_000)
    lines = err.splitlines()
    assert code == 1 and out == "" and len(lines) == 1 and len(lines[0]) < 200, err[:300]
    assert cpu <= CPU_SECONDS and peak <= PEAK_BYTES
