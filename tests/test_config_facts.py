"""transformers facts: computed once per config and transformers version by the reader (hfvram.readers.config_hf,
which keeps them in-process only), kept on disk in the facts cache (hfvram.sources.cache) or shipped in the
embedded catalogue, looked up by the sources (hfvram.sources.facts.transformers_facts) and read back so that a
cached or catalogued config never imports transformers. Configs are the real files of fixtures/hub (sources in
fixtures/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hfvram.readers import config_hf
from hfvram.readers.config import load_json_tolerant, read_config
from hfvram.readers.config_hf import (
    FACTS_FORMAT,
    HfFacts,
    canonical_config,
    compute_hf_facts,
    config_sha256,
    installed_transformers_version,
)
from hfvram.sources.cache import FORMAT, TRANSFORMERS_FACTS, FactsCache
from hfvram.sources.facts import CheckpointFacts, spec_from_facts, transformers_facts

ROOT = Path(__file__).resolve().parent.parent
HUB = ROOT / "fixtures" / "hub"
REPOS = sorted(p.parent for p in HUB.glob("*/*/config.json"))
CATALOG = json.loads((ROOT / "hfvram" / "data" / "catalog.json").read_text(encoding="utf-8"))
VERSION = installed_transformers_version()

needs_transformers = pytest.mark.skipif(VERSION is None, reason="transformers not installed")


def _config(repo: str | Path) -> dict:
    folder = repo if isinstance(repo, Path) else HUB / repo
    return load_json_tolerant((folder / "config.json").read_bytes(), "config.json")


def _cache_file(config: dict) -> Path:
    return FactsCache().transformers_path(canonical_config(config), VERSION or "none")


def _entry_text(config: dict, facts: dict) -> str:
    """A facts-cache entry as FactsCache.put_transformers_facts writes it, holding ``facts`` (JSON form)."""
    entry = {"format": FORMAT, "config_sha256": config_sha256(config), "transformers": VERSION, "stored": 0}
    return json.dumps({**entry, "value": facts})


def _without_decided_by_note(spec):
    provenance = {k: v for k, v in spec.provenance.items() if k != "decided_by"}
    return replace(spec, provenance=provenance)


def _edited_config(repo: str) -> dict:
    """A real config with one harmless key added, so the catalogue (keyed by config sha256) does not know it."""
    return {**_config(repo), "hfvram_test_marker": 1}


def test_facts_cache_dir_follows_hfvram_cache_dir(isolated_caches):
    config = _config("google/gemma-2-9b-it")
    assert _cache_file(config).parent == isolated_caches / "hfvram_cache" / TRANSFORMERS_FACTS


@needs_transformers
def test_facts_are_written_once_then_read_from_the_cache():
    config = _edited_config("google/gemma-2-9b-it")
    path = _cache_file(config)
    assert not path.exists()
    first = transformers_facts(config)
    assert first is not None and first.origin is None and first.version == VERSION and first.ok
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert stored["config_sha256"] == config_sha256(config) and stored["transformers"] == VERSION
    assert stored["value"]["format"] == FACTS_FORMAT and stored["value"]["version"] == VERSION
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp")]  # written through a temporary file
    # the second reading is the stored one: an entry edited on disk is what comes back
    stored["value"]["label"] = "transformers (edited cache entry)"
    path.write_text(json.dumps(stored), encoding="utf-8")
    second = transformers_facts(config)
    assert second is not None
    assert second.origin == "facts cache" and second.label == "transformers (edited cache entry)"
    assert second.layer_types == first.layer_types and second.defaults == first.defaults


@needs_transformers
@pytest.mark.parametrize("garbage", [b"", b"{not json", b'{"format": 999}', b"\xff\xfe", b'{"format": 1, "label": 3}'])
def test_a_corrupt_cache_entry_is_ignored_and_rewritten(garbage: bytes):
    config = _edited_config("Qwen/Qwen3-8B")
    path = _cache_file(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(garbage)
    facts = transformers_facts(config)
    assert facts is not None and facts.ok and facts.origin is None
    assert HfFacts.from_json(json.loads(path.read_text(encoding="utf-8"))["value"]).layer_types == facts.layer_types


@needs_transformers
def test_facts_computed_by_one_process_are_read_by_the_next_without_transformers(isolated_caches):
    """A config the catalogue does not know: the first process computes its facts (importing transformers) and
    stores them; a later process reads the same config through the sources, takes the facts from the cache and
    leaves transformers unimported, with the same spec."""
    config = _edited_config("google/gemma-2-9b-it")
    (isolated_caches / "config.json").write_text(json.dumps(config), encoding="utf-8")
    script = (
        "import sys, json\n"
        "from hfvram.sources.facts import CheckpointFacts, spec_from_facts\n"
        f"spec = spec_from_facts(CheckpointFacts(open({str(isolated_caches / 'config.json')!r}).read()))\n"
        "by = [spec.decided_by, spec.provenance.get('decided_by', '')]\n"
        "print(json.dumps([by, [l.kind for l in spec.layers], 'transformers' in sys.modules]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)]
    assert runs[0].returncode == 0, runs[0].stderr
    assert _cache_file(config).is_file()
    runs.append(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120))
    assert runs[1].returncode == 0, runs[1].stderr
    (first_by, first_kinds, first_imported), (second_by, second_kinds, second_imported) = (
        json.loads(run.stdout) for run in runs
    )
    assert first_imported and not second_imported
    assert first_by[0] == second_by[0] == f"transformers {VERSION}"
    assert "from the facts cache" in second_by[1] and "from the" not in first_by[1]
    assert second_kinds == first_kinds


@needs_transformers
@pytest.mark.parametrize("repo", REPOS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_facts_read_the_config_exactly_as_transformers_does(repo: Path):
    """The JSON facts (as the cache and catalogue store them) give the same spec as asking transformers now."""
    config = _config(repo)
    live = read_config(config)
    stored = json.loads(json.dumps(compute_hf_facts(config).to_json()))
    from_json = read_config(config, hf_facts=stored)
    assert _without_decided_by_note(from_json) == _without_decided_by_note(live)


def test_every_catalogue_entry_carries_facts_for_its_config():
    for repo_id, entry in CATALOG["repos"].items():
        config = load_json_tolerant(entry["files"]["config.json"].encode("utf-8"), "config.json")
        assert entry["config_sha256"] == config_sha256(config), repo_id
        facts = HfFacts.from_json(entry["hf_facts"])
        assert facts.version and facts.version.startswith("5."), repo_id


@needs_transformers
def test_catalogue_facts_are_current_for_the_installed_transformers():
    """Rebuild the catalogue (scripts/build_catalog.py) when this fails after a transformers upgrade."""
    versions = {entry["hf_facts"]["version"] for entry in CATALOG["repos"].values()}
    if versions != {VERSION}:
        pytest.skip(f"catalogue built with transformers {versions}, installed {VERSION}")
    for repo_id, entry in CATALOG["repos"].items():
        config = load_json_tolerant(entry["files"]["config.json"].encode("utf-8"), "config.json")
        assert entry["hf_facts"] == compute_hf_facts(config).to_json(), repo_id


def test_a_catalogued_config_takes_its_facts_from_the_catalogue():
    config = _config("meta-llama/Llama-3.1-8B-Instruct")
    facts = transformers_facts(config)
    assert facts is not None and facts.origin == "hfvram catalogue" and facts.ok
    config_hf._memo_facts.cache_clear()  # an earlier test may have remembered this config's facts in-process
    spec = spec_from_facts(CheckpointFacts(json.dumps(config)))
    assert "from the hfvram catalogue" in spec.provenance["decided_by"]
    assert spec.decided_by.startswith("transformers 5.")


def test_facts_from_another_transformers_version_are_used_and_say_so():
    config = _config("google/gemma-2-9b-it")
    entry = CATALOG["repos"]["google/gemma-2-9b-it"]["hf_facts"]
    older = {**entry, "version": "4.99.0", "label": "transformers 4.99.0 Gemma2Config"}
    spec = read_config(config, hf_facts=older)
    assert spec.decided_by == "transformers 4.99.0"
    assert spec.provenance["tie_word_embeddings"].startswith("transformers 4.99.0 Gemma2Config (precomputed; ")
    assert [layer.kind for layer in spec.layers] == [layer.kind for layer in read_config(config, hf_facts=entry).layers]


def test_unusable_precomputed_facts_fall_back_to_the_rules():
    config = _config("google/gemma-2-9b-it")
    spec = read_config(config, hf_facts={"format": FACTS_FORMAT + 1})
    assert spec.decided_by == "hfvram rules"
    assert "unusable" in spec.provenance["decided_by"]
    assert spec.layers == read_config(config, use_transformers=False).layers


def test_reading_a_catalogued_config_does_not_import_transformers(tmp_path):
    """The start-up cost the facts remove: reading a catalogued config leaves transformers unimported."""
    script = (
        "import sys, json\n"
        "from hfvram.sources.facts import CheckpointFacts, spec_from_facts\n"
        f"text = open({str(HUB / 'meta-llama/Llama-3.1-8B-Instruct/config.json')!r}).read()\n"
        "spec = spec_from_facts(CheckpointFacts(text))\n"
        "print(spec.decided_by, 'transformers' in sys.modules)\n"
    )
    env = {**os.environ, "HFVRAM_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    decided_by, imported = done.stdout.rsplit(" ", 1)
    assert decided_by.startswith("transformers 5.") and imported.strip() == "False"


# ---- issue 17: hostile facts-cache entries (not regular files, too large, counts beyond the bounds) -------------


def _entry(kind: str, path: Path, good: dict, config: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "dev-zero-link":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        with path.open("wb") as handle:
            handle.truncate(1 << 30)  # sparse: 1 GiB of zeros, nothing written
    elif kind == "layer-types":
        path.write_text(_entry_text(config, {**good, "layer_types": ["full_attention"] * 1_000_000}), encoding="utf-8")
    elif kind == "huge-default":
        huge = {**good, "defaults": {**good["defaults"], "head_dim": 10**400}}
        path.write_text(_entry_text(config, huge), encoding="utf-8")
    elif kind == "bare-facts":  # the layout before the facts cache held these entries: computed again
        path.write_text(json.dumps(good), encoding="utf-8")
    elif kind == "other-version":
        path.write_text(_entry_text(config, {**good, "version": "4.0.0"}), encoding="utf-8")


@needs_transformers
@pytest.mark.skipif(not Path("/dev/zero").exists() or not hasattr(os, "mkfifo"), reason="needs /dev/zero and FIFOs")
@pytest.mark.parametrize(
    "kind", ["dev-zero-link", "fifo", "huge", "layer-types", "huge-default", "bare-facts", "other-version"]
)
def test_a_hostile_cache_entry_is_ignored(kind: str):
    """The entry is not read into memory (nor waited on): the facts are computed again, as for a corrupt entry."""
    config = _edited_config("Qwen/Qwen3-8B")
    good = compute_hf_facts(config).to_json()
    _entry(kind, _cache_file(config), good, config)
    facts = transformers_facts(config)
    assert facts is not None and facts.ok and facts.origin is None
    assert list(facts.layer_types or ()) == good["layer_types"]
