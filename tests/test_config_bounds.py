"""Hostile counts in a config.json: one validation pass (hfvram/readers/bounds.py, bounds in
hfvram/data/bounds.toml) refuses them, naming the field, before transformers' config classes or the shape builder
iterate over them. The hostile files are written at test time; the real configs come from fixtures/hub (sources
in fixtures/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run_hfvram

from hfvram.datafiles import data_table
from hfvram.errors import MalformedFileError
from hfvram.readers.bounds import config_bounds, validate_config
from hfvram.readers.config import load_json_tolerant, read_config, read_config_files
from hfvram.readers.shapes import derive_warnings, derived_weights, tensors_from_spec

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
LAYERS_MAX = data_table("bounds.toml")["config"]["layers"]["maximum"]
#: a small dense text model, every field a real config states (Llama-3.1-8B's, fixtures/hub)
LLAMA = json.loads((HUB / "meta-llama" / "Llama-3.1-8B-Instruct" / "config.json").read_text())


def small(model_type: str, **extra: object) -> dict:
    base = {
        "model_type": model_type,
        "architectures": ["X"],
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "num_hidden_layers": 2,
        "torch_dtype": "bfloat16",
        "sliding_window": 1024,
    }
    return {**base, **extra}


def folder(tmp_path: Path, config: dict | str) -> Path:
    target = tmp_path / "model"
    target.mkdir()
    (target / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return target


def refused(config: dict, field: str, *, use_transformers: bool = True) -> str:
    with pytest.raises(MalformedFileError) as caught:
        read_config(config, use_transformers=use_transformers)
    assert caught.value.field == field, str(caught.value)
    return str(caught.value)


# ---- issue 17 case 1: num_hidden_layers 1e12 through transformers' config classes ----------------------------


@pytest.mark.parametrize("model_type", ["qwen3", "qwen2", "gemma2", "gemma3_text", "gpt_oss", "cohere2"])
def test_one_line_config_with_1e12_layers_is_one_line_exit_3(tmp_path, model_type):
    """The one-line config of the report: before the fix transformers built a 10^12-entry layer_types list (still
    growing at 6.4 GiB after 10 minutes). The timeout is a guard, not an assertion on time."""
    config = f'{{"model_type": "{model_type}", "num_hidden_layers": 1000000000000}}'
    result = run_hfvram("check", str(folder(tmp_path, config)), "--gpu", "rtx4090", timeout=120)
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "num_hidden_layers" in lines[0] and "implausible" in lines[0], result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


@pytest.mark.parametrize("model_type", ["qwen3", "qwen2", "gemma2", "gemma3_text", "gpt_oss", "cohere2"])
def test_1e12_layers_refused_before_transformers(model_type):
    message = refused({"model_type": model_type, "num_hidden_layers": 10**12}, "num_hidden_layers")
    assert f"{LAYERS_MAX:,}" in message


def test_transformers_is_never_given_unbounded_counts():
    """config_hf refuses such a config itself (defence in depth: read_config checks first)."""
    from hfvram.readers.config_hf import load_hf_config

    hf = load_hf_config({"model_type": "qwen3", "num_hidden_layers": 10**12})
    assert not hf.ok and "num_hidden_layers" in (hf.failure or "")


# ---- every bounded count, at any depth ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"num_hidden_layers": 10**9}, "num_hidden_layers"),
        ({"num_nextn_predict_layers": 10**9}, "num_nextn_predict_layers"),
        ({"num_mtp_layers": 10**9}, "num_mtp_layers"),
        ({"mtp_num_hidden_layers": 10**9}, "mtp_num_hidden_layers"),
        ({"num_attention_heads": 10**9}, "num_attention_heads"),
        ({"num_key_value_heads": 10**9}, "num_key_value_heads"),
        ({"head_dim": 10**9}, "head_dim"),
        ({"hidden_size": 10**9}, "hidden_size"),
        ({"intermediate_size": 10**12}, "intermediate_size"),
        ({"vocab_size": 10**12}, "vocab_size"),
        ({"max_position_embeddings": 10**15}, "max_position_embeddings"),
        ({"sliding_window": 10**15}, "sliding_window"),
        ({"num_local_experts": 10**9, "num_experts_per_tok": 2}, "num_local_experts"),
        (
            {"vision_config": {"model_type": "siglip_vision_model", "num_hidden_layers": 10**9}},
            "vision_config.num_hidden_layers",
        ),
        ({"text_config": {"num_hidden_layers": 10**12}}, "text_config.num_hidden_layers"),
        ({"layer_types": ["full_attention"] * (LAYERS_MAX + 1)}, "layer_types"),
        ({"num_hidden_layers": 1e200}, "num_hidden_layers"),
        ({"num_hidden_layers": 10**400}, "num_hidden_layers"),
        ({"num_hidden_layers": float("inf")}, "num_hidden_layers"),
        ({"num_hidden_layers": float("nan")}, "num_hidden_layers"),
        ({"num_hidden_layers": -1}, "num_hidden_layers"),
        ({"num_hidden_layers": 2.5}, "num_hidden_layers"),
        ({"num_hidden_layers": "1e12"}, "num_hidden_layers"),
        ({"sliding_window": -5}, "sliding_window"),
    ],
)
@pytest.mark.parametrize("model_type", ["qwen3", "gemma2", "deepseek_v3"])
def test_hostile_count_names_its_field(extra, field, model_type):
    message = refused(small(model_type, **extra), field)
    assert len(message.splitlines()) == 1 and len(message) < 300, message


def test_huge_integer_is_not_echoed_whole():
    message = refused(small("llama", num_hidden_layers=10**400), "num_hidden_layers")
    assert "401-digit integer" in message and "1000000000" not in message


def test_expert_instances_over_all_layers_are_bounded():
    """65,536 experts pass alone; in each of 10,000 layers they would be 655 million derived expert instances."""
    config = small(
        "qwen3_moe", num_experts=65_536, num_experts_per_tok=8, moe_intermediate_size=64, num_hidden_layers=10_000
    )
    message = refused(config, "num_experts")
    assert "expert instances" in message


def test_every_real_config_passes_the_bounds():
    """The bounds are plausibility bounds: no real config of the corpus comes near them."""
    configs = sorted(HUB.glob("*/*/config.json"))
    assert len(configs) > 30
    for path in configs:
        validate_config(json.loads(path.read_text()), filename=str(path))


def test_bounds_table_names_every_alias_of_the_reader():
    """Every count alias the reader reads (data/config_rules.toml) has a bound."""
    rules = data_table("config_rules.toml")["aliases"]
    for fact in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "intermediate_size"):
        for key in rules[fact]:
            assert key in config_bounds(), (fact, key)
    for fact in ("vocab_size", "max_position_embeddings", "num_experts", "num_shared_experts", "num_mtp_layers"):
        for key in rules[fact]:
            if key != "embedding_size":
                assert key in config_bounds(), (fact, key)


# ---- issue 17 case 4: the shape builder on large counts -------------------------------------------------------


def test_many_experts_with_an_exclusion_naming_one_are_counted_not_built_one_by_one():
    """65,536 experts (within the bound) in 4 layers, with a quantization exclusion that names one expert: the
    experts are grouped (counted like expert 0, said in a warning) instead of 262,144 experts built one by one."""
    config = small(
        "qwen3_moe",
        num_hidden_layers=4,
        num_experts=65_536,
        num_experts_per_tok=8,
        moe_intermediate_size=64,
        quantization_config={
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": ["model.layers.0.mlp.experts.5.up_proj"],
        },
    )
    spec = read_config(config, use_transformers=False)
    weights = derived_weights(spec)
    assert weights is not None
    # per layer: 65,536 experts × 3 projections of 64×256 FP8 elements (+ block scales)
    assert weights.params_total > 4 * 65_536 * 3 * 64 * 256
    assert any("counted like expert 0" in w for w in derive_warnings(spec))


def test_few_experts_with_an_exclusion_are_still_built_one_by_one():
    """Below the budget the exclusion applies to its one expert: that expert stays BF16, its siblings FP8."""
    config = small(
        "qwen3_moe",
        num_hidden_layers=2,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        quantization_config={
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": ["model.layers.0.mlp.experts.5.up_proj"],
        },
    )
    tensors = {t.name: t for t in tensors_from_spec(read_config(config, use_transformers=False))}
    assert tensors["model.layers.0.mlp.experts.5.up_proj.weight"].dtype == "BF16"
    assert tensors["model.layers.0.mlp.experts.4.up_proj.weight"].dtype == "F8_E4M3"
    assert tensors["model.layers.1.mlp.experts.5.up_proj.weight"].dtype == "F8_E4M3"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"num_nextn_predict_layers": 10**9}, "num_nextn_predict_layers"),
        ({"num_mtp_layers": 10**9}, "num_mtp_layers"),
        (
            {"vision_config": {"model_type": "siglip_vision_model", "num_hidden_layers": 10**9}},
            "vision_config.num_hidden_layers",
        ),
        (
            {
                "num_experts": 10**9,
                "num_experts_per_tok": 2,
                "quantization_config": {"quant_method": "fp8", "modules_to_not_convert": ["experts.5"]},
            },
            "num_experts",
        ),
    ],
)
def test_shape_builder_counts_from_the_issue_exit_3(tmp_path, extra, field):
    result = run_hfvram("check", str(folder(tmp_path, small("deepseek_v3", **extra))), "--gpu", "h100", timeout=120)
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], result.stderr


# ---- issue 17 case 9: numbers and bytes JSON cannot hold ------------------------------------------------------


def test_integer_over_the_digit_limit_is_malformed():
    raw = b'{"model_type": "llama", "num_hidden_layers": 1' + b"0" * 5000 + b"}"
    with pytest.raises(MalformedFileError, match=r"more than \d+ digits"):
        load_json_tolerant(raw, "config.json")


def test_deep_json_is_malformed():
    raw = b'{"model_type": "llama", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(MalformedFileError, match="nested too deeply"):
        read_config_files({"config.json": raw})


@pytest.mark.parametrize(
    "text",
    [
        '{"model_type": "llama", "num_hidden_layers": 1' + "0" * 5000 + "}",
        '{"model_type": "llama", "num_hidden_layers": 1e200}',
        '{"model_type": "llama", "num_hidden_layers": 1e400}',
        '{"model_type": "llama", "num_hidden_layers": 1' + "0" * 400 + "}",
        '{"model_type": "llama", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    ],
    ids=["5000-digits", "1e200", "1e400", "10^400", "100k-deep"],
)
def test_hostile_numbers_in_a_local_config_are_one_line(tmp_path, text):
    result = run_hfvram("check", str(folder(tmp_path, text)), "--gpu", "h100", timeout=120)
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hfvram: error: config.json"), result.stderr
    assert "internal error" not in result.stderr and len(lines[0]) < 300


def test_config_that_is_not_utf8_is_one_line(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "config.json").write_bytes(b'{"model_type": "llama", "name": "\xff\xfe"}')
    result = run_hfvram("check", str(target), "--gpu", "h100", timeout=120)
    assert result.returncode == 3 and "not UTF-8" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_legitimate_large_model_at_the_bounds_still_reads():
    """A real config passes unchanged (Llama-3.1-8B), and so does one at the layer bound."""
    assert read_config(dict(LLAMA), use_transformers=False).num_layers == 32
    spec = read_config(small("llama", num_hidden_layers=LAYERS_MAX), use_transformers=False)
    assert spec.num_layers == LAYERS_MAX and len(spec.layers) == LAYERS_MAX


# ---- the same through a (local test) Hub and through scan -----------------------------------------------------


@pytest.fixture
def hostile_hub(tmp_path):
    """The test Hub (tests/hubserver.py, the real huggingface_hub client talks to it) serving repos written now."""
    import struct

    from hubserver import HubFiles, HubServer

    root = tmp_path / "hub"
    layers = root / "evil" / "layers-1e12"
    layers.mkdir(parents=True)
    (layers / "config.json").write_text('{"model_type": "qwen3", "num_hidden_layers": 1000000000000}')
    negative = root / "evil" / "negative-count"
    negative.mkdir(parents=True)
    (negative / "config.json").write_text(json.dumps(LLAMA))
    header = json.dumps({"w": {"dtype": "BF16", "shape": [-8783], "data_offsets": [0, 0]}}).encode()
    (negative / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    server = HubServer(HubFiles(root=root, headers_dir=tmp_path / "no-headers")).start()
    yield server
    server.stop()


def _hub_env(server) -> dict:
    return {"HF_ENDPOINT": server.url, "HFVRAM_HTTP_TIMEOUT": "5", "HFVRAM_RETRY_BASE": "0.02"}


def test_1e12_layers_through_the_hub_is_one_line_exit_3(hostile_hub):
    result = run_hfvram("check", "evil/layers-1e12", "--gpu", "h100", env=_hub_env(hostile_hub), timeout=120)
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "num_hidden_layers" in lines[0] and "implausible" in lines[0], result.stderr


def test_negative_hub_parameter_count_never_fits(hostile_hub):
    """The Hub's model info reports BF16: -8783 for that header; this printed 'FITS (−8783 % of usable memory)'."""
    result = run_hfvram("check", "evil/negative-count", "--gpu", "h100", env=_hub_env(hostile_hub), timeout=120)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "FITS" not in result.stdout
    lines = result.stderr.strip().splitlines()
    # resolver-first (issue 25) reads the header before any model info: its own negative shape is refused first;
    # a model info read first refuses its parameter count; either way one line that names the bad figure
    assert len(lines) == 1 and ("safetensors.parameters" in lines[0] or "invalid shape [-8783]" in lines[0]), lines


def test_scan_reports_the_hostile_config_as_an_error_row_and_finishes(tmp_path):
    hostile = folder(tmp_path, '{"model_type": "gemma2", "num_hidden_layers": 1000000000000}')
    good = HUB / "meta-llama" / "Llama-3.1-8B-Instruct"
    listing = tmp_path / "models.txt"
    listing.write_text(f"{hostile}\n{good}\n")
    result = run_hfvram("scan", str(listing), "--gpu", "h100", "--format", "jsonl", timeout=120)
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert len(rows) == 2, result.stdout + result.stderr
    errors = [row for row in rows if "error" in row]
    assert len(errors) == 1 and errors[0]["source"]["text"] == str(hostile), rows
    assert "num_hidden_layers" in errors[0]["error"]["message"]
    assert [row.get("verdict") for row in rows if "error" not in row] == ["fits"]
