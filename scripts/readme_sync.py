"""Re-run the commands and the Python example README.md shows and put their real output back under them.

    python3 scripts/readme_sync.py          # rewrite README.md's console blocks from fresh runs
    python3 scripts/readme_sync.py --check  # exit 1 if a block is stale, or neither re-run nor listed as skipped

Every fenced ``console`` block, and every ``text`` block that starts with a ``$`` line, is either re-run or
named in ``SKIPPED`` with the reason it cannot be (its first command is the key); ``--check`` fails on a block
that is neither, so a new block cannot go unchecked. A block is re-run when every command in it (``$`` lines,
``\\`` continuing one) is ``hfvram …`` or ``cat FILE`` reading only the repository or the embedded catalogue
(``--offline``, a fixture path, ``gpus``, ``engines``, ``models`` without ``--hub``), with ``HFVRAM_X=value``
settings before it and ``| head -N`` after it at most: nothing that needs the network, a server or a particular
home folder. A block named in ``WITH_CONFIG`` runs with the ``toml`` block above it as the user's config file. Each command runs in the repository root with ``COLUMNS`` fixed,
no colour, and caches of its own, so the output is what a user sees at that width.

A ``python`` block followed by a ``text`` block is an example and its printed output: the code runs in a
subprocess under the same environment (a library call reads no ``HFVRAM_*`` variable, so it must say
``offline=True`` itself) and the ``text`` block must be what it prints.

A shown line that is exactly ``…`` stands for one or more lines of the real output left out (a trimmed
table): the lines around it must appear in that order with at least one line between them. Update mode keeps
the same rows of a trimmed table (by their first column) and puts a ``…`` wherever rows are left out.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
COLUMNS = "120"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
# commands whose output depends only on the checkout (the catalogue, fixtures, packaged tables)
RERUN = re.compile(r"^(hfvram (check|scan|fit|inspect|gpus|calibrate|engines|models)\b.*|cat [\w./-]+)$", re.S)
NEEDS_NETWORK = re.compile(r"^hfvram (check|scan|fit|inspect|calibrate)\b")
LOCAL_MARKERS = ("--offline", "fixtures/")
# what may stand around a command: ``HFVRAM_X=value`` settings before it, ``| head -N`` after it
SETTINGS = re.compile(r"^((?:HFVRAM_[A-Z_]+=[\w.@-]+ )*)")
HEAD = re.compile(r" \| head -\d+$")
# Blocks that read their defaults from the ``toml`` block above them, written as the user's config file.
WITH_CONFIG = {"hfvram check Qwen/Qwen3-8B --offline | head -2"}
ELIDED = "…"
# Blocks that cannot be re-run here, by their first command, and why. ``--check`` fails on any other block it
# does not re-run, and on a name here that no longer matches a block.
SKIPPED = {
    'hfvram check Qwen/Qwen3-8B --offline          # HOME=/tmp/me, with context = "32q" in the file': (
        "needs a broken config file in /tmp/me, and `echo $?` is a shell command, not hfvram"
    ),
    "hfvram check ./model --gpu h100": (
        "needs a hostile ./model folder (num_hidden_layers 10^12) that the repository does not hold, and its"
        " second command reads the Hub"
    ),
    "HFVRAM_DEADLINE=5 hfvram check hfvram-test/all-MiniLM-L6-v2-alias --gpu h100": (
        "needs the slow local test Hub (tests/hubserver.py, one byte per 0.2 s) on a random port, which the"
        " output names"
    ),
}


@dataclass
class Block:
    """One fenced block that shows output: its commands (or Python code) and what it shows under each."""

    start: int  # offset of the fence in the document
    end: int
    kind: str  # "console" (commands) or "python" (code, its output in the text block after it)
    items: list[tuple[str, list[str]]] = field(default_factory=list)
    runnable: bool = True
    config: str | None = None  # the user's config file it runs with (WITH_CONFIG)


def split_commands(body: str) -> list[tuple[str, list[str]]]:
    """(command, shown output lines) for each ``$`` line of a block; lines before the first ``$`` are dropped."""
    items: list[tuple[str, list[str]]] = []
    lines = body.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.startswith("$ "):
            if items:
                items[-1][1].append(line)
            index += 1
            continue
        command = line[2:]
        while command.endswith("\\") and index + 1 < len(lines):
            index += 1
            command = command + "\n" + lines[index]
        items.append((command, []))
        index += 1
    return items


def rerunnable(command: str) -> bool:
    flat = HEAD.sub("", SETTINGS.sub("", command.replace("\\\n", " ")))
    if not RERUN.match(flat) or "|" in flat or "#" in flat:
        return False
    return not (NEEDS_NETWORK.match(flat) and not any(marker in flat for marker in LOCAL_MARKERS))


def commands_of(block: str) -> list[tuple[str, list[str]]] | None:
    """(command, shown output lines) for each ``$`` line of a block; None when the block is not re-runnable."""
    items = split_commands(block)
    if not items or not block.startswith("$ ") or not all(rerunnable(command) for command, _ in items):
        return None
    return items


def blocks_of(text: str) -> list[Block]:
    """Every block that shows output: console blocks, text blocks starting with ``$``, python + text pairs."""
    found: list[Block] = []
    fences = list(FENCE.finditer(text))
    taken: set[int] = set()
    toml: str | None = None
    for number, match in enumerate(fences):
        lang, body = match.group(1), match.group(2)
        if number in taken:
            continue
        if lang == "toml":
            toml = body
        if lang == "console" or (lang == "text" and body.startswith("$ ")):
            items = split_commands(body)
            block = Block(match.start(), match.end(), "console", items, commands_of(body) is not None)
            if items and items[0][0] in WITH_CONFIG:
                block.config = toml
                block.runnable = block.runnable and toml is not None
            found.append(block)
        elif lang == "python":
            after = fences[number + 1] if number + 1 < len(fences) else None
            if after is None or after.group(1) != "text" or text[match.end() : after.start()].strip():
                found.append(Block(match.start(), match.end(), "python", [(body, [])], runnable=False))
                continue
            taken.add(number + 1)
            shown = after.group(2).rstrip("\n").splitlines()
            found.append(Block(match.start(), after.end(), "python", [(body, shown)]))
    return found


#: ``hfvram models --hub`` blocks run against the local test Hub (tests/hubserver.py: the fixture repos, their listing
#: and its derived download counts), started once for a pass; every other block runs offline
HUB_BLOCK = re.compile(r"^hfvram models --hub\b")
_TEST_HUB: list[object] = []
_TEST_HUB_LOCK = threading.Lock()


def test_hub_url() -> str:
    with _TEST_HUB_LOCK:
        if not _TEST_HUB:
            sys.path.insert(0, str(ROOT / "tests"))
            from hubserver import HubFiles, HubServer

            _TEST_HUB.append(HubServer(HubFiles()).start())
    return _TEST_HUB[0].url  # type: ignore[attr-defined]


def environment(home: Path, hub: str | None = None) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HFVRAM_", "HF_")) and key not in ("FORCE_COLOR", "CLICOLOR_FORCE")
    }
    env.update(
        COLUMNS=COLUMNS,
        NO_COLOR="1",
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        HF_HOME=str(home / "hf"),
        HF_HUB_OFFLINE="1",  # nothing re-run here may reach the Hub
        HFVRAM_CACHE_DIR=str(home / "hfvram-cache"),
        PYTHONPATH=str(ROOT),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    if hub is not None:  # the local test Hub, never huggingface.co
        env.pop("HF_HUB_OFFLINE")
        env["HF_ENDPOINT"] = hub
    return env


def run(command: str, home: Path) -> str:
    flat = command.replace("\\\n", " ")
    settings = SETTINGS.match(flat)
    cut = settings.end() if settings else 0
    hub = test_hub_url() if HUB_BLOCK.match(flat[cut:]) else None
    if flat[cut:].startswith("hfvram "):
        flat = f"{flat[:cut]}{sys.executable} -m hfvram {flat[cut + len('hfvram ') :]}"
    return _run(["bash", "-c", flat], home, hub)


def run_python(code: str, home: Path) -> str:
    return _run([sys.executable, "-c", code], home)


def _run(argv: list[str], home: Path, hub: str | None = None) -> str:
    done = subprocess.run(
        argv,
        cwd=ROOT,
        env=environment(home, hub),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # as a terminal shows them: progress lines and warnings where they fall
        text=True,
        timeout=180,
        check=False,
    )
    return done.stdout


def matches_elided(got: list[str], was: list[str]) -> bool:
    """``was`` is ``got`` with runs of lines left out where it says ``…`` (each run one line or more)."""
    segments: list[list[str]] = [[]]
    for line in was:
        if line == ELIDED:
            segments.append([])
        else:
            segments[-1].append(line)
    first, last = segments[0], segments[-1]
    if got[: len(first)] != first:
        return False
    position = len(first)
    for segment in segments[1:-1]:
        found = next(
            (at for at in range(position + 1, len(got) - len(segment) + 1) if got[at : at + len(segment)] == segment),
            None,
        )
        if found is None:
            return False
        position = found + len(segment)
    return len(got) - len(last) >= position + 1 and got[len(got) - len(last) :] == last


def retrimmed(got: list[str], was: list[str]) -> list[str]:
    """Fresh output trimmed as the pasted one was: everything up to a table's rule line, then the rows whose first
    column a shown row has, with ``…`` for each run of rows left out."""
    rule = next((at for at, line in enumerate(got) if line and set(line) == {"─"}), -1)
    keys = [line.split()[0] for line in was if line.strip() and line != ELIDED]
    kept = got[: rule + 1]
    for line in got[rule + 1 :]:
        if line.strip() and any(same_name(line.split()[0], key) for key in keys):
            kept.append(line)
        elif kept[-1:] != [ELIDED]:
            kept.append(ELIDED)
    return kept


def same_name(one: str, other: str) -> bool:
    """Two first columns name the same row: equal, or one cut (``…``) where the other goes on the same way."""
    if ELIDED not in one + other:
        return one == other
    one, other = one.rstrip(ELIDED), other.rstrip(ELIDED)
    return one.startswith(other) or other.startswith(one)


def same_output(command: str, output: list[str], shown: list[str]) -> bool:
    """The fresh output says what the pasted one says. ``hfvram scan`` prints one progress line per source in the
    order the sources finish (concurrently), so its lines before the summary are compared as a set."""
    got = [line.rstrip() for line in output]
    was = [line.rstrip() for line in shown]
    if ELIDED in was:
        return matches_elided(got, was)
    if not command.startswith("hfvram scan") or "Scan summary" not in got or "Scan summary" not in was:
        return got == was
    cut_got, cut_was = got.index("Scan summary"), was.index("Scan summary")
    return sorted(got[:cut_got]) == sorted(was[:cut_was]) and got[cut_got:] == was[cut_was:]


@dataclass
class Sync:
    """What a pass over a document found: the new text, the stale commands, the blocks nobody checks."""

    text: str
    changed: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    checked: int = 0


def fresh_block(block: Block, home: Path, sync: Sync) -> str:
    """A block's text with fresh output under each command (the pasted output where it still holds)."""
    if block.kind == "python":
        code, shown = block.items[0]
        output = run_python(code, home).rstrip("\n").splitlines()
        if not same_output("python", output, shown):
            sync.changed.append("the Python example (" + code.strip().splitlines()[0] + " …)")
            shown = [line.rstrip() for line in output]
        return "```python\n" + code + "```\n\n```text\n" + "\n".join(shown) + "\n```\n"
    if block.config is not None:  # a home of its own, holding the config file
        home = Path(tempfile.mkdtemp(dir=home, prefix="configured-"))
        (home / ".config" / "hfvram").mkdir(parents=True)
        (home / ".config" / "hfvram" / "config.toml").write_text(block.config, encoding="utf-8")
    body = []
    for command, shown in block.items:
        output = run(command, home).rstrip("\n").splitlines()
        if same_output(command, output, shown):
            output = shown  # unchanged: keep the pasted run (a scan's progress lines come in any order)
        else:
            sync.changed.append(command.replace("\\\n", " "))
            if ELIDED in shown:
                output = retrimmed([line.rstrip() for line in output], shown)
        body.append(f"$ {command}")
        body.extend(line.rstrip() for line in output)
    return "```console\n" + "\n".join(body) + "\n```\n"


