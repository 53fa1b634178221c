"""Each engine's identity facts (hfvram/engines/<engine>/engine.toml) and command line (settings.toml) load into typed
records, checked when they load: an unknown or missing key, or a value outside its choices, is an error naming the
file. The tables are the real packaged ones, changed one key at a time."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import tomllib

from hfvram.datafiles import PACKAGE
from hfvram.engines import _check_defaults, default_rules, identity, registry

FOLDERS = sorted(path.parent.name for path in (PACKAGE / "engines").glob("*/engine.toml"))


def _engine_toml(folder: str) -> dict:
    return tomllib.loads((PACKAGE / "engines" / folder / "engine.toml").read_text(encoding="utf-8"))


def _settings_toml(folder: str) -> dict:
    return tomllib.loads((PACKAGE / "engines" / folder / "settings.toml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", list(registry()))
def test_every_engine_states_its_facts_and_its_command_line_agrees(name):
    entry = registry()[name]
    assert entry.kv_pool_sized_by in identity.KV_POOLS and entry.mixed_set in identity.MIXED_SETS
    assert (entry.hub_quant.refused is None) == bool(entry.hub_quant.name)
    assert entry.hub_quant.doc.startswith("docs/engines/quantization.md#")
    assert (entry.folder / "settings.toml").is_file() == entry.command_line
    table = entry.command_line_table()
    assert (table is not None) == entry.command_line
    if table is not None:
        assert table.settings and set(table.fields.values()) <= set(table.settings) | set(table.booleans)


def test_transformers_has_no_command_line_and_vllm_has_one():
    assert registry()["transformers"].command_line_table() is None
    vllm = registry()["vllm"].command_line_table()
    assert vllm is not None and vllm.fields["context"] == "max-model-len" and "serve" in vllm.subcommands


def test_the_default_rules_end_with_the_one_fallback():
    rules = default_rules()
    assert [engine for engine, _ in rules] == ["llama.cpp", "mlx", "vllm"]
    assert not rules[-1][1].conditional and all(rule.conditional for _, rule in rules[:-1])
    twice = replace(registry()["sglang"], default_when=rules[-1][1:])
    with pytest.raises(ValueError, match="exactly one rule"):
        _check_defaults([*registry().values(), twice])


@pytest.mark.parametrize("folder", FOLDERS)
def test_an_unknown_or_missing_engine_key_names_the_file(folder):
    where = f"hfvram/engines/{folder}/engine.toml"
    table = _engine_toml(folder)
    assert identity.engine_facts(table, where)["name"] == table["name"]
    with pytest.raises(ValueError, match=f"{where}: unknown keys \\['pool'\\]"):
        identity.engine_facts({**table, "pool": "memory"}, where)
    missing = {key: value for key, value in table.items() if key != "mixed_set"}
    with pytest.raises(ValueError, match=f"{where}: .*missing \\['mixed_set'\\]"):
        identity.engine_facts(missing, where)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("mixed_set", "by_memory", "mixed_set must be one of"),
        ("kv_pool_sized_by", "tokens", "kv_pool_sized_by must be one of"),
        ("command_line", "yes", "command_line must be true or false"),
        ("rank", "1", "rank must be a whole number"),
        ("aliases", ["VLLM"], "aliases must be a list of lower-case names"),
    ],
)
def test_a_value_outside_its_choices_names_the_file(key, value, message):
    where = "hfvram/engines/vllm/engine.toml"
    with pytest.raises(ValueError, match=f"{where}.*{message}"):
        identity.engine_facts({**_engine_toml("vllm"), key: value}, where)


def test_nested_rows_are_checked_too():
    where = "hfvram/engines/vllm/engine.toml"
    table = _engine_toml("vllm")
    bad_format = copy.deepcopy(table["hub_quant"])
    bad_format["formats"]["awq"]["run"] = ["ada"]
    with pytest.raises(ValueError, match=r"engine.toml \[hub_quant\]\.formats\.awq: unknown keys \['run'\]"):
        identity.hub_quant(bad_format, f"{where} [hub_quant]")
    with pytest.raises(ValueError, match=r"engine.toml \[hub_quant\]: unknown keys \['runs'\], missing"):
        identity.hub_quant({"refused": "no", "doc": "x", "runs": []}, f"{where} [hub_quant]")
    with pytest.raises(ValueError, match=r"engine.toml \[hub_quant\]: expected a table"):
        identity.engine_facts({**table, "hub_quant": "vLLM"}, where)
    with pytest.raises(ValueError, match=r"engine.toml \[hub_quant\]: unknown keys \['pool_kind'\]"):
        identity.engine_facts({**table, "hub_quant": {**table["hub_quant"], "pool_kind": "memory"}}, where)
    bad_row = copy.deepcopy(table)
    bad_row["refused_on"][0]["vendors"] = "apple"
    with pytest.raises(ValueError, match=r"\[\[refused_on\]\] row 1: unknown keys \['vendors'\]"):
        identity.engine_facts(bad_row, where)
    bad_rule = copy.deepcopy(table)
    bad_rule["default_when"][0]["format"] = "exl2"
    with pytest.raises(ValueError, match=r"\[\[default_when\]\] row 1: format must be one of"):
        identity.engine_facts(bad_rule, where)


@pytest.mark.parametrize(
    "folder", [folder for folder in FOLDERS if (PACKAGE / "engines" / folder / "settings.toml").is_file()]
)
def test_an_unknown_or_missing_command_line_key_names_the_file(folder):
    where = f"hfvram/engines/{folder}/settings.toml"
    table = _settings_toml(folder)
    assert identity.command_line(table, where).programs == tuple(table["command_line"]["programs"])
    unknown = copy.deepcopy(table)
    unknown["command_line"]["flags"] = []
    with pytest.raises(ValueError, match=rf"{where} \[command_line\]: unknown keys \['flags'\]"):
        identity.command_line(unknown, where)
    missing = copy.deepcopy(table)
    del missing["command_line"]["settings"]
    with pytest.raises(ValueError, match=rf"{where} \[command_line\]: .*missing \['settings'\]"):
        identity.command_line(missing, where)
    field = copy.deepcopy(table)
    field["command_line"]["fields"]["contxt"] = "x"
    with pytest.raises(ValueError, match=rf"{where} \[command_line\]: fields names \['contxt'\]"):
        identity.command_line(field, where)
