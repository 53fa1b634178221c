"""llama.cpp and a Hub GGUF repo's projector (docs/engines/llamacpp.md#llamacpp-extra-models): without ``--mmproj``
llama-server's ``-hf`` downloads the ``mmproj-*.gguf`` that common/download.cpp's ``find_best_mmproj`` picks
(``--no-mmproj`` leaves it out); ``--mmproj NAME`` of a file of the repo is read from the Hub too. hfvram reads the
projector's header by range requests (the path of a Hub GGUF model), never the whole file.

No real ``mmproj-*.gguf`` header is among the fixtures, so the test repo (built by tests/hubserver.py
``add_header_repo``) presents real headers under the repo's file names: the model is
fixtures/headers/DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf-header.gguf and every projector is the real
SmolLM2-135M-Instruct.Q4_1 header at its real size (98,362,432 bytes; its tensors take 98,362,432 − 1,785,664 =
96,576,768 bytes, fixtures/README.md). The model file's size is a test input (the header decides the figures)."""

from __future__ import annotations

import json

import pytest
from cli_support import validate
from click.testing import CliRunner

from hfvram.cli import cli
from hfvram.sources.gguf_repo import best_mmproj, quant_bits

REPO = "hfvram-test/DeepSeek-R1-Distill-Qwen-7B-VL-GGUF"
MODEL = "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf"
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf"
SMOL_BYTES = 98_362_432
SMOL_TENSORS = 98_362_432 - 1_785_664
FILES = {
    MODEL: ("DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf-header.gguf", 4_700_000_000),
    "mmproj-F16.gguf": (SMOL, SMOL_BYTES),
    "mmproj-Q8_0.gguf": (SMOL, SMOL_BYTES),
    "extra/mmproj-Q4_0.gguf": (SMOL, SMOL_BYTES),
}


@pytest.fixture
def vl_hub(hub):
    hub.files.add_header_repo(REPO, FILES)
    return hub


def check(*engine_args: str) -> dict:
    args = ["check", f"{REPO}:Q4_K_M", "--gpu", "rtx4090", "--engine", "llama.cpp", "--context", "8192", "--json"]
    if engine_args:
        args += ["--engine-args", " ".join(engine_args)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(document)
    return document


def test_find_best_mmproj_rules():
    # common/download.cpp: the trailing tag's first number; folders must lead to the model's; nearest bits; first of a tie
    assert (quant_bits("m-Q4_K_M.gguf"), quant_bits("mmproj-BF16.gguf"), quant_bits("m-F16-00001-of-00002.gguf")) == (
        4,
        16,
        16,
    )
    assert best_mmproj(list(FILES), MODEL) == "mmproj-Q8_0.gguf"  # 8 bits nearer 4 than 16; extra/ is not above
    assert (
        best_mmproj(["mmproj-BF16.gguf", "mmproj-F16.gguf", "mmproj-F32.gguf"], "m-Q4_K_M.gguf") == "mmproj-BF16.gguf"
    )
    assert best_mmproj(["mmproj-F16.gguf", "UD/mmproj-F32.gguf"], "UD/m-Q4_K_M.gguf") == "UD/mmproj-F32.gguf"
    assert best_mmproj(["MMPROJ-F16.gguf", "m-Q8_0.gguf"], "m-Q4_K_M.gguf") is None  # the keyword is case-sensitive


def test_hf_downloads_the_best_projector_and_it_is_counted(vl_hub):
    default = check()
    # the repo listing the model's own read stored is reused: one model-info request in all
    assert [r.path for r in vl_hub.requests_to("/api/")] == [f"/api/models/{REPO}"]
    without = check("--no-mmproj")
    assert without["engine"]["mmproj"] is None
    assert default["engine"]["mmproj"] == {
        "file": "mmproj-Q8_0.gguf",
        "weights_bytes": SMOL_TENSORS,
        "device": "gpu0",
        "compute_buffer_bytes": None,
        "origin": "hub-auto",
        "repo": REPO,
    }
    assert default["per_gpu"]["weights"] - without["per_gpu"]["weights"] == SMOL_TENSORS
    warnings = "\n".join(default["warnings"])
    assert f"-hf projector {REPO}/mmproj-Q8_0.gguf" in warnings and "--no-mmproj leaves it out" in warnings
    # only its header was read: Range requests, a few MiB at most of the 98 MB file
    ranged = [r for r in vl_hub.requests_to("mmproj-Q8_0.gguf") if r.byte_range]
    assert ranged and all(r.byte_range.startswith("bytes=") for r in ranged)
    assert vl_hub.bytes_sent("mmproj-Q8_0.gguf") < 4 * 1024 * 1024
    assert not vl_hub.requests_to("mmproj-F16.gguf")


def test_mmproj_naming_a_file_of_the_hub_repo(vl_hub):
    named = check("--mmproj mmproj-F16.gguf")
    projector = named["engine"]["mmproj"]
    assert (projector["file"], projector["origin"], projector["weights_bytes"]) == (
        "mmproj-F16.gguf",
        "hub",
        SMOL_TENSORS,
    )
    assert "llama-server takes --mmproj as a local path" in "\n".join(named["warnings"])
    assert "--mmproj mmproj-F16.gguf" in named["launch"]["command"]
