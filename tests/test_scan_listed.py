"""Issue 25, batch listing: a scan answers a repo whose weights alone outweigh the GPUs from its owner's Hub
listing (``safetensors.parameters``: per-dtype counts), with no further request for that repo, where the engine
holds every weight on its GPUs (vLLM, SGLang without ``--cpu-offload-gb``); the others are read as before.
Everything runs the real CLI against the test Hub (tests/hubserver.py), whose listing states the counts of the
repos' real safetensors headers."""

from __future__ import annotations

import csv
import io
import json

import pytest
from cli_support import run_hfvram
from test_hub_limits import SCAN_TARGETS
from test_schema import validate_as

from hfvram.estimate.listed import LISTING_PROVENANCE, listed_weights_bytes

#: 14 GiB: below Llama-3.1-8B's and gemma-2-9b's BF16 weights (14.96 / 17.21 GiB by their headers' counts), above
#: gpt-oss-20b's (12.82 GiB), the GPTQ 13B's (6.76 GiB) and MiniLM's; Qwen3-8B's fixture has no weights listed
GPU = "14gb"
TOO_LARGE = {"meta-llama/Llama-3.1-8B-Instruct", "google/gemma-2-9b-it"}


def test_weights_from_the_listing_counts_are_exact():
    # Llama-3.1-8B-Instruct: 8,030,261,248 BF16 elements in its safetensors headers (fixtures/headers), 2 bytes each
    assert listed_weights_bytes({"BF16": 8_030_261_248}) == 16_060_522_496
    # gpt-oss-20b: BF16 attention and embeddings, MXFP4 experts stored as U8 blocks and scales (its headers)
    assert listed_weights_bytes({"BF16": 1_804_459_584, "U8": 10_152_345_600}) == 13_761_264_768
    # FP4 (4 bits) packs two to a byte; a 32-bit float may be loaded in 16 bits (vLLM --dtype auto: FP16 for FP32)
    assert listed_weights_bytes({"F4": 10, "F32": 3}) == 5 + 6
    assert listed_weights_bytes({"I64": 512}) == 0  # a buffer (position ids), not a weight an engine loads
    assert listed_weights_bytes({"NOT_A_DTYPE": 1}) is None


def _scan(hub, names, *args):
    return run_hfvram("scan", "-", "--gpu", GPU, "--context", "8k", *args, stdin="\n".join(names) + "\n", timeout=300)


def _repo_requests(hub, name):
    return [r.path for r in hub.records if r.path.startswith((f"/{name}/", f"/api/models/{name}"))]


