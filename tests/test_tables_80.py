"""The terminal tables at 80 columns (the real CLI, the embedded catalogue): no figure is cut, every name stays
readable (whole or at least 12 characters) and distinct, no line is wider than the terminal, none ends in spaces,
and the columns left out are named."""

from __future__ import annotations

import pytest
from cli_support import run_hfvram
from test_gguf_repo import FILES, REPO

from hfvram.report.fitwidth import middle_cut, shorten_names

WIDE = {"COLUMNS": "80", "NO_COLOR": "1"}


def _table(stdout: str, first_header: str) -> tuple[list[str], list[list[str]]]:
    """The header line and the rows (split on runs of 2+ spaces) of the table whose header starts with
    ``first_header``; a row ends at the first blank line or non-table line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header))
    assert lines[start + 1].startswith("─")
    rows = []
    for line in lines[start + 2 :]:
        if not line.strip() or line.startswith(("columns left out", "Cheapest", "Refused", "vision", "Recommended")):
            break
        rows.append([cell for cell in line.split("   ") if cell.strip()])
    return lines[start].split(), rows


def _check_lines(stdout: str) -> None:
    for line in stdout.splitlines():
        assert line == line.rstrip(), f"trailing spaces: {line!r}"
        if "://" not in line:  # a source URL cannot be broken
            assert len(line) <= 80, f"{len(line)} columns: {line!r}"


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
