"""`scan` keeps only what its summary needs (issue 27: every full report, ~23 KB a row, was kept for every output,
so the allowed 100,000-line list needed > 2 GB): each format's output is the one the whole reports render to, and
memory stays flat in the list's length (a JSON array's elements wait in a temporary file). The real CLI, offline on
the embedded catalogue and against the test Hub; peak memory read from the child's own counters."""

from __future__ import annotations

import io
import json

from cli_support import run_hfvram
from test_hostile_round3 import PEAK_BYTES, measured
from test_scan_scale import TARGETS

from hfvram.sources.catalog import catalog_repos


def _list(tmp_path) -> str:
    """Every catalogue repo, a what-if, an unreadable folder and a line that is not a SOURCE."""
    listed = tmp_path / "models.txt"
    listed.write_text("\n".join([*catalog_repos(), "Qwen/Qwen3-8B:Q4_K_M", "./no/such/folder", "not a source"]) + "\n")
    return str(listed)


def test_every_summary_is_what_the_whole_reports_render_to(tmp_path):
    from rich.console import Console

    from hfvram.report.markdown import scan_markdown
    from hfvram.report.table import render_scan
    from hfvram.report.tabular import to_csv

    listed = _list(tmp_path)

    def scan(fmt: str) -> str:
        result = run_hfvram("scan", listed, "--gpu", "rtx4090", "--offline", "--format", fmt, env={"COLUMNS": "120"})
        assert result.returncode == 3, result.stderr[-300:]  # the error rows
        return result.stdout

    reports = json.loads(scan("json"))  # the whole reports, sorted
    assert len(reports) == len(catalog_repos()) + 3
    lines = [json.loads(line) for line in scan("jsonl").splitlines()]
    assert sorted(map(json.dumps, lines)) == sorted(map(json.dumps, reports))
    assert scan("csv") == to_csv(reports)
    assert scan("markdown") == scan_markdown(reports)
    table = Console(file=io.StringIO(), width=120, color_system=None, legacy_windows=False)
    render_scan(table, reports)
    assert scan("table") == table.file.getvalue()


def test_a_scan_of_hundreds_of_repos_keeps_memory_flat(hub, tmp_path):
    """800 repos of the test Hub (aliases of four real ones): the JSON array and the table, within the round's
    300 MB, one row per repo (before: every report kept; 5,000 repos' JSON array 223 MiB, their table 149 MiB;
    now 130 and 93 MiB, as the issue's closing note gives them)."""
    names = hub.files.alias_many("flat", 800, targets=TARGETS)
    stdin = ("\n".join(names) + "\n").encode()
    env = {"HFVRAM_HTTP_TIMEOUT": "30", "HFVRAM_SCAN_PROCESSES": "1"}
    for fmt in ("json", "table"):
        code, out, err, cpu, peak = measured("scan", "-", "--gpu", "rtx4090", "--format", fmt, stdin=stdin, env=env)
        print(fmt, f"{peak / 2**20:.0f} MiB, {cpu:.1f} s CPU")
        assert code in (0, 1), err[-300:]
        assert peak <= PEAK_BYTES, peak
        if fmt == "json":
            assert len(json.loads(out)) == 800
        else:
            assert sum(name in out for name in ("flat/repo-000", "flat/repo-799")) == 2
