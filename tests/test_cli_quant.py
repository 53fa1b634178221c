"""``--quant Q|auto`` on check, fit, scan and models, run as the real CLI on the embedded catalogue (offline).

The what-if weights are held against llama.cpp's own quantizer in tests/test_quant_gguf.py; here the figures are
checked against the same truth file (benchmarks/data/llamacpp_quant_truth.jsonl, llama.cpp 0c1e5709), and the
wiring: the report says it is a what-if, the engine rules, the errors, the schemas.
"""

from __future__ import annotations

import json

import pytest
from cli_support import ROOT, run_hfvram, validate
from test_schema import validate_as

from hfvram.errors import UsageError

TRUTH = ROOT / "benchmarks" / "data" / "llamacpp_quant_truth.jsonl"


def truth_bytes(model: str, quant: str) -> int:
    for line in TRUTH.read_text().splitlines():
        row = json.loads(line)
        if row["model"] == model and row["quant"] == quant and row["method"] == "dry_run":
            return int(row["tensor_bytes"])
    raise KeyError((model, quant))


def check_json(*args: str) -> tuple[int, dict]:
    result = run_hfvram("check", *args, "--offline", "--json")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_qwen3_32b_q4_k_m_on_a_4090_at_32k_is_a_plain_what_if():
    code, report = check_json(
        "Qwen/Qwen3-32B", "--gpu", "rtx4090", "--context", "32k", "--engine", "llamacpp", "--quant", "Q4_K_M"
    )
    validate(report)
    what_if = report["what_if"]
    assert what_if["quant"] == "Q4_K_M" and what_if["family"] == "gguf" and what_if["auto"] is None
    # llama.cpp's quantizer wrote these bytes for the same config (qwen3-32b Q4_K_M dry run)
    assert what_if["weights_bytes"] == truth_bytes("qwen3-32b", "Q4_K_M") == report["model"]["weights_bytes"]
    assert what_if["weights_source"].startswith("what-if: as llama.cpp 0c1e5709 would write Q4_K_M")
    assert set(what_if["bytes_by_type"]) == {"F32", "Q4_K", "Q6_K"}
    assert report["model"]["weights_exact"] is False and report["model"]["quantization"]["method"] == "gguf"
    assert report["engine"]["name"] == "llama.cpp"
    # every other fact is the real config's: Qwen3-32B's 64 layers, 8 KV heads of 128
    assert report["model"]["kv_bytes_per_token"] == 64 * 2 * 8 * 128 * 2
    assert code == (1 if report["verdict"] == "does_not_fit" else 0)
    table = run_hfvram(
        "check", "Qwen/Qwen3-32B", "--gpu", "rtx4090", "--context", "32k", "--engine", "llamacpp", "--quant", "q4_k_m",
        "--offline",
    )  # fmt: skip
    assert "What-if --quant Q4_K_M: weights 18.40 GiB are not the repo's files" in table.stdout
    assert "what-if weights 18.40 GiB" in table.stdout
    markdown = run_hfvram("check", "Qwen/Qwen3-32B", "--gpu", "rtx4090", "--quant", "Q4_K_M", "--offline", "--markdown")
    assert "> What-if --quant Q4_K_M" in markdown.stdout


def test_without_an_engine_a_gguf_quant_is_served_by_llama_cpp():
    _, report = check_json("Qwen/Qwen3-8B", "--gpu", "rtx4090", "--quant", "Q8_0")
    assert report["engine"]["name"] == "llama.cpp"
    assert report["what_if"]["weights_bytes"] == truth_bytes("qwen3-8b", "Q8_0")
    assert not any("not a GGUF" in w for w in report["warnings"])


def test_unknown_quant_is_one_line_with_the_list_exit_2():
    result = run_hfvram("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--quant", "Q4_K_X", "--offline")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown quant 'Q4_K_X'" in lines[0]
    assert "Q4_K_M" in lines[0] and "IQ4_XS" in lines[0] and "auto" in lines[0]
    assert result.stdout == ""


def test_an_engine_that_does_not_load_gguf_refuses_with_the_reason_exit_1():
    result = run_hfvram(
        "check",
        "Qwen/Qwen3-8B",
        "--gpu",
        "h100",
        "--engine",
        "tensorrt-llm",
        "--quant",
        "Q4_K_M",
        "--offline",
        "--json",
    )
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["verdict"] == "does_not_fit"
    assert report["verdict_reason"] == "engine rule: TensorRT-LLM does not load GGUF files"


def test_vllm_runs_a_gguf_what_if_with_a_warning():
    _, report = check_json("Qwen/Qwen3-8B", "--gpu", "h100", "--engine", "vllm", "--quant", "Q4_K_M")
    assert report["verdict"] != "does_not_fit"
    assert any("GGUF support is experimental" in w for w in report["warnings"])