def rendered_sync(text: str) -> Sync:
    """A pass over ``text``: every re-runnable block re-run, the others held against ``SKIPPED``."""
    from concurrent.futures import ThreadPoolExecutor

    sync = Sync(text)
    pieces: list[str] = []
    cursor = 0
    runnable: list[Block] = []
    for block in blocks_of(text):
        first = block.items[0][0].replace("\\\n", " ") if block.items else ""
        if not block.runnable:
            (sync.skipped if first in SKIPPED else sync.unchecked).append(first.strip().splitlines()[0])
            continue
        runnable.append(block)
    with tempfile.TemporaryDirectory() as scratch:
        # the blocks are independent (each runs offline, in a home of its own): run them side by side, each with its
        # own Sync, and merge what they found in the README's order
        def fresh(index: int, block: Block) -> tuple[str, Sync]:
            home = Path(scratch) / f"block-{index}"
            home.mkdir()
            own = Sync(text)
            return fresh_block(block, home, own), own

        with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as pool:
            done = list(pool.map(fresh, range(len(runnable)), runnable))
    for block, (fresh_text, own) in zip(runnable, done):
        pieces.append(text[cursor : block.start])
        pieces.append(fresh_text)
        cursor = block.end
        sync.changed.extend(own.changed)
        sync.checked += 1
    pieces.append(text[cursor:])
    sync.text = "".join(pieces)
    return sync


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report stale or unchecked blocks (exit 1 if any)")
    args = parser.parse_args()
    text = README.read_text(encoding="utf-8")
    sync = rendered_sync(text)
    for command in sync.changed:
        print(f"stale: $ {command}")
    for command in sync.unchecked:
        print(f"unchecked (neither re-run nor listed in SKIPPED): {command}")
    for command in sorted(set(SKIPPED) - set(sync.skipped)):
        print(f"SKIPPED names no block: {command}")
    problems = sync.unchecked or set(SKIPPED) - set(sync.skipped)
    print(f"README.md: {sync.checked} block(s) re-run, {len(sync.skipped)} skipped with a reason", file=sys.stderr)
    if args.check:
        return 1 if sync.changed or problems else 0
    if sync.text != text:
        README.write_text(sync.text, encoding="utf-8")
        print(f"README.md: {len(sync.changed)} block command(s) re-pasted")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
