"""llama.cpp's speculative draft model ``-md FILE`` (docs/engines/llamacpp.md#llamacpp-draft-model): the pipeline reads
the draft GGUF like the model's own file, and llama-server's one draft context — weights placed by ``-ngld`` /
``-devd``, its KV cache (``-ctkd`` / ``-ctvd``, F16 by default) for the target's n_ctx, its compute buffer — is
booked on the GPUs; ``--fit`` keeps it inside each device's margin.

No published llama-server log with a draft model whose GGUF header we hold was found (the logs we found, e.g.
llama.cpp#12436 with Qwen2.5-0.5B-Instruct as the draft, name files whose headers are not among the fixtures; that
log shows the draft's own F16 cache next to the target's q8_0 one, the rule tested here). So the draft here is a
real header of another file, fixtures/headers/SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf (sources in
fixtures/README.md), and the expected figures come from its metadata and llama.cpp's formulas, not from hfvram:
30 blocks, 3 KV heads × 64 = 192 K and V elements per cell; a cell of one layer is 2 × 192 × 2 B in F16 and
2 × (192 / 32 × 34 B) in q8_0; the tensors take 98,362,432 − 1,785,664 = 96,576,768 bytes (fixtures/README.md);
token_embd is Q8_0, 49,152 × 576 elements × 34 / 32 B."""

from __future__ import annotations

import json
from pathlib import Path

from cli_support import validate
from click.testing import CliRunner

