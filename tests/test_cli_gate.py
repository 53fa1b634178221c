"""A gate a pipeline can trust and output that reads right everywhere (issue 14, items 1-10), and model strings
that cannot drive the terminal (issue 17, item 7, and the command-line cases of items 9 and 12). Each test runs
the real command line (click's runner or a subprocess) on real fixture files and the embedded catalogue.

Golden figures and where they come from:
- Llama-3.1-8B-Instruct's max_position_embeddings 131,072: fixtures/hub/meta-llama/Llama-3.1-8B-Instruct/config.json.
- SmolLM2-135M's KV shape (30 layers, 3 KV heads × 64 dims per K and per V): the GGUF header in
  fixtures/headers/SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf; q8_0 stores 32 elements in 34 bytes, f16 in 2 bytes
  each (ggml's block_q8_0), so K = 5,760 × 34 / 32 = 6,120 B and V = 5,760 × 2 = 11,520 B per token.
- gt-0004's measured activations: fixtures/logs/gt-0004-vllm-v0-llama31-8b-rtx3090.log, read by `hfvram calibrate`.
"""

from __future__ import annotations

import itertools
import json
import os
import pty
import re
import stat
import struct
import subprocess
import sys

import pytest
from cli_support import FIXTURES, LLAMA_FOLDER, ROOT, SMOLLM_GGUF, run_hfvram, validate
from click.testing import CliRunner

from hfvram.cli import cli

runner = CliRunner()
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_MAX = 131072  # config.json max_position_embeddings
V0_LOG = FIXTURES / "logs" / "gt-0004-vllm-v0-llama31-8b-rtx3090.log"


def invoke(*args: str, env: dict | None = None, stdin: str | None = None):
    return runner.invoke(cli, list(args), env=env, input=stdin)


def check_json(*args: str, env: dict | None = None) -> tuple[int, dict]:
    result = invoke("check", *args, "--json", env=env)
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(document)
    return result.exit_code, document


def one_line_error(result, code: int) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("hfvram: error: "), result.stderr
    return lines[0]


# ---- 1. a context the engine refuses ----------------------------------------------------------------------------


@pytest.mark.parametrize(("engine", "setting"), [("vllm", "max_model_len"), ("sglang", "context_length")])
def test_context_above_the_model_limit_is_an_engine_rule_refusal(engine, setting):
    code, document = check_json(LLAMA, "--gpu", "h200", "--context", "200k", "--offline", "--engine", engine)
    assert code == 1 and document["verdict"] == "does_not_fit"
    assert document["verdict_reason"].startswith(f"engine rule: {engine} refuses {setting} 204,800")
    assert f"max_position_embeddings {LLAMA_MAX:,}" in document["verdict_reason"]
    assert document["capacity"]["max_context"] == LLAMA_MAX  # never more than the model's limit
    assert document["capacity"]["max_concurrency"] == 0  # a refused layout serves no request
    table = invoke("check", LLAMA, "--gpu", "h200", "--context", "200k", "--offline", "--engine", engine)
    assert table.exit_code == 1 and "DOES NOT FIT" in table.stdout


def test_the_override_lifts_the_refusal_and_1m_never_claims_more_than_the_limit():
    code, lifted = check_json(
        LLAMA, "--gpu", "h200", "--context", "200k", "--offline", "--set", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
    )
    assert code == 0 and lifted["verdict"] == "fits"
    assert not any("not a known" in w or "unknown setting" in w for w in lifted["warnings"]), lifted["warnings"]
    result = invoke("check", LLAMA, "--gpu", "h200", "--context", "1M", "--offline")
    assert result.exit_code == 1
    assert f"Longest context at concurrency 1: {LLAMA_MAX:,} tokens (the model's limit)" in result.stdout
    assert "910,048 tokens (the model's limit)" not in result.stdout


