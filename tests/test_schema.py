"""The shipped JSON Schemas (hfvram/data/schema/) against README.md's JSON contract and real outputs."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
from cli_support import LLAMA_FOLDER, SMOLLM_GGUF, schema, validate
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
