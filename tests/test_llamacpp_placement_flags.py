"""llama.cpp's placement flags as llama.cpp applies them (docs/engines/llamacpp.md#llamacpp-override-devices,
#llamacpp-split-modes, #llamacpp-user-placement), on the real Qwen3-30B-A3B GGUF header
(fixtures/gguf-derived/qwen3-30b-a3b.gguf) and against the published 4-GPU ``--split-mode row`` start-up log of
https://github.com/ggml-org/llama.cpp/issues/13661 (Qwen3-30B-A3B Q8_0, build 5261, 30016 cells, FA off)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hfvram.engines.llamacpp import profile as llamacpp
from hfvram.engines.llamacpp.breakdown import Breakdown, breakdown
from hfvram.engines.llamacpp.placement import layer_weight_bytes
from hfvram.engines.llamacpp.settings import resolve_settings
from hfvram.errors import UsageError
from hfvram.estimate.core import estimate
from hfvram.estimate.hardware import parse_gpu_spec
from hfvram.estimate.types import EngineChoice, Hardware, Workload
from hfvram.readers.gguf import read_gguf_file, spec_from_gguf
from hfvram.spec import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20


@pytest.fixture(scope="module")
def qwen3moe() -> ModelSpec:
    path = ROOT / "fixtures" / "gguf-derived" / "qwen3-30b-a3b.gguf"
    return spec_from_gguf([read_gguf_file(path)], filename=path.name)


def parts_of(spec: ModelSpec, hardware: Hardware, workload: Workload = Workload(), **values: str) -> Breakdown:
    choice = EngineChoice("llama.cpp", settings={k.replace("_", "-"): str(v) for k, v in values.items()})
    _, constants, consts = llamacpp.constants_for(choice)
    settings = resolve_settings(spec, choice, workload, constants)
    return breakdown(spec, hardware, settings, constants, consts)


# ---- -ot to any device (llamacpp.md#llamacpp-override-devices) ----------------------------------------------------


def test_experts_pinned_to_a_named_gpu_land_on_that_gpu(qwen3moe):
    two = parse_gpu_spec("rtx4090x2")
    dense, experts, _, output = layer_weight_bytes(qwen3moe)
    base = parts_of(qwen3moe, two, ctx_size=16384)
    # the default split: blocks 0-24 on GPU 0, 25-47 and the output on GPU 1
    assert base.placement.gpu_layers == (25, 24)
    pinned = parts_of(qwen3moe, two, ctx_size=16384, ot=r"blk\.(2[4-9]|3[0-9]|4[0-7])\.ffn_.*_exps=CUDA1")
    moved = experts[24]
    assert pinned.placement.gpu_weights[0] == base.placement.gpu_weights[0] - moved
    assert pinned.placement.gpu_weights[1] == base.placement.gpu_weights[1] + moved
    # the KV cache follows the layer, not the override
    assert pinned.placement.gpu_kv == base.placement.gpu_kv
    # every expert on CUDA0: the second card keeps only its dense layers and the output matrix
    first = parts_of(qwen3moe, two, ctx_size=16384, ot="exps=CUDA0")
    assert first.placement.gpu_weights[1] == base.placement.gpu_weights[1] - sum(experts[25:])
    assert first.placement.gpu_weights[0] == base.placement.gpu_weights[0] + sum(experts[25:])
    assert sum(first.placement.gpu_weights) == sum(base.placement.gpu_weights)
    assert first.placement.gpu_weights[1] > sum(dense[25:]) + output - MiB  # dense + output stay (row padding aside)


def test_every_backends_device_names_are_read_and_unknown_ones_refused(qwen3moe):
    two = parse_gpu_spec("rtx4090x2")
    cuda = parts_of(qwen3moe, two, ctx_size=8192, ot="exps=CUDA1").placement.gpu_weights
    for name in ("Vulkan1", "ROCm1", "SYCL1"):
        assert parts_of(qwen3moe, two, ctx_size=8192, ot=f"exps={name}").placement.gpu_weights == cuda
    host = parts_of(qwen3moe, two, ctx_size=8192, ot="exps=CPU").placement
    assert parts_of(qwen3moe, two, ctx_size=8192, ot="exps=CUDA_Host").placement.cpu_weights == host.cpu_weights
    with pytest.raises(UsageError, match="buffer type"):
        parts_of(qwen3moe, two, ctx_size=8192, ot="exps=FOO")
    with pytest.raises(UsageError, match="GPU 2"):
        parts_of(qwen3moe, two, ctx_size=8192, ot="exps=CUDA2")


def test_a_gpu_holding_only_pinned_experts_gets_a_compute_buffer(qwen3moe):
    # every layer on GPU 0 (--split-mode none), every expert on GPU 1: both GPUs run ops
    two = parse_gpu_spec("rtx4090x2")
    parts = parts_of(qwen3moe, two, ctx_size=8192, split_mode="none", ot="exps=CUDA1")
    assert parts.placement.gpu_layers == (49, 0)
    assert parts.placement.gpu_weights[1] == sum(layer_weight_bytes(qwen3moe)[1])
    assert parts.gpu_compute[1] > 0


# ---- --split-mode row / none (llamacpp.md#llamacpp-split-modes) ---------------------------------------------------


def test_split_mode_row_matches_the_4_gpu_log_of_llamacpp_13661(qwen3moe):
    """llama.cpp#13661: KV per device follows the layers (CUDA2 703.50, CUDA3 644.88 MiB of 2814), every GPU holds
    the same 1958.63 MiB compute buffer, and the first GPU's model buffers are one layer of experts larger
    (7969.22 + 248.62 vs 7344.20 + 241.50 MiB). The log's 30016 cells are not a multiple of 256 (that build padded
    less); hfvram pads to 30208 (+0.6 %)."""
    four = parse_gpu_spec("rtx3060x4")
    parts = parts_of(qwen3moe, four, ctx_size=30016, flash_attn="off", split_mode="row", binary="llama-cli")
    kv = [size / MiB for size in parts.placement.gpu_kv]
    assert kv[2] == pytest.approx(703.50, rel=0.01) and kv[3] == pytest.approx(644.88, rel=0.01)
    assert sum(kv) == pytest.approx(2814.00, rel=0.01)
    compute = [size / MiB for size in parts.gpu_compute]
    assert all(size == pytest.approx(1958.63, rel=0.01) for size in compute)
    experts = layer_weight_bytes(qwen3moe)[1]
    weights = parts.placement.gpu_weights
    assert weights[0] - weights[1] == pytest.approx(experts[12], rel=0.02)
    assert weights[1] == weights[2]
    # the dense matrices are cut by rows: the layer split would give GPU 0 its 13 layers' dense bytes
    layer = parts_of(qwen3moe, four, ctx_size=30016, flash_attn="off", binary="llama-cli").placement.gpu_weights
    assert weights[0] < layer[0] and sum(weights) == pytest.approx(sum(layer), abs=4)


def test_split_mode_row_follows_the_tensor_split(qwen3moe):
    two = parse_gpu_spec("rtx4090x2")
    even = parts_of(qwen3moe, two, ctx_size=8192, split_mode="row").placement
    skew = parts_of(qwen3moe, two, ctx_size=8192, split_mode="row", ts="3,1").placement
    # -ts moves layers (their experts and KV) and the rows of the dense matrices with them
    assert skew.gpu_layers[0] > even.gpu_layers[0] and skew.gpu_kv[0] > even.gpu_kv[0]
    assert skew.gpu_weights[0] > even.gpu_weights[0]


def test_split_mode_none_puts_everything_on_the_main_gpu(qwen3moe):
    two = parse_gpu_spec("rtx4090x2")
    parts = parts_of(qwen3moe, two, ctx_size=8192, split_mode="none", main_gpu="1")
    assert parts.placement.gpu_weights[0] == 0 and parts.placement.gpu_kv[0] == 0 and parts.gpu_compute[0] == 0
    assert parts.placement.gpu_layers == (0, 49) and parts.worst == 1
    with pytest.raises(UsageError, match="main-gpu"):
        parts_of(qwen3moe, two, ctx_size=8192, split_mode="none", main_gpu="2")


# ---- a placement the user set: no --fit margin (llamacpp.md#llamacpp-user-placement) ------------------------------


@pytest.mark.parametrize("placement", [{"ngl": "99"}, {"ot": "exps=CPU"}, {"n-cpu-moe": "4"}])
def test_a_user_placement_with_a_set_context_loads_up_to_the_whole_device(qwen3moe, placement):
    gpu = parse_gpu_spec("rtx4090")
    memory = gpu.gpu.gpu_memory_bytes
    asked = estimate(qwen3moe, gpu, EngineChoice("llama.cpp", settings={"ctx-size": "8192"}), Workload())
    assert asked.per_gpu.usable == memory - 1024 * MiB  # --fit may place: it keeps 1 GiB free
    placed = estimate(qwen3moe, gpu, EngineChoice("llama.cpp", settings={"ctx-size": "8192", **placement}), Workload())
    assert placed.per_gpu.usable == memory  # --fit aborts: loaded as asked
    assert not any("--fit would not load" in warning for warning in placed.warnings)
    # context unset: --fit's context step runs before it aborts, so the margin still binds
    unset = estimate(qwen3moe, gpu, EngineChoice("llama.cpp", settings=placement), Workload())
    assert unset.per_gpu.usable == memory - 1024 * MiB


def test_tensor_split_and_row_count_as_placements_only_on_several_gpus(qwen3moe):
    one, two = parse_gpu_spec("rtx4090"), parse_gpu_spec("rtx4090x2")
    settings = {"ctx-size": "8192", "ts": "1,1"}
    assert estimate(qwen3moe, one, EngineChoice("llama.cpp", settings=settings), Workload()).per_gpu.usable == (
        one.gpu.gpu_memory_bytes - 1024 * MiB
    )
    assert estimate(qwen3moe, two, EngineChoice("llama.cpp", settings=settings), Workload()).per_gpu.usable == (
        two.gpu.gpu_memory_bytes
    )
    row = {"ctx-size": "8192", "sm": "row"}
    assert estimate(qwen3moe, two, EngineChoice("llama.cpp", settings=row), Workload()).per_gpu.usable == (
        two.gpu.gpu_memory_bytes
    )


# ---- a quantized KV cache: F16 dequantization scratch (llamacpp.md#llamacpp-kv-dequant-scratch) --------------------


def test_a_quantized_cache_adds_f16_copies_of_the_largest_layers_views_from_build_9461():
    """llama.cpp PR #23907 (first in b9461; b9460 lacks it, b9501 has it: llama.cpp#24135): CUDA flash attention
    reserves F16 copies of the quantized K / V views, sized by the allocated cells (llama.cpp#24166). Qwen3.5-27B
    (fixture config: full-attention layers with 4 KV heads × 256) at 262144 cells and q8_0: 2 B × 262144 × (1024 +
    1024) = 1 GiB on top of the f16 buffer; Unsloth's measurement on a model with the same 1024-wide K / V rows
    (unsloth#6718: Qwen3.5-4B at 256k, 1.30 GiB compute at q8_0 vs 0.31 GiB at f16) is +0.99 GiB."""
    import json

    from hfvram.engines.llamacpp.compute import compute_buffer_bytes
    from hfvram.readers.config import read_config

    config = json.loads((ROOT / "fixtures" / "hub" / "Qwen" / "Qwen3.5-27B" / "config.json").read_text())
    spec = read_config(config)

    def compute(**values: str) -> int:
        choice = EngineChoice("llama.cpp", settings={"ctx-size": "262144", "np": "1", "fa": "on", **values})
        _, constants, consts = llamacpp.constants_for(choice)
        return compute_buffer_bytes(spec, resolve_settings(spec, choice, Workload(), constants), consts)[0]

    f16 = compute(build="9461")
    q8 = compute(build="9461", ctk="q8_0", ctv="q8_0")
    assert q8 - f16 == 2 * 262144 * (1024 + 1024)
    # K alone quantized: only K is copied
    assert compute(build="9461", ctk="q8_0") - f16 == 2 * 262144 * 1024
    # before the change (and without a build, the older rules): the scratch was a transient pool allocation
    assert compute(build="9460", ctk="q8_0", ctv="q8_0") == compute(build="9460")
    assert compute(ctk="q8_0", ctv="q8_0") == compute()


# ---- pipeline parallelism: scheduler input copies (llamacpp.md#llamacpp-pipeline-parallel) ------------------------


def test_pipeline_parallelism_pins_four_copies_of_the_masks_on_every_gpu():
    """unsloth#7637 (Kimi-K3 UD-IQ1_M at 1M context on 4 GPUs, -sm layer): llama.cpp allocated 4.0 GiB of compute
    per device, 4 × the f16 KQ mask (1048576 cells × ubatch 512 × 2 B = 1 GiB), because pipeline parallelism keeps
    GGML_SCHED_MAX_COPIES = 4 copies of every graph input. Kimi-K2 (fixture config, the same MLA attention; Kimi-K3
    is not in the fixtures) at the same context: 4.37 GiB per device (hfvram before: 1.37 GiB, −69 %), the mask
    counted once on one GPU and with a tensor override (no pipeline parallelism: the ik_llama.cpp#514 2-GPU log's
    1080 MiB per device is held by tests/test_engine_llamacpp.py)."""
    import json

    from hfvram.readers.config import read_config

    config = json.loads((ROOT / "fixtures" / "hub" / "moonshotai" / "Kimi-K2-Instruct" / "config.json").read_text())
    spec = read_config(config)
    settings = {"ctx-size": "1048576", "np": "1", "fa": "on"}
    four = parts_of(spec, parse_gpu_spec("h200x4"), **settings)
    one = parts_of(spec, parse_gpu_spec("h200"), **settings)
    mask = 1048576 * 512 * 2
    assert four.settings.sched_copies == 4 and one.settings.sched_copies == 1
    assert all(size == pytest.approx(4.0 * 1024 * MiB, rel=0.12) for size in four.gpu_compute)  # 4.37-4.41 GiB
    assert four.gpu_compute[0] - one.gpu_compute[0] == pytest.approx(3 * mask, rel=0.01)
    # an override (here: the experts of the first block in RAM) turns pipeline parallelism off
    overridden = parts_of(spec, parse_gpu_spec("h200x4"), **settings, ncmoe="1")
    assert overridden.settings.sched_copies == 1
    assert overridden.gpu_compute[1] == pytest.approx(one.gpu_compute[0], rel=0.01)


# ---- other GGUFs on the line (llamacpp.md#llamacpp-extra-models) -------------------------------------------------


def test_a_draft_model_and_a_projector_are_named_not_passed_over(qwen3moe):
    from hfvram.estimate.engine_args import parse_engine_args

    line = "llama-server -m main.gguf -md draft.gguf -mm mmproj-F16.gguf -c 8192"
    parsed = parse_engine_args(line)
    assert parsed.settings.get("model-draft") == "draft.gguf" and parsed.settings.get("mmproj") == "mmproj-F16.gguf"
    result = estimate(
        qwen3moe, parse_gpu_spec("rtx4090"), EngineChoice("llama.cpp", settings=dict(parsed.settings)), Workload()
    )
    assert any(w.startswith("--model-draft draft.gguf: the draft model's weights") for w in result.warnings)
    assert any(w.startswith("--mmproj mmproj-F16.gguf: the vision projector's") for w in result.warnings)
    plain = estimate(qwen3moe, parse_gpu_spec("rtx4090"), EngineChoice("llama.cpp", settings={"c": "8192"}), Workload())
    assert not any("not counted" in w for w in plain.warnings)
