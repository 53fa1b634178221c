"""safetensors header reader: the real all-MiniLM-L6-v2 header, crafted headers, shards, packed formats.

Source of the real header: fixtures/README.md, headers/ row
"sentence-transformers--all-MiniLM-L6-v2--model.safetensors-header" (complete file 90,868,376 bytes).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from hfvram.errors import MalformedFileError
from hfvram.readers.safetensors import (
    MAX_HEADER_BYTES,
    TensorInfo,
    file_reader,
    header_length,
    merge_shards,
    parse_header,
    parse_header_full,
    read_safetensors_header,
    read_safetensors_header_full,
    read_sharded_headers,
    shard_files,
    weights_from_tensors,
)
from hfvram.readers.tensors import hf_component, params_active
from hfvram.spec import Layer, LayerKind, ModelSpec, Quantization

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MINILM = FIXTURES / "headers" / "sentence-transformers--all-MiniLM-L6-v2--model.safetensors-header"


def header_bytes(table: dict) -> bytes:
    raw = json.dumps(table).encode()
    return struct.pack("<Q", len(raw)) + raw


def table(*entries: tuple[str, str, list[int]]) -> dict:
    """A valid JSON tensor table with contiguous data offsets."""
    from hfvram.readers.tensors import tensor_nbytes

    out: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in entries:
        size = tensor_nbytes(dtype, shape)
        out[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    return out


def reader_of(data: bytes):
    return lambda offset, length: data[offset : offset + length]


# ---- the real header ----------------------------------------------------------------------------


def test_minilm_real_header_gives_exact_file_size_and_params():
    header = read_safetensors_header_full(file_reader(MINILM), filename=MINILM.name)
    assert len(header.tensors) == 104
    assert header.metadata == {"format": "pt"}
    assert header.header_length == 11408
    # SOURCES.md: 8 + header_len + max(data_offsets end) == full file size, 90,868,376 bytes
    assert header.file_size == 90_868_376
    weights = weights_from_tensors(header.tensors.values(), source=MINILM.name)
    assert weights.exact and weights.num_tensors == 104
    assert weights.total_bytes == 90_868_376 - 8 - 11408
    assert weights.bytes_by_dtype == {"F32": 90_852_864, "I64": 4096}
    # all-MiniLM-L6-v2 is the 22.7M-parameter model; the I64 position_ids buffer is not a parameter
    assert weights.params_total == 22_713_216
    assert sum(weights.bytes_by_component.values()) == weights.total_bytes
    # word + position + token-type embeddings (config.json: vocab 30522, 512 positions, 2 types, hidden 384)
    # plus the 512 × I64 position_ids buffer stored beside them
    assert weights.bytes_by_component["embeddings"] == (30522 + 512 + 2) * 384 * 4 + 512 * 8


def test_minilm_components_follow_bert_names():
    tensors = read_safetensors_header(file_reader(MINILM), filename=MINILM.name)
    assert hf_component("encoder.layer.0.attention.self.query.weight") == "attention"
    assert hf_component("encoder.layer.0.attention.output.dense.weight") == "attention"
    assert hf_component("encoder.layer.0.intermediate.dense.weight") == "mlp"
    assert hf_component("encoder.layer.0.output.LayerNorm.weight") == "norms"
    assert {hf_component(n) for n in tensors} == {"embeddings", "attention", "mlp", "norms", "other"}


# ---- header length ------------------------------------------------------------------------------


def test_header_length_limits():
    assert header_length(struct.pack("<Q", 11408), filename="f", available=11416) == 11408
    with pytest.raises(MalformedFileError, match="100 MB"):
        header_length(struct.pack("<Q", MAX_HEADER_BYTES + 1), filename="f")
    with pytest.raises(MalformedFileError, match="available"):
        header_length(struct.pack("<Q", 5000), filename="f", available=1000)
    with pytest.raises(MalformedFileError, match="too short"):
        header_length(b"\x01\x02", filename="f")
    with pytest.raises(MalformedFileError) as info:
        header_length(struct.pack("<Q", 1 << 62), filename="model.safetensors")
    assert info.value.file == "model.safetensors" and info.value.field == "header length"


def test_truncated_header_is_malformed():
    data = header_bytes(table(("a.weight", "BF16", [4, 4])))
    with pytest.raises(MalformedFileError, match="truncated"):
        read_safetensors_header(reader_of(data[:-3]), filename="t.safetensors")


# ---- malformed JSON tables ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, field",
    [
        (b"\xff\xfe{}", "header"),  # not UTF-8
        (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {}}', "a"),  # duplicate key
        (b'{"a": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}}', "a.dtype"),  # unknown dtype
        (b'{"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}', "a.shape"),  # negative
        (b'{"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}}', "a.shape"),  # non-int
        (b'{"a": {"dtype": "F32", "shape": [true], "data_offsets": [0, 4]}}', "a.shape"),  # bool
        (
            b'{"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 4]}}',
            "a.shape",
        ),  # overflowing
        (b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}', "a.data_offsets"),  # mismatch
        (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}', "a.data_offsets"),
        (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', "a.data_offsets"),  # gap at 0
        (b'{"a": {"dtype": "F32", "shape": [1]}}', "a"),  # missing key
        (b'{"a": [1, 2]}', "a"),
        (b"[1, 2]", "header"),
        (b'{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}', "header"),
        (b'{"__metadata__": {"k": 1}}', "__metadata__"),
        (b"[" * 100_000, "header"),  # deeply nested
    ],
)
def test_malformed_tables_name_the_field(raw, field):
    with pytest.raises(MalformedFileError) as info:
        parse_header(raw, filename="bad.safetensors")
    assert info.value.file == "bad.safetensors"
    assert info.value.field == field


ENTRY = '{"shape": [1], "dtype": "F32", "data_offsets": [0, 4]}'
AS_READ = str(json.loads(ENTRY))  # (an error quotes a bad value as Python prints the parsed value)


@pytest.mark.parametrize(
    "raw, field, said",
    [
        (ENTRY, "shape", "tensor entry is not an object"),  # the whole header is one entry: "shape" is a tensor
        ('{"a": {"dtype": "F32", "shape": ' + ENTRY + ', "data_offsets": [0, 4]}}', "a.shape", f"got {AS_READ}"),
        ('{"a": {"dtype": [' + ENTRY + '], "shape": [1], "data_offsets": [0, 4]}}', "a.dtype", f"[{AS_READ}"[:40]),
        ('{"__metadata__": ' + ENTRY + "}", "__metadata__", "must map strings to strings"),
        ('{"__metadata__": {"k": ' + ENTRY + "}}", "__metadata__", "must map strings to strings"),
    ],
)
def test_an_entry_where_no_tensor_entry_belongs_is_refused_as_before(raw, field, said):
    """Valid tensor entries are checked while the JSON is parsed (a 262,144-tensor header's per-entry dicts cost
    ~110 MB): one found anywhere else is refused as before, and quoted as the parsed value reads."""
    with pytest.raises(MalformedFileError) as info:
        parse_header(raw.encode(), filename="bad.safetensors")
    assert info.value.field == field and said in str(info.value), str(info.value)


def test_padding_spaces_after_json_are_accepted():
    raw = json.dumps(table(("w", "F16", [2, 3]))).encode() + b"    "
    assert parse_header(raw, filename="p")["w"].nbytes == 12


# ---- sharded checkpoints ------------------------------------------------------------------------


def test_sharded_headers_merge_and_reject_duplicates(tmp_path):
    shard_a = header_bytes(table(("model.embed_tokens.weight", "BF16", [10, 8])))
    shard_b = header_bytes(
        table(("model.layers.0.self_attn.q_proj.weight", "BF16", [8, 8]), ("lm_head.weight", "BF16", [10, 8]))
    )
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(shard_a)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(shard_b)
    index = {
        "metadata": {"total_size": 160 + 128 + 160},
        "weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "model.layers.0.self_attn.q_proj.weight": "model-00002-of-00002.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors",
        },
    }
    assert shard_files(index) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    merged = read_sharded_headers(index, lambda name: file_reader(tmp_path / name))
    weights = weights_from_tensors(merged.values())
    assert weights.total_bytes == index["metadata"]["total_size"]
    assert weights.bytes_by_component == {"embeddings": 160, "attention": 128, "lm_head": 160}
    a = parse_header(shard_a[8:], filename="a")
    with pytest.raises(MalformedFileError, match="both"):
        merge_shards({"x.safetensors": a, "y.safetensors": a})
    with pytest.raises(MalformedFileError):
        shard_files({"weight_map": {"t": "../../etc/passwd"}})
    with pytest.raises(MalformedFileError):
        shard_files({"weight_map": {}})


# ---- packed formats: parameters unpacked, scales not parameters ---------------------------------


def test_gptq_packed_int32_unpacks_to_eight_weights_each():
    # GPTQ layout (docs/engines/common.md#hf-quant-formats): qweight int32 [in/8, out], qzeros [in/g, out/8], scales [in/g, out]
    n_in, n_out, g = 4096, 4096, 128
    tensors = [
        TensorInfo("model.layers.0.self_attn.q_proj.qweight", "I32", (n_in // 8, n_out), n_in // 8 * n_out * 4),
        TensorInfo(
            "model.layers.0.self_attn.q_proj.qzeros", "I32", (n_in // g, n_out // 8), n_in // g * n_out // 8 * 4
        ),
        TensorInfo("model.layers.0.self_attn.q_proj.scales", "F16", (n_in // g, n_out), n_in // g * n_out * 2),
        TensorInfo("model.layers.0.self_attn.q_proj.g_idx", "I32", (n_in,), n_in * 4),
    ]
    weights = weights_from_tensors(tensors, quantization=Quantization(method="gptq", bits=4, group_size=128))
    assert weights.params_total == n_in * n_out
    # docs/engines/common.md#hf-quant-formats: in·out·bits/8 + (in/g)·out·(2 + bits/8) + 4·in
    assert weights.total_bytes == n_in * n_out // 2 + (n_in // g) * n_out * 2.5 + 4 * n_in


def test_mxfp4_blocks_nvfp4_bnb_and_fp8_scales():
    tensors = [
        # MXFP4: *_blocks uint8 [E, out, in/32, 16] hold two weights per byte; *_scales are not parameters
        TensorInfo("model.layers.0.mlp.experts.gate_up_proj_blocks", "U8", (2, 64, 4, 16), 2 * 64 * 4 * 16),
        TensorInfo("model.layers.0.mlp.experts.gate_up_proj_scales", "U8", (2, 64, 4), 2 * 64 * 4),
        # NVFP4 (ModelOpt): U8 weight packed 2 per byte + F8 weight_scale + F32 weight_scale_2
        TensorInfo("model.layers.0.mlp.down_proj.weight", "U8", (64, 32), 64 * 32),
        TensorInfo("model.layers.0.mlp.down_proj.weight_scale", "F8_E4M3", (64, 4), 256),
        TensorInfo("model.layers.0.mlp.down_proj.weight_scale_2", "F32", (), 4),
        TensorInfo("model.layers.0.mlp.down_proj.input_scale", "F32", (), 4),
        # bitsandbytes 4-bit: packed uint8 + absmax / quant_map / quant_state
        TensorInfo("model.layers.0.mlp.up_proj.weight", "U8", (2048, 1), 2048),
        TensorInfo("model.layers.0.mlp.up_proj.weight.absmax", "F32", (64,), 256),
        TensorInfo("model.layers.0.mlp.up_proj.weight.quant_map", "F32", (16,), 64),
        TensorInfo("model.layers.0.mlp.up_proj.weight.quant_state.bitsandbytes__nf4", "U8", (100,), 100),
        # FP8 block scaled
        TensorInfo("model.layers.0.self_attn.q_proj.weight", "F8_E4M3", (256, 256), 65536),
        TensorInfo("model.layers.0.self_attn.q_proj.weight_scale_inv", "F32", (2, 2), 16),
    ]
    weights = weights_from_tensors(tensors)
    assert weights.params_by_component["experts"] == 2 * 64 * 4 * 32
    assert weights.params_by_component["mlp"] == 64 * 64 + 4096
    assert weights.params_by_component["attention"] == 65536
    assert weights.total_bytes == sum(t.nbytes for t in tensors)


def test_moe_components_and_active_params():
    tensors = (
        [
            TensorInfo("model.embed_tokens.weight", "BF16", (100, 16), 3200),
            TensorInfo("model.layers.0.mlp.gate.weight", "BF16", (8, 16), 256),
            TensorInfo("model.layers.0.mlp.shared_experts.up_proj.weight", "BF16", (32, 16), 1024),
        ]
        + [
            TensorInfo(f"model.layers.0.mlp.experts.{e}.{p}.weight", "BF16", (32, 16), 1024)
            for e in range(8)
            for p in ("gate_proj", "up_proj", "down_proj")
        ]
        + [TensorInfo("model.layers.1.self_attn.q_proj.weight", "BF16", (16, 16), 512)]
    )  # layer 1 = MTP
    weights = weights_from_tensors(tensors, num_layers=1)
    assert weights.params_by_component == {
        "embeddings": 1600,
        "mlp": 512,
        "experts": 8 * 3 * 512,
        "router": 128,
        "mtp": 256,
    }
    spec = ModelSpec(
        architecture="X",
        model_type="x",
        dtype="bfloat16",
        num_layers=1,
        layers=(Layer(LayerKind.FULL, 1, 16, 16, moe=True),),
        num_experts=8,
        experts_per_token=2,
    )
    # total − experts × (1 − k/E)
    assert params_active(weights, spec) == weights.params_total - 8 * 3 * 512 * 6 // 8
    assert params_active(tensors, spec) == params_active(weights, spec)
    unknown = ModelSpec(architecture="X", model_type="x", dtype=None, num_layers=1, layers=())
    assert params_active(weights, unknown) is None


@pytest.mark.parametrize(
    "name, component",
    [
        ("model.embed_tokens.weight", "embeddings"),
        ("transformer.wte.weight", "embeddings"),
        ("model.layers.3.self_attn.kv_a_proj_with_mqa.weight", "attention"),
        ("model.layers.3.self_attn.indexer.wk.weight", "attention"),
        ("model.layers.3.mlp.gate_proj.weight", "mlp"),
        ("model.layers.3.block_sparse_moe.experts.7.w1.weight", "experts"),
        ("model.layers.3.block_sparse_moe.gate.weight", "router"),
        ("model.layers.3.mlp.router.weight", "router"),
        ("model.layers.3.mlp.gate.e_score_correction_bias", "router"),
        ("model.layers.3.mlp.shared_experts.down_proj.weight", "mlp"),
        ("model.layers.3.input_layernorm.weight", "norms"),
        ("model.norm.weight", "norms"),
        ("lm_head.weight", "lm_head"),
        ("vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", "vision"),
        ("multi_modal_projector.mm_input_projection_weight", "vision"),
        ("model.visual.blocks.0.attn.qkv.weight", "vision"),
        ("mtp.layers.0.mlp.experts.0.up_proj.weight", "mtp"),
    ],
)
def test_component_names(name, component):
    assert hf_component(name, num_layers=61) == component


def test_deepseek_layers_past_num_hidden_layers_are_mtp():
    assert hf_component("model.layers.61.eh_proj.weight", num_layers=61) == "mtp"
    assert hf_component("model.layers.60.self_attn.o_proj.weight", num_layers=61) == "attention"


def test_full_header_file_size_of_crafted_file():
    data = header_bytes(table(("a", "F32", [3]), ("b", "BF16", [5])))
    header = read_safetensors_header_full(reader_of(data), filename="c")
    assert header.file_size == len(data) + 12 + 10
    assert parse_header_full(data[8:], filename="c").metadata == {"format": "pt"}


# ---- the DERIVED header-only fixtures (scripts/make_safetensors_fixtures.py) --------------------

HUB = FIXTURES / "hub"


@pytest.mark.parametrize(
    "repo, shards",
    [
        ("google/gemma-2-9b-it", 4),
        ("meta-llama/Llama-3.1-8B-Instruct", 4),
        ("Qwen/Qwen3-30B-A3B", 16),
        ("openai/gpt-oss-20b", 3),
    ],
)
def test_derived_sharded_fixtures_read_back(repo, shards):
    folder = HUB / repo
    assert "DERIVED" in (folder / "DERIVED.md").read_text()
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(shard_files(index)) == shards
    tensors = read_sharded_headers(index, lambda name: file_reader(folder / name))
    assert set(tensors) == set(index["weight_map"])
    weights = weights_from_tensors(tensors.values())
    if repo == "google/gemma-2-9b-it":  # real index (SOURCES.md): total_size 18,483,411,968
        assert abs(weights.total_bytes - index["metadata"]["total_size"]) / index["metadata"]["total_size"] < 0.01
    else:  # derived index: total_size is the derived sum
        assert weights.total_bytes == index["metadata"]["total_size"]


def test_derived_gptq_single_file_fixture():
    path = HUB / "TheBloke" / "Llama-2-13B-chat-GPTQ" / "model.safetensors"
    header = read_safetensors_header_full(file_reader(path), filename=path.name)
    assert header.header_length % 8 == 0
    weights = weights_from_tensors(header.tensors.values(), quantization=Quantization("gptq", bits=4, group_size=128))
    assert 13.0e9 < weights.params_total < 13.1e9  # packed int32 qweight unpacked, 8 weights each
    assert weights.bytes_by_dtype["I32"] > weights.bytes_by_dtype["F16"]


# ---- issue 17 cases 9 and 10: hostile headers and parameter counts, through the real CLI and the facts ---------

LLAMA_CONFIG = FIXTURES / "hub" / "meta-llama" / "Llama-3.1-8B-Instruct" / "config.json"


def _model_with_header(tmp_path: Path, header: bytes) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_bytes(LLAMA_CONFIG.read_bytes())
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return folder


@pytest.mark.parametrize(
    ("header", "said"),
    [
        (b'{"a": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]}, "\xff": 1}', "not UTF-8"),
        (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
        (b'{"a": {"dtype": "F16", "shape": [1' + b"0" * 5000 + b'], "data_offsets": [0, 2]}}', "not valid JSON"),
    ],
    ids=["bad-utf8", "100k-deep", "5000-digits"],
)
def test_hostile_local_header_is_one_line_exit_3(tmp_path, header, said):
    from cli_support import run_hfvram

    result = run_hfvram("check", str(_model_with_header(tmp_path, header)), "--gpu", "h100", timeout=120)
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "model.safetensors" in lines[0], result.stderr
    assert "internal error" not in result.stderr


@pytest.mark.parametrize("header", [b"{}", b'{"__metadata__": {"format": "pt"}}'], ids=["empty", "metadata-only"])
def test_header_without_tensors_never_fits(tmp_path, header):
    """A header ``{}`` used to give 0 parameters, 0 bytes and FITS; the weights are now unknown (exit 3)."""
    from cli_support import run_hfvram

    result = run_hfvram("check", str(_model_with_header(tmp_path, header)), "--gpu", "h100", timeout=120)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "FITS" not in result.stdout and "weights unknown" in result.stderr
    assert "list no tensors" in result.stderr


@pytest.mark.parametrize(
    ("counts", "said"),
    [
        ({"BF16": -8783}, "expected a number >= 0"),
        ({"BF16": 8_030_261_248, "F32": -1}, "expected a number >= 0"),
        ({"BF16": True}, "expected a whole number"),
        ({"BF16": 10**30}, "implausible"),
    ],
)
def test_hostile_hub_parameter_counts_are_refused(counts, said):
    """The Hub's model info ``safetensors.parameters`` is untrusted: a negative count printed
    'FITS (−8783 % of usable memory)' before."""
    from hfvram.sources.facts import CheckpointFacts, spec_from_facts

    with pytest.raises(MalformedFileError, match=said) as caught:
        spec_from_facts(CheckpointFacts(LLAMA_CONFIG.read_text(), dtype_parameters=counts))
    assert caught.value.file == "Hub model info" and caught.value.field.startswith("safetensors.parameters.")


def test_hub_parameter_counts_summing_to_zero_leave_weights_unknown():
    from hfvram.estimate.common import WeightsUnknownError, require_weights
    from hfvram.sources.facts import CheckpointFacts, spec_from_facts

    spec = spec_from_facts(CheckpointFacts(LLAMA_CONFIG.read_text(), dtype_parameters={"BF16": 0}))
    assert spec.weights is None
    with pytest.raises(WeightsUnknownError, match="sum to 0"):
        require_weights(spec)


def test_real_hub_parameter_counts_still_size_the_weights():
    """Llama-3.1-8B: 8,030,261,248 BF16 parameters (the Hub's count for meta-llama/Llama-3.1-8B-Instruct)."""
    from hfvram.sources.facts import CheckpointFacts, spec_from_facts

    spec = spec_from_facts(CheckpointFacts(LLAMA_CONFIG.read_text(), dtype_parameters={"BF16": 8_030_261_248}))
    assert spec.weights is not None and spec.weights.total_bytes == 2 * 8_030_261_248


@pytest.mark.parametrize(
    "metadata",
    [
        {"total_size": 10**400},
        {"total_size": -5},
        {"total_size": 1e300},
        {"total_size": 16, "total_parameters": 10**30},
    ],
)
def test_hostile_index_totals_are_refused(metadata):
    """An index total_size of 10^400 ended in 'internal error: OverflowError' when printed in GiB."""
    from hfvram.sources.facts import CheckpointFacts, spec_from_facts

    with pytest.raises(MalformedFileError) as caught:
        spec_from_facts(CheckpointFacts(LLAMA_CONFIG.read_text(), index_metadata=metadata))
    assert caught.value.file == "model.safetensors.index.json" and caught.value.field.startswith("metadata.")


def test_real_index_total_still_sizes_the_weights():
    """Llama-3.1-8B-Instruct's index (fixtures/hub): metadata.total_size 16,060,522,496."""
    from hfvram.sources.facts import CheckpointFacts, spec_from_facts

    index = json.loads((LLAMA_CONFIG.parent / "model.safetensors.index.json").read_text())
    spec = spec_from_facts(CheckpointFacts(LLAMA_CONFIG.read_text(), index_metadata=index["metadata"]))
    assert spec.weights is not None and spec.weights.total_bytes == index["metadata"]["total_size"] == 16_060_522_496
