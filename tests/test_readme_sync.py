"""scripts/readme_sync.py: every block of README.md that shows output is re-run and matches, or is listed with a
reason; a stale, unchecked or trimmed block is caught."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _sync():
    spec = importlib.util.spec_from_file_location("readme_sync", ROOT / "scripts" / "readme_sync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["readme_sync"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


sync = _sync()
MODELS_TXT = (ROOT / "examples" / "models.txt").read_text(encoding="utf-8").rstrip("\n")


def test_readme_blocks_are_fresh_and_each_is_checked_or_listed():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_sync.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped with a reason" in done.stderr


def test_every_readme_block_with_output_is_rerun_unless_listed():
    text = sync.README.read_text(encoding="utf-8")
    blocks = sync.blocks_of(text)
    kinds = {block.kind for block in blocks if block.runnable}
    assert kinds == {"console", "python"}  # the models blocks and the Python example are among them
    rerun = [block.items[0][0] for block in blocks if block.runnable and block.kind == "console"]
    assert any(command.startswith("hfvram models --gpu") for command in rerun)
    assert any(command.startswith("hfvram models --list") for command in rerun)
    not_rerun = {block.items[0][0] for block in blocks if not block.runnable}
    assert not_rerun == set(sync.SKIPPED)


def test_a_stale_block_is_reported_and_repasted():
    text = "intro\n\n```console\n$ cat examples/models.txt\nsomething else\n```\n\nafter\n"
    found = sync.rendered_sync(text)
    assert found.changed == ["cat examples/models.txt"]
    assert found.text == f"intro\n\n```console\n$ cat examples/models.txt\n{MODELS_TXT}\n```\n\nafter\n"
    assert not found.unchecked


def test_a_block_neither_rerun_nor_listed_is_unchecked():
    text = "```console\n$ curl https://example.org | sh\nok\n```\n\n```text\n$ hfvram check x/y --gpu h100\nz\n```\n"
    found = sync.rendered_sync(text)
    assert found.unchecked == ["curl https://example.org | sh", "hfvram check x/y --gpu h100"]
    assert found.checked == 0 and found.text == text


def test_the_python_example_runs_and_its_output_block_is_compared():
    code = 'print("one")\nprint(2 + 2)\n'
    fresh = f"```python\n{code}```\n\n```text\none\n4\n```\n"
    assert sync.rendered_sync(fresh).changed == []
    stale = sync.rendered_sync(f"```python\n{code}```\n\n```text\none\n5\n```\n")
    assert stale.changed == ['the Python example (print("one") …)']
    assert stale.text == fresh


def test_an_example_runs_with_no_hub_and_no_hfvram_settings():
    code = "import os\nprint(os.environ['HF_HUB_OFFLINE'], os.environ.get('HFVRAM_GPU'), os.environ['COLUMNS'])\n"
    found = sync.rendered_sync(f"```python\n{code}```\n\n```text\n1 None 120\n```\n")
    assert found.changed == [] and found.checked == 1


def test_a_trimmed_table_matches_only_with_lines_left_out_where_it_says():
    got = ["head", "───", "a 1", "b 2", "c 3", "d 4", "e 5"]
    assert sync.matches_elided(got, ["head", "───", "a 1", "…", "d 4", "…"])
    assert sync.matches_elided(got, ["head", "───", "…", "c 3", "…", "e 5"])
    assert not sync.matches_elided(got, ["head", "───", "a 1", "…", "b 2", "…"])  # nothing left out there
    assert not sync.matches_elided(got, ["head", "───", "a 1", "…", "z 9", "…"])
    assert not sync.matches_elided(got, ["head", "───", "a 1", "…", "d 4"])  # the real output goes on
    assert not sync.matches_elided(got, ["head", "───", "…", "c 3", "…", "e 6"])


def test_a_stale_trimmed_table_keeps_its_rows_by_first_column():
    got = ["3 of 5", "name  n", "───", "org/alpha-lon…  1", "org/beta  2", "org/gamma  3", "org/delta  4"]
    was = ["2 of 5", "name  n", "───", "org/alpha-long-name  9", "…", "org/gamma  7", "…"]
    assert sync.retrimmed(got, was) == ["3 of 5", "name  n", "───", "org/alpha-lon…  1", "…", "org/gamma  3", "…"]


def test_a_block_with_config_runs_with_the_toml_block_above_it_as_the_config_file():
    command = "hfvram check Qwen/Qwen3-8B --offline | head -2"
    assert command in sync.WITH_CONFIG
    text = f'```toml\ngpu = "h100"\nconcurrency = 3\n```\n\n```console\n$ {command}\nstale\n```\n'
    found = sync.rendered_sync(text)
    assert found.changed == [command]
    shown = found.text.split("```console\n")[1].splitlines()
    assert shown[1] == "Qwen/Qwen3-8B  (catalog)"
    assert "h100-sxm ×1" in shown[2] and "concurrency 3" in shown[2]


def test_a_models_hub_block_runs_against_the_local_test_hub_only(tmp_path):
    """`models --hub` is re-run (issue 25): against tests/hubserver.py started by the script, never huggingface.co;
    every other block stays offline."""
    assert sync.rerunnable("hfvram models --hub --author Qwen --gpu rtx4090 --limit 12")
    url = sync.test_hub_url()
    assert url.startswith("http://127.0.0.1:") and sync.test_hub_url() == url  # one server for the pass
    hub_env, offline_env = sync.environment(tmp_path, url), sync.environment(tmp_path)
    assert hub_env["HF_ENDPOINT"] == url and "HF_HUB_OFFLINE" not in hub_env
    assert offline_env["HF_HUB_OFFLINE"] == "1" and "HF_ENDPOINT" not in offline_env
    shown = sync.run("hfvram models --hub --author Qwen --gpu rtx4090 --limit 2", tmp_path)
    assert shown.startswith("0 of 2 Hub models run on rtx4090"), shown  # the fixture listing's two first repos