from hfvram.cli import cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MODEL = FIXTURES / "headers" / "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf-header.gguf"
DRAFT = FIXTURES / "headers" / "SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf"
CELLS = 8192
F16_KV = 30 * CELLS * 2 * 192 * 2
Q8_KV = 30 * CELLS * 2 * (192 // 32 * 34)
TENSOR_BYTES = 98_362_432 - 1_785_664
TOKEN_EMBD = 49_152 * 576 * 34 // 32


def check(*engine_args: str, gpu: str = "rtx4090", model: Path = MODEL, context: str = str(CELLS)) -> dict:
    args = ["check", str(model), "--gpu", gpu, "--engine", "llama.cpp", "--context", context, "--json"]
    if engine_args:
        args += ["--engine-args", " ".join(engine_args)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(document)
    return document


def test_the_draft_context_is_booked_on_the_gpu():
    base, drafted = check(), check(f"-md {DRAFT}")
    draft = drafted["engine"]["draft_model"]
    assert base["engine"]["draft_model"] is None
    # its own F16 cache for the target's n_ctx (the target's -ctk does not apply: llama.cpp#12436, PR #10586)
    assert draft["gpu_kv_bytes"] == [F16_KV] and draft["cpu_kv_bytes"] == 0
    assert drafted["per_gpu"]["kv_cache"] - base["per_gpu"]["kv_cache"] == F16_KV
    # every tensor on the GPU (the tied output duplicates token_embd there), token_embd itself in RAM; CUDA row padding
    assert 0 <= draft["gpu_weights_bytes"][0] - TENSOR_BYTES < 256 * 1024
    assert draft["cpu_weights_bytes"] == TOKEN_EMBD
    assert drafted["per_gpu"]["weights"] - base["per_gpu"]["weights"] == draft["gpu_weights_bytes"][0]
    assert draft["gpu_compute_bytes"][0] > 0
    assert drafted["per_gpu"]["activations"] - base["per_gpu"]["activations"] == draft["gpu_compute_bytes"][0]
    assert any("its context is counted" in warning for warning in drafted["warnings"])
    assert not any("are not counted" in warning for warning in drafted["warnings"])
    assert f"--model-draft {DRAFT}" in drafted["launch"]["command"]


def test_draft_cache_types_follow_ctkd_ctvd():
    quantized = check(f"-md {DRAFT}", "-ctkd q8_0", "-ctvd q8_0")
    assert quantized["engine"]["draft_model"]["gpu_kv_bytes"] == [Q8_KV]
    assert quantized["engine"]["cache-type-k"] == "f16"  # the target's own cache is untouched
    assert "--cache-type-k-draft q8_0 --cache-type-v-draft q8_0" in quantized["launch"]["command"]


def test_ngld_zero_keeps_the_draft_in_ram_but_its_compute_buffer_on_the_gpu():
    base, in_ram = check(), check(f"-md {DRAFT}", "-ngld 0")
    draft = in_ram["engine"]["draft_model"]
    assert draft["gpu_weights_bytes"] == [0] and draft["gpu_kv_bytes"] == [0]
    assert draft["cpu_kv_bytes"] == F16_KV
    assert abs(draft["cpu_weights_bytes"] - TENSOR_BYTES) < 64
    assert in_ram["per_gpu"]["weights"] == base["per_gpu"]["weights"]
    assert in_ram["per_gpu"]["kv_cache"] == base["per_gpu"]["kv_cache"]
    # the CUDA backend still reserves a compute buffer for the draft (op offload of host weights)
    assert in_ram["per_gpu"]["activations"] > base["per_gpu"]["activations"]
    assert "--n-gpu-layers-draft 0" in in_ram["launch"]["command"]


def test_devd_none_puts_nothing_of_the_draft_on_a_gpu():
    base, on_cpu = check(), check(f"-md {DRAFT}", "-devd none")
    assert on_cpu["per_gpu"] == base["per_gpu"]
    assert on_cpu["engine"]["draft_model"]["cpu_kv_bytes"] == F16_KV
    assert "--device-draft none" in on_cpu["launch"]["command"]


def test_devd_names_the_gpu_that_takes_the_draft():
    placed = check(f"-md {DRAFT}", "-devd CUDA1", gpu="rtx4090x2")["engine"]["draft_model"]
    assert placed["gpu_weights_bytes"][0] == 0 and placed["gpu_kv_bytes"] == [0, F16_KV]
    assert placed["gpu_compute_bytes"][0] == 0 and placed["gpu_compute_bytes"][1] > 0


def test_cd_does_not_size_the_draft_context():
    asked = check(f"-md {DRAFT}", "-cd 2048")
    assert asked["engine"]["draft_model"]["gpu_kv_bytes"] == [F16_KV]
    assert any(warning.startswith("-cd 2048: llama-server gives") for warning in asked["warnings"])
    assert "--ctx-size-draft 2048" in asked["launch"]["command"]


def test_an_unreadable_draft_keeps_the_not_counted_warning(tmp_path):
    document = check(f"-md {tmp_path / 'missing.gguf'}")
    assert document["engine"]["draft_model"] is None
    assert any("are not counted" in warning for warning in document["warnings"])


def test_fit_keeps_the_draft_inside_its_margin():
    """Qwen3-30B-A3B (DERIVED header, fixtures/README.md) on an 8 GB card at 32k: --fit adds the draft context's bytes
    to the device's margin (PR #23485), so more experts go to RAM, and the GPU figures hold the draft too."""
    qwen3 = FIXTURES / "gguf-derived" / "qwen3-30b-a3b.gguf"
    base = check(model=qwen3, gpu="rtx4060ti-8g", context="32768")
    drafted = check(f"-md {DRAFT}", model=qwen3, gpu="rtx4060ti-8g", context="32768")
    assert base["verdict"] == drafted["verdict"] == "offload"
    draft = drafted["engine"]["draft_model"]
    on_gpu = draft["gpu_weights_bytes"][0] + draft["gpu_kv_bytes"][0] + draft["gpu_compute_bytes"][0]
    margins = [plan["offload_plan"]["devices"][0]["margin_bytes"] for plan in (base, drafted)]
    assert margins[1] - margins[0] == on_gpu
    assert drafted["offload_plan"]["expert_layers_in_ram"] > base["offload_plan"]["expert_layers_in_ram"]
    assert drafted["per_gpu"]["usable"] == base["per_gpu"]["usable"]
    assert drafted["per_gpu"]["total"] <= drafted["per_gpu"]["usable"]
