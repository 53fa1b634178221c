"""The pre-built data tables cannot drift from their sources: every hfvram/data TOML has a JSON twin built from
exactly its bytes and holding exactly what tomllib parses, and the ggml type table equals the gguf package's
(gguf.GGML_QUANT_SIZES / GGMLQuantizationType / LlamaFileType). Regenerate with scripts/build_data_tables.py."""

from __future__ import annotations

import json
import zlib

import pytest
import tomllib

from hfvram.datafiles import BUILT, DATA, PACKAGE, data_table, ggml_types, package_table

TOMLS = sorted(p.relative_to(DATA).as_posix() for p in DATA.rglob("*.toml"))
#: the tables kept beside their engine's code (hfvram/engines/<engine>/*.toml)
PACKAGE_TOMLS = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.glob("engines/*/*.toml"))


def test_every_toml_has_a_twin():
    assert "gpus.toml" in TOMLS and "engines/vllm/rules.toml" in PACKAGE_TOMLS
    twins = sorted(
        p.relative_to(BUILT).with_suffix(".toml").as_posix() for p in BUILT.rglob("*.json") if "package" not in p.parts
    )
    assert twins == TOMLS
    package_twins = sorted(
        p.relative_to(BUILT / "package").with_suffix(".toml").as_posix()
        for p in BUILT.rglob("*.json")
        if "package" in p.parts
    )
    assert package_twins == PACKAGE_TOMLS


@pytest.mark.parametrize("name", PACKAGE_TOMLS)
def test_built_twin_of_an_engine_table_matches_its_toml(name):
    raw = PACKAGE.joinpath(name).read_bytes()
    entry = json.loads(BUILT.joinpath("package", name).with_suffix(".json").read_bytes())
    assert entry["source"] == name
    assert entry["source_crc32"] == zlib.crc32(raw), "stale: run scripts/build_data_tables.py"
    assert entry["table"] == tomllib.loads(raw.decode("utf-8"))
    assert package_table(name) == tomllib.loads(raw.decode("utf-8"))


@pytest.mark.parametrize("name", TOMLS)
def test_built_twin_matches_its_toml(name):
    raw = DATA.joinpath(name).read_bytes()
    entry = json.loads(BUILT.joinpath(name).with_suffix(".json").read_bytes())
    assert entry["source"] == name
    assert entry["source_crc32"] == zlib.crc32(raw), "stale: run scripts/build_data_tables.py"
    assert entry["source_length"] == len(raw)
    assert entry["table"] == tomllib.loads(raw.decode("utf-8"))
    assert data_table(name) == tomllib.loads(raw.decode("utf-8"))


def test_an_edited_toml_is_read_from_the_toml_not_the_stale_twin(tmp_path, monkeypatch):
    """datafiles reads the twin only while its CRC and length match the TOML's bytes."""
    import hfvram.datafiles as datafiles

    (tmp_path / "data" / "built").mkdir(parents=True)
    (tmp_path / "data" / "t.toml").write_text("x = 2\n")
    stale = {"source": "t.toml", "source_crc32": zlib.crc32(b"x = 1\n"), "source_length": 6, "table": {"x": 1}}
    (tmp_path / "data" / "built" / "t.json").write_text(json.dumps(stale))
    monkeypatch.setattr(datafiles, "DATA", tmp_path / "data")
    monkeypatch.setattr(datafiles, "BUILT", tmp_path / "data" / "built")
    datafiles.data_table.cache_clear()
    try:
        assert datafiles.data_table("t.toml") == {"x": 2}
        (tmp_path / "data" / "t.toml").write_text("x = 1\n")
        datafiles.data_table.cache_clear()
        assert datafiles.data_table("t.toml") == {"x": 1}
    finally:
        datafiles.data_table.cache_clear()


def test_ggml_type_table_equals_the_gguf_package():
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

    types, file_types = ggml_types()
    assert types == {int(t): (t.name, block, size) for t, (block, size) in GGML_QUANT_SIZES.items()}
    assert {int(t) for t in GGMLQuantizationType} == set(types)
    assert file_types == {int(t): t.name for t in LlamaFileType}
