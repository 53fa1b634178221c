"""`hfvram gpus`, `inspect`, `fit`, help / version / completion, and a start-up that imports almost nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_support import GGUF_HEADERS, LLAMA_FOLDER, ROOT, run_hfvram, validate
from click.testing import CliRunner

from hfvram.cli import cli

runner = CliRunner()


# ---- gpus ---------------------------------------------------------------------------------------------------------


def test_gpus_query_and_vendor_filter():
    result = runner.invoke(cli, ["gpus", "4090", "--json"])
    assert result.exit_code == 0
    found = json.loads(result.stdout)
    assert "rtx4090" in {gpu["id"] for gpu in found}
    # gpus.toml: the RTX 4090 exposes 25,757,220,864 bytes (nvidia-smi total), not the marketing 24 GB
    assert {gpu["id"]: gpu["memory_bytes"] for gpu in found}["rtx4090"] == 25_757_220_864
    amd = json.loads(runner.invoke(cli, ["gpus", "--vendor", "amd", "--json"]).stdout)
    assert amd and all(gpu["vendor"] == "amd" for gpu in amd)


def test_gpus_table_and_no_match():
    table = runner.invoke(cli, ["gpus", "h100"])
    assert table.exit_code == 0 and "h100" in table.stdout and "GiB" in table.stdout
    none = runner.invoke(cli, ["gpus", "no-such-card-at-all"])
    assert none.exit_code == 2


# ---- inspect ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("header", GGUF_HEADERS, ids=lambda path: path.name[:30])
def test_inspect_each_real_gguf_header(header):
    result = runner.invoke(cli, ["inspect", str(header), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    validate(document, "inspect")
    assert document["source"]["kind"] == "gguf"
    assert document["model"]["weights_bytes"] > 0
    assert document["model"]["quantization"]["method"] == "gguf"
    assert any("block_count" in where for where in document["provenance"].values())


def test_inspect_deepseek_distill_gguf_kv():
    """DeepSeek-R1-Distill-Qwen-7B (Qwen2 shape): 28 layers × 4 KV heads × 128 × 2 (K+V) × 2 B = 57,344 B/token."""
    header = next(path for path in GGUF_HEADERS if path.name.startswith("DeepSeek"))
    document = json.loads(runner.invoke(cli, ["inspect", str(header), "--json"]).stdout)
    assert document["model"]["num_layers"] == 28
    assert document["model"]["kv_bytes_per_token"] == 57344


def test_inspect_folder_and_kv_dtype():
    plain = json.loads(runner.invoke(cli, ["inspect", str(LLAMA_FOLDER), "--json"]).stdout)
    fp8 = json.loads(runner.invoke(cli, ["inspect", str(LLAMA_FOLDER), "--kv-dtype", "fp8", "--json"]).stdout)
    validate(plain, "inspect")
    assert plain["model"]["kv_bytes_per_token"] == 131072  # contract.md: Llama-3-8B at bf16
    assert fp8["model"]["kv_bytes_per_token"] == 65536
    assert plain["provenance"]["num_layers"].startswith("config.json")
    table = runner.invoke(cli, ["inspect", str(LLAMA_FOLDER)])
    assert "KV per token" in table.stdout and "Where each input figure came from" in table.stdout


def test_inspect_repo_id_on_the_local_hub(hub):
    result = runner.invoke(cli, ["inspect", "Qwen/Qwen3-8B", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    validate(document, "inspect")
    assert document["source"]["kind"] == "hub" and document["source"]["repo_id"] == "Qwen/Qwen3-8B"
    # Qwen3-8B config: 36 layers × 8 KV heads × head_dim 128 × 2 × 2 B
    assert document["model"]["kv_bytes_per_token"] == 36 * 8 * 128 * 2 * 2


def test_inspect_errors():
    assert runner.invoke(cli, ["inspect", "/nonexistent/x.gguf"]).exit_code == 3
    assert runner.invoke(cli, ["inspect", str(LLAMA_FOLDER), "--kv-dtype", "fp7"]).exit_code == 2


# ---- fit ----------------------------------------------------------------------------------------------------------


def test_fit_json_answers_the_inverse_questions():
    result = runner.invoke(cli, ["fit", "--gpu", "rtx4090", str(LLAMA_FOLDER), "--context", "8k", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["gpu"] == "rtx4090"
    assert document["max_context"] is None or document["max_context"] > 0
    assert document["max_concurrency"] >= 0
    rows = document["context_table"]
    assert {row["kv_dtype"] for row in rows} == {"bf16", "fp8"}
    contexts = sorted({row["context"] for row in rows})
    assert contexts[0] == 4096 and contexts[-1] == 131072  # 4k … the model's max (config.json)
    by_key = {(row["context"], row["kv_dtype"]): row for row in rows}
    # an fp8 cache holds at least as many full-length requests as bf16 at every context
    for context in contexts:
        assert by_key[(context, "fp8")]["max_concurrency"] >= by_key[(context, "bf16")]["max_concurrency"]


def test_fit_table_several_models_and_smallest_count():
    result = runner.invoke(
        cli,
        [
            "fit",
            "--gpu",
            "rtx4090",
            "--offline",
            "Qwen/Qwen3-0.6B",
            "meta-llama/Meta-Llama-3.1-405B",
            "--context",
            "8k",
        ],
    )
    assert result.exit_code == 1, result.output  # the 405B model does not fit one rtx4090 at 8k: exit 1, as check
    assert "Qwen/Qwen3-0.6B" in result.stdout and "Meta-Llama-3.1-405B" in result.stdout
    assert "fewest rtx4090 that fit" in result.stdout
    as_json = json.loads(
        runner.invoke(
            cli, ["fit", "--gpu", "rtx4090", "--offline", "Qwen/Qwen3-0.6B", "--context", "8k", "--json"]
        ).stdout
    )
    assert as_json["smallest_gpu_count"] == 1


def test_fit_usage_errors():
    assert runner.invoke(cli, ["fit", str(LLAMA_FOLDER)]).exit_code == 2  # --gpu is required
    assert runner.invoke(cli, ["fit", "--gpu", "rtx4090"]).exit_code == 2  # no SOURCE


def test_fit_plot_without_matplotlib_is_a_clear_message(tmp_path):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        result = runner.invoke(cli, ["fit", "--gpu", "rtx4090", str(LLAMA_FOLDER), "--plot", str(tmp_path / "a.png")])
        assert result.exit_code == 2 and "hfvram[plot]" in result.output
    else:
        target = tmp_path / "plot.svg"
        result = runner.invoke(
            cli, ["fit", "--gpu", "rtx4090", str(LLAMA_FOLDER), "--context", "8k", "--plot", str(target)]
        )
        assert result.exit_code == 0, result.output
        assert target.read_text().lstrip().startswith("<?xml")


# ---- the program itself ----------------------------------------------------------------------------------------


def test_help_imports_almost_nothing():
    """`hfvram --help` must not import rich, huggingface_hub, transformers, the readers or the engines."""
    code = (
        "import sys\n"
        "from hfvram.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('rich', 'huggingface_hub', 'transformers', 'torch', 'gguf', 'safetensors',"
        " 'hfvram.readers', 'hfvram.sources', 'hfvram.engines.vllm.profile') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert "HEAVY []" in result.stdout, result.stdout + result.stderr


def test_shell_completion_script():
    result = run_hfvram(env={"_HFVRAM_COMPLETE": "bash_source"})
    assert result.returncode == 0
    assert "_hfvram_completion" in result.stdout


def test_python_dash_m_and_version():
    result = run_hfvram("--version")
    assert result.returncode == 0 and "0.1.0" in result.stdout
    assert run_hfvram("no-such-command").returncode == 2


# ---- the shipped examples ----------------------------------------------------------------------------------------


def _example_commands() -> list[str]:
    import re
    import shlex

    import yaml

    text = (ROOT / "examples" / "github-actions.yml").read_text(encoding="utf-8")
    commands = [shlex.split(match.group(1)) for match in re.finditer(r"hfvram (scan [^|>\n]+)", text)]
    # the pre-commit hook: the entry of .pre-commit-hooks.yaml with the example's args
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    config = yaml.safe_load((ROOT / "examples" / "pre-commit-hook.yaml").read_text(encoding="utf-8"))
    for repo in config["repos"]:
        for used in repo["hooks"]:
            assert used["id"] == hook["id"]
            commands.append([*shlex.split(hook["entry"])[1:], *used.get("args", hook["args"])])
    return commands


def test_example_command_lines_run(tmp_path, monkeypatch):
    """Every `hfvram scan …` line of examples/ runs as written (offline, on catalogue models) and exits 0/1."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models.txt").write_text("# deployed\nQwen/Qwen3-0.6B\n", encoding="utf-8")
    commands = _example_commands()
    assert len(commands) == 3
    for args in commands:
        if "--offline" not in args:
            args.append("--offline")
        result = runner.invoke(cli, args)
        assert result.exit_code in (0, 1), (args, result.output)


def test_gpus_inspect_fit_as_subprocesses():
    gpus = run_hfvram("gpus", "h100", "--json")
    assert gpus.returncode == 0 and any(gpu["id"] == "h100-sxm" for gpu in json.loads(gpus.stdout))
    header = next(path for path in GGUF_HEADERS if path.name.startswith("SmolLM2"))
    inspected = run_hfvram("inspect", str(header), "--json")
    assert inspected.returncode == 0, inspected.stderr
    validate(json.loads(inspected.stdout), "inspect")
    fitted = run_hfvram("fit", "--gpu", "rtx4090", str(header), "--context", "4k", "--json")
    assert fitted.returncode == 0, fitted.stderr
    assert json.loads(fitted.stdout)["smallest_gpu_count"] == 1
    missing_gpu = run_hfvram("fit", str(header))
    assert missing_gpu.returncode == 2 and "Traceback" not in missing_gpu.stderr
