"""What a Hub repository holds, without the HTTP stack: the model-info record kept in the facts cache and the
rules that pick checkpoint files from a file list. Kept apart from ``hub`` so that offline runs (facts cache,
embedded catalogue) never import the HTTP client."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: facts-cache entry holding a repo's model info (sha, files, gated, dtype parameters)
MODEL_INFO = "model-info"


def offline_requested() -> bool:
    """Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE, as huggingface_hub reads it) asks for no network, read at
    call time; also huggingface_hub's own switch when that library is already loaded (importing it only for
    this would cost a warm run its start-up)."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    if value.strip().upper() in {"1", "ON", "YES", "TRUE"}:
        return True
    hf_constants = sys.modules.get("huggingface_hub.constants")
    return bool(getattr(hf_constants, "HF_HUB_OFFLINE", False))


@dataclass(frozen=True)
class RepoInfo:
    repo_id: str
    sha: str
    files: tuple[str, ...]
    gated: object = False
    #: `safetensors.parameters` of the model info: element count per dtype (None when the Hub has none)
    dtype_parameters: Mapping[str, int] | None = None
    #: True when ``files`` holds only the files found by name through the resolver (``hub_resolver``), not the
    #: repo's listing: a file it lacks may still be in the repo
    partial: bool = False

    def to_json(self) -> dict:
        data = {
            "sha": self.sha,
            "files": list(self.files),
            "gated": self.gated,
            "dtype_parameters": dict(self.dtype_parameters) if self.dtype_parameters else None,
        }
        if self.partial:
            data["partial"] = True
        return data

    @classmethod
    def from_json(cls, repo_id: str, data: Mapping) -> RepoInfo:
        return cls(
            repo_id,
            data["sha"],
            tuple(data["files"]),
            data.get("gated", False),
            data.get("dtype_parameters"),
            data.get("partial") is True,
        )


_WEIGHT_SUFFIXES_UNSUPPORTED = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")


def safetensors_shards(files: Sequence[str]) -> list[str]:
    """Top-level checkpoint shards (``model*.safetensors``; else any top-level ``*.safetensors`` except
    Mistral's ``consolidated`` duplicate of the same weights)."""
    top = [f for f in files if "/" not in f and f.endswith(".safetensors")]
    preferred = [f for f in top if f.startswith("model")]
    if preferred:
        return sorted(preferred)
    others = [f for f in top if not f.startswith("consolidated")]
    return sorted(others or top)


def gguf_files(files: Sequence[str], selector: str) -> list[str]:
    """The GGUF file (or split set) a ``:QUANT`` or ``:file.gguf`` selector names."""
    ggufs = [f for f in files if f.lower().endswith(".gguf")]
    if selector.lower().endswith(".gguf"):
        chosen = [f for f in ggufs if f == selector or f.rsplit("/", 1)[-1] == selector]
        first = chosen[:1]
        split = re.match(r"^(.*)-00001-of-(\d{5})\.gguf$", first[0]) if first else None
        if split:
            return sorted(f for f in ggufs if re.match(re.escape(split[1]) + r"-\d{5}-of-" + split[2] + r"\.gguf$", f))
        return first
    tag = re.compile(r"(^|[._\-/])" + re.escape(selector) + r"([._\-]|$)", re.IGNORECASE)
    matches = sorted(f for f in ggufs if tag.search(f.rsplit("/", 1)[-1]) or tag.search(f))
    if not matches:
        return []
    groups: dict[str, list[str]] = {}
    for f in matches:
        key = re.sub(r"-\d{5}-of-\d{5}\.gguf$", "", f)
        groups.setdefault(key, []).append(f)
    return groups[sorted(groups, key=lambda k: (k.count("/"), len(k)))[0]]


def quant_tags(files: Sequence[str]) -> list[str]:
    tags = set()
    for f in files:
        found = re.search(r"(?i)(I?Q\d_[A-Z0-9_]+|Q\d_\d|BF16|F16|F32)", f.rsplit("/", 1)[-1])
        if found:
            tags.add(found[1].upper().rstrip("_"))
    return sorted(tags)


_SPLIT_NAME = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def check_file_counts(files: Sequence[str], *, kind: str, where: str) -> None:
    """Bound the files one checkpoint is read from before a request (or a read) is made per file: at most
    ``max_shards`` safetensors shards, at most ``max_split_parts`` parts of a split GGUF, counting both the
    files listed and the count a split name declares (``-00001-of-99999.gguf``). One short error otherwise."""
    from hfvram.errors import MalformedFileError
    from hfvram.sources.limits import count_bound

    if kind == "gguf":
        bound = count_bound("max_split_parts")
        declared = max((int(m[2]) for m in map(_SPLIT_NAME.search, files[:1]) if m), default=0)
        count = max(len(files), declared)
        noun = "parts of a split GGUF"
    else:
        bound = count_bound("max_shards")
        count = len(files)
        noun = "safetensors shards"
    if count > bound:
        raise MalformedFileError(
            f"{count} {noun}, more than the {bound} hfvram reads (max_{'split_parts' if kind == 'gguf' else 'shards'} "
            "in hfvram/data/limits.toml)",
            file=where,
        )
