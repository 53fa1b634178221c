"""The Python API (hfvram/api.py): ``from hfvram import check, inspect, fit`` gives typed results whose documents
are exactly what the command line prints with --json, for the same options."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_support import LLAMA_FOLDER, ROOT, SMOLLM_GGUF, validate
from click.testing import CliRunner

import hfvram
from hfvram import CheckResult, FitResult, InspectResult, check, fit, inspect
from hfvram.cli import cli
from hfvram.errors import HfvramError, UsageError


def cli_json(*args: str) -> dict:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_import_hfvram_stays_light():
    """The API is loaded on first use: `import hfvram` (and so the CLI's start-up) imports neither it nor click."""
    code = (
        "import sys, hfvram; print('hfvram.api' in sys.modules, 'hfvram.cli' in sys.modules, 'click' in sys.modules);"
        "hfvram.check; print('hfvram.api' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.split() == ["False", "False", "False", "True"], done.stderr


def test_a_library_check_never_loads_the_command_line():
    """api.py runs the wiring of hfvram.pipeline, not of hfvram.cli: a real check from Python imports neither the
    CLI nor click (the import graph points from the CLI down to the API and the pipeline, never back up)."""
    code = (
        "import sys, hfvram; r = hfvram.check(sys.argv[1], gpu='rtx4090', context='8k'); "
        "print(r.verdict is not None, 'hfvram.pipeline' in sys.modules, 'hfvram.cli' in sys.modules, "
        "'click' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(LLAMA_FOLDER)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.stdout.split() == ["True", "True", "False", "False"], done.stderr[-2000:]


def test_public_names():
    assert {"check", "inspect", "fit", "CheckResult", "FitResult", "InspectResult"} <= set(hfvram.__all__)
    assert {"check", "inspect", "fit"} <= set(dir(hfvram))
    with pytest.raises(AttributeError):
        hfvram.no_such_name  # noqa: B018
    assert check.__doc__ and "Raises" in check.__doc__
    assert fit.__doc__ and inspect.__doc__


def test_check_is_the_cli_check():
    """Same options, same hfvram.check/1 document; the typed fields read from it."""
    result = check(LLAMA_FOLDER, gpu="rtx4090", context="32k", settings={"max-num-batched-tokens": 8192})
    assert isinstance(result, CheckResult)
    expected = cli_json(
        "check", str(LLAMA_FOLDER), "--gpu", "rtx4090", "--context", "32k", "--set", "max-num-batched-tokens=8192"
    )
    assert result.document == expected
    validate(result.document)
    assert json.loads(result.to_json()) == expected
    assert result.verdict == expected["verdict"]
    assert result.gpu == "rtx4090"
    assert result.engine == "vllm"
    assert result.context == 32768
    assert result.kv_dtype == "bf16"
    per_gpu = result.per_gpu
    assert per_gpu.total == per_gpu.weights + per_gpu.kv_cache + per_gpu.activations + per_gpu.overhead
    assert per_gpu.usable == expected["per_gpu"]["usable"]
    assert result.capacity.max_context == expected["capacity"]["max_context"]
    assert result.exit_code() == (1 if result.verdict == "does_not_fit" else 0)
    assert result.exit_code(fail_on_tight=True) == (0 if result.verdict == "fits" else 1)


def test_check_accepts_numbers_and_cli_spellings_alike():
    as_numbers = check(LLAMA_FOLDER, gpu="rtx4090", context=32768, concurrency=2, settings=["max-num-seqs=8"])
    as_text = check(str(LLAMA_FOLDER), gpu="rtx4090", context="32k", concurrency="2", settings={"max-num-seqs": 8})
    assert as_numbers == as_text
    assert as_numbers.concurrency == 2


def test_check_from_a_pasted_engine_command_line():
    result = check(engine_args=f"vllm serve {LLAMA_FOLDER} --max-model-len 16384", gpu="rtx4090")
    assert result.context == 16384
    assert result.document == cli_json("check", "--engine-args", f"vllm serve {LLAMA_FOLDER} --max-model-len 16384",
                                       "--gpu", "rtx4090")  # fmt: skip


def test_check_without_gpu_has_terms_and_no_verdict():
    result = check(LLAMA_FOLDER)
    assert result.verdict is None
    assert result.gpu is None
    assert result.per_gpu.total is not None and result.per_gpu.usable is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu": "nope"}, "unknown GPU 'nope'"),
        ({"engine": "nope"}, "unknown engine 'nope'"),
        ({"gpu": "rtx4090", "tp": 0}, "tp must be a whole number"),
        ({"gpu": "rtx4090", "gpu_util": 1.5}, "gpu_util must be a fraction"),
        ({"gpu": "rtx4090", "context": "12q"}, "'12q'"),
        ({"gpu": "rtx4090", "settings": ["oops"]}, "expected NAME=VALUE"),
    ],
)
def test_bad_input_raises_usage_error(kwargs, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        check(LLAMA_FOLDER, **kwargs)


def test_unreadable_model_raises_an_hfvram_error(tmp_path):
    with pytest.raises(HfvramError) as caught:
        check(tmp_path / "missing-folder", gpu="rtx4090", offline=True)
    assert caught.value.exit_code in (2, 3)


def test_the_library_reads_no_user_defaults(tmp_path, monkeypatch):
    """HFVRAM_GPU and config.toml are the command line's defaults; a library call depends on its arguments only."""
    monkeypatch.setenv("HFVRAM_GPU", "rtx4090")
    (tmp_path / "config.toml").write_text('gpu = "h100"\n')
    monkeypatch.setenv("HFVRAM_CONFIG_DIR", str(tmp_path))
    assert check(LLAMA_FOLDER).gpu is None
    assert cli_json("check", str(LLAMA_FOLDER))["hardware"]["gpu"] == "rtx4090"


def test_fit_is_the_cli_fit():
    result = fit(LLAMA_FOLDER, gpu="rtx4090", context="32k")
    assert isinstance(result, FitResult)
    expected = cli_json("fit", str(LLAMA_FOLDER), "--gpu", "rtx4090", "--context", "32k")
    assert result.document == expected
    assert result.max_context == expected["max_context"]
    assert result.smallest_gpu_count == expected["smallest_gpu_count"]
    assert [row.context for row in result.context_table] == [row["context"] for row in expected["context_table"]]
    assert {row.kv_dtype for row in result.context_table} == {"bf16", "fp8"}
    assert result.spec is not None and result.engine_choice is not None and result.engine_choice.name == "vllm"
    with pytest.raises(UsageError, match="fit needs a gpu"):
        fit(LLAMA_FOLDER, gpu="")


def test_inspect_is_the_cli_inspect():
    result = inspect(SMOLLM_GGUF)
    assert isinstance(result, InspectResult)
    expected = cli_json("inspect", str(SMOLLM_GGUF))
    assert result.document == expected
    validate(result.document, "inspect")
    assert result.architecture == expected["model"]["architecture"]
    assert result.kv_bytes_per_token == expected["model"]["kv_bytes_per_token"]
    assert result.num_layers == expected["model"]["num_layers"] > 0
    assert result.spec is not None
    with pytest.raises(UsageError):
        inspect(SMOLLM_GGUF, kv_dtype="q9_9")
