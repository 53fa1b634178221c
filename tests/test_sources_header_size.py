"""First-Range sizing of safetensors headers from the config shapes (hfvram.sources.header_size).

Yardstick: the real shard headers in fixtures/hub (corpus rows in fixtures/hub/*/DERIVED.md and
fixtures/README.md), whose first 8 bytes give each header's true length."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from hfvram.sources.header_size import first_ranges, header_bytes, predicted_tensors, tensors_by_shard
from hfvram.sources.hub import FIRST_HEADER_RANGE

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
REPOS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "google/gemma-2-9b-it",
    "Qwen/Qwen3-30B-A3B",
    "openai/gpt-oss-20b",
    "TheBloke/Llama-2-13B-chat-GPTQ",
]


def real_header_bytes(repo: str) -> dict[str, int]:
    shards = sorted((HUB / repo).glob("model*.safetensors"))
    return {p.name: 8 + struct.unpack("<Q", p.read_bytes()[:8])[0] for p in shards}


@pytest.mark.parametrize("repo", REPOS)
def test_one_range_covers_every_real_header(repo):
    real = real_header_bytes(repo)
    tensors = predicted_tensors((HUB / repo / "config.json").read_text(encoding="utf-8"))
    assert tensors
    first = first_ranges(tensors, list(real), FIRST_HEADER_RANGE)
    for name, size in real.items():
        assert size <= first[name], name
        assert first[name] <= 1.05 * size + 8192, name  # not a blind over-read (no fixed 32 KiB floor)


def test_moe_shards_predicted_within_two_percent():
    """Qwen3-30B-A3B: 16 shards of 121-145 KiB headers, each predicted from config.json alone."""
    real = real_header_bytes("Qwen/Qwen3-30B-A3B")
    tensors = predicted_tensors((HUB / "Qwen/Qwen3-30B-A3B/config.json").read_text(encoding="utf-8"))
    total = sum(t.nbytes for t in tensors)
    per_shard = tensors_by_shard(tensors, len(real))
    assert sum(len(held) for held in per_shard) == len(tensors)
    for (name, size), held in zip(real.items(), per_shard):
        assert header_bytes(held, total // len(real)) == pytest.approx(size, rel=0.02), name


def test_unreadable_config_falls_back_to_the_fixed_range():
    assert predicted_tensors("{not json") == []
    assert predicted_tensors("[1, 2]") == []
    assert first_ranges([], ["a.safetensors", "b.safetensors"], 4096) == {"a.safetensors": 4096, "b.safetensors": 4096}
