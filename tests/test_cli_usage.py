"""Usage errors are the contract's one line and exit 2 (README "Exit codes"), click's own ones included, and an
option's value is never another option (`--gpu --context 32k` names --gpu, not a GPU called '--context')."""

from __future__ import annotations

import pytest
from cli_support import run_hfvram
from click.testing import CliRunner

from hfvram.cli import cli

runner = CliRunner()
REPO = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["check", REPO, "--bogus", "--offline"],
            "No such option '--bogus'. Did you mean '--gpu'? (see 'hfvram check --help')",
        ),
        (["chek", REPO], "No such command 'chek'. Did you mean 'check'? (see 'hfvram --help')"),
        (["--bogus"], "No such option '--bogus'"),
        (["check", REPO, "--offline", "--context"], "Option '--context' requires an argument"),
        (["check", "--gpu", "--context", "32k", REPO, "--offline"], "--gpu needs a value; --context is an option"),
        (["fit", "--gpu", "--engine=vllm", REPO, "--offline"], "--gpu needs a value; --engine=vllm is an option"),
        (["check", REPO, "--offline", "--format", "yaml"], "Invalid value for '--format'"),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(args, says):
    result = runner.invoke(cli, args, prog_name="hfvram")
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hfvram: error: "), result.stderr
    assert says in lines[0]


def test_the_console_script_path_gives_the_same_line():
    done = run_hfvram("check", "--gpu", "--context", "32k", REPO, "--offline")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "hfvram: error: --gpu needs a value; --context is an option (see 'hfvram check --help')"
    ]


def test_an_engine_command_line_may_start_like_an_option():
    """--engine-args takes a command line: a value such as '--max-num-seqs 8' is the engine's, not hfvram's."""
    result = runner.invoke(cli, ["check", REPO, "--gpu", "rtx4090", "--offline", "--engine-args", "--max-num-seqs 8"])
    assert result.exit_code in (0, 1), result.output


def test_a_value_that_only_looks_like_a_flag_is_still_a_value():
    """A negative-looking value that is no option of the command reaches the option's own check."""
    result = runner.invoke(cli, ["check", REPO, "--offline", "--gpu", "-x"])
    assert result.exit_code == 2
    assert "unknown GPU '-x'" in result.stderr
