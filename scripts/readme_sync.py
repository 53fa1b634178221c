"""Re-run the commands README.md shows and put their real output back under them.

    python3 scripts/readme_sync.py          # rewrite README.md's console blocks from fresh runs
    python3 scripts/readme_sync.py --check  # exit 1 and show the first difference if a block is stale

A block is re-run when it is fenced as ``console`` and every command in it (``$ `` lines, ``\\`` continuing
one) is ``hfvram …`` or ``cat FILE`` reading only the repository or the embedded catalogue (``--offline``, a
fixture path, ``gpus``): nothing that needs the network, a server or a particular home folder. Each command
runs in the repository root with ``COLUMNS`` fixed, no colour, and caches of its own, so the output is what a
user sees at that width.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
COLUMNS = "120"
BLOCK = re.compile(r"^```console\n(.*?)^```\n", re.M | re.S)
# commands whose output depends only on the checkout (the catalogue, fixtures, packaged tables)
RERUN = re.compile(r"^(hfvram (check|scan|fit|inspect|gpus|calibrate|engines)\b.*|cat [\w./-]+)$", re.S)
NEEDS_NETWORK = re.compile(r"^hfvram (check|scan|fit|inspect|calibrate)\b")
LOCAL_MARKERS = ("--offline", "fixtures/")


def commands_of(block: str) -> list[tuple[str, list[str]]] | None:
    """(command, shown output lines) for each ``$`` line of a block; None when the block is not re-runnable."""
    items: list[tuple[str, list[str]]] = []
    lines = block.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.startswith("$ "):
            if not items:
                return None
            items[-1][1].append(line)
            index += 1
            continue
        command = line[2:]
        while command.endswith("\\") and index + 1 < len(lines):
            index += 1
            command = command + "\n" + lines[index]
        items.append((command, []))
        index += 1
    for command, _ in items:
        flat = command.replace("\\\n", " ")
        if not RERUN.match(flat) or "|" in flat or "#" in flat:
            return None
        if NEEDS_NETWORK.match(flat) and not any(marker in flat for marker in LOCAL_MARKERS):
            return None
    return items or None


def run(command: str, home: Path) -> str:
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
        HFVRAM_CACHE_DIR=str(home / "hfvram-cache"),
        PYTHONPATH=str(ROOT),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    flat = command.replace("\\\n", " ")
    if flat.startswith("hfvram "):
        flat = f"{sys.executable} -m hfvram {flat[len('hfvram ') :]}"
    done = subprocess.run(
        ["bash", "-c", flat],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # as a terminal shows them: progress lines and warnings where they fall
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout


def same_output(command: str, output: list[str], shown: list[str]) -> bool:
    """The fresh output says what the pasted one says. ``hfvram scan`` prints one progress line per source in the
    order the sources finish (concurrently), so its lines before the summary are compared as a set."""
    got = [line.rstrip() for line in output]
    was = [line.rstrip() for line in shown]
    if not command.startswith("hfvram scan") or "Scan summary" not in got or "Scan summary" not in was:
        return got == was
    cut_got, cut_was = got.index("Scan summary"), was.index("Scan summary")
    return sorted(got[:cut_got]) == sorted(was[:cut_was]) and got[cut_got:] == was[cut_was:]


def rendered(text: str) -> tuple[str, list[str]]:
    """README.md with every re-runnable block replaced by fresh output; the commands whose output changed."""
    changed: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)

        def fresh(match: re.Match[str]) -> str:
            items = commands_of(match.group(1))
            if items is None:
                return match.group(0)
            body = []
            for command, shown in items:
                output = run(command, home).rstrip("\n").splitlines()
                if same_output(command, output, shown):
                    output = shown  # unchanged: keep the pasted run (a scan's progress lines come in any order)
                else:
                    changed.append(command.replace("\\\n", " "))
                body.append(f"$ {command}")
                body.extend(line.rstrip() for line in output)
            return "```console\n" + "\n".join(body) + "\n```\n"

        return BLOCK.sub(fresh, text), changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report stale blocks (exit 1 if any)")
    args = parser.parse_args()
    text = README.read_text(encoding="utf-8")
    new, changed = rendered(text)
    for command in changed:
        print(f"stale: $ {command}")
    if args.check:
        return 1 if changed else 0
    if new != text:
        README.write_text(new, encoding="utf-8")
        print(f"README.md: {len(changed)} block command(s) re-pasted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
