"""``hfvram models``: which of the embedded catalogue's models run on one GPU set, through the real CLI.

The figures are the estimator's own (each row is what ``hfvram check REPO --offline`` answers for the same
options); the tests check the command's wiring: the query, filters, order, the document and the exit codes.
"""

from __future__ import annotations

import csv
import io
import json

import jsonschema
import pytest
from cli_support import run_hfvram, schema

from hfvram.sources.catalog import catalog_repos

OFFLINE = {"HF_HUB_OFFLINE": "1"}


def _validate(document) -> None:
    """Against models.schema.json, its check.schema.json reference resolved from the shipped files."""
    from referencing import Registry, Resource

    resources = [Resource.from_contents(schema(name)) for name in ("check", "models")]
    registry = Registry().with_resources((resource.id(), resource) for resource in resources)
    jsonschema.Draft202012Validator(schema("models"), registry=registry).validate(document)


def _models(*args: str, code: int = 0) -> dict:
    result = run_hfvram("models", *args, "--format", "json", env=OFFLINE)
    assert result.returncode == code, result.stderr
    document = json.loads(result.stdout)
    _validate(document)
    return document


@pytest.fixture(scope="module")
def mac_8k() -> dict:
    return _models("--gpu", "m4-max-64", "--context", "8k")


def test_a_mac_query_answers_for_every_catalogue_repo_and_validates(mac_8k):
    assert mac_8k["schema"] == "hfvram.models/1"
    assert mac_8k["query"] == {
        "gpu": "m4-max-64",
        "engine": None,
        "context": 8192,
        "concurrency": 1,
        "family": None,
        "sort": "verdict",
        "catalogue_built": mac_8k["query"]["catalogue_built"],
    }
    rows = mac_8k["models"]
    assert sorted(row["source"]["repo_id"] for row in rows) == catalog_repos()
    assert all(row["source"]["kind"] == "catalog" for row in rows)
    counts = mac_8k["counts"]
    assert counts["models"] == len(rows) == counts["fits"] + counts["tight"] + counts["does_not_fit"] + counts["errors"]
    assert counts["fits"] > 0 and counts["does_not_fit"] > 0
    by_repo = {row["source"]["repo_id"]: row for row in rows}
    # an 8B model in bf16 fits 64 GB of unified memory; a 671B one does not
    assert by_repo["meta-llama/Llama-3.1-8B-Instruct"]["verdict"] == "fits"
    assert by_repo["deepseek-ai/DeepSeek-V3"]["verdict"] == "does_not_fit"
    for row in rows:
        assert row["workload"]["context"] == 8192
        assert row["hardware"]["count"] >= 1
    # the schema rejects a document without its query
    broken = {key: value for key, value in mac_8k.items() if key != "query"}
    with pytest.raises(jsonschema.ValidationError):
        _validate(broken)


def test_each_row_is_what_check_answers_for_that_repo(mac_8k):
    row = next(row for row in mac_8k["models"] if row["source"]["repo_id"] == "Qwen/Qwen3-8B")
    result = run_hfvram("check", "Qwen/Qwen3-8B", "--gpu", "m4-max-64", "--context", "8k", "--offline", "--json")
    check = json.loads(result.stdout)
    assert row["per_gpu"] == check["per_gpu"] and row["verdict"] == check["verdict"]
    assert row["capacity"] == check["capacity"]
    assert row["decode_tokens_per_second"] == check["decode_tokens_per_second"]


def test_default_order_is_fits_first_then_the_largest_model_first(mac_8k):
    rank = {"fits": 0, "tight": 1, "does_not_fit": 2}
    keys = [(rank[row["verdict"]], -row["model"]["params_total"]) for row in mac_8k["models"]]
    assert keys == sorted(keys)


@pytest.mark.parametrize(
    ("sort", "key"),
    [
        ("total", lambda row: row["per_gpu"]["total"]),
        ("params", lambda row: -row["model"]["params_total"]),
        ("context", lambda row: -row["capacity"]["max_context"]),
        ("speed", lambda row: -(row["decode_tokens_per_second"] or -1)),
    ],
)
def test_sort_orders(sort, key):
    rows = _models("--gpu", "rtx4090", "--context", "8k", "--sort", sort)["models"]
    assert len(rows) == len(catalog_repos())
    values = [key(row) for row in rows]
    assert values == sorted(values)


