"""Hostile safetensors files read from a local folder (issue 27): tensor offsets that run past the file's end are a
refusal, not a figure, and a header listing more tensors than any checkpoint holds is refused before it is parsed,
within the round's goal of 10 s and 300 MB. Runs the real CLI in a fresh interpreter and reads its own counters."""

from __future__ import annotations

import json
import os
import shutil
import struct

from test_hostile_round3 import measured, one_error_line
from test_sources_local import MINILM_DATA_BYTES, _minilm_folder

from hfvram.readers.bounds import bound


def test_a_complete_file_reads_and_one_cut_short_is_refused(tmp_path):
    folder = _minilm_folder(tmp_path / "m")
    weights = folder / "model.safetensors"
    header_only = weights.stat().st_size
    # the real file's size (sparse: no data written), as the header's offsets say: it reads
    os.truncate(weights, header_only + MINILM_DATA_BYTES)
    code, out, err, _, _ = measured("check", str(folder), "--gpu", "rtx4090", "--json")
    assert code == 0, err
    assert json.loads(out)["model"]["weights_bytes"] == MINILM_DATA_BYTES
    # a download cut short: the tensors run past the end of the file, which no engine loads
    os.truncate(weights, header_only + MINILM_DATA_BYTES // 2)
    code, out, err, _, _ = measured("check", str(folder), "--gpu", "rtx4090")
    line = one_error_line(code, err, 3)
    assert "past the end of the file" in line and "model.safetensors" in line
    assert out == ""


def test_a_header_of_the_header_alone_is_still_sized(tmp_path):
    """hfvram's header fixtures hold no data bytes at all: such a file is sized from its header."""
    folder = _minilm_folder(tmp_path / "m")
    code, out, err, _, _ = measured("check", str(folder), "--json")
    assert code == 0, err
    assert json.loads(out)["model"]["weights_bytes"] == MINILM_DATA_BYTES


def test_a_header_of_too_many_tensors_is_refused_before_it_is_parsed(tmp_path):
    folder = tmp_path / "many"
    _minilm_folder(folder, with_weights=False)
    count = bound("safetensors", "maximum_tensors_per_file") + 1
    entries = ",".join(
        f'"t.{i}":{{"dtype":"BF16","shape":[1],"data_offsets":[{2 * i},{2 * i + 2}]}}' for i in range(count)
    )
    header = ("{" + entries + "}").encode()
    with open(folder / "model.safetensors", "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
    code, out, err, cpu, peak = measured("check", str(folder), "--gpu", "rtx4090")
    assert out == ""
    line = one_error_line(code, err, 3)
    assert f"header lists {count} tensors" in line
    assert cpu <= 10 and peak <= 300 * 1024 * 1024, (cpu, peak)
    shutil.rmtree(folder)
