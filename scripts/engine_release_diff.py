#!/usr/bin/env python3
"""List the memory-relevant files of an engine that changed between two of its release tags.

"Memory-relevant" means the modules the engine's note cites (every ``github.com/<org>/<repo>/blob/<ref>/<path>``
permalink in ``docs/engines/<engine>.md``), each with the note sections (anchors) that cite it, so that the
review of a new release starts from a list (docs/engines/README.md has the checklist).

The tags are read from a git repository of the engine: a clone, or the bare mirror the code store's ``fetch``
leaves under /work/.mirror/<owner>+<name>/ (``--git DIR``; no work tree is needed).

    python3 scripts/engine_release_diff.py vllm v0.29.0 v0.30.0 --git /path/to/vllm.git [--json]

Exit 0 with the list (possibly empty), 2 on a usage error (unknown engine, tag or repository).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTES = ROOT / "docs" / "engines"
#: engine name (as --engine spells it) -> its note
NOTE_OF = {
    "vllm": "vllm.md",
    "sglang": "sglang.md",
    "llama.cpp": "llamacpp.md",
    "ollama": "ollama.md",
    "lmdeploy": "lmdeploy.md",
    "tensorrt-llm": "trtllm.md",
    "exllamav2": "exllamav2.md",
    "mlx": "mlx.md",
    "transformers": "transformers.md",
}
LINK = re.compile(r"https://github\.com/(?P<repo>[\w.-]+/[\w.-]+)/blob/(?P<ref>[^/\s)]+)/(?P<path>[^\s)#>]+)")
HEADING = re.compile(r"^## (?P<anchor>[\w-]+)\s*$")
#: hostile-input bounds: a note and a git answer are read whole only up to these sizes
MAX_NOTE_BYTES = 2_000_000
MAX_FILES = 20_000
GIT_TIMEOUT_S = 120


def cited_paths(note: Path) -> dict[str, dict[str, set[str]]]:
    """repository -> path -> the note's sections (``## anchor``) whose text or link definitions cite it."""
    text = note.read_bytes()[:MAX_NOTE_BYTES].decode("utf-8", errors="replace")
    cited: dict[str, dict[str, set[str]]] = {}
    section = "(top)"
    for line in text.splitlines():
        heading = HEADING.match(line)
        if heading:
            section = heading.group("anchor")
            continue
        for match in LINK.finditer(line):
            repo, path = match.group("repo"), match.group("path").split("#", 1)[0]
            cited.setdefault(repo, {}).setdefault(path, set()).add(section)
    return cited


def changed_files(git_dir: str, old: str, new: str, paths: list[str]) -> list[str]:
    """The paths among ``paths`` that differ between the two tags (``git diff --name-only``)."""
    if not paths:
        return []
    command = ["git", "--git-dir", git_dir, "diff", "--name-only", f"{old}..{new}", "--", *paths]
    done = subprocess.run(command, capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise SystemExit(f"engine_release_diff: git diff failed: {done.stderr.strip()[:400]}")
    return done.stdout.splitlines()[:MAX_FILES]


def git_dir_of(path: str) -> str:
    """The git directory of a clone (its .git) or of a bare repository."""
    candidate = Path(path)
    if (candidate / ".git").exists():
        return str(candidate / ".git")
    if (candidate / "HEAD").exists():
        return str(candidate)
    raise SystemExit(f"engine_release_diff: {path} is not a git repository")


def check_tag(git_dir: str, tag: str) -> None:
    done = subprocess.run(
        ["git", "--git-dir", git_dir, "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}"],
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        print(f"engine_release_diff: no tag or commit {tag!r} in {git_dir}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("engine", help=f"one of: {', '.join(NOTE_OF)}")
    parser.add_argument("old", help="the last reviewed tag (v0.29.0)")
    parser.add_argument("new", help="the tag to review (v0.30.0)")
    parser.add_argument("--git", required=True, help="the engine's git repository (a clone or a bare mirror)")
    parser.add_argument("--repo", help="owner/name when the note cites several repositories (default: the most cited)")
    parser.add_argument("--json", action="store_true", help="JSON instead of lines")
    args = parser.parse_args(argv)
    if args.engine not in NOTE_OF:
        print(f"engine_release_diff: unknown engine {args.engine!r}; one of: {', '.join(NOTE_OF)}", file=sys.stderr)
        return 2
    cited = cited_paths(NOTES / NOTE_OF[args.engine])
    if not cited:
        print(f"engine_release_diff: docs/engines/{NOTE_OF[args.engine]} cites no source file", file=sys.stderr)
        return 2
    repo = args.repo or max(cited, key=lambda name: len(cited[name]))
    if repo not in cited:
        print(f"engine_release_diff: the note cites no file of {repo}", file=sys.stderr)
        return 2
    git_dir = git_dir_of(args.git)
    for tag in (args.old, args.new):
        check_tag(git_dir, tag)
    paths = sorted(cited[repo])
    changed = changed_files(git_dir, args.old, args.new, paths)
    rows = [{"path": path, "sections": sorted(cited[repo].get(path, ()))} for path in changed]
    if args.json:
        document = {"engine": args.engine, "repo": repo, "old": args.old, "new": args.new, "cited": len(paths)}
        print(json.dumps({**document, "changed": rows}, indent=2))
        return 0
    print(f"{args.engine} ({repo}) {args.old} -> {args.new}: {len(rows)} of the {len(paths)} cited files changed")
    for row in rows:
        print(f"  {row['path']}  (docs/engines/{NOTE_OF[args.engine]}: {', '.join(row['sections'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
