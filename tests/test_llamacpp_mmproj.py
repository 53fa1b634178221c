"""llama.cpp ``--mmproj FILE`` (docs/engines/llamacpp.md#llamacpp-extra-models): the pipeline reads the projector's
GGUF header (metadata and tensor infos only) and the estimate books the bytes of its tensors where llama.cpp's clip
code loads them — the first GPU, or RAM with ``--no-mmproj-offload``.

No real ``mmproj-*.gguf`` header is among the fixtures, so the projector here is a real GGUF header of another
file: fixtures/headers/SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf (sources in fixtures/README.md). The booking does
not depend on the architecture (clip loads every tensor of the file). Its expected bytes come from that README, not
from hfvram: the complete upstream file is 98,362,432 bytes and its data section starts at 1,785,664, so its
tensors take 96,576,768 bytes (the last tensor ends exactly at the file's end)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_support import validate
from click.testing import CliRunner

from hfvram.cli import cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MODEL = FIXTURES / "headers" / "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf-header.gguf"
PROJECTOR = FIXTURES / "headers" / "SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf"
# fixtures/README.md: complete file 98,362,432 bytes − data start 1,785,664
PROJECTOR_TENSOR_BYTES = 98_362_432 - 1_785_664


def check(*engine_args: str, gpu: str = "rtx4090", explain: bool = False) -> dict:
    args = ["check", str(MODEL), "--gpu", gpu, "--engine", "llama.cpp", "--context", "8192", "--json"]
    if engine_args:
        args += ["--engine-args", " ".join(engine_args)]
    if explain:
        args.append("--explain")
    result = CliRunner().invoke(cli, args)
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(document)
    return document


def test_mmproj_weights_are_booked_on_the_first_gpu():
    base = check()
    with_projector = check(f"--mmproj {PROJECTOR}")
    grown = with_projector["per_gpu"]["weights"] - base["per_gpu"]["weights"]
    assert grown == PROJECTOR_TENSOR_BYTES
    assert with_projector["per_gpu"]["total"] - base["per_gpu"]["total"] == PROJECTOR_TENSOR_BYTES
    for term in ("kv_cache", "activations", "overhead"):
        assert with_projector["per_gpu"][term] == base["per_gpu"][term]
    booked = with_projector["engine"]["mmproj"]
    assert booked == {
        "file": str(PROJECTOR),
        "weights_bytes": PROJECTOR_TENSOR_BYTES,
        "device": "gpu0",
        "compute_buffer_bytes": None,
        "origin": "file",
        "repo": None,
    }
    assert base["engine"]["mmproj"] is None
    text = "\n".join(with_projector["warnings"])
    # the weights are counted, the compute buffer is said not to be; the old "not counted" warning is gone
    assert "its weights (92.10 MiB) are counted on the first GPU" in text
    assert "its compute buffer is not" in text
    assert "the vision projector's weights and compute buffer" not in text


def test_no_mmproj_offload_books_the_projector_in_ram():
    base = check()
    in_ram = check(f"--mmproj {PROJECTOR}", "--no-mmproj-offload")
    assert in_ram["per_gpu"] == base["per_gpu"]
    assert in_ram["engine"]["mmproj"]["device"] == "cpu"
    assert "are counted in RAM (--no-mmproj-offload)" in "\n".join(in_ram["warnings"])


def test_explain_names_the_projector():
    explained = check(f"--mmproj {PROJECTOR}", explain=True)
    text = json.dumps(explained)
    assert f"vision projector {PROJECTOR} 92.10 MiB on this GPU" in text


def test_an_unreadable_projector_keeps_the_not_counted_warning(tmp_path):
    missing = tmp_path / "mmproj-missing.gguf"
    document = check(f"--mmproj {missing}")
    assert document["engine"]["mmproj"] is None
    assert "the vision projector's weights and compute buffer" in "\n".join(document["warnings"])


def test_an_offload_plan_keeps_the_projector_on_the_first_gpu():
    """Qwen3-30B-A3B (DERIVED header, fixtures/README.md) on an 8 GB card: --fit keeps experts in RAM; the
    projector, loaded after the plan, adds its bytes to GPU 0's weights and the plan itself does not change."""
    qwen3 = ["check", str(FIXTURES / "gguf-derived" / "qwen3-30b-a3b.gguf"), "--gpu", "rtx4060ti-8g"]
    common = [*qwen3, "--engine", "llama.cpp", "--context", "32768", "--json"]
    runs = []
    for extra in ([], ["--engine-args", f"--mmproj {PROJECTOR}"]):
        result = CliRunner().invoke(cli, [*common, *extra])
        assert result.exit_code in (0, 1), result.output
        runs.append(json.loads(result.stdout))
        validate(runs[-1])
    base, with_projector = runs
    assert base["verdict"] == "offload" and base["offload_plan"] == with_projector["offload_plan"]
    assert with_projector["per_gpu"]["weights"] - base["per_gpu"]["weights"] == PROJECTOR_TENSOR_BYTES
