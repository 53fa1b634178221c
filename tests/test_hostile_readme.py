"""The README's security notes, case by case (issue 27: "the README's security notes say what is redacted"): each
name, header and shape the notes list is hidden in a real check's JSON, Markdown and error output."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hfvram.cli import cli

SECRET = "Zq8vK2mW9pLx4"
CASES = [
    f"GITHUB_PAT={SECRET}",
    f"--passphrase {SECRET}",
    f"--apikey {SECRET}",
    f"--authorization {SECRET}",
    f'--header "Proxy-Authorization: Basic {SECRET}aaaa"',
    f'--header "Set-Cookie: session={SECRET}"',
    f'--header "Private-Token: {SECRET}"',
    f'--header "X-Api-Token: {SECRET}"',
    f'--header "Api-Key: {SECRET}"',
    f"--db-pwd {SECRET}",
    f"--api-base https://bob:{SECRET}@proxy.example/v1?token={SECRET}",
]


@pytest.mark.parametrize("words", CASES)
@pytest.mark.parametrize("fmt", [["--json"], ["--markdown"], ["--explain"]], ids=["json", "markdown", "explain"])
def test_what_the_readme_says_is_hidden_is_hidden(words, fmt):
    line = f"vllm serve Qwen/Qwen3-8B {words} --max-model-len 8192"
    result = CliRunner().invoke(cli, ["check", "--gpu", "h100", "--offline", "--engine-args", line, *fmt])
    assert result.exit_code in (0, 1), result.output[-300:]
    assert SECRET not in result.output
    assert "***" in result.output or r"\*\*\*" in result.output  # (Markdown escapes the mask)


def test_a_secret_in_a_bad_source_is_hidden_in_the_error():
    result = CliRunner().invoke(cli, ["check", f"org/name@hf_{SECRET}x:../{SECRET}", "--gpu", "h100", "--offline"])
    assert result.exit_code in (2, 3) and result.output.count("\n") == 1, result.output[:300]
    assert SECRET not in result.output
