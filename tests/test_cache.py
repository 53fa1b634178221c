"""The facts cache: atomic entries, corrupt entries rebuilt, refs TTL, zero requests on a second check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from hfvram.sources import load_model
from hfvram.sources.cache import ORPHAN_SECONDS, REF_TTL_SECONDS, TRANSFORMERS_FACTS, FactsCache, value_shape_ok
from hfvram.sources.limits import byte_cap

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_DATA_BYTES = 90_868_376 - (8 + 11_408)  # fixtures/README.md: all-MiniLM-L6-v2 model.safetensors row
SHA = "a" * 40


def test_put_get_and_keys_are_exact(tmp_path):
    cache = FactsCache(tmp_path)
    cache.put("org/name", SHA, "config.json", '{"a": 1}')
    assert cache.get("org/name", SHA, "config.json") == '{"a": 1}'
    assert cache.get("org/name", "b" * 40, "config.json") is None
    assert cache.get("org/other", SHA, "config.json") is None
    assert not list(tmp_path.rglob(".tmp-*"))


def test_branch_refs_expire_commit_refs_do_not(tmp_path):
    FactsCache(tmp_path, now=1000.0).remember("org/name", "main", SHA)
    FactsCache(tmp_path, now=1000.0).remember("org/name", SHA, SHA)
    later = FactsCache(tmp_path, now=1000.0 + REF_TTL_SECONDS + 1)
    assert FactsCache(tmp_path, now=1000.0 + 60).resolve("org/name", "main") == SHA
    assert later.resolve("org/name", "main") is None
    assert later.resolve("org/name", "main", allow_stale=True) == SHA
    assert later.resolve("org/name", SHA) == SHA


def test_corrupt_entry_is_ignored_and_rebuilt(hub, tmp_path):
    first = load_model(MINILM, need_split=True)
    # one write per read: the ref entry of `main` carries every fact read at its commit
    (entry,) = list((tmp_path / "hfvram_cache").rglob("*.json"))
    assert "model.safetensors" in json.loads(entry.read_text())["facts"]
    entry.write_text('{"format": 1, "repo": "sentence-transf')  # torn write
    hub.records.clear()
    second = load_model(MINILM, need_split=True)
    assert second.spec.weights == first.spec.weights
    assert [r.path.rsplit("/", 1)[-1] for r in hub.records if r.status == 206] == ["model.safetensors"]
    assert "model.safetensors" in json.loads(entry.read_text())["facts"]
    hub.records.clear()
    load_model(MINILM, need_split=True)
    assert hub.request_count == 0


def test_stale_branch_ref_asks_the_hub_again(hub, tmp_path):
    load_model(MINILM)
    ref = next(path for path in (tmp_path / "hfvram_cache").rglob("*.json") if "refs" in path.parts)
    entry = json.loads(ref.read_text())
    entry["stored"] -= REF_TTL_SECONDS + 10
    ref.write_text(json.dumps(entry))
    hub.records.clear()
    load_model(MINILM)
    # the branch may have moved: the resolver is asked again (config.json ∥ the index ∥ the header), no API
    asked = sorted(r.path.rsplit("/", 1)[-1] for r in hub.records if "/resolve/" in r.path)
    assert asked == ["config.json", "model.safetensors", "model.safetensors.index.json"]
    assert hub.requests_to("/api/") == []


_WRITER = """
import sys
from pathlib import Path
from hfvram.sources.cache import FactsCache
cache = FactsCache(Path(sys.argv[1]))
print("ready", flush=True)
cache.put("org/name", "a" * 40, "config.json", "x" * 200_000_000)
"""


def test_crash_mid_write_leaves_old_entry_or_none(tmp_path):
    cache = FactsCache(tmp_path)
    cache.put("org/name", SHA, "config.json", "old")
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(0.3)
    proc.kill()
    proc.wait()
    assert cache.get("org/name", SHA, "config.json") in ("old", "x" * 200_000_000)
    cache.put("org/name", SHA, "config.json", "new")
    assert cache.get("org/name", SHA, "config.json") == "new"


# ---- hostile cache entries (issue 17): wrong shape, links to devices, FIFOs, orphaned temporary files -------------


def _entry(tmp_path, fragment: str) -> Path:
    """The cache file holding the fact ``fragment``: the ref entry that carries its commit's facts (one write per
    read), else a fact file of its own."""
    root = tmp_path / "hfvram_cache"
    for path in sorted(root.rglob("*.json")):
        entry = json.loads(path.read_text())
        if fragment in (entry.get("facts") or {}) or fragment in path.name:
            return path
    raise AssertionError(f"no cache entry holds {fragment}")


def _value(path: Path, fragment: str):
    entry = json.loads(path.read_text())
    return entry["facts"][fragment] if "facts" in entry else entry["value"]


def _set_value(path: Path, fragment: str, value) -> None:
    entry = json.loads(path.read_text())
    if "facts" in entry:
        entry["facts"][fragment] = value
    else:
        entry["value"] = value
    path.write_text(json.dumps(entry))


@pytest.mark.parametrize(
    ("fragment", "value"),
    [
        ("model-info", {"sha": 5}),
        ("model-info", {"sha": SHA, "files": None}),
        ("model-info", {"sha": SHA, "files": ["config.json"], "dtype_parameters": {"F32": -5}}),
        ("model.safetensors", 5),
        ("model.safetensors", {"__metadata__": {}}),
        ("config.json", ["not", "text"]),
    ],
)
def test_valid_json_of_the_wrong_shape_is_discarded_and_rebuilt(hub, tmp_path, fragment, value):
    first = load_model(MINILM, need_split=True)
    path = _entry(tmp_path, fragment)
    _set_value(path, fragment, value)
    hub.records.clear()
    second = load_model(MINILM, need_split=True)
    assert second.spec.weights == first.spec.weights
    assert hub.request_count >= 1  # the bad entry was read again from the Hub …
    assert _value(path, fragment) != value  # … and stored again in its right shape
    hub.records.clear()
    load_model(MINILM, need_split=True)
    assert hub.request_count == 0


def test_ref_entry_with_a_bad_timestamp_is_discarded(hub, tmp_path):
    load_model(MINILM)
    ref = next(path for path in (tmp_path / "hfvram_cache").rglob("*.json") if "refs" in path.parts)
    entry = json.loads(ref.read_text())
    entry["stored"] = "yesterday"
    ref.write_text(json.dumps(entry))
    assert load_model(MINILM).spec.weights is not None
    assert isinstance(json.loads(ref.read_text())["stored"], float)


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "dangling", "huge"])
def test_entry_that_is_not_a_small_regular_file_is_not_read(hub, tmp_path, kind):
    """A link to /dev/zero would be read forever, a FIFO would block the open: neither is read; the entry is
    replaced by a regular file on the next successful read."""
    first = load_model(MINILM, need_split=True)
    path = _entry(tmp_path, "model.safetensors")
    path.unlink()
    if kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dangling":
        path.symlink_to(tmp_path / "nowhere.json")
    else:  # sparse, larger than the cap: refused by its size, not read
        with path.open("wb") as fh:
            fh.truncate(byte_cap("cache_entry") + 1)
    second = load_model(MINILM, need_split=True)
    assert second.spec.weights == first.spec.weights
    assert path.is_file() and not path.is_symlink()
    rewritten = json.loads(path.read_text())
    assert "model.safetensors" in (rewritten.get("facts") or {}) or rewritten.get("file") == "model.safetensors"


def test_orphaned_temporary_files_are_removed_once_old(tmp_path):
    cache = FactsCache(tmp_path)
    cache.put("org/name", SHA, "config.json", "old")
    folder = next(tmp_path.rglob("*.json")).parent
    stale, fresh = folder / ".tmp-killed.json", folder / ".tmp-writing.json"
    for orphan in (stale, fresh):
        orphan.write_text('{"format": 1, "va')
    long_ago = time.time() - ORPHAN_SECONDS - 60
    os.utime(stale, (long_ago, long_ago))
    cache.put("org/name", SHA, "quantize_config.json", "{}")
    assert not stale.exists()
    assert fresh.exists()  # may belong to a writer still at work
    assert cache.get("org/name", SHA, "config.json") == "old"


def test_deeply_nested_entry_is_discarded_not_a_crash(tmp_path):
    cache = FactsCache(tmp_path)
    cache.put("org/name", SHA, "config.json", "x")
    path = next(tmp_path.rglob("*.json"))
    path.write_text('{"format": 1, "value": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert cache.get("org/name", SHA, "config.json") is None
    assert not path.exists()


def test_value_shapes():
    assert value_shape_ok("model-info", {"sha": SHA, "files": ["a"], "gated": False, "dtype_parameters": None})
    assert not value_shape_ok("model-info", {"sha": SHA, "files": ["a"], "dtype_parameters": {"F32": True}})
    assert not value_shape_ok("x.gguf", {"version": 3, "metadata": {}, "tensors": [["t", 1, "Q4", [-1], 0, 0]]})
    good_gguf = {"version": 3, "metadata": {}, "tensors": [], "header_end": 1, "alignment": 32, "data_start": 32}
    assert value_shape_ok("x.gguf", good_gguf)
    assert value_shape_ok("model.safetensors.index.json", {"total_size": 1})
    assert not value_shape_ok("model.safetensors.index.json", "text")


# ---- transformers' facts of a config: one entry per (config, transformers version), in the same cache ------------


def _hf_facts(version: str = "5.0.0", **changes):
    from hfvram.readers.config_hf import HfFacts

    # the shape of what config_hf.compute_hf_facts returns for a small Llama config (values as in its config.json)
    facts = HfFacts(
        f"transformers {version} LlamaConfig",
        version,
        None,
        ("full_attention",) * 2,
        {"num_hidden_layers": 2, "tie_word_embeddings": False},
    )
    return replace(facts, **changes)


def test_transformers_facts_are_kept_per_config_and_version(tmp_path):
    cache = FactsCache(tmp_path)
    canonical = json.dumps({"model_type": "llama", "num_hidden_layers": 2}, sort_keys=True)
    assert cache.transformers_facts(canonical, "5.0.0") is None
    assert cache.put_transformers_facts(canonical, "5.0.0", _hf_facts())
    got = cache.transformers_facts(canonical, "5.0.0")
    assert got is not None and got.origin == "facts cache"
    assert replace(got, origin=None) == _hf_facts()
    assert cache.transformers_facts(canonical, "5.0.1") is None  # another transformers: computed again
    assert cache.transformers_facts(canonical.replace("2", "3"), "5.0.0") is None  # another config
    (path,) = (tmp_path / TRANSFORMERS_FACTS).glob("*.json")
    assert path == cache.transformers_path(canonical, "5.0.0")
    assert not list(tmp_path.rglob(".tmp-*"))  # written through a temporary file


@pytest.mark.parametrize(
    "kind",
    ["torn", "other-config", "facts-of-another-version", "bad-facts", "unbounded-facts", "dev_zero", "fifo", "huge"],
)
def test_a_bad_transformers_facts_entry_is_discarded(tmp_path, kind):
    """Entries are untrusted like every other: not a capped regular file, torn, naming another config, or facts
    that do not parse as facts within the bounds are deleted (and the caller computes the facts again)."""
    cache = FactsCache(tmp_path)
    canonical = json.dumps({"model_type": "llama"})
    cache.put_transformers_facts(canonical, "5.0.0", _hf_facts())
    path = cache.transformers_path(canonical, "5.0.0")
    entry = json.loads(path.read_text())
    path.unlink()
    if kind == "torn":
        path.write_text(json.dumps(entry)[:40])
    elif kind == "other-config":
        path.write_text(json.dumps({**entry, "config_sha256": "0" * 64}))
    elif kind == "facts-of-another-version":
        path.write_text(json.dumps({**entry, "value": _hf_facts("4.0.0").to_json()}))
    elif kind == "bad-facts":  # a default that is not an int / bool
        path.write_text(json.dumps({**entry, "value": {**entry["value"], "defaults": {"num_hidden_layers": "2"}}}))
    elif kind == "unbounded-facts":  # a count beyond hfvram's bounds (readers/bounds.py)
        path.write_text(json.dumps({**entry, "value": {**entry["value"], "defaults": {"num_hidden_layers": 10**12}}}))
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    else:  # sparse, larger than the cap: refused by its size, not read
        with path.open("wb") as fh:
            fh.truncate(byte_cap("transformers_facts") + 1)
    assert cache.transformers_facts(canonical, "5.0.0") is None
    assert not os.path.lexists(path)