def test_a_300_repo_scan_answers_the_too_large_from_the_listing_alone(hub):
    names = hub.files.alias_many("listed", 300, targets=SCAN_TARGETS)
    result = _scan(hub, names, "--json")
    rows = {r["source"]["repo_id"]: r for r in map(json.loads, result.stdout.splitlines())}
    assert sorted(rows) == names and not [r for r in rows.values() if "error" in r], result.stderr[-2000:]
    large = [name for name in names if hub.files.aliases[name] in TOO_LARGE]
    assert len(large) == 100
    for name in large:
        row = rows[name]
        assert _repo_requests(hub, name) == []  # no resolver, no model info: the listing answered it
        assert row["verdict"] == "does_not_fit" and LISTING_PROVENANCE in row["verdict_reason"]
        params = hub.files.parameters(hub.files.get(name))
        assert row["model"]["weights_bytes"] == listed_weights_bytes(params) == row["per_gpu"]["weights"]
        assert row["source"]["revision"] == hub.files.get(name).sha
        validate_as(row, "check")
    rest = [name for name in names if name not in large]
    assert all(_repo_requests(hub, name) for name in rest)  # read as before
    assert all(LISTING_PROVENANCE not in (rows[name].get("verdict_reason") or "") for name in rest)
    # the rest unchanged: the same rows as a scan (its owner's listing read too) of those repos alone
    others = [target for target in SCAN_TARGETS if target not in TOO_LARGE]
    again = hub.files.alias_many("others", 8, targets=others)
    alone = {
        hub.files.aliases[r["source"]["repo_id"]]: r
        for r in map(json.loads, _scan(hub, again, "--json").stdout.splitlines())
    }
    for name in rest[: len(SCAN_TARGETS)]:
        mine, theirs = dict(rows[name]), dict(alone[hub.files.aliases[name]])
        for row in (mine, theirs):
            row.pop("source")
            row.pop("launch", None)  # names the repo
        assert mine == theirs, name
    # and a full read of a too-large repo (an owner with too few repos for a listing) comes to the same verdict
    few = hub.files.alias_many("unlisted", 2, targets=sorted(TOO_LARGE))
    full = [json.loads(line) for line in _scan(hub, few, "--json").stdout.splitlines()]
    assert [r["verdict"] for r in full] == ["does_not_fit"] * 2
    assert all(_repo_requests(hub, name) for name in few)


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv", "json"])
def test_the_listed_row_in_every_output_format(hub, fmt):
    names = hub.files.alias_many("formats", 8, targets=SCAN_TARGETS)
    large = [name for name in names if hub.files.aliases[name] in TOO_LARGE]
    result = _scan(hub, names, "--format", fmt, "--explain")
    assert result.returncode == 1, result.stderr[-2000:]  # does not fit somewhere, no error row (that is 3)
    assert all(_repo_requests(hub, name) == [] for name in large)
    if fmt == "json":
        document = json.loads(result.stdout)
        validate_as(document, "scan")
        listed = [r for r in document if r["source"]["repo_id"] in large]
        assert all(r["explain"]["provenance"]["weights"] == LISTING_PROVENANCE for r in listed)
    elif fmt == "csv":
        rows = {r["source"]: r for r in csv.DictReader(io.StringIO(result.stdout))}
        assert all(rows[name]["verdict"] == "does_not_fit" and not rows[name]["error_kind"] for name in large)
    else:
        for name in large:
            line = next(line for line in result.stdout.splitlines() if name.split("/")[1] in line)
            assert "not fit" in line.lower() or "does_not_fit" in line, line


@pytest.mark.parametrize(
    "args",
    [("--engine", "llama.cpp"), ("--engine-args", "vllm serve --cpu-offload-gb 8"), ("--quant", "fp8")],
    ids=["llama.cpp places into RAM", "vllm --cpu-offload-gb", "--quant what-if"],
)
def test_no_shortcut_where_the_engine_may_hold_less_on_its_gpus(hub, args):
    names = hub.files.alias_many("noshort", 8, targets=SCAN_TARGETS)
    large = [name for name in names if hub.files.aliases[name] in TOO_LARGE]
    result = _scan(hub, names, "--json", *args)
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 8, result.stderr[-2000:]
    assert all(_repo_requests(hub, name) for name in large)
    assert not [r for r in rows if LISTING_PROVENANCE in (r.get("verdict_reason") or "")]


def test_models_hub_answers_too_large_repos_from_its_listing_but_not_under_a_family(hub):
    from test_cli_models_hub import _validate

    names = hub.files.alias_many("hubmodels", 6, targets=SCAN_TARGETS)
    large = [name for name in names if hub.files.aliases[name] in TOO_LARGE]
    args = ("models", "--hub", "--author", "hubmodels", "--gpu", GPU, "--format", "json")
    document = json.loads(run_hfvram(*args).stdout)
    _validate(document)
    rows = {r["source"]["repo_id"]: r for r in document["models"]}
    assert sorted(rows) == names
    assert all(LISTING_PROVENANCE in rows[name]["verdict_reason"] for name in large)
    assert all(_repo_requests(hub, name) == [] for name in large)
    # a family is matched on the architecture the config names, which the listing's row lacks: read in full
    hub.records.clear()
    document = json.loads(run_hfvram(*args, "--family", "llama").stdout)
    llama = [r for r in document["models"] if hub.files.aliases[r["source"]["repo_id"]].startswith("meta-llama/")]
    assert llama and all(r["model"]["architecture"] == "LlamaForCausalLM" for r in llama)
    assert all(_repo_requests(hub, r["source"]["repo_id"]) for r in llama)
