"""The terminal tables at 80 columns (and 60 and 100 where a table has more to give up; the real CLI, the embedded
catalogue): no figure is cut, every name stays readable (whole or at least 12 characters) and distinct, no line is
wider than the terminal, none ends in spaces, and the columns left out are named."""

from __future__ import annotations

import json

import pytest
from cli_support import run_hfvram
from test_gguf_repo import FILES, REPO

from hfvram.report.compare import VERDICT_TEXT
from hfvram.report.fitwidth import middle_cut, shorten_names

WIDE = {"COLUMNS": "80", "NO_COLOR": "1"}
WIDTHS = (60, 80, 100)
#: what ends a table: a note under it, a change between rows (``a → b``), a list under it
_AFTER = ("columns left out", "Cheapest", "Refused", "vision", "Recommended", "Set:", "Could not", "* unified")


def _env(width: int) -> dict[str, str]:
    return {"COLUMNS": str(width), "NO_COLOR": "1"}


def _table(stdout: str, first_header: str) -> tuple[list[str], list[list[str]]]:
    """The header line and the rows (split on runs of 2+ spaces) of the table whose header starts with
    ``first_header``; a row ends at the first blank line or non-table line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header))
    assert lines[start + 1].startswith("─")
    rows = []
    for line in lines[start + 2 :]:
        if not line.strip() or line.startswith(_AFTER) or " → " in line:
            break
        rows.append([cell for cell in line.split("   ") if cell.strip()])
    return [cell.strip() for cell in lines[start].split("   ") if cell.strip()], rows


def _check_lines(stdout: str, width: int = 80) -> None:
    for line in stdout.splitlines():
        assert line == line.rstrip(), f"trailing spaces: {line!r}"
        # a source URL cannot be broken, and a printed command line stays whole so that it pastes as it runs
        if "://" not in line and not line.startswith("  vllm serve "):
            assert len(line) <= width, f"{len(line)} columns: {line!r}"


def _check_rows(rows: list[list[str]], names: set[str] | None = None) -> None:
    shown = [row[0].strip() for row in rows]
    assert len(set(shown)) == len(shown), shown
    for row, name in zip(rows, shown):
        assert names is None or name in names or (len(name) >= 12 and "…" in name), name
        for cell in row[1:]:
            assert not cell.strip().endswith("…"), row


def test_models_table_at_80_columns():
    result = run_hfvram("models", "--gpu", "rtx4090", env=WIDE)
    assert result.returncode == 0, result.stderr
    _check_lines(result.stdout)
    header, rows = _table(result.stdout, "model")
    assert len(rows) > 40 and "verdict" in header and "tok/s" in header
    _check_rows(rows)
    assert "columns left out at 80 columns:" in result.stdout
    # a shortened name keeps the repo (the org goes first)
    assert any(row[0].strip() == "Llama-3.1-8B-Instruct" for row in rows)


def test_cheapest_table_at_80_columns():
    result = run_hfvram("fit", "meta-llama/Llama-3.1-8B-Instruct", "--cheapest", "--offline", env=WIDE)
    assert result.returncode == 0, result.stderr
    _check_lines(result.stdout)
    header, rows = _table(result.stdout, "GPU set")
    assert "price" in header and len(rows) > 20
    _check_rows(rows)
    assert all(row[-2].strip().startswith("$") or row[-2].strip() == "no price" for row in rows)


def test_gpu_set_comparison_at_80_columns():
    gpus = "rtx4090,rtx5090,rtx3090x2,h100,rtx4090+rtx3060"
    result = run_hfvram("check", "Qwen/Qwen3-14B", "--offline", "--gpu", gpus, "--context", "16k", env=WIDE)
    _check_lines(result.stdout)
    _, rows = _table(result.stdout, "GPU set")
    _check_rows(rows, names={"rtx4090", "rtx5090", "rtx3090x2", "h100-sxm", "rtx4090+rtx3060"})
    assert "$30,000 new" in result.stdout


@pytest.fixture
def gguf_hub(hub):
    hub.files.add_header_repo(REPO, FILES)
    return hub


def test_gguf_repo_table_at_80_columns(gguf_hub):
    result = run_hfvram("check", REPO, "--gpu", "rtx4090", env=WIDE)
    assert result.returncode == 0, result.stderr
    _check_lines(result.stdout)
    header, rows = _table(result.stdout, "quant")
    assert "verdict" in header and len(rows) == 3
    _check_rows(rows, names={"Q4_1", "Q6_K", "F16", "Q6_K *", "Q4_1 *", "F16 *"})


def test_names_shorten_readably_and_stay_distinct():
    assert middle_cut("Llama-3.1-8B-Instruct", 18) == "Llama-3.1…Instruct"
    assert shorten_names(["meta-llama/Llama-3.1-8B-Instruct"], 21) == ["Llama-3.1-8B-Instruct"]
    twins = ["deepseek-ai/DeepSeek-V3-Base-0324-long", "deepseek-ai/DeepSeek-V3-Chat-0324-long"]
    short = shorten_names(twins, 14)
    assert len(set(short)) == 2 and all(len(text) == 14 for text in short)
    same_repo = ["org-a/model-name-that-is-long", "org-b/model-name-that-is-long"]
    assert len(set(shorten_names(same_repo, 16))) == 2


PACK = ("Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B")


@pytest.mark.parametrize("width", WIDTHS)
def test_pack_table_fits_the_terminal(width):
    args = (*PACK, "--gpu", "h100", "--offline", "--context", "8k")
    result = run_hfvram("check", *args, env=_env(width))
    assert result.returncode == 1, result.stderr  # the three together do not fit: the set's verdict
    _check_lines(result.stdout, width)
    header, rows = _table(result.stdout, "model")
    assert len(rows) == 3 and header[-1] == "verdict"
    _check_rows(rows, names=set(PACK) | {name.split("/")[1] for name in PACK})
    document = json.loads(run_hfvram("check", *args, "--json").stdout)
    terms = [f"{row['need_bytes'] / 2**30:.2f}" for row in document["models"]]
    # the terms column is kept at every width, each figure whole (with or without its unit)
    column = header.index("terms" if "terms" in header else "terms GiB")
    assert [row[column].split()[0] for row in rows] == terms
    if width == 60:
        assert f"columns left out at {width} columns: share" in result.stdout


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "engines, labels", [("vllm,sglang,llama.cpp", ["vllm", "sglang", "llama.cpp"]), ("vllm@0.25,vllm@0.26", None)]
)
def test_engine_comparison_fits_the_terminal(width, engines, labels):
    args = ("Qwen/Qwen3-8B", "--offline", "--gpu", "rtx4090", "--engine", engines)
    result = run_hfvram("check", *args, env=_env(width))
    _check_lines(result.stdout, width)
    header, rows = _table(result.stdout, "engine")
    assert [row[0].strip() for row in rows] == (labels or engines.split(","))
    document = json.loads(run_hfvram("check", *args, "--json").stdout)
    # the KV tokens and the verdict stay at every width, whole
    assert [row[header.index("tokens")].strip() for row in rows] == [
        f"{row['kv_tokens']:,}" for row in document["rows"]
    ]
    verdicts = [row[header.index("verdict")].strip() for row in rows]
    assert verdicts == [VERDICT_TEXT[row["verdict"]] for row in document["rows"]]
    if width == 60:
        assert "columns left out at 60 columns: max context, activations" in result.stdout
    if width == 100:
        assert "columns left out" not in result.stdout


@pytest.mark.parametrize("width", WIDTHS)
def test_scan_table_fits_the_terminal(width, tmp_path):
    listing = tmp_path / "models.txt"
    listing.write_text(
        "meta-llama/Llama-3.1-8B-Instruct\nQwen/Qwen3-8B\nmistralai/Mistral-Nemo-Instruct-2407\n"
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B\n",
        encoding="utf-8",
    )
    args = ("scan", str(listing), "--gpu", "rtx4090", "--offline", "--quant", "awq")
    result = run_hfvram(*args, env=_env(width))
    assert result.returncode in (0, 1), result.stderr
    _check_lines(result.stdout, width)
    # one what-if for every row: said once, in the title, not in every name
    assert "Scan summary · what-if --quant awq" in result.stdout
    header, rows = _table(result.stdout, "source")
    assert len(rows) == 4 and header[1] == "verdict"
    sources = listing.read_text().split()
    _check_rows(rows, names=set(sources) | {source.split("/")[1] for source in sources})
    reports = [json.loads(line) for line in run_hfvram(*args, "--json").stdout.splitlines()]
    totals = [f"{report['per_gpu']['total'] / 2**30:.2f}" for report in reports]
    assert sorted(row[2].split()[0] for row in rows) == sorted(totals)
    # narrower, the unit moves from the cells into the header
    assert ("GiB/GPU" in header) == (width == 60) and ("per GPU" in header) == (width > 60)


@pytest.mark.parametrize("width", WIDTHS)
def test_gpus_table_fits_the_terminal(width):
    result = run_hfvram("gpus", env=_env(width))
    assert result.returncode == 0, result.stderr
    _check_lines(result.stdout, width)
    _, rows = _table(result.stdout, "id (--gpu)")
    gpus = json.loads(run_hfvram("gpus", "--json").stdout)
    # the id is what --gpu takes: never shortened; the bandwidth whole (1,008 GB/s, not 1,0…)
    assert [row[0].strip() for row in rows] == [gpu["id"] for gpu in gpus]
    bandwidths = ["—" if gpu["memory_bandwidth_gbs"] is None else f"{gpu['memory_bandwidth_gbs']:,.0f}" for gpu in gpus]
    assert [row[2].strip() for row in rows] == bandwidths
    names = {gpu["name"] for gpu in gpus}
    shown = [row[3].strip() for row in rows]
    assert all(name in names or (len(name) >= 12 and "…" in name) for name in shown)
    assert (width == 60) == ("columns left out at 60 columns: also" in result.stdout)


@pytest.mark.parametrize("width", (60, 80))
def test_engine_list_wraps_at_the_terminal(width):
    result = run_hfvram("engines", env=_env(width))
    assert result.returncode == 0, result.stderr
    _check_lines(result.stdout, width)
    # a wrapped line keeps its block's indent
    lines = result.stdout.splitlines()
    assert any(line.startswith("  rule sets: ") for line in lines)
    assert all(line.startswith("  ") for line in lines[1:] if line and line[0].isdigit())