# ---- 2. a gate without a GPU -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("check", LLAMA, "--offline", "--fail-on", "tight"),
        ("check", LLAMA, "--offline", "--gpu", ""),
        ("check", LLAMA, "--offline", "--gpu", "  ", "--fail-on", "tight"),
        ("scan", "-", "--offline", "--gpu", ""),
        ("scan", "-", "--offline", "--fail-on", "tight"),
        ("fit", LLAMA, "--offline", "--gpu", ""),
    ],
)
def test_fail_on_without_a_gpu_and_an_empty_gpu_are_usage_errors(args):
    line = one_line_error(invoke(*args, stdin=f"{LLAMA}\n"), 2)
    assert "--gpu" in line


# ---- 3. one meaning of max_context and of the pool ---------------------------------------------------------------


ENGINES = ("vllm", "sglang", "tensorrt-llm", "lmdeploy", "llama.cpp", "ollama", "mlx", "exllamav2", "transformers")


def test_longest_context_means_the_same_for_every_engine_and_for_fit():
    """An 8B model on an H200 has room for its whole 131,072-token context at one request, whatever the engine."""
    for engine in ENGINES:
        _, document = check_json(LLAMA, "--gpu", "h200", "--context", "8k", "--offline", "--engine", engine)
        assert document["capacity"]["max_context"] == LLAMA_MAX, (engine, document["capacity"])
        assert document["capacity"]["kv_pool_sized_by"] in ("memory", "context", "none")
        fit = json.loads(
            invoke("fit", LLAMA, "--gpu", "h200", "--context", "8k", "--offline", "--engine", engine, "--json").stdout
        )
        assert fit["max_context"] == document["capacity"]["max_context"], engine
        assert fit["max_concurrency"] == document["capacity"]["max_concurrency"], engine


def test_max_context_agrees_with_the_verdict_at_that_context():
    """The longest context is the largest --context that is not does_not_fit: one token more does not fit."""
    _, document = check_json("Qwen/Qwen3-8B", "--gpu", "rtx4090", "--context", "8k", "--offline", "--engine", "sglang")
    longest = document["capacity"]["max_context"]
    assert 8192 < longest < 40960
    _, at = check_json(
        "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--context", str(longest), "--offline", "--engine", "sglang"
    )
    _, past = check_json(
        "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--context", str(longest + 64), "--offline", "--engine", "sglang"
    )
    assert at["verdict"] != "does_not_fit" and past["verdict"] == "does_not_fit"


def test_the_meaning_is_documented_in_the_schema_and_the_methodology():
    schema = json.loads((ROOT / "hfvram" / "data" / "schema" / "check.schema.json").read_text(encoding="utf-8"))
    capacity = schema["$defs"]["result"]["properties"]["capacity"]["properties"]
    assert "largest --context" in capacity["max_context"]["description"]
    assert "sized by" in capacity["kv_tokens"]["description"] or "size it by" in capacity["kv_tokens"]["description"]
    methodology = (ROOT / "docs" / "methodology.md").read_text(encoding="utf-8")
    assert "largest `--context`" in methodology and "kv_pool_sized_by" in methodology


# ---- 4. calibrations keyed by engine, release range, GPU and model family ----------------------------------------


