"""Helpers shared by the CLI / report tests (not a test module): paths of real fixtures, the shipped JSON
schemas, and running ``python -m hfvram`` as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from importlib import resources
from pathlib import Path

import jsonschema

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
LLAMA_FOLDER = FIXTURES / "hub" / "meta-llama" / "Llama-3.1-8B-Instruct"
GGUF_HEADERS = sorted((FIXTURES / "headers").glob("*.gguf-header.gguf"))
SMOLLM_GGUF = FIXTURES / "headers" / "SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf"


@cache
def schema(name: str) -> dict:
    text = resources.files("hfvram").joinpath("data", "schema", f"{name}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def validate(document: dict, name: str = "check") -> None:
    jsonschema.Draft202012Validator(schema(name)).validate(document)


def run_hfvram(*args: str, env: dict | None = None, stdin: str | None = None, timeout: float = 120):
    """``python -m hfvram ARGS`` in a fresh interpreter (the console script's code path)."""
    return subprocess.run(
        [sys.executable, "-m", "hfvram", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )
