"""The repository stands alone: no citation of files outside it, and every engine-note citation resolves.

- Code, data, tests, docs, benchmarks and scripts cite the project's own engine notes (``docs/engines/``), never
  research notes or reference folders that live outside the repository.
- Every ``docs/engines/<page>.md#<anchor>`` cited anywhere in the repository names a page that exists and a heading
  of that page (anchors computed as GitHub renders them).
- Every source link in ``docs/engines/`` is a permalink pinned to a full 40-hex commit, and every rule section of
  an engine page points somewhere: a pinned source link, another rule, or says that no permalink was found.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from pathlib import Path

import pytest

SELF = Path(__file__).resolve()
ROOT = SELF.parent.parent
ENGINES = ROOT / "docs" / "engines"
SCANNED_DIRS = ("hfvram", "tests", "docs", "benchmarks", "scripts")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".json", ".txt", ".cfg", ".ini", ".yaml", ".yml", ".sh", ".jsonl", ""}
MAX_BYTES = 4 << 20  # larger files are data, not prose; none of ours is that large

# Spelled in pieces so that this file does not match its own patterns.
FORBIDDEN = (
    "design/" + "engines.md",
    "design/" + "contract.md",
    "../" + "shared",
    "/work/" + "shared",
    "engines.md " + "\u00a7",
)

PAGE_NAMES = sorted(p.stem for p in ENGINES.glob("*.md"))
# docs/engines/vllm.md#a, engines/vllm.md#a (relative links from docs/), or vllm.md#a where the page name is one of
# the engine pages and no other directory precedes it.
CITATION = re.compile(r"(?P<prefix>[\w./-]*?)(?<![\w-])(?P<page>[a-z0-9_]+)\.md(?:#(?P<anchor>[\w-]+))?")
GITHUB_LINK = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/(?:blob|tree)/(?P<ref>[^/\s)]+)/[^\s)\]>]*")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for top in SCANNED_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or ".pytest_cache" in path.parts:
                continue
            if path.suffix not in TEXT_SUFFIXES or path.stat().st_size > MAX_BYTES:
                continue
            files.append(path)
    # the prose around the data: top-level docs, the fixtures' source notes, examples, CI and packaging
    extra = [*ROOT.glob("*.md"), *ROOT.glob("fixtures/**/*.md"), *ROOT.glob("examples/*"), *ROOT.glob(".ci/*")]
    files.extend(sorted(p for p in extra if p.is_file()))
    files.append(ROOT / "pyproject.toml")
    return files


def read_text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def github_anchor(heading: str, seen: Counter[str]) -> str:
    """The id GitHub gives a heading: inline markup dropped, lower case, punctuation removed, spaces to hyphens,
    repeats suffixed -1, -2, ..."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text).lower()
    kept = []
    for ch in text:
        if ch in " -_" or unicodedata.category(ch)[0] in "LN":
            kept.append(ch)
    slug = "".join(kept).replace(" ", "-")
    n = seen[slug]
    seen[slug] += 1
    return slug if n == 0 else f"{slug}-{n}"


def anchors_of(page: Path) -> set[str]:
    seen: Counter[str] = Counter()
    anchors = set()
    in_fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        m = HEADING.match(line)
        if m and not in_fence:
            anchors.add(github_anchor(m.group(2), seen))
    return anchors


def rule_sections(page: Path) -> list[tuple[str, str]]:
    """(anchor, body) of each ``##`` section of an engine page."""
    sections: list[tuple[str, list[str]]] = []
    in_fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and line.startswith("## "):
            sections.append((line[3:].strip(), []))
            continue
        if sections:
            sections[-1][1].append(line)
    return [(name, "\n".join(body)) for name, body in sections]


def citations(text: str, path: Path):
    """(page, anchor or None, line number) of every engine-note citation in one file's text."""
    in_engine_notes = path.parent == ENGINES
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in CITATION.finditer(line):
            page, prefix = m.group("page"), m.group("prefix").lstrip("(`'\"[<")
            if page not in PAGE_NAMES:
                continue
            if prefix not in ("", "docs/engines/", "engines/", "./") and not prefix.endswith("/docs/engines/"):
                continue  # another folder's file of the same name
            if prefix == "" and page == "README" and not in_engine_notes:
                continue  # the top-level README.md, not docs/engines/README.md
            yield page, m.group("anchor"), lineno
        if in_engine_notes:
            for m in re.finditer(r"\]\(#([\w-]+)\)", line):
                yield path.stem, m.group(1), lineno


def test_the_scan_sees_the_repository():
    files = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
    assert "hfvram/engines/vllm/profile.py" in files
    assert "hfvram/engines/vllm/rules.toml" in files
    assert "docs/methodology.md" in files
    assert "tests/test_repo_hygiene.py" in files
    assert "fixtures/README.md" in files
    expected = {
        "common",
        "vllm",
        "sglang",
        "llamacpp",
        "ollama",
        "lmdeploy",
        "trtllm",
        "exllamav2",
        "mlx",
        "transformers",
    }
    assert expected <= set(PAGE_NAMES)


def test_no_file_refers_to_material_outside_the_repository():
    offenders = []
    for path in scanned_files():
        text = read_text(path)
        if text is None:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for pattern in FORBIDDEN:
                if pattern in line:
                    offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {pattern!r}")
    assert offenders == []