def test_which_quant_of_qwen3_32b_to_download_for_a_24gb_card_at_32k():
    """ "Which quant of Qwen3-32B should I download for my 24 GB card at 32k context?" — `--quant auto`: the
    largest GGUF quant that fits, with the larger ones that do not."""
    code, report = check_json("Qwen/Qwen3-32B", "--gpu", "rtx4090", "--context", "32k", "--quant", "auto")
    validate(report)
    auto = report["what_if"]["auto"]
    assert report["verdict"] == "fits" and code == 0
    assert auto["chosen"] == report["what_if"]["quant"]
    sizes = [c["weights_bytes"] for c in auto["candidates"]]
    assert sizes == sorted(sizes, reverse=True)
    chosen = next(c for c in auto["candidates"] if c["quant"] == auto["chosen"])
    assert chosen["verdict"] == "fits"
    assert all(c["verdict"] != "fits" for c in auto["candidates"] if c["weights_bytes"] > chosen["weights_bytes"])
    table = run_hfvram(
        "check", "Qwen/Qwen3-32B", "--gpu", "rtx4090", "--context", "32k", "--quant", "auto", "--offline"
    )
    assert f"--quant auto picked {auto['chosen']}: the largest that fits" in table.stdout


def test_auto_needs_a_gpu():
    result = run_hfvram("check", "Qwen/Qwen3-8B", "--quant", "auto", "--offline")
    assert result.returncode == 2 and "--quant auto needs --gpu" in result.stderr


def test_fit_with_quant(tmp_path):
    result = run_hfvram("fit", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--quant", "IQ4_XS", "--offline", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    validate_as(document, "fit")
    assert document["what_if"]["quant"] == "IQ4_XS"
    assert document["what_if"]["weights_bytes"] == truth_bytes("qwen3-8b", "IQ4_XS")
    assert document["engine"].startswith("llama.cpp")


def test_scan_with_quant(tmp_path):
    listing = tmp_path / "models.txt"
    listing.write_text("Qwen/Qwen3-8B\ngoogle/gemma-2-9b-it\n")
    result = run_hfvram("scan", str(listing), "--gpu", "rtx4090", "--quant", "Q5_K_M", "--offline", "--format", "json")
    assert result.returncode in (0, 1), result.stderr
    rows = json.loads(result.stdout)
    validate_as(rows, "scan")
    got = {row["source"]["repo_id"]: row["what_if"]["weights_bytes"] for row in rows}
    assert got == {
        "Qwen/Qwen3-8B": truth_bytes("qwen3-8b", "Q5_K_M"),
        "google/gemma-2-9b-it": truth_bytes("gemma-2-9b", "Q5_K_M"),
    }


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_models_quant_auto(fmt):
    """`models --quant auto`: per catalogue model, the best GGUF quant that fits (offline)."""
    # the table's title and column are what this checks (README's block of the same command is compared whole by
    # scripts/readme_sync.py): a smaller family keeps the run short; the JSON rows need Qwen3-8B
    family = "qwen3" if fmt == "json" else "qwen2"
    args = ["models", "--gpu", "rtx4090", "--context", "8k", "--quant", "auto", "--family", family, "--offline"]
    result = run_hfvram(*args, "--format", fmt, timeout=300)
    assert result.returncode == 0, result.stderr
    if fmt == "table":
        assert "what-if --quant auto: the largest GGUF quant that fits" in result.stdout.replace("\n", " ")
        header = next(line for line in result.stdout.splitlines() if line.startswith("model"))
        assert header.split()[-1] == "quant"
        return
    document = json.loads(result.stdout)
    validate_as(document, "models")
    assert document["query"]["quant"] == "auto"
    rows = [row for row in document["models"] if "error" not in row]
    assert rows
    for row in rows:
        auto = row["what_if"]["auto"]
        assert auto["chosen"] == row["what_if"]["quant"]
        if row["verdict"] == "fits":
            chosen = next(c for c in auto["candidates"] if c["quant"] == auto["chosen"])
            assert all(
                c["verdict"] != "fits" for c in auto["candidates"] if c["weights_bytes"] > chosen["weights_bytes"]
            )
    qwen8 = next(row for row in rows if row["source"]["repo_id"] == "Qwen/Qwen3-8B")
    assert qwen8["what_if"]["quant"] == "Q8_0"  # 8 GiB of weights fit a 24 GB card at 8k


def test_python_api_takes_quant():
    from hfvram import api

    result = api.check("Qwen/Qwen3-8B", gpu="rtx4090", quant="Q4_K_M", offline=True)
    assert result.engine == "llama.cpp"
    assert result.document["what_if"]["weights_bytes"] == truth_bytes("qwen3-8b", "Q4_K_M")
    fit = api.fit("Qwen/Qwen3-8B", gpu="rtx4090", quant="auto", offline=True)
    assert fit.verdict == "fits"
    with pytest.raises(UsageError, match="unknown quant"):
        api.check("Qwen/Qwen3-8B", gpu="rtx4090", quant="Q9_K", offline=True)
