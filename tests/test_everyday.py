"""The everyday list: what a person sees at a terminal and copies from it, run as the real CLI offline."""

from __future__ import annotations

import pytest
from cli_support import run_hfvram


@pytest.mark.parametrize(
    "args",
    [
        ("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--quant", "Q4_K_M", "--offline"),
        ("gpus",),
        ("fit", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline"),
        ("models", "--gpu", "rtx4090", "--offline"),
    ],
)
def test_no_line_ends_in_a_space(args):
    """rich pads a table's last column and a wrapped line with spaces: none reaches the output."""
    result = run_hfvram(*args)
    assert result.returncode in (0, 1), result.stderr
    padded = [line for line in result.stdout.splitlines() if line != line.rstrip()]
    assert not padded, padded[:3]


@pytest.mark.parametrize("name", ["rtx2080", "2080", "rtx2080-super", "rtx2070", "rtx2070-super", "rtx2060", "t4"])
def test_turing_cards_are_in_the_catalogue(name):
    from hfvram.estimate.hardware import catalog_row

    row = catalog_row(name)
    assert row["architecture"].startswith("Turing") and row["memory_bandwidth_gbs"] > 0 and row["source"]


def test_a_raw_size_with_a_bandwidth_gets_a_decode_speed():
    """``--gpu 8GiB@448GB/s``: the size and the bandwidth of an RTX 2080 (nvidia.com), so a decode bound is printed
    — the same bound the catalogue's rtx2080 gives, since both read 448 GB/s."""
    from hfvram import check

    raw = check("Qwen/Qwen3-8B", gpu="8GiB@448GB/s", quant="Q4_K_M", context="4k", offline=True)
    card = check("Qwen/Qwen3-8B", gpu="rtx2080", quant="Q4_K_M", context="4k", offline=True)
    plain = check("Qwen/Qwen3-8B", gpu="8GiB", quant="Q4_K_M", context="4k", offline=True)
    decode = [r.document["decode_tokens_per_second"] for r in (raw, card, plain)]
    assert decode[0] is not None and decode[0] == decode[1] and decode[2] is None
    assert "8GiB@448GB/s" in run_hfvram("check", "Qwen/Qwen3-8B", "--gpu", "8GiB@448GB/s", "--offline").stdout


@pytest.mark.parametrize(
    "repo,gpu,state",
    [
        ("Qwen/Qwen3-8B", "h100", "on"),  # V1 turns prefix caching on by default
        ("Qwen/Qwen3-Next-80B-A3B-Thinking", "h100x4", "off"),  # hybrid models run with it off
    ],
)
def test_explain_and_the_settings_table_agree_on_prefix_caching(repo, gpu, state):
    out = run_hfvram("check", repo, "--gpu", gpu, "--engine", "vllm", "--offline", "--explain").stdout
    assert f"prefix caching ({state}, the release default)" in out
    row = next(line for line in out.splitlines() if line.split()[:1] == ["enable_prefix_caching"])
    assert row.split()[1] == state


def test_calibrate_reads_the_vllm_generation_from_the_log():
    """gt-0004 is a published vLLM V0 start-up log (fixtures/logs/README.md) that names no release: its "# GPU
    blocks" lines are V0's, so the prediction follows the V0 rules (the V1 rules put the KV cache 56 % high)."""
    from hfvram.calibrate.logs import parse_vllm_log, read_log

    log = "fixtures/logs/gt-0004-vllm-v0-llama31-8b-rtx3090.log"
    measured = parse_vllm_log(read_log(log))
    assert measured.engine_generation == "v0" and measured.engine_version is None
    v1 = parse_vllm_log(read_log("fixtures/logs/gt-0062-vllm-v0.19-llama31-8b-h100.log"))
    assert v1.engine_generation == "v1"
    result = run_hfvram(
        "calibrate", log, "--gpu", "rtx3090", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--offline", "--json"
    )
    assert "the log's lines are vLLM V0's" in result.stdout


def test_fit_cheapest_from_apple_answers_with_a_sourced_price():
    """Apple's Mac Studio launch prices (2025-03-05: M4 Max 36GB $1,999, M3 Ultra 96GB $3,999; the whole
    computer, hfvram/data/gpu_prices.toml with its source) make `--from apple` answer."""
    result = run_hfvram("fit", "Qwen/Qwen3-8B", "--cheapest", "--from", "apple", "--offline")
    assert result.returncode == 0, result.stderr
    assert "Cheapest that fits: m4-max-36 ($1,999 new, 2025-03-05)" in result.stdout


def test_models_reports_its_progress_repo_by_repo():
    """``models --quant auto`` sizes every catalogue model at several quants (seconds): the CLI draws a progress
    bar on stderr from these calls when stderr is a terminal; off a terminal stderr stays quiet."""
    from hfvram.pipeline import RunOptions, models_rows
    from hfvram.pipeline.scan import may_hold_family
    from hfvram.sources.catalog import catalog_repos

    seen: list[tuple[int, int]] = []
    options = RunOptions(gpu="rtx4090", offline=True)
    rows = models_rows(options, family="qwen3", sort="verdict", progress=lambda done, total: seen.append((done, total)))
    # the repos whose stored config could be of the family are checked, one progress call each
    total = sum(may_hold_family(repo, "qwen3") for repo in catalog_repos())
    assert 0 < total < len(catalog_repos())
    assert seen == [(i, total) for i in range(1, total + 1)] and rows
    everything: list[tuple[int, int]] = []
    models_rows(options, family=None, sort="verdict", progress=lambda done, total: everything.append((done, total)))
    assert everything[-1] == (len(catalog_repos()), len(catalog_repos()))
    quiet = run_hfvram("models", "--gpu", "rtx4090", "--family", "qwen3", "--offline")
    assert quiet.returncode == 0 and "checking the catalogue" not in quiet.stderr


def test_models_says_why_a_row_is_refused():
    """At --context 1M Yi-34B needs 41 GiB of an H100's 80 but vLLM refuses a context above its 4k
    max_position_embeddings (config.json): the table says so under it, not only DOES NOT FIT."""
    out = run_hfvram("models", "--gpu", "h100x8", "--context", "1M", "--family", "llama", "--offline").stdout
    assert "Refused by the engine, whatever the memory:" in out
    flat = " ".join(out.split())
    assert "01-ai/Yi-34B: vllm refuses max_model_len 1,048,576: above the model's max_position_embeddings 4,096" in flat


def test_models_family_prefilter_keeps_every_row_the_family_matches():
    """models checks only the repos whose stored config could be of --family (a --quant auto run sized every quant
    of all 67 repos, then kept 18): the rows are exactly those of checking every repo and then filtering."""
    from hfvram.pipeline import RunOptions, models_rows, scan_one
    from hfvram.report.models import select_rows
    from hfvram.sources.catalog import catalog_repos

    options = RunOptions(gpu="rtx4090", offline=True)
    every = [scan_one(repo, options) for repo in catalog_repos()]
    for family in ("qwen3", "llama", "Gemma", "deepseek", "ForCausalLM", "mistral3"):
        expected = select_rows(every, family=family, sort="verdict")
        assert models_rows(options, family=family, sort="verdict") == expected, family


QWEN3_GGUF = "fixtures/gguf-derived/qwen3-30b-a3b.gguf"


@pytest.mark.parametrize(
    "args, model",
    [
        # a local .gguf: its own path
        ((QWEN3_GGUF,), QWEN3_GGUF),
        # a --quant what-if: the file llama-quantize would write, as the launch line names it (it printed MODEL.gguf)
        (("Qwen/Qwen3-30B-A3B", "--offline", "--quant", "Q4_K_M"), "Qwen3-30B-A3B-Q4_K_M.gguf"),
    ],
)
def test_the_offload_plan_names_a_file_llama_server_can_load(args, model):
    """The offload plan's ``llama-server -m`` names a file, never a repo id (`-m Qwen/Qwen3-30B-A3B` is refused)."""
    import json
    import shlex

    result = run_hfvram("check", *args, "--gpu", "rtx4060ti-8g", "--context", "32k", "--json")
    document = json.loads(result.stdout)
    assert document["verdict"] == "offload", result.stderr
    words = shlex.split(document["offload_plan"]["command"])
    assert words[:3] == ["llama-server", "-m", model]
    assert shlex.split(document["launch"]["command"])[1:3] == ["-m", model]


def test_the_offload_plan_of_a_hub_gguf_names_the_repo_and_its_file(hub):
    """A GGUF repo on the Hub: ``-hf REPO -hff FILE`` (llama-server downloads that exact file), each its own word."""
    import json
    import shlex

    from test_gguf_repo import FILES, REPO

    hub.files.add_header_repo(REPO, FILES)
    # 64 slots of 8k on a 1 GiB card: the plan keeps the layers in RAM and says how to start that
    args = ("--gpu", "1GiB@100GB/s", "--context", "8k", "--concurrency", "64", "--json")
    document = json.loads(run_hfvram("check", f"{REPO}:Q4_1", *args).stdout)
    # the words a shell passes (they were quoted as one: -hf 'REPO -hff FILE')
    words = shlex.split(document["offload_plan"]["command"])
    assert words[1:5] == ["-hf", REPO, "-hff", "SmolLM2-135M-Instruct.Q4_1.gguf"], words