def test_github_anchor_rules():
    seen: Counter[str] = Counter()
    assert github_anchor("vllm-budget", seen) == "vllm-budget"
    assert github_anchor("How to read a page", seen) == "how-to-read-a-page"
    assert github_anchor("`mem_fraction_static` (SGLang)", seen) == "mem_fraction_static-sglang"
    assert github_anchor("vllm-budget", seen) == "vllm-budget-1"
    assert github_anchor("[Link](x.md) text", seen) == "link-text"


def test_every_cited_engine_note_anchor_exists():
    anchors = {name: anchors_of(ENGINES / f"{name}.md") for name in PAGE_NAMES}
    cited: Counter[str] = Counter()
    missing = []
    for path in scanned_files():
        text = read_text(path) if path != SELF else None  # this file's examples cite made-up anchors on purpose
        if text is None:
            continue
        for page, anchor, lineno in citations(text, path):
            cited[page] += 1
            if anchor is not None and anchor not in anchors[page]:
                missing.append(f"{path.relative_to(ROOT)}:{lineno}: {page}.md#{anchor}")
    assert missing == []
    # the notes are what the code cites: every engine page is cited from outside docs/engines at least once
    outside: Counter[str] = Counter()
    for path in scanned_files():
        if path.parent == ENGINES:
            continue
        text = read_text(path)
        if text is not None:
            outside.update(page for page, _, _ in citations(text, path))
    uncited = [name for name in PAGE_NAMES if name != "README" and outside[name] == 0]
    assert uncited == []
    assert sum(cited.values()) > 100  # the code cites the notes throughout, not once


def test_a_stale_anchor_is_caught(tmp_path):
    page = tmp_path / "x.md"
    page.write_text("# X\n\n## vllm-budget\n\n```\n## not-a-heading\n```\n")
    assert anchors_of(page) == {"x", "vllm-budget"}
    found = list(citations("see docs/engines/vllm.md#vllm-nope and docs/methodology.md#x", tmp_path / "a.py"))
    assert found == [("vllm", "vllm-nope", 1)]


@pytest.mark.parametrize("name", [n for n in PAGE_NAMES if n != "README"])
def test_engine_note_links_are_pinned_permalinks(name):
    text = (ENGINES / f"{name}.md").read_text(encoding="utf-8")
    links = [m for m in GITHUB_LINK.finditer(text)]
    assert links, f"{name}.md links no source"
    for m in links:
        assert re.fullmatch(r"[0-9a-f]{40}", m.group("ref")), m.group(0)
        fragment = m.group(0).partition("#")[2]
        assert fragment == "" or re.fullmatch(r"L\d+(?:-L\d+)?", fragment), m.group(0)
        if "-L" in fragment:
            first, last = (int(x) for x in re.findall(r"\d+", fragment))
            assert first < last, m.group(0)


@pytest.mark.parametrize("name", [n for n in PAGE_NAMES if n != "README"])
def test_every_rule_section_points_to_its_source(name):
    sections = rule_sections(ENGINES / f"{name}.md")
    assert sections, f"{name}.md has no rule sections"
    for anchor, body in sections:
        assert re.fullmatch(r"[a-z0-9-]+", anchor), f"{name}.md: heading {anchor!r} is not a stable anchor"
        pinned = GITHUB_LINK.search(body) or re.search(r"^\[[\w-]+\]: https://github\.com/", body, re.M)
        cross = re.search(r"\]\((?:[a-z0-9_]+\.md)?#[\w-]+\)", body)
        assert pinned or cross or "no permalink" in body, f"{name}.md#{anchor} cites no source"


def test_relative_links_in_the_docs_resolve():
    pages = sorted((ROOT / "docs").rglob("*.md")) + sorted(ROOT.glob("*.md"))
    broken = []
    for page in pages:
        for lineno, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue
                if not (page.parent / target.partition("#")[0]).exists():
                    broken.append(f"{page.relative_to(ROOT)}:{lineno}: {target}")
    assert broken == []
    assert (ROOT / "docs" / "architecture.md").is_file()
    assert "docs/architecture.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "architecture.md" in (ROOT / "docs" / "methodology.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", PAGE_NAMES)
def test_reference_links_are_defined(name):
    """A reference-style link without its definition renders as plain text: the source link silently disappears."""
    text = (ENGINES / f"{name}.md").read_text(encoding="utf-8")
    defined = {m.group(1).lower() for m in re.finditer(r"^\[([^\]]+)\]: \S+", text, re.M)}
    used = {m.group(1).lower() for m in re.finditer(r"\]\[([^\]]+)\]", text)}
    assert used - defined == set()


def test_no_file_holds_a_merge_conflict_marker():
    """A conflict left in a generated file (a built JSON twin) is read as a stale twin and silently costs the TOML
    parse; in code it is a syntax error only where the file is imported. Every text file, built tables included."""
    markers = re.compile(r"^(<{7}|>{7}) |^={7}$", re.M)
    paths = [*scanned_files(), *sorted((ROOT / "hfvram" / "data" / "built").rglob("*.json"))]
    found = [p.relative_to(ROOT).as_posix() for p in paths if markers.search(p.read_text(encoding="utf-8"))]
    assert not found, f"merge-conflict markers in {found}"
