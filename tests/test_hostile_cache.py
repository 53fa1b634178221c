"""The facts cache under hostile input (issue 27): entries hold parsed facts (a safetensors header's tensor table,
never its raw text), are size-capped, and a bad or oversized one is dropped once; a header from the Hub whose tensors
run past the file's real size is a read error. Costs read from the child's own counters (test_hostile_round3)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hubserver import Fault, Repo, RepoFile
from test_hostile_round3 import CPU_SECONDS, PEAK_BYTES, measured, one_error_line

from hfvram.readers.bounds import bound

CONFIG = Path(__file__).resolve().parents[1] / "fixtures/hub/sentence-transformers/all-MiniLM-L6-v2/config.json"
SHA = "1" * 40


@pytest.fixture(autouse=True)
def _patient_http(monkeypatch):
    """These cases are about the cache, not deadlines: the suite's 2 s request deadline (conftest) made a plain check
    of a small repo time out once on a loaded machine, so each child gets 30 s."""
    monkeypatch.setenv("HFVRAM_HTTP_TIMEOUT", "30")


def _header(count: int, name_width: int = 0, metadata: str = "") -> bytes:
    entries = [f'"__metadata__":{{"note":"{metadata}"}}'] if metadata else []
    entries += [
        f'"model.layers.{i}.{"w" * name_width}":{{"dtype":"BF16","shape":[1],"data_offsets":[{2 * i},{2 * i + 2}]}}'
        for i in range(count)
    ]
    body = ("{" + ",".join(entries) + "}").encode()
    return struct.pack("<Q", len(body)) + body


def _serve(hub, repo_id: str, header: bytes, size: int | None = None) -> None:
    """A repo on the test Hub: MiniLM's config.json and one model.safetensors of ``header`` (presented at ``size``
    bytes, by default the size its offsets imply); the model info states no dtype counts, so the header is read."""
    length = struct.unpack("<Q", header[:8])[0]
    table = json.loads(header[8 : 8 + length])
    implied = 8 + length + max(v["data_offsets"][1] for k, v in table.items() if k != "__metadata__")
    files = {
        "config.json": RepoFile("config.json", CONFIG.stat().st_size, CONFIG.read_bytes, False),
        "model.safetensors": RepoFile("model.safetensors", size or implied, lambda: header, True),
    }
    hub.files.repos[repo_id] = Repo(repo_id, files, SHA)
    hub.faults[f"/api/models/{repo_id}"] = Fault("parameters", parameters={})


def _cache_files(tmp_path) -> list[Path]:
    return [p for p in (tmp_path / "hfvram_cache").rglob("*") if p.is_file()]


@pytest.mark.parametrize(
    "shape", [{"count": 170_000, "name_width": 280}, {"count": 4, "metadata": "x" * (60 * 1024 * 1024)}],
    ids=["170k long names", "60 MiB metadata"],
)  # fmt: skip
def test_a_header_at_the_cap_costs_within_the_bound_and_is_not_paid_for_again(hub, tmp_path, shape):
    """Issue 27 measured a 99 MiB header at 30 s and 1.2 GB on every later check, offline included (its text was
    cached). The cache now holds its parsed facts, within a cap: later checks, offline and online, read no header
    text (a table over the cap is not kept: an online check reads the header again, an offline one answers from the
    config's shapes). A header just under hfvram's header cap (bounds.toml) is read within the cost bound."""
    header = _header(**shape)
    assert 55 * 1024 * 1024 < len(header) < bound("safetensors", "maximum_header_bytes")
    _serve(hub, "hostile/big-header", header)
    args = ("check", "hostile/big-header", "--gpu", "h100", "--json")
    code, _, err, cpu, peak = measured(*args, env={"HFVRAM_HTTP_TIMEOUT": "60"})
    print(f"first check: exit {code}, {cpu:.1f} s CPU, {peak / 2**20:.0f} MiB")
    assert code == 0, err[-300:]
    assert cpu <= CPU_SECONDS and peak <= PEAK_BYTES, (cpu, peak)
    files = _cache_files(tmp_path)
    assert files and max(p.stat().st_size for p in files) < 33_554_432
    assert not any(b"wwwwwwww" in p.read_bytes() or b"xxxxxxxx" in p.read_bytes() for p in files)
    for extra in (["--offline"], []):
        code, _, err, cpu, peak = measured(*args, *extra, env={"HFVRAM_HTTP_TIMEOUT": "60"})
        print(f"later check {extra}: exit {code}, {cpu:.1f} s CPU, {peak / 2**20:.0f} MiB")
        assert code == 0, err[-300:]
        assert cpu <= CPU_SECONDS and peak <= PEAK_BYTES, (cpu, peak)


def test_a_header_over_the_cap_is_refused_before_it_is_read(hub, tmp_path):
    """A 95 MB header (under the format's 100 MB, over hfvram's cap) cost 350 MiB and 10-11 s to parse: it is now
    one read error from its 8-byte length, and its body is never fetched."""
    header = _header(262_000, name_width=280)
    assert bound("safetensors", "maximum_header_bytes") < len(header) < 100_000_000
    _serve(hub, "hostile/huge-header", header)
    code, out, err, cpu, peak = measured("check", "hostile/huge-header", "--gpu", "h100")
    line = one_error_line(code, err, 3)
    assert "cap on a safetensors header" in line and out == ""
    assert cpu <= CPU_SECONDS and peak <= PEAK_BYTES, (cpu, peak)
    assert hub.bytes_sent("model.safetensors") < 1024 * 1024


def test_tensors_past_the_size_the_hub_states_are_a_read_error(hub, tmp_path):
    """The header's offsets say 1,000 bytes of data; the file (Content-Range total) holds 100."""
    header = _header(500)
    _serve(hub, "hostile/short-file", header, size=len(header) + 100)
    code, out, err, cpu, peak = measured("check", "hostile/short-file", "--gpu", "h100")
    line = one_error_line(code, err, 3)
    assert "past the end of the file" in line and "model.safetensors" in line and out == ""
    assert cpu <= CPU_SECONDS and peak <= PEAK_BYTES
    assert not any(b"model.layers" in p.read_bytes() for p in _cache_files(tmp_path))
    # the same header at its real size reads
    _serve(hub, "hostile/whole-file", header)
    code, out, err, _, _ = measured("check", "hostile/whole-file", "--gpu", "h100", "--json")
    assert code == 0 and json.loads(out)["model"]["weights_bytes"] == 1000, err[-300:]


def _ref_entry(tmp_path) -> Path:
    (ref,) = [p for p in _cache_files(tmp_path) if "refs" in p.parts]
    return ref


def test_an_old_or_oversized_cache_entry_is_dropped_once(hub, tmp_path):
    """A ref entry of the old format (raw header text) is ignored and deleted; one over the cap (a 216 MB entry cost
    1 GB on every run) is deleted unread; the next online check writes a good one."""
    _serve(hub, "hostile/small", _header(8))
    args = ("check", "hostile/small", "--gpu", "h100", "--json")
    assert measured(*args)[0] == 0
    ref = _ref_entry(tmp_path)
    entry = json.loads(ref.read_text())
    assert entry["format"] == 2 and entry["facts"]["model.safetensors"]["tensors"][0][0] == "model.layers.0."
    old = {**entry, "format": 1, "facts": {**entry["facts"], "model.safetensors": "{" + " " * 40_000_000 + "}"}}
    for hostile in (json.dumps(old), json.dumps(old).replace('"format": 1', '"format": 2')):
        ref.write_text(hostile)
        code, _, err, cpu, peak = measured(*args, "--offline")
        if code != 0:  # the facts are gone with the entry: offline, one line
            one_error_line(code, err, 3)
        assert cpu <= CPU_SECONDS and peak <= PEAK_BYTES, (cpu, peak)
        assert not ref.exists()
        assert measured(*args)[0] == 0
        assert json.loads(ref.read_text())["format"] == 2


def test_a_bad_row_in_a_cached_table_is_read_again(hub, tmp_path):
    """A stored tensor table whose row does not add up (shape against offsets) is not believed: the next check
    reads the header again and stores a good table."""
    _serve(hub, "hostile/small", _header(8))
    args = ("check", "hostile/small", "--gpu", "h100", "--json")
    assert measured(*args)[0] == 0
    ref = _ref_entry(tmp_path)
    entry = json.loads(ref.read_text())
    entry["facts"]["model.safetensors"]["tensors"][0][2] = [10**9]
    ref.write_text(json.dumps(entry))
    code, out, err, _, _ = measured(*args)
    assert code in (0, 3), err[-300:]
    if code == 3:  # the bad table is refused with one line, then dropped: the next check reads the Hub
        one_error_line(code, err, 3)
    code, out, err, _, _ = measured(*args)
    assert code == 0 and json.loads(out)["model"]["weights_bytes"] == 16, err[-300:]


# ---- cache folders are regular folders only --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "linked", ["<hub>/refs", "<hub>/facts", "<hub>/refs/<repo>", "endpoints", "transformers-facts"]
)
def test_a_linked_folder_inside_the_cache_is_not_followed(hub, tmp_path, linked):
    """A symbolic link inside the cache (a folder an attacker, or a mistaken sync, replaced by a link): no entry is
    written through it, an old ``.tmp-*`` file in its target is not swept, and the check still answers."""
    import os

    from hfvram.sources.cache import ORPHAN_SECONDS, FactsCache, _slug

    source = "sentence-transformers/all-MiniLM-L6-v2"
    outside = tmp_path / "outside"
    outside.mkdir()
    orphan = outside / ".tmp-victim.json"
    orphan.write_text("keep me")
    os.utime(orphan, (1, 1))  # older than ORPHAN_SECONDS: a sweep in this folder would delete it
    assert ORPHAN_SECONDS < 10**9
    cache = tmp_path / "hfvram_cache"
    hub_root = os.path.relpath(FactsCache(cache).hub_root, cache)  # the test Hub's facts: endpoints/<hash>
    inner = linked.replace("<repo>", _slug(source)).replace("<hub>", hub_root)
    (cache / inner).parent.mkdir(parents=True, exist_ok=True)
    (cache / inner).symlink_to(outside, target_is_directory=True)
    code, _, err, cpu, peak = measured("check", source, "--gpu", "h100", "--json", env={"HFVRAM_HTTP_TIMEOUT": "30"})
    assert code == 0, err[-300:]
    assert cpu <= CPU_SECONDS and peak <= PEAK_BYTES
    assert sorted(p.name for p in outside.rglob("*")) == [".tmp-victim.json"] and orphan.read_text() == "keep me"
    assert (cache / inner).is_symlink()
    # an entry planted in the link's target is not read as this repo's facts either: the check asks the Hub
    hub.records.clear()
    assert measured("check", source, "--gpu", "h100", "--json")[0] == 0
    if "refs" in linked or linked == "endpoints":
        assert hub.request_count > 0


def test_an_entry_that_is_a_link_is_not_read(hub, tmp_path):
    source = "sentence-transformers/all-MiniLM-L6-v2"
    assert measured("check", source, "--gpu", "h100", "--json")[0] == 0
    ref = _ref_entry(tmp_path)
    planted = tmp_path / "planted.json"
    planted.write_bytes(ref.read_bytes())
    ref.unlink()
    ref.symlink_to(planted)
    hub.records.clear()
    code, _, err, _, _ = measured("check", source, "--gpu", "h100", "--json")
    assert code == 0, err[-300:]
    assert hub.request_count > 0 and not ref.is_symlink() and planted.exists()
