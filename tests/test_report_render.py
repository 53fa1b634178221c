"""The report renderers on a real estimate: Llama-3.1-8B-Instruct's config (fixtures/hub) through the
config reader and the vLLM profile on an RTX 4090 and without GPU."""

from __future__ import annotations

import csv
import io
import json

import pytest
from cli_support import LLAMA_FOLDER
from rich.console import Console

from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Workload
from hfvram.report import markdown, table, tabular, units
from hfvram.report.jsonout import check_dict, error_dict, inspect_dict
from hfvram.sources import load_model
from hfvram.spec import SourceInfo

SOURCE = SourceInfo(kind="local", files=(str(LLAMA_FOLDER / "config.json"),))


@pytest.fixture(scope="module")
def spec():
    """The folder's config and real safetensors headers (weights are attached by the source, not the config)."""
    return load_model(str(LLAMA_FOLDER), offline=True).spec


@pytest.fixture(scope="module")
def report(spec):
    est = estimate(spec, parse_gpu_spec("rtx4090"), EngineChoice("vllm"), Workload(context=32768))
    return check_dict(SOURCE, est, explain=True)


def recorded(render, *args, **kwargs) -> str:
    console = Console(record=True, width=120, color_system=None)
    render(console, *args, **kwargs)
    return console.export_text()


def test_check_dict_terms_and_capacity_agree(report):
    per_gpu = report["per_gpu"]
    assert per_gpu["total"] == sum(per_gpu[k] for k in ("weights", "kv_cache", "activations", "overhead"))
    assert report["utilization"] == pytest.approx(per_gpu["total"] / per_gpu["usable"])
    assert per_gpu["reserve"] == per_gpu["memory"] - per_gpu["usable"]
    # 32k tokens × 128 KiB per token = 4 GiB for one sequence at bf16 (article: 128 KiB/token for Llama-3-8B)
    assert per_gpu["kv_cache"] >= 32768 * 131072
    json.dumps(report)  # plain JSON types only


def test_render_check_table(report):
    text = recorded(table.render_check, report, explain=True)
    assert "Memory on the worst GPU" in text
    assert "Verdict:" in text and table.VERDICT_LABEL[report["verdict"]] in text
    assert units.gib(report["per_gpu"]["weights"]) in text
    assert f"{report['capacity']['kv_tokens']:,} tokens" in text
    assert "concurrent 32k requests" in text
    assert "Where each input figure came from" in text and "config.json" in text


def test_memory_bar_is_proportional(report):
    bar = table.memory_bar(report["per_gpu"]).plain
    assert len(bar) == table.BAR_WIDTH
    weights_cells = round(report["per_gpu"]["weights"] / report["per_gpu"]["memory"] * table.BAR_WIDTH)
    assert bar.startswith("█" * weights_cells)
    assert bar.endswith("▒")  # the engine's reserve is drawn last


def test_memory_bar_marks_overflow():
    per_gpu = {
        "weights": 30,
        "kv_cache": 0,
        "activations": 0,
        "overhead": 0,
        "total": 30,
        "usable": 20,
        "memory": 24,
        "reserve": 4,
    }
    assert "over by" in table.memory_bar(per_gpu).plain


def test_markdown_and_csv(report):
    text = markdown.check_markdown(report, explain=True)
    assert text.count("\n| ") >= 6 and "| **total** |" in text
    error = error_dict("nobody/nothing", RuntimeError("boom"))
    rows = list(csv.DictReader(io.StringIO(tabular.to_csv([report, error]))))
    assert rows[0]["verdict"] == report["verdict"] and int(rows[0]["total"]) == report["per_gpu"]["total"]
    assert rows[1]["error_kind"] == "internal" and rows[1]["error_message"] == "boom"
    assert list(rows[0]) == list(tabular.CSV_COLUMNS)
    assert "nobody/nothing" in markdown.scan_markdown([error])


def test_inspect_dict_kv_at_requested_dtype(spec):
    assert inspect_dict(SOURCE, spec)["model"]["kv_bytes_per_token"] == 131072
    assert inspect_dict(SOURCE, spec, "q8_0")["model"]["kv_bytes_per_token"] == 131072 // 2 * 34 // 32
    text = recorded(table.render_inspect, inspect_dict(SOURCE, spec))
    assert "LlamaForCausalLM" in text and "131,072 B" in text


def test_footprint_without_gpu(spec):
    est = estimate(spec, None, EngineChoice("vllm"), Workload(context=8192))
    document = check_dict(SOURCE, est)
    assert document["hardware"] is None and document["verdict"] is None
    text = recorded(table.render_check, document)
    assert "footprint" in text and "█ weights" not in text


@pytest.mark.parametrize(
    "value, expected",
    [(32768, "32k"), (131072, "128k"), (1048576, "1M"), (1000, "1,000"), (None, "—")],
)
def test_tokens_short(value, expected):
    assert units.tokens_short(value) == expected


def test_units():
    assert units.gib(16 * 1024**3) == "16.00 GiB"
    assert units.params(8_030_261_248) == "8.03B"
    assert units.params(134_515_008) == "135M"
    assert units.percent(0.9368) == "94%"


# ---- text from files and servers -----------------------------------------------------------------------------


def test_safe_escapes_every_control_character_and_keeps_text():
    from hfvram.report.text import safe

    assert safe("Llama\x1b]0;t\x07\x9b2J\u202eok\n") == "Llama\\x1b]0;t\\x07\\x9b2J\\u202eok\\x0a"
    assert safe("a\nb", keep_lines=True) == "a\nb"
    assert safe("[/bold] Qwen/Qwen3-8B · 32k") == "[/bold] Qwen/Qwen3-8B · 32k"  # text, not markup: unchanged
    assert safe(None) == ""


def test_to_ascii_maps_the_report_glyphs():
    from hfvram.report.text import to_ascii

    assert to_ascii("┏━┳┓│ ≤ 49.5 × 2 — … ▶ ✅ é") == "+-++| <= 49.5 x 2 - ... > [ok] ?"


def test_safe_json_escapes_c1_and_bidi_but_stays_the_same_document():
    from hfvram.report.text import safe_json

    document = {"name": "a\x9b[2Jb\u202e"}
    text = safe_json(json.dumps(document, ensure_ascii=False))
    assert "\x9b" not in text and "\u202e" not in text and json.loads(text) == document


def test_markup_in_a_name_is_printed_as_is(spec):
    est = estimate(spec, parse_gpu_spec("rtx4090"), EngineChoice("vllm"), Workload(context=8192))
    report = check_dict(SourceInfo(kind="local", files=("[/bold][link=http://x]y[/link]",)), est)
    console = Console(record=True, width=120, color_system=None)
    table.render_check(console, report)
    assert "[/bold][link=http://x]y[/link]" in console.export_text()
    assert "\\[link=http://x\\]y\\[/link\\]" in markdown.check_markdown(report)
