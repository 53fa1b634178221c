"""Local sources: a model folder, a ``.gguf`` file (or split set), and repos in the HF cache. No network."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hfvram.errors import HfvramError, MalformedFileError, ModelReadError, UnsupportedLayoutError
from hfvram.sources.facts import COMPANION_FILES, INDEX_FILE, CheckpointFacts, spec_from_facts
from hfvram.sources.limits import byte_cap, is_regular_file, read_local_bytes, read_local_text
from hfvram.sources.repo_files import check_file_counts, safetensors_shards
from hfvram.spec import LoadedModel, SourceInfo

#: local JSON files (config.json, companions, the index): limits.toml [bytes] local_json
JSON_CAP = byte_cap("local_json")


def _text(path: Path) -> str:
    """A local JSON file's text: a regular file of at most 16 MiB (a FIFO, a device, a sparse 4 GiB file are
    refused before a byte is read)."""
    return read_local_text(path, JSON_CAP)


def folder_facts(folder: Path, origin: str) -> tuple[CheckpointFacts, tuple[str, ...]]:
    """Raw facts of a model folder: config.json, companions, safetensors headers (or the index metadata)."""
    from hfvram.readers.safetensors import file_reader, header_length

    config = folder / "config.json"
    if not os.path.lexists(config):
        raise ModelReadError(f"{folder} has no config.json")
    config_text = _text(config)  # a link to /dev/zero or a FIFO is refused here, with its reason
    names = sorted(p.name for p in folder.iterdir() if is_regular_file(p))
    companions = {n: _text(folder / n) for n in COMPANION_FILES if n in names}
    shards = safetensors_shards(names)
    check_file_counts(shards, kind="safetensors", where=str(folder))
    index_meta = None
    missing: list[str] = []
    if INDEX_FILE in names:
        from hfvram.readers.config import load_json_tolerant

        index = load_json_tolerant(read_local_bytes(folder / INDEX_FILE, JSON_CAP), INDEX_FILE)
        metadata = index.get("metadata")
        index_meta = dict(metadata) if isinstance(metadata, dict) else {}
        weight_map = index.get("weight_map")
        weight_map = weight_map if isinstance(weight_map, dict) else {}
        missing = sorted({str(v) for v in weight_map.values()} - set(names))
    headers: dict[str, str] = {}
    # bytes after each header: a local file's size is known, so its tensors must end exactly there
    data_sizes: dict[str, int] = {}
    if not missing:  # a partial download would under-count: use the index total (or config shapes) instead
        for shard in shards:
            read = file_reader(folder / shard)
            size = (folder / shard).stat().st_size
            length = header_length(read(0, 8), filename=shard, available=size)
            data_sizes[shard] = size - 8 - length
            try:
                headers[shard] = read(8, length).decode("utf-8", errors="strict")
            except UnicodeDecodeError as exc:
                raise MalformedFileError(
                    f"header is not UTF-8 (byte {exc.start})", file=shard, field="header"
                ) from None
    if headers:
        index_meta = None
    if not headers and any(n.endswith((".bin", ".pt", ".pth")) for n in names) and index_meta is None:
        raise UnsupportedLayoutError(f"{folder} holds only pickled PyTorch weights; hfvram reads safetensors or GGUF")
    facts = CheckpointFacts(config_text, companions, headers, None, index_meta, origin, data_sizes=data_sizes)
    used = ("config.json", *companions, *headers, *((INDEX_FILE,) if index_meta is not None else ()))
    return facts, used


def load_folder(folder: Path) -> LoadedModel:
    facts, used = folder_facts(folder, origin=f"local folder {folder}")
    spec = spec_from_facts(facts)
    return LoadedModel(spec, SourceInfo(kind="local", repo_id=None, files=tuple(str(folder / f) for f in used)))


_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")


def gguf_parts(path: Path) -> list[Path]:
    """A split GGUF's parts (``-00001-of-00003.gguf`` …), in order; else the file alone."""
    match = _SPLIT.match(path.name)
    if not match:
        return [path]
    check_file_counts([path.name], kind="gguf", where=str(path))
    count = int(match["count"])
    parts = [path.with_name(f"{match['stem']}-{i:05d}-of-{match['count']}.gguf") for i in range(1, count + 1)]
    missing = [p.name for p in parts if not is_regular_file(p)]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ModelReadError(f"split GGUF is missing {len(missing)} of its {count} parts: {shown}")
    return parts


def load_gguf_file(path: Path) -> LoadedModel:
    from hfvram.readers.gguf import read_gguf_header, spec_from_gguf

    parts = gguf_parts(path)
    headers = []
    for part in parts:
        with part.open("rb") as stream:
            headers.append(read_gguf_header(stream, filename=part.name))
    spec = spec_from_gguf(headers, filename=parts[0].name)
    return LoadedModel(spec, SourceInfo(kind="gguf", files=tuple(str(p) for p in parts)))


def read_gguf_file_header(path: Path):
    """The header of one local GGUF file another flag names (``--mmproj FILE``): metadata and tensor infos only,
    through the same capped reader as the model's own file (``ModelReadError`` when it is not a regular file)."""
    from hfvram.readers.gguf import read_gguf_header

    if not is_regular_file(path):
        raise ModelReadError(f"not a regular file: {str(path)[:200]}")
    with path.open("rb") as stream:
        return read_gguf_header(stream, filename=path.name)


# ---- the HF cache ---------------------------------------------------------------------------------


def hf_hub_cache() -> Path:
    """HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub — read at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"), "huggingface"
    )
    return Path(home) / "hub"


def cached_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The snapshot folder of ``repo_id`` at ``revision`` in the HF cache, when its config.json is there.

    Read from the cache's own layout (``models--ORG--NAME/refs/REV`` → ``snapshots/SHA``, as huggingface_hub's
    ``try_to_load_from_cache`` does) so that an offline run never imports the HTTP stack."""
    # plain strings and os.path until a snapshot is found: a scan asks this once per repo, mostly in vain
    repo_dir = os.path.join(hf_hub_cache(), "models--" + repo_id.replace("/", "--"))
    wanted = revision or "main"
    ref = os.path.join(repo_dir, "refs", wanted)
    try:
        sha = read_local_text(Path(ref), 4096).strip() if os.path.isfile(ref) else wanted
    except (OSError, HfvramError):
        return None
    if not sha or "/" in sha or sha in (".", ".."):
        return None
    snapshot = os.path.join(repo_dir, "snapshots", sha)
    return Path(snapshot) if os.path.isfile(os.path.join(snapshot, "config.json")) else None


def snapshot_is_complete(snapshot: Path) -> bool:
    """Weights are on disk: a single model.safetensors, or every shard the index names."""
    names = {p.name for p in snapshot.iterdir()}
    if INDEX_FILE in names:
        import json

        try:
            index = json.loads(read_local_bytes(snapshot / INDEX_FILE, JSON_CAP))
        except (OSError, ValueError, RecursionError, HfvramError):
            return False
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict):
            return False
        return bool(weight_map) and {str(v) for v in weight_map.values()} <= names
    return any(n.endswith(".safetensors") for n in names)


def load_cached_repo(repo_id: str, snapshot: Path) -> LoadedModel:
    facts, used = folder_facts(snapshot, origin=f"HF cache {snapshot}")
    spec = spec_from_facts(facts)
    return LoadedModel(
        spec, SourceInfo(kind="cache", repo_id=repo_id, revision=snapshot.name, files=tuple(used), note=str(snapshot))
    )