def test_a_calibration_applies_only_where_engine_release_gpu_and_family_match(tmp_path):
    env = {"HFVRAM_CONFIG_DIR": str(tmp_path)}
    saved = invoke(
        "calibrate",
        str(V0_LOG),
        "--gpu",
        "rtx3090",
        "--engine",
        "vllm@0.6.4",
        "--model",
        LLAMA,
        "--offline",
        "--save",
        "--json",
        env=env,
    )
    assert saved.exit_code == 0, saved.output
    record = json.loads(next((tmp_path / "calibration").glob("*.json")).read_text())
    assert (record["engine"], record["engine_rules"], record["gpu"], record["model"]["family"]) == (
        "vllm",
        "0.6",
        "rtx3090",
        "llama",
    )
    args = ("--gpu", "rtx3090", "--context", "8k", "--offline")
    _, plain_qwen = check_json("Qwen/Qwen3-8B", *args, "--engine", "vllm@0.6")
    _, other_family = check_json("Qwen/Qwen3-8B", *args, "--engine", "vllm@0.6", env=env)
    assert other_family["per_gpu"]["activations"] == plain_qwen["per_gpu"]["activations"]
    assert any("not applied" in w and "llama model, this is qwen3" in w for w in other_family["warnings"])
    _, plain_llama = check_json(LLAMA, *args, env=env)  # the 0.21 rules: another release range
    assert any("not applied" in w and "0.6 rules" in w for w in plain_llama["warnings"])
    assert plain_llama["per_gpu"]["activations"] != record["activations"]
    _, matching = check_json(LLAMA, *args, "--engine", "vllm@0.6", env=env)
    assert matching["per_gpu"]["activations"] == record["activations"]


def test_a_calibration_saved_without_model_is_named_not_applied(tmp_path):
    env = {"HFVRAM_CONFIG_DIR": str(tmp_path)}
    saved = invoke("calibrate", str(V0_LOG), "--gpu", "rtx3090", "--engine", "vllm@0.6.4", "--save", env=env)
    assert saved.exit_code == 0 and "saved without --model" in saved.stdout
    _, document = check_json(LLAMA, "--gpu", "rtx3090", "--offline", "--engine", "vllm@0.6", env=env)
    _, plain = check_json(LLAMA, "--gpu", "rtx3090", "--offline", "--engine", "vllm@0.6")
    assert document["per_gpu"] == plain["per_gpu"]
    assert any("not applied" in w and "model family it measured is unknown" in w for w in document["warnings"])


# ---- 5. K and V bytes from the estimator ---------------------------------------------------------------------------


def test_different_k_and_v_cache_types_are_sized_by_the_estimator():
    code, document = check_json(str(SMOLLM_GGUF), "--gpu", "rtx4090", "--set", "ctk=q8_0", "--set", "ctv=f16")
    assert code == 0
    model = document["model"]
    assert model["kv_dtype"] == "q8_0/f16"
    assert (model["kv_k_bytes_per_token"], model["kv_v_bytes_per_token"]) == (6120, 11520)
    assert model["kv_bytes_per_token"] == 17640
    # the report's figure is the one the KV cache term was sized with: 8,192 cells of 17,640 bytes
    assert document["per_gpu"]["kv_cache"] == document["capacity"]["kv_tokens"] * 17640
    table = invoke("check", str(SMOLLM_GGUF), "--gpu", "rtx4090", "--set", "ctk=q8_0", "--set", "ctv=f16")
    assert table.exit_code == 0 and "KV 17,640 B/token" in table.stdout


# ---- 6. capacity lines that agree with each other -------------------------------------------------------------


def test_a_context_sized_pool_is_not_called_room_for_two_requests():
    result = invoke("check", str(SMOLLM_GGUF), "--gpu", "rtx4090", "--context", "16k")
    assert "KV cache pool: 16,384 tokens (sized by the context: 1.0 × 16k)" in result.stdout
    assert "room for 2.0 concurrent 16k" not in result.stdout


def test_a_memory_pool_keeps_its_bytes_when_vllm_counts_its_tokens_by_max_model_len():
    """gpt-oss-120b (sliding-window layers): vLLM prints its pool as requests × max_model_len, so the tokens move
    with --context; the bytes the budget leaves do not, and the line says both."""
    lines, longest = [], set()
    for context in ("8k", "32k"):
        _, document = check_json("openai/gpt-oss-120b", "--gpu", "h100", "--offline", "--context", context)
        longest.add(document["capacity"]["max_context"])
        result = invoke("check", "openai/gpt-oss-120b", "--gpu", "h100", "--offline", "--context", context)
        lines.append(next(line for line in result.stdout.splitlines() if line.startswith("KV cache pool:")))
    sizes = {re.search(r"\(([\d.]+ GiB), what the memory budget leaves\)", line)[1] for line in lines}
    assert len(sizes) == 1, lines
    assert len(longest) == 1  # the longest context is a property of the pool, not of the --context asked