def test_family_filter_matches_architecture_or_model_type_case_insensitively():
    doc = _models("--gpu", "m4-max-64", "--family", "QWEN3")
    assert doc["models"] and doc["query"]["family"] == "QWEN3"
    for row in doc["models"]:
        model = row["model"]
        assert "qwen3" in model["architecture"].lower() or "qwen3" in model["model_type"].lower()
    all_qwen3 = [
        row for row in _models("--gpu", "m4-max-64")["models"] if "qwen3" in (row["model"]["model_type"] or "").lower()
    ]
    assert {row["source"]["repo_id"] for row in all_qwen3} <= {row["source"]["repo_id"] for row in doc["models"]}
    mixtral = _models("--gpu", "m4-max-64", "--family", "mixtral", code=1)["models"]  # none fits 64 GB
    assert mixtral and all(row["model"]["architecture"] == "MixtralForCausalLM" for row in mixtral)


def test_engine_and_concurrency_reach_every_row():
    doc = _models(
        "--gpu", "rtx4090x2", "--engine", "vllm", "--context", "4k", "--concurrency", "4", "--family", "llama"
    )
    assert doc["models"]
    for row in doc["models"]:
        assert row["engine"]["name"] == "vllm"
        assert row["workload"]["concurrency"] == 4 and row["workload"]["context"] == 4096
        assert row["hardware"]["count"] == 2


def test_exit_code_is_1_when_nothing_fits():
    doc = _models("--gpu", "rtx4090", "--family", "deepseekv3", code=1)
    assert doc["models"] and all(row["verdict"] == "does_not_fit" for row in doc["models"])
    result = run_hfvram("models", "--gpu", "rtx4090", "--family", "no-such-family", env=OFFLINE)
    assert result.returncode == 1
    assert "no catalogue model has the family 'no-such-family'" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--gpu", "rtx9999"), "rtx9999"),
        (("--gpu", ""), "--gpu is empty"),
        ((), "models needs --gpu"),
        (("--gpu", "rtx4090", "--context", "12q"), "12q"),
        (("--gpu", "rtx4090", "--sort", "size"), "size"),
        (("--gpu", "rtx4090", "Qwen/Qwen3-8B"), "goes with --list"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = run_hfvram("models", *args, env={**OFFLINE, "HFVRAM_GPU": ""})
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and result.stdout == ""


def test_table_markdown_csv_and_jsonl_views():
    table = run_hfvram("models", "--gpu", "m4-max-64", "--context", "8k", "--family", "qwen3", env=OFFLINE)
    assert table.returncode == 0, table.stderr
    assert "catalogue models run on m4-max-64 at 8k context" in table.stdout
    assert "longest context" in table.stdout and "tok/s" in table.stdout and "FITS" in table.stdout
    markdown = run_hfvram("models", "--gpu", "m4-max-64", "--family", "qwen3", "--markdown", env=OFFLINE)
    assert "| model | params / active | verdict |" in markdown.stdout
    lines = run_hfvram("models", "--gpu", "m4-max-64", "--family", "qwen3", "--format", "jsonl", env=OFFLINE)
    rows = [json.loads(line) for line in lines.stdout.splitlines()]
    for row in rows:
        jsonschema.Draft202012Validator(schema("check")).validate(row)
    table_csv = run_hfvram("models", "--gpu", "m4-max-64", "--family", "qwen3", "--format", "csv", env=OFFLINE)
    parsed = list(csv.DictReader(io.StringIO(table_csv.stdout)))
    assert [row["source"] for row in parsed] == [row["source"]["repo_id"] for row in rows]
    assert all(row["params_total"] and row["decode_tokens_per_second"] for row in parsed)
    assert {"fits"} <= {row["verdict"] for row in parsed}


def test_list_searches_the_catalogue():
    everything = run_hfvram("models", "--list")
    assert everything.returncode == 0
    assert [line.split()[0] for line in everything.stdout.splitlines()] == catalog_repos()
    found = run_hfvram("models", "--list", "LLAMA-3.1")
    assert found.returncode == 0
    names = [line.split()[0] for line in found.stdout.splitlines()]
    assert names and all("llama-3.1" in name.lower() for name in names)
    assert "meta-llama/Llama-3.1-8B-Instruct" in names
    # the total parameters the readers derive from the stored config, as `check` reports them
    line = next(line for line in found.stdout.splitlines() if line.startswith("meta-llama/Llama-3.1-8B-Instruct "))
    assert line.split()[-1] == "8.03B"
    missing = run_hfvram("models", "--list", "no-such-model")
    assert missing.returncode == 1 and missing.stdout == ""
    assert "no catalogue repo matches 'no-such-model'" in missing.stderr


def test_gpu_default_comes_from_hfvram_gpu_as_for_check():
    result = run_hfvram("models", "--family", "phi3", "--format", "json", env={**OFFLINE, "HFVRAM_GPU": "h100"})
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    _validate(document)
    assert document["query"]["gpu"] == "h100"
    assert [row["source"]["repo_id"] for row in document["models"]] == ["microsoft/phi-4"]
    assert document["models"][0]["hardware"]["gpu"] == "h100-sxm"  # the alias h100 resolves to the SXM card
