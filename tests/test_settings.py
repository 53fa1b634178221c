"""User defaults (hfvram/settings.py): config.toml and HFVRAM_* variables, below the command line, through the
real CLI (click's runner) so that the precedence is the one a user gets."""

from __future__ import annotations

import json
import os

import pytest
from cli_support import LLAMA_FOLDER
from click.testing import CliRunner

from hfvram.cli import cli
from hfvram.settings import MAX_CONFIG_BYTES, config_path


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    folder = tmp_path / "hfvram_config"
    folder.mkdir()
    monkeypatch.setenv("HFVRAM_CONFIG_DIR", str(folder))
    return folder


def check_json(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["check", str(LLAMA_FOLDER), "--json", *args])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_config_path_is_under_the_platform_config_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("HFVRAM_CONFIG_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    if os.name == "posix" and os.uname().sysname == "Linux":
        assert config_path() == tmp_path / "xdg" / "hfvram" / "config.toml"
    assert config_path().name == "config.toml"


def test_config_file_sets_the_defaults(config_dir):
    (config_dir / "config.toml").write_text('gpu = "rtx4090"\nengine = "sglang"\ncontext = "16k"\nconcurrency = 3\n')
    report = check_json()
    assert report["hardware"]["gpu"] == "rtx4090"
    assert report["engine"]["name"] == "sglang"
    assert report["workload"]["context"] == 16384
    assert report["workload"]["concurrency"] == 3


def test_precedence_cli_over_environment_over_config(config_dir, monkeypatch):
    (config_dir / "config.toml").write_text('gpu = "rtx4090"\ncontext = 8192\n')
    monkeypatch.setenv("HFVRAM_GPU", "a100-80g")
    report = check_json()
    assert report["hardware"]["gpu"] == "a100-80g-sxm"  # the variable beats the file
    assert report["workload"]["context"] == 8192  # the file still gives what the environment does not
    report = check_json("--gpu", "h100", "--context", "4k")
    assert report["hardware"]["gpu"] == "h100-sxm"  # the command line beats both
    assert report["workload"]["context"] == 4096


def test_empty_variable_counts_as_unset(config_dir, monkeypatch):
    (config_dir / "config.toml").write_text('gpu = "rtx4090"\n')
    monkeypatch.setenv("HFVRAM_GPU", "")
    assert check_json()["hardware"]["gpu"] == "rtx4090"


def test_fit_takes_its_gpu_from_the_config(config_dir):
    (config_dir / "config.toml").write_text('gpu = "rtx4090"\n')
    result = run("fit", str(LLAMA_FOLDER), "--json")
    assert result.exit_code in (0, 1), result.output
    assert json.loads(result.stdout)["gpu"] == "rtx4090"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('gpu = "nope"\n', "gpu: unknown GPU 'nope'"),
        ("gpu = \n", "not valid TOML"),
        ('colour = "red"\n', "unknown key 'colour'"),
        ("gpu = 4090\n", "gpu must be a string, got int"),
        ('gpu = ""\n', "gpu: is empty"),
        ('context = "12q"\n', "context: '12q' is not a token count"),
        ("unified_fraction = 1.5\n", "unified_fraction: must be in (0, 1]"),
    ],
)
def test_a_bad_config_file_is_one_line_and_exit_2(config_dir, text, message):
    (config_dir / "config.toml").write_text(text)
    result = run("check", str(LLAMA_FOLDER))
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line
    assert line.startswith(f"hfvram: error: config file {config_dir / 'config.toml'}: ")
    assert message in line


def test_a_bad_variable_names_the_variable(monkeypatch):
    monkeypatch.setenv("HFVRAM_CONCURRENCY", "0")
    result = run("check", str(LLAMA_FOLDER), "--gpu", "rtx4090")
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("hfvram: error: HFVRAM_CONCURRENCY: must be a whole number")


def test_config_that_is_not_a_regular_file_is_refused_without_reading(config_dir):
    (config_dir / "config.toml").mkdir()
    result = run("check", str(LLAMA_FOLDER))
    assert result.exit_code == 2
    assert "not a regular file" in result.stderr
    (config_dir / "config.toml").rmdir()
    os.mkfifo(config_dir / "config.toml")  # a FIFO would block a plain open(); refused at once
    result = run("check", str(LLAMA_FOLDER))
    assert result.exit_code == 2
    assert "not a regular file" in result.stderr


def test_oversized_config_is_refused(config_dir):
    (config_dir / "config.toml").write_text("# padding\n" * (MAX_CONFIG_BYTES // 10 + 10))
    result = run("check", str(LLAMA_FOLDER))
    assert result.exit_code == 2
    assert "larger than 64 KiB" in result.stderr


def test_help_still_works_with_a_broken_config(config_dir):
    (config_dir / "config.toml").write_text('gpu = "nope"\n')
    result = run("check", "--help")
    assert result.exit_code == 0
    assert "Usage:" in result.output


def test_commands_other_than_check_scan_fit_ignore_the_defaults(config_dir):
    """calibrate's --gpu names the GPU a log came from: a default GPU must not stand in for it."""
    (config_dir / "config.toml").write_text('gpu = "rtx4090"\n')
    result = run("calibrate", "missing.log", "--save")
    assert result.exit_code == 2
    assert "--model and --save need --gpu" in result.stderr
