"""The shipped JSON Schemas (hfvram/data/schema/) against README.md's JSON contract and real outputs."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
from cli_support import LLAMA_FOLDER, ROOT, SMOLLM_GGUF, schema, validate
from click.testing import CliRunner

from hfvram.cli import cli


@pytest.mark.parametrize("name", ["check", "inspect"])
def test_schemas_are_valid_draft_2020_12(name):
    jsonschema.Draft202012Validator.check_schema(schema(name))


@pytest.fixture(scope="module")
def llama_check() -> dict:
    result = CliRunner().invoke(cli, ["check", str(LLAMA_FOLDER), "--gpu", "rtx4090", "--context", "32k", "--json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_check_output_validates_and_keeps_contract_meanings(llama_check):
    """contract.md: Llama-3-8B at bf16 -> kv_bytes_per_token 131072; per_gpu.total is the sum of the four terms."""
    validate(llama_check)
    assert llama_check["schema"] == "hfvram.check/1"
    assert llama_check["model"]["kv_bytes_per_token"] == 131072
    per_gpu = llama_check["per_gpu"]
    assert per_gpu["total"] == per_gpu["weights"] + per_gpu["kv_cache"] + per_gpu["activations"] + per_gpu["overhead"]
    assert llama_check["hardware"]["gpu"] == "rtx4090"
    assert llama_check["hardware"]["usable_bytes"] == per_gpu["usable"]
    assert llama_check["workload"] == {"context": 32768, "concurrency": 1, "kv_dtype": "bf16"}


@pytest.mark.parametrize("field", ["verdict", "per_gpu", "capacity", "warnings"])
def test_schema_rejects_a_check_without_a_contract_field(llama_check, field):
    broken = copy.deepcopy(llama_check)
    del broken[field]
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)


def test_schema_rejects_a_renamed_verdict(llama_check):
    broken = copy.deepcopy(llama_check)
    broken["verdict"] = "ok"
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)


def test_error_row_validates():
    row = {
        "schema": "hfvram.check/1",
        "source": {"text": "nobody/nothing"},
        "error": {"kind": "not_found", "message": "repository nobody/nothing not found"},
    }
    validate(row)
    with pytest.raises(jsonschema.ValidationError):
        validate({**row, "error": {"kind": "not_found"}})


def test_inspect_output_validates():
    result = CliRunner().invoke(cli, ["inspect", str(SMOLLM_GGUF), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    validate(document, "inspect")
    with pytest.raises(jsonschema.ValidationError):
        validate({**document, "schema": "hfvram.check/1"}, "inspect")


# ---- the other documents: fit, scan --format json, gpus, calibrate ---------------------------------------------

SCHEMA_DIR = ROOT / "hfvram" / "data" / "schema"
LOGS = ROOT / "fixtures" / "logs"


def registry():
    """Every shipped schema under its $id, so that scan.schema.json's "$ref": "check.schema.json" resolves."""
    from referencing import Registry, Resource

    resources = [Resource.from_contents(json.loads(path.read_text())) for path in sorted(SCHEMA_DIR.glob("*.json"))]
    return Registry().with_resources((resource.id(), resource) for resource in resources)


def validate_as(document, name: str) -> None:
    jsonschema.Draft202012Validator(schema(name), registry=registry()).validate(document)


def cli_json(*args: str, codes=(0, 1)):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code in codes, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("path", sorted(SCHEMA_DIR.glob("*.schema.json")), ids=lambda path: path.name)
def test_every_shipped_schema_is_valid_and_named_after_its_file(path):
    document = json.loads(path.read_text())
    jsonschema.Draft202012Validator.check_schema(document)
    assert document["$id"].endswith("/" + path.name)


def test_every_document_has_a_shipped_schema():
    assert {path.name for path in SCHEMA_DIR.glob("*.schema.json")} >= {
        f"{name}.schema.json" for name in ("check", "inspect", "fit", "scan", "gpus", "calibrate")
    }


def test_fit_output_validates_one_and_several():
    one = cli_json("fit", str(LLAMA_FOLDER), "--gpu", "rtx4090", "--context", "32k", "--json")
    validate_as(one, "fit")
    assert one["schema"] == "hfvram.fit/1"
    several = cli_json("fit", str(LLAMA_FOLDER), str(SMOLLM_GGUF), "--gpu", "rtx4090", "--json")
    assert isinstance(several, list) and len(several) == 2
    validate_as(several, "fit")
    for field in ("max_context", "context_table", "smallest_gpu_count"):
        broken = copy.deepcopy(one)
        del broken[field]
        with pytest.raises(jsonschema.ValidationError):
            validate_as(broken, "fit")
    with pytest.raises(jsonschema.ValidationError):
        validate_as({**one, "schema": "hfvram.check/1"}, "fit")


def test_scan_json_list_validates_with_its_error_rows(tmp_path):
    listing = tmp_path / "models.txt"
    listing.write_text(f"{LLAMA_FOLDER}\n{SMOLLM_GGUF}\n{tmp_path / 'no-such-model'}\n")
    rows = cli_json("scan", str(listing), "--gpu", "rtx4090", "--format", "json", codes=(3,))
    assert len(rows) == 3 and "error" in rows[-1]
    validate_as(rows, "scan")
    broken = copy.deepcopy(rows)
    del broken[0]["per_gpu"]
    with pytest.raises(jsonschema.ValidationError):
        validate_as(broken, "scan")


def test_gpus_output_validates():
    found = cli_json("gpus", "--json")
    assert len(found) > 10
    validate_as(found, "gpus")
    with pytest.raises(jsonschema.ValidationError):
        validate_as([{**found[0], "memory_bytes": "24 GB"}], "gpus")


@pytest.mark.parametrize(
    "args",
    [
        [str(LOGS / "gt-0062-vllm-v0.19-llama31-8b-h100.log")],
        [str(LOGS / "gt-0016-llamacpp-qwen3-30b-a3b-2gpu.log")],
        [str(LOGS / "gt-0062-vllm-v0.19-llama31-8b-h100.log"), "--model", str(LLAMA_FOLDER), "--gpu", "h100"],
    ],
    ids=["vllm", "llama.cpp", "vllm-with-prediction"],
)
def test_calibrate_output_validates(args):
    document = cli_json("calibrate", *args, "--json", codes=(0,))
    validate_as(document, "calibrate")
    assert ("predicted" in document) == ("--model" in args)
    with pytest.raises(jsonschema.ValidationError):
        validate_as({**document, "measured": {**document["measured"], "weights": -1}}, "calibrate")


def test_check_with_a_speculative_draft_validates(hub):
    """engine.speculative_draft (vLLM with a draft checkpoint read from the local test Hub) is in the check schema;
    a draft that is not an object with its weights and KV figures is rejected."""
    config = '{"model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 5}'
    args = ["check", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100x4", "--engine", "vllm", "--json"]
    result = CliRunner().invoke(cli, [*args, "--engine-args", f"--speculative-config '{config}'"])
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(document)
    assert document["engine"]["speculative_draft"]["model"] == "meta-llama/Llama-3.2-1B"
    broken = copy.deepcopy(document)
    del broken["engine"]["speculative_draft"]["weights_bytes"]
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)
