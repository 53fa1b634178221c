"""The everyday list: what a person sees at a terminal and copies from it, run as the real CLI offline."""

from __future__ import annotations

import pytest
from cli_support import run_hfvram


@pytest.mark.parametrize(
    "args",
    [
        ("check", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--quant", "Q4_K_M", "--offline"),
        ("gpus",),
        ("fit", "Qwen/Qwen3-8B", "--gpu", "rtx4090", "--offline"),
        ("models", "--gpu", "rtx4090", "--offline"),
    ],
)
def test_no_line_ends_in_a_space(args):
    """rich pads a table's last column and a wrapped line with spaces: none reaches the output."""
    result = run_hfvram(*args)
    assert result.returncode in (0, 1), result.stderr
    padded = [line for line in result.stdout.splitlines() if line != line.rstrip()]
    assert not padded, padded[:3]