def test_fit_says_fewest_gpus_that_fit_and_names_a_tight_count_apart():
    result = invoke("fit", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--context", "32k")
    assert "TIGHT" in result.stdout
    assert "fewest rtx4090 that fit: 2 (1 runs, but tight" in result.stdout
    document = json.loads(
        invoke("fit", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--context", "32k", "--json").stdout
    )
    assert (document["smallest_gpu_count"], document["smallest_gpu_count_tight"]) == (2, 1)


def test_a_refused_layout_claims_no_room():
    result = invoke("check", LLAMA, "--gpu", "h200", "--context", "200k", "--offline")
    assert "concurrent 200k requests" not in result.stdout


# ---- 7. conflicts resolved loudly ---------------------------------------------------------------------------------


def test_conflicting_model_or_engine_is_a_usage_error():
    line = one_line_error(
        invoke("check", "Qwen/Qwen3-8B", "--gpu", "h100", "--offline", "--engine-args", f"vllm serve {LLAMA}"), 2
    )
    assert "Qwen/Qwen3-8B" in line and LLAMA in line
    line = one_line_error(
        invoke("check", "--gpu", "h100", "--offline", "--engine", "sglang", "--engine-args", f"vllm serve {LLAMA}"), 2
    )
    assert "--engine sglang" in line
    assert one_line_error(invoke("check", LLAMA, "--gpu", "h100", "--offline", "--format", "markdown", "--json"), 2)
    assert one_line_error(invoke("check", LLAMA, "--gpu", "h100", "--offline", "--format", "json", "--markdown"), 2)


def test_an_explicit_option_overrides_the_pasted_one_with_a_warning():
    _, document = check_json(
        "--gpu",
        "h100x2",
        "--offline",
        "--context",
        "32k",
        "--tp",
        "2",
        "--engine-args",
        f"vllm serve {LLAMA} --max-model-len 16384 -tp 1",
    )
    assert document["workload"]["context"] == 32768 and document["engine"]["max_model_len"] == 32768
    assert document["parallel"]["tp"] == 2
    warnings = document["warnings"]
    assert "--context 32768 overrides the pasted --max-model-len 16384" in warnings
    assert "--tp 2 overrides the pasted --tensor-parallel-size 1" in warnings


# ---- 8. tables at every width and in every encoding ------------------------------------------------------------


LONG_ID = "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"


def test_scan_at_80_columns_never_cuts_a_figure_nor_fakes_a_prefix():
    stdin = f"{LONG_ID}\nQwen/Qwen3-0.6B\nQwen/Qwen2.5-72B\n"
    table = invoke("scan", "-", "--gpu", "rtx4090", "--offline", env={"COLUMNS": "80"}, stdin=stdin)
    rows = [
        json.loads(line)
        for line in invoke("scan", "-", "--gpu", "rtx4090", "--offline", "--json", stdin=stdin).stdout.splitlines()
    ]
    assert all(len(line) <= 80 for line in table.stdout.splitlines()), table.stdout
    for row in rows:
        assert f"{row['utilization'] * 100:.0f}%" in table.stdout  # 2669% whole, not "266…"
    assert "requests" in table.stdout  # the header is a figure's name: not cut either
    # a long id shortens as fitwidth does (the org dropped first, then one ellipsis in the middle): the name shown
    # starts as the model's own name starts and ends as it ends, never a cut that fakes another prefix
    shown = next(line.split()[0] for line in table.stdout.splitlines() if "2689%" in line or "Llama" in line)
    head, _, tail = shown.partition("…")
    assert "…/RedHatAI" not in table.stdout and tail
    assert LONG_ID.split("/", 1)[1].startswith(head) and LONG_ID.endswith(tail)


def test_without_colour_each_term_has_its_own_glyph():
    result = invoke("check", "Qwen/Qwen3-0.6B", "--gpu", "rtx4090", "--offline", env={"NO_COLOR": "1"})
    bar = next(line for line in result.stdout.splitlines() if re.fullmatch(r"W+K+A*O+\.*-*", line.strip()))
    assert len(set(bar)) >= 4
    assert "W weights  K KV cache  A activations  O overhead  . free  - reserve" in result.stdout


def _pty_width_run(columns: int, *args: str) -> str:
    """hfvram with stdout piped (as into `less`) and stderr on a terminal ``columns`` wide."""
    import fcntl
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    try:
        result = subprocess.run(
            [sys.executable, "-m", "hfvram", *args],
            stdout=subprocess.PIPE,
            stderr=slave,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env=env,
            timeout=120,
        )
    finally:
        os.close(slave)
        os.close(master)
    return result.stdout.decode("utf-8")


def test_piped_output_takes_the_width_of_the_terminal_the_user_sees():
    text = _pty_width_run(90, "check", "Qwen/Qwen3-0.6B", "--gpu", "rtx4090", "--offline")
    widest = max(len(line) for line in text.splitlines())
    assert 80 < widest <= 90, widest


def test_an_ascii_only_stdout_gets_plain_ascii_not_an_internal_error():
    for args in (
        ("check", "Qwen/Qwen3-0.6B", "--gpu", "rtx4090", "--offline"),
        ("fit", "Qwen/Qwen3-0.6B", "--gpu", "rtx4090", "--offline"),
        ("check", "Qwen/Qwen3-0.6B", "--gpu", "rtx4090", "--offline", "--markdown"),
    ):
        result = run_hfvram(*args, env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"})
        assert result.returncode == 0, result.stderr
        assert result.stdout.isascii() and "internal error" not in result.stderr
    table = run_hfvram("check", "Qwen/Qwen3-0.6B", "--gpu", "rtx4090", "--offline", env={"PYTHONIOENCODING": "ascii"})
    assert "+---" in table.stdout and "W weights" in table.stdout and "<=" in table.stdout
    document = run_hfvram(
        "check", "Qwen/Qwen3-0.6B", "--gpu", "rtx4090", "--offline", "--json", env={"PYTHONIOENCODING": "ascii"}
    )
    assert json.loads(document.stdout)["verdict"] == "fits"


# ---- 9. fit --plot -------------------------------------------------------------------------------------------


def test_plot_contexts_are_evenly_spaced_up_to_the_model_limit():
    from hfvram.report.plot import plot_contexts

    contexts = plot_contexts(LLAMA_MAX)
    steps = {b - a for a, b in itertools.pairwise(contexts)}
    assert max(steps) - min(steps) <= 1 and contexts[-1] == LLAMA_MAX and len(contexts) >= 32


def test_fit_plot_draws_every_model_linear_with_the_crossing_marked(tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "two.svg"
    result = invoke(
        "fit", "Qwen/Qwen3-8B", LLAMA, "--gpu", "rtx4090", "--offline", "--context", "8k", "--plot", str(target)
    )
    assert result.exit_code == 0, result.output
    svg = target.read_text(encoding="utf-8")
    documents = [
        json.loads(invoke("fit", model, "--gpu", "rtx4090", "--offline", "--context", "8k", "--json").stdout)
        for model in ("Qwen/Qwen3-8B", LLAMA)
    ]
    assert "Qwen/Qwen3-8B" in svg and LLAMA in svg  # one panel per model
    for document in documents:
        assert f"longest context {document['max_context']:,}" in svg
    assert "linear" in svg and svg.count('<g id="axes_') == 2
    assert '<g id="legend_1">' in svg


# ---- 10. messages ---------------------------------------------------------------------------------------------


def test_messages_say_what_is_wrong():
    line = one_line_error(invoke("check", LLAMA, "--gpu", "h100", "--offline", "--concurrency", "0"), 2)
    assert "--concurrency must be a whole number of requests" in line and "tokens" not in line
    _, document = check_json("--gpu", "h100", "--offline", "--engine-args", f"vllm serve {LLAMA} --max-model-lenn 8192")
    assert any("did you mean --max-model-len?" in w for w in document["warnings"]), document["warnings"]
    assert not any("not a memory setting" in w for w in document["warnings"])
    _, huge = check_json("meta-llama/Meta-Llama-3.1-405B", "--gpu", "rtx4090", "--offline", "--context", "8k")
    assert not any("Try increasing `gpu_memory_utilization`" in w for w in huge["warnings"])
    assert any("No gpu_memory_utilization closes that" in w for w in huge["warnings"])


def test_fit_exit_codes_follow_the_verdict():
    assert (
        invoke("fit", "meta-llama/Meta-Llama-3.1-405B", "--gpu", "rtx4090", "--offline", "--context", "8k").exit_code
        == 1
    )
    assert invoke("fit", "Qwen/Qwen3-0.6B", "--gpu", "rtx4090", "--offline", "--context", "8k").exit_code == 0
    tight = ("fit", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline", "--context", "32k")
    assert invoke(*tight).exit_code == 0 and invoke(*tight, "--fail-on", "tight").exit_code == 1
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`fit`" in readme.split("## Exit codes", 1)[1].split("##", 1)[0]


# ---- issue 17 item 7: model strings are text, never markup or terminal commands --------------------------------


HOSTILE = "[/bold]\x1b]0;pwned\x07[link=http://evil.example]x[/link]\x1b[2J\u202e"


@pytest.fixture
def hostile_model(tmp_path):
    folder = tmp_path / "hostile"
    folder.mkdir()
    for item in LLAMA_FOLDER.iterdir():
        if item.name != "config.json":
            (folder / item.name).symlink_to(item)
    config = json.loads((LLAMA_FOLDER / "config.json").read_text(encoding="utf-8"))
    config["architectures"] = [HOSTILE]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.mark.parametrize("output", [(), ("--markdown",), ("--json",), ("--explain",)])
def test_a_hostile_architecture_name_is_printed_as_text(hostile_model, output):
    result = invoke("check", str(hostile_model), "--gpu", "h100", "--context", "8k", *output)
    assert result.exit_code == 0, result.output
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in result.stdout
    if output in ((), ("--explain",)):
        assert "[/bold]\\x1b]0;pwned\\x07[link=http://evil.example]x[/link]\\x1b[2J\\u202e" in result.stdout
    elif output == ("--json",):
        assert json.loads(result.stdout)["model"]["architecture"] == HOSTILE  # JSON keeps the exact value, escaped
        assert "\\u202e" in result.stdout
    inspect = invoke("inspect", str(hostile_model))
    assert inspect.exit_code == 0 and "\x1b" not in inspect.stdout and "[/bold]" in inspect.stdout


def test_a_hostile_scan_list_line_is_one_error_row():
    stdin = "[/]\nQwen/Qwen3-0.6B\n[link=http://evil.example]x[/link]\n\x1b]0;pwned\x07\n"
    for fmt in ("table", "markdown", "csv", "jsonl"):
        result = invoke("scan", "-", "--gpu", "h100", "--offline", "--format", fmt, stdin=stdin)
        assert result.exit_code == 3, result.output
        assert "internal error" not in result.output and "\x1b" not in result.stdout and "\x07" not in result.stdout
        assert "Qwen/Qwen3-0.6B" in result.stdout
    # issue 27: a line that is not a SOURCE is named by its line number only (the list may be any file)
    table = invoke("scan", "-", "--gpu", "h100", "--offline", stdin=stdin)
    assert "line 1" in table.stdout and "line 3" in table.stdout and "line 4" in table.stdout
    assert "[/]" not in table.stdout and "evil.example" not in table.stdout and "pwned" not in table.stdout
    markdown = invoke("scan", "-", "--gpu", "h100", "--offline", "--markdown", stdin=stdin)
    assert "evil.example" not in markdown.stdout  # no link in a pull-request comment


def test_an_error_message_with_escapes_is_escaped(tmp_path):
    folder = tmp_path / "model\x1b[2J\x1b]0;pwned\x07"
    folder.mkdir()
    result = invoke("check", str(folder), "--gpu", "h100")
    line = one_line_error(result, 3)
    assert "\x1b" not in result.output and "\\x1b[2J\\x1b]0;pwned\\x07 has no config.json" in line


# ---- issue 17 items 9 and 12: hostile scan lists and output streams ---------------------------------------------


def test_a_binary_scan_list_is_one_line_exit_2(tmp_path):
    binary = tmp_path / "list.bin"
    binary.write_bytes(bytes(range(256)) * 8)
    assert "binary" in one_line_error(invoke("scan", str(binary), "--gpu", "h100"), 2)
    latin = tmp_path / "list.txt"
    latin.write_bytes(b"Qwen/Qwen3-0.6B\n\xe9t\xe9\n")
    assert "not UTF-8" in one_line_error(invoke("scan", str(latin), "--gpu", "h100"), 2)


def test_a_utf8_bom_in_a_scan_list_is_not_part_of_the_first_source(tmp_path):
    listing = tmp_path / "list.txt"
    listing.write_bytes("\ufeffQwen/Qwen3-0.6B\r\n".encode())
    result = invoke("scan", str(listing), "--gpu", "h100", "--offline", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["source"]["repo_id"] == "Qwen/Qwen3-0.6B"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_output_device_is_one_line():
    for args in (("--json",), ()):
        with open("/dev/full", "w") as full:
            result = subprocess.run(
                [sys.executable, "-m", "hfvram", "check", "Qwen/Qwen3-0.6B", "--gpu", "h100", "--offline", *args],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                timeout=120,
            )
        assert result.returncode == 3
        assert result.stderr.strip() == "hfvram: error: cannot write the output: No space left on device"
    saved = invoke("calibrate", str(V0_LOG), "--gpu", "rtx3090", "--save", "--output", "/dev/full")
    # README 'Exit codes': output that cannot be written is exit 3; the device is written, never replaced
    assert "cannot write --output /dev/full" in one_line_error(saved, 3)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_closed_pipe_ends_the_scan_quietly():
    from hfvram.sources.catalog import catalog_repos

    # distinct sources: a repeated line is answered once (issue 27), so 400 copies would print one row
    sources = "".join(f"{repo}\n" for repo in catalog_repos()[:400])
    process = subprocess.Popen(
        [sys.executable, "-m", "hfvram", "scan", "-", "--gpu", "h100", "--offline", "--format", "jsonl", "-j", "2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    process.stdin.write(sources.encode())
    process.stdin.close()
    first = process.stdout.readline()  # `| head -1`
    process.stdout.close()
    stderr = process.stderr.read().decode()
    code = process.wait(timeout=120)
    assert "source" in json.loads(first)
    assert code == 141 and "Traceback" not in stderr and "Error" not in stderr, stderr


@pytest.mark.parametrize(
    "args",
    [
        ("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline"),
        ("fit", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline"),
        ("models", "--gpu", "rtx4090", "--offline"),
        ("gpus",),
    ],
)
def test_a_closed_pipe_exits_141_for_every_table(args):
    """``hfvram check … | head -1``: the reader went away, which is not "does not fit" (exit 1): 141, as scan."""
    process = subprocess.Popen(
        [sys.executable, "-m", "hfvram", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.read(1)  # `| head -c 1`: read a little, then close the pipe before the table is written
    process.stdout.close()
    stderr = process.stderr.read().decode()
    code = process.wait(timeout=120)
    assert code == 141 and "Traceback" not in stderr, (code, stderr)
