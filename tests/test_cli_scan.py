"""`hfvram scan`: many sources at once; a broken source is an error row, never a crash (README.md)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from cli_support import LLAMA_FOLDER, SMOLLM_GGUF, run_hfvram, validate
from click.testing import CliRunner

from hfvram.cli import cli
from hfvram.pipeline import read_source_list, scan_sort_key
from hfvram.sources.catalog import catalog_repos

runner = CliRunner()


@pytest.fixture
def malformed_folder(tmp_path):
    folder = tmp_path / "malformed-model"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": ', "utf-8")
    return folder


def scan_jsonl(list_text: str, *args: str) -> tuple[int, list[dict]]:
    result = runner.invoke(cli, ["scan", "-", "--json", *args], input=list_text)
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    for row in rows:
        validate(row)
    return result.exit_code, rows


def test_read_source_list_skips_comments_and_blanks():
    text = "# models\n\norg/a   # trailing comment\n   \n  ./folder\n#org/skipped\n"
    assert read_source_list(text) == ["org/a", "./folder"]


@pytest.mark.slow
def test_whole_catalogue_offline_with_broken_entries(malformed_folder):
    """Every repo of the embedded catalogue, plus a missing repo and a malformed local config: the broken two
    become error rows, every catalogue repo is still reported, and the exit code is 3."""
    repos = catalog_repos()
    listing = "\n".join(["# the whole catalogue", *repos, "nobody/does-not-exist", str(malformed_folder)])
    result = runner.invoke(
        cli, ["scan", "-", "--offline", "--gpu", "h100", "--context", "8k", "--format", "jsonl"], input=listing
    )
    assert result.exit_code == 3, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    for row in rows:
        validate(row)
    errors = [row for row in rows if "error" in row]
    good = [row for row in rows if "error" not in row]
    assert len(rows) == len(repos) + 2
    assert {row["source"]["text"] for row in errors} == {"nobody/does-not-exist", str(malformed_folder)}
    assert {row["source"]["repo_id"] for row in good} == set(repos)
    assert "Traceback" not in result.output


def test_summary_table_sorted_by_verdict_then_memory(malformed_folder):
    listing = f"meta-llama/Meta-Llama-3.1-405B\nQwen/Qwen3-0.6B\n{malformed_folder}\nmeta-llama/Llama-3.1-8B-Instruct\n"
    result = runner.invoke(cli, ["scan", "-", "--offline", "--gpu", "rtx4090", "--context", "128k"], input=listing)
    assert result.exit_code == 3
    out = result.stdout
    assert "Scan summary" in out
    positions = [out.index(name) for name in ("Qwen/Qwen3-0.6B", "Meta-Llama-3.1-405B", "malformed-model")]
    assert positions == sorted(positions)  # fits first, does-not-fit next, errors last


def test_sort_key_orders_fits_tight_does_not_fit_errors():
    def row(verdict, total):
        return {"verdict": verdict, "per_gpu": {"total": total}, "source": {"repo_id": verdict}}

    rows = [
        row("does_not_fit", 1),
        {"error": {}, "source": {"text": "x"}},
        row("fits", 9),
        row("tight", 5),
        row("fits", 2),
    ]
    ordered = sorted(rows, key=scan_sort_key)
    assert [r.get("verdict") for r in ordered] == ["fits", "fits", "tight", "does_not_fit", None]
    assert ordered[0]["per_gpu"]["total"] == 2


def test_exit_1_when_all_read_and_one_does_not_fit():
    code, rows = scan_jsonl(
        "Qwen/Qwen3-0.6B\nmeta-llama/Meta-Llama-3.1-405B\n", "--offline", "--gpu", "rtx4090", "--context", "32k"
    )
    assert code == 1
    assert sorted(row["verdict"] for row in rows) == ["does_not_fit", "fits"]


def test_exit_0_when_everything_fits():
    code, rows = scan_jsonl(f"Qwen/Qwen3-0.6B\n{LLAMA_FOLDER}\n", "--offline", "--gpu", "h100", "--context", "8k")
    assert code == 0 and len(rows) == 2


def test_hub_gated_and_missing_do_not_stop_the_others(hub):
    hub.gated.add("meta-llama/Llama-3.2-1B")
    listing = "Qwen/Qwen3-8B\nmeta-llama/Llama-3.2-1B\nnobody/nothing\nmeta-llama/Llama-3.1-8B-Instruct\n"
    code, rows = scan_jsonl(listing, "--gpu", "h100", "--context", "8k", "--jobs", "4")
    assert code == 3
    kinds = {row["source"].get("text"): row["error"]["kind"] for row in rows if "error" in row}
    assert kinds == {"meta-llama/Llama-3.2-1B": "gated", "nobody/nothing": "not_found"}
    assert {row["source"]["repo_id"] for row in rows if "error" not in row} == {
        "Qwen/Qwen3-8B",
        "meta-llama/Llama-3.1-8B-Instruct",
    }


def test_csv_markdown_and_json_formats(malformed_folder):
    listing = f"Qwen/Qwen3-0.6B\n{malformed_folder}\n"
    args = ["scan", "-", "--offline", "--gpu", "h100", "--context", "8k"]
    as_csv = runner.invoke(cli, [*args, "--format", "csv"], input=listing)
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert next(row["source"] for row in rows) == "Qwen/Qwen3-0.6B"
    assert rows[0]["verdict"] == "fits" and int(rows[0]["total"]) > 0
    assert rows[1]["error_kind"] and rows[1]["error_message"]
    as_md = runner.invoke(cli, [*args, "--format", "markdown"], input=listing)
    assert "| source | verdict |" in as_md.stdout and "error (malformed): " in as_md.stdout
    as_json = runner.invoke(cli, [*args, "--format", "json"], input=listing)
    document = json.loads(as_json.stdout)
    assert isinstance(document, list) and len(document) == 2


def test_scan_as_subprocess_streams_jsonl(malformed_folder):
    result = run_hfvram(
        "scan",
        "-",
        "--offline",
        "--gpu",
        "h100",
        "--context",
        "8k",
        "--json",
        stdin=f"Qwen/Qwen3-0.6B\n{malformed_folder}\n",
    )
    assert result.returncode == 3, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 2 and sum("error" in row for row in rows) == 1
    assert "Traceback" not in result.stderr


def test_usage_errors_exit_2():
    assert runner.invoke(cli, ["scan", "-"], input="# nothing\n\n").exit_code == 2
    assert runner.invoke(cli, ["scan", "/nonexistent/list.txt"]).exit_code == 2
    bad_gpu = runner.invoke(cli, ["scan", "-", "--gpu", "rtx4091"], input="Qwen/Qwen3-0.6B\n")
    assert bad_gpu.exit_code == 2 and "rtx4090" in bad_gpu.output


def test_gguf_and_folder_in_one_list():
    _code, rows = scan_jsonl(f"{SMOLLM_GGUF}\n{LLAMA_FOLDER}\n", "--gpu", "rtx4090", "--context", "4k")
    assert {row["source"]["kind"] for row in rows} == {"gguf", "local"}
    assert {row["engine"]["name"] for row in rows} == {"llama.cpp", "vllm"}


def test_ctrl_c_prints_what_finished(hub):
    """SIGINT in the middle of a slow scan (the local Hub answers after 0.4 s): the finished rows are printed,
    the exit code is 130, no traceback."""
    import signal
    import subprocess
    import sys

    from cli_support import ROOT

    hub.latency = 0.4
    repos = [
        "Qwen/Qwen3-8B",
        "Qwen/Qwen3-14B",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen2.5-7B",
        "Qwen/Qwen2.5-32B",
        "Qwen/Qwen2.5-72B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.2-1B",
    ] * 2
    process = subprocess.Popen(
        [sys.executable, "-m", "hfvram", "scan", "-", "--json", "--jobs", "1", "--gpu", "h100"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    process.stdin.write("\n".join(repos) + "\n")
    process.stdin.close()
    import select

    # wait for one finished row, but never hang the suite if the scan stalls
    if not select.select([process.stdout], [], [], 60)[0]:
        process.kill()
        pytest.fail(f"no row within 60 s; stderr: {process.stderr.read()[-2000:]}")
    first = process.stdout.readline()
    process.send_signal(signal.SIGINT)
    process.stdin = None  # closed above: communicate() only reads
    try:
        rest, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("the scan did not exit within 60 s of Ctrl-C")
    assert process.returncode == 130, stderr
    rows = [json.loads(line) for line in (first + rest).splitlines() if line.strip()]
    assert 1 <= len(rows) < len(repos)
    assert "interrupted" in stderr and "Traceback" not in stderr
