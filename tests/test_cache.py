"""The facts cache: atomic entries, corrupt entries rebuilt, refs TTL, zero requests on a second check."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from hfvram.sources import load_model
from hfvram.sources.cache import REF_TTL_SECONDS, FactsCache

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
    ref = next((tmp_path / "hfvram_cache" / "refs").rglob("*.json"))
    entry = json.loads(ref.read_text())
    entry["stored"] -= REF_TTL_SECONDS + 10
    ref.write_text(json.dumps(entry))
    hub.records.clear()
    load_model(MINILM)
    # the branch may have moved: model info and config.json are asked again (in parallel), nothing else
    assert sorted(r.path.rsplit("/", 1)[-1] for r in hub.records) == ["all-MiniLM-L6-v2", "config.json"]


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
