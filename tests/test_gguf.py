"""GGUF header parser and ModelSpec from GGUF, on the three real model headers and crafted files.

Real headers: fixtures/README.md, "headers/" rows (gemma-3-270m Q4_K_M, SmolLM2-135M Q4_1,
DeepSeek-R1-Distill-Qwen-7B Q4_K_M, llama.cpp vocab GGUFs).
"""

from __future__ import annotations

import io
import struct
from functools import cache
from pathlib import Path

import gguf
import numpy as np
import pytest

from hfvram.errors import MalformedFileError
from hfvram.readers.gguf import (
    GGUFHeader,
    SkippedArray,
    gguf_file_size,
    read_gguf_file,
    read_gguf_header,
    spec_from_gguf,
    split_gguf_names,
)
from hfvram.readers.provenance import missing_provenance
from hfvram.spec import LayerKind

HEADERS = Path(__file__).resolve().parent.parent / "fixtures" / "headers"
GEMMA3 = HEADERS / "hugginllam--gemma-3-270m-Q4_K_M-GGUF--gemma-3-270m-q4_k_m.gguf-header.gguf"
SMOLLM2 = HEADERS / "SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf"
R1_7B = HEADERS / "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf-header.gguf"
LLAMA_SPM = HEADERS / "llama.cpp-ggml-vocab-llama-spm.gguf"
PHI3 = HEADERS / "llama.cpp-ggml-vocab-phi-3.gguf"


# ---- a raw GGUF writer for crafted files (independent of the parser) -----------------------------

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {
    U8: "<B",
    I8: "<b",
    U16: "<H",
    I16: "<h",
    U32: "<I",
    I32: "<i",
    F32: "<f",
    BOOL: "<?",
    U64: "<Q",
    I64: "<q",
    F64: "<d",
}


def gguf_string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def gguf_value(vtype: int, value) -> bytes:
    if vtype == STR:
        return gguf_string(value)
    if vtype == ARR:
        item_type, items = value
        return struct.pack("<IQ", item_type, len(items)) + b"".join(gguf_value(item_type, v) for v in items)
    return struct.pack(_FMT[vtype], value)


def gguf_bytes(
    kvs: list[tuple[str, int, object]],
    tensors: list[tuple[str, tuple[int, ...], int]] = (),
    *,
    version: int = 3,
    alignment: int = 32,
) -> bytes:
    """A header-only GGUF: kvs = [(key, value type, value)], tensors = [(name, ggml shape, ggml type)];
    tensor offsets laid out contiguously with alignment padding, as writers do."""
    out = [b"GGUF", struct.pack("<IQQ", version, len(tensors), len(kvs))]
    for key, vtype, value in kvs:
        out += [gguf_string(key), struct.pack("<I", vtype), gguf_value(vtype, value)]
    offset = 0
    for name, shape, gtype in tensors:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(gtype)]
        out += [
            gguf_string(name),
            struct.pack("<I", len(shape)),
            struct.pack(f"<{len(shape)}Q", *shape),
            struct.pack("<IQ", gtype, offset),
        ]
        nbytes = int(np.prod(shape)) // block * size
        offset += nbytes + (-nbytes) % alignment
    return b"".join(out)


def parse(data: bytes, name: str = "t.gguf") -> GGUFHeader:
    return read_gguf_header(io.BytesIO(data), filename=name)


def llama_kvs(arch: str = "llama", layers: int = 2, **extra) -> list:
    kvs = [
        ("general.architecture", STR, arch),
        (f"{arch}.block_count", U32, layers),
        (f"{arch}.embedding_length", U32, 64),
        (f"{arch}.attention.head_count", U32, 4),
        (f"{arch}.context_length", U32, 4096),
        ("general.file_type", U32, 15),
    ]
    return kvs + [(f"{arch}.{k}", t, v) for k, (t, v) in extra.items()]


def block_tensors(layers: int, *, experts: int = 0) -> list:
    tensors = [("token_embd.weight", (64, 100), 1), ("output_norm.weight", (64,), 0)]
    for il in range(layers):
        tensors += [
            (f"blk.{il}.attn_norm.weight", (64,), 0),
            (f"blk.{il}.attn_q.weight", (64, 64), 8),
            (f"blk.{il}.attn_k.weight", (64, 32), 8),
        ]
        if experts:
            tensors += [
                (f"blk.{il}.ffn_gate_inp.weight", (64, experts), 0),
                (f"blk.{il}.ffn_up_exps.weight", (64, 128, experts), 8),
                (f"blk.{il}.ffn_up_shexp.weight", (64, 128), 8),
            ]
        else:
            tensors += [(f"blk.{il}.ffn_up.weight", (64, 128), 8)]
    return tensors


# ---- golden figures from the real headers --------------------------------------------------------


@cache
def real(path: Path) -> GGUFHeader:
    """Each real header is parsed once per test session (the 262k-token vocabularies take a moment)."""
    return read_gguf_file(path)


def test_smollm2_exact_file_size_from_tensor_infos():
    """SOURCES.md: the complete SmolLM2-135M-Instruct.Q4_1.gguf is 98,362,432 bytes; data starts at 1,785,664."""
    header = real(SMOLLM2)
    assert (header.version, len(header.metadata), len(header.tensors)) == (3, 33, 272)
    assert header.header_end == header.data_start == 1_785_664
    assert gguf_file_size(header) == 98_362_432


def test_gemma3_and_r1_data_start_and_file_size_bounds():
    """SOURCES.md: gemma-3-270m tensor infos end at 6,525,112, data at 6,525,120 (alignment 32); its first
    63,963,136-byte chunk is one of 4 chunks. R1-Distill-Qwen-7B: infos end 5,953,246, data 5,953,248, first
    99,614,720-byte chunk of the file."""
    gemma = real(GEMMA3)
    assert (gemma.header_end, gemma.data_start, gemma.alignment, len(gemma.tensors)) == (6_525_112, 6_525_120, 32, 236)
    assert 3 * 63_963_136 < gguf_file_size(gemma) <= 4 * 63_963_136
    r1 = real(R1_7B)
    assert (r1.header_end, r1.data_start, len(r1.tensors), len(r1.metadata)) == (5_953_246, 5_953_248, 339, 27)
    assert gguf_file_size(r1) > 99_614_720


def test_q4_k_m_is_about_4_9_bits_per_weight_on_the_real_7b():
    """Article 000 (sources/000_…txt): Q4_K_M ≈ 4.9 effective bits, 0.61 bytes per parameter."""
    spec = spec_from_gguf([real(R1_7B)], filename=R1_7B.name)
    assert spec.extra["file_type"] == "Q4_K_M"
    assert 4.85 <= spec.extra["bits_per_weight"] <= 4.95
    assert spec.weights_bytes / spec.params_total == pytest.approx(0.61, abs=0.01)
    assert spec.weights.exact and set(spec.weights.bytes_by_dtype) == {"F32", "Q4_K", "Q6_K"}


def test_q8_0_is_8_5_bits():
    """Article 000: Q8_0 = 8.5 bits (1.06 bytes per parameter); the gemma-3 header holds Q8_0 tensors."""
    q8 = [t for t in real(GEMMA3).tensors if t.type_name == "Q8_0"]
    assert q8
    assert sum(t.nbytes for t in q8) * 8 / sum(t.numel for t in q8) == 8.5


def test_r1_distill_spec_facts():
    spec = spec_from_gguf([real(R1_7B)], filename=R1_7B.name)
    assert spec.architecture == "qwen2" and spec.num_layers == 28
    assert spec.layer_census()["full_attention"] == 28
    assert {(layer.num_kv_heads, layer.head_dim_k, layer.head_dim_v) for layer in spec.layers} == {(4, 128, 128)}
    assert spec.vocab_size == 152064 and spec.tie_word_embeddings is False
    assert spec.weights.bytes_by_component["lm_head"] > 0
    assert spec.extra["token_embd_bytes"] == spec.weights.bytes_by_component["embeddings"]
    assert spec.provenance["num_layers"].endswith("qwen2.block_count")
    # consistency of the layer facts: 28 layers × 4 KV heads × (128 + 128) elements × 2 bytes per token
    assert spec.kv_bytes_per_token(2) == 28 * 4 * 256 * 2


def test_smollm2_tied_and_gemma3_sliding_pattern():
    smol = spec_from_gguf([real(SMOLLM2)], filename=SMOLLM2.name)
    assert smol.tie_word_embeddings is True and "lm_head" not in smol.weights.bytes_by_component
    assert (smol.num_layers, smol.layers[0].num_kv_heads, smol.hidden_size) == (30, 3, 576)
    gemma = spec_from_gguf([real(GEMMA3)], filename=GEMMA3.name)
    # gemma3: llama.cpp set_swa_pattern(6) → 5 of every 6 layers windowed (docs/engines/llamacpp.md#llamacpp-swa)
    kinds = [layer.kind for layer in gemma.layers]
    assert kinds[:6] == [LayerKind.SLIDING] * 5 + [LayerKind.FULL]
    assert gemma.layer_census()["sliding_attention"] == 15 and gemma.layer_census()["full_attention"] == 3
    assert {layer.window for layer in gemma.layers if layer.kind is LayerKind.SLIDING} == {512}
    assert gemma.layers[0].head_dim_k == 256 and gemma.layers[0].num_kv_heads == 1


def test_vocab_only_gguf_skips_large_arrays():
    header = real(LLAMA_SPM)
    tokens = header.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, SkippedArray) and tokens.length == 32000 and tokens.item_type == "string"
    assert header.tensors == () and header.header_end == 723_869
    spec = spec_from_gguf([header], filename=LLAMA_SPM.name)
    assert spec.vocab_size == 32000 and spec.num_layers == 32
    phi = spec_from_gguf([real(PHI3)], filename=PHI3.name)
    assert (phi.hidden_size, phi.intermediate_size, phi.layers[0].head_dim_k) == (3072, 8192, 96)


@pytest.mark.parametrize("path", [LLAMA_SPM, PHI3], ids=lambda p: p.name)
def test_a_gguf_without_tensors_has_unknown_weights_and_says_why(path):
    """llama.cpp's ggml-vocab-*.gguf (fixtures/headers, SOURCES.md) carry hyper-parameters and a tokenizer but
    no tensor: not a model checkpoint. Weights (and whether embeddings are tied) are null with a warning, never
    0 parameters; the metadata facts are still read, so `inspect` can show them."""
    spec = spec_from_gguf([real(path)], filename=path.name)
    assert spec.weights is None and spec.params_total is None and spec.params_active is None
    assert spec.tie_word_embeddings is None and "weights" not in spec.provenance
    assert any(w.startswith("weights unknown") and "no tensors" in w and "vocabulary" in w for w in spec.warnings)
    assert any(w.startswith("tie_word_embeddings") for w in spec.warnings)
    assert spec.quantization is not None and spec.quantization.details["file_type"] == "F16"  # general.file_type 1
    assert spec.extra["token_embd_bytes"] is None and spec.extra["file_size"] == real(path).header_end
    assert spec.num_layers == 32 and spec.max_position_embeddings == 4096


# ---- crafted files: ModelSpec rules --------------------------------------------------------------


def test_moe_counts_every_expert_and_active_share():
    data = gguf_bytes(
        llama_kvs("qwen3moe", expert_count=(U32, 8), expert_used_count=(U32, 2)), block_tensors(2, experts=8)
    )
    spec = spec_from_gguf([parse(data)], filename="moe.gguf")
    assert missing_provenance(spec) == []
    experts = spec.weights.params_by_component["experts"]
    assert experts == 2 * 64 * 128 * 8  # every expert counted
    assert spec.weights.params_by_component["router"] == 2 * 64 * 8
    assert spec.params_active == spec.params_total - experts * 6 // 8
    assert all(layer.moe for layer in spec.layers)


def test_gpt_oss_even_layers_slide_and_per_layer_kv_heads():
    data = gguf_bytes(
        llama_kvs(
            "gpt-oss",
            layers=4,
            **{"attention.sliding_window": (U32, 128), "attention.head_count_kv": (ARR, (I32, [2, 2, 0, 2]))},
        ),
        [("token_embd.weight", (64, 10), 0)],
    )
    spec = spec_from_gguf([parse(data)], filename="oss.gguf")
    assert missing_provenance(spec) == []
    assert [layer.kind for layer in spec.layers] == [LayerKind.SLIDING, LayerKind.FULL, LayerKind.NONE, LayerKind.FULL]
    assert spec.layers[0].window == 128 and spec.layers[0].head_dim_k == 16


def test_bool_array_pattern_and_swa_head_dims():
    data = gguf_bytes(
        llama_kvs(
            "gemma4",
            layers=3,
            **{
                "attention.sliding_window": (U32, 1024),
                "attention.sliding_window_pattern": (ARR, (BOOL, [1, 1, 0])),
                "attention.key_length": (U32, 512),
                "attention.key_length_swa": (U32, 256),
                "attention.head_count_kv": (ARR, (I32, [8, 8, 2])),
            },
        )
    )
    spec = spec_from_gguf([parse(data)], filename="g4.gguf")
    assert missing_provenance(spec) == []
    assert [(layer.kind, layer.head_dim_k, layer.num_kv_heads) for layer in spec.layers] == [
        (LayerKind.SLIDING, 256, 8),
        (LayerKind.SLIDING, 256, 8),
        (LayerKind.FULL, 512, 2),
    ]


def test_mla_gguf_caches_the_latent():
    data = gguf_bytes(
        llama_kvs(
            "deepseek2",
            layers=2,
            **{
                "attention.head_count_kv": (U32, 1),
                "attention.key_length": (U32, 576),
                "attention.value_length": (U32, 512),
                "attention.key_length_mla": (U32, 192),
                "attention.kv_lora_rank": (U32, 512),
                "rope.dimension_count": (U32, 64),
                "nextn_predict_layers": (U32, 1),
            },
        ),
        [("blk.2.nextn.eh_proj.weight", (64, 64), 0)],
    )
    spec = spec_from_gguf([parse(data)], filename="ds.gguf")
    assert missing_provenance(spec) == []
    # DeepSeek (MLA): 576 elements per token per layer (article 000; docs/engines/llamacpp.md#llamacpp-kv-cache)
    assert spec.num_layers == 1 and spec.num_mtp_layers == 1
    assert spec.layers[0].kind is LayerKind.MLA and spec.layers[0].kv_elems_per_token == 576
    assert spec.weights.bytes_by_component == {"mtp": 64 * 64 * 4}


def test_old_non_mla_deepseek_gguf_warns_and_keeps_full_kv():
    data = gguf_bytes(
        llama_kvs(
            "deepseek2",
            layers=1,
            **{
                "attention.head_count_kv": (U32, 4),
                "attention.key_length": (U32, 192),
                "attention.value_length": (U32, 128),
                "attention.kv_lora_rank": (U32, 512),
            },
        )
    )
    spec = spec_from_gguf([parse(data)], filename="old.gguf")
    assert missing_provenance(spec) == []
    assert spec.layers[0].kind is LayerKind.FULL and spec.layers[0].kv_elems_per_token == 4 * 320
    assert any("MLA" in w for w in spec.warnings)


def test_hybrid_recurrent_layers_from_ssm_keys():
    data = gguf_bytes(
        llama_kvs(
            "qwen3next",
            layers=4,
            **{
                "attention.head_count_kv": (U32, 2),
                "ssm.conv_kernel": (U32, 4),
                "ssm.inner_size": (U32, 4096),
                "ssm.state_size": (U32, 128),
                "ssm.group_count": (U32, 16),
                "ssm.time_step_rank": (U32, 32),
            },
        )
    )
    spec = spec_from_gguf([parse(data)], filename="next.gguf")
    assert missing_provenance(spec) == []
    assert [layer.kind for layer in spec.layers] == [LayerKind.LINEAR] * 3 + [LayerKind.FULL]
    # llama.cpp n_embd_r = (d_conv−1)(d_inner + 2·n_group·d_state), n_embd_s = d_state·d_inner (docs/engines/llamacpp.md#llamacpp-recurrent-state)
    assert spec.layers[0].conv_state_elems == 3 * (4096 + 2 * 16 * 128)
    assert spec.layers[0].ssm_state_elems == 128 * 4096 and spec.layers[0].state_dtype_bytes == 4.0
    assert spec.provenance["recurrent_state"].startswith("derived: conv (ssm.conv_kernel − 1)")
    assert (
        spec.provenance["layers"] == "derived: recurrent where qwen3next.attention.head_count_kv is 0 or "
        "outside every 4th block"
    )


def test_llama4_chunked_layers():
    data = gguf_bytes(llama_kvs("llama4", layers=4, **{"attention.head_count_kv": (U32, 1)}))
    spec = spec_from_gguf([parse(data)], filename="l4.gguf")
    assert missing_provenance(spec) == []
    assert [layer.kind for layer in spec.layers] == [LayerKind.CHUNKED] * 3 + [LayerKind.FULL]
    assert spec.layers[0].window == 8192
    assert spec.provenance["attention_chunk_size"].startswith("llama.cpp llama4: n_chunk 8192")


def test_split_files_merge_all_parts():
    tensors = block_tensors(2)
    first = gguf_bytes(
        [*llama_kvs(), ("split.no", U16, 0), ("split.count", U16, 2), ("split.tensors.count", I32, len(tensors))],
        tensors[:3],
    )
    second = gguf_bytes([("split.no", U16, 1), ("split.count", U16, 2)], tensors[3:])
    parts = [parse(first, "m-00001-of-00002.gguf"), parse(second, "m-00002-of-00002.gguf")]
    spec = spec_from_gguf(parts, filename="m-00001-of-00002.gguf")
    whole = spec_from_gguf([parse(gguf_bytes(llama_kvs(), tensors))], filename="m.gguf")
    assert spec.weights.total_bytes == whole.weights.total_bytes and spec.weights.num_tensors == len(tensors)
    assert spec.extra["split_count"] == 2
    with pytest.raises(MalformedFileError, match=r"split\.tensors\.count"):
        spec_from_gguf(parts[:1], filename="m-00001-of-00002.gguf")
    assert split_gguf_names("Qwen3-235B-Q4_K_M-00002-of-00003.gguf") == [
        "Qwen3-235B-Q4_K_M-00001-of-00003.gguf",
        "Qwen3-235B-Q4_K_M-00002-of-00003.gguf",
        "Qwen3-235B-Q4_K_M-00003-of-00003.gguf",
    ]
    assert split_gguf_names("model.gguf") == ["model.gguf"]
    with pytest.raises(MalformedFileError):
        split_gguf_names("x-00004-of-00003.gguf")


def test_gguf_writer_output_round_trips(tmp_path):
    """A header written by the gguf package's own GGUFWriter reads back with the same tensor table."""
    path = tmp_path / "w.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_array("llama.attention.head_count_kv", [1])
    writer.add_float64("custom.f64", 1.5)
    writer.add_bool("custom.flag", True)
    writer.add_tensor_info("token_embd.weight", (100, 64), np.dtype(np.float32), 100 * 64 * 4)
    writer.add_tensor_info(
        "blk.0.attn_q.weight", (64, 144), np.dtype(np.uint8), 64 * 144, raw_dtype=gguf.GGMLQuantizationType.Q4_K
    )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    header = read_gguf_file(path)
    assert header.metadata["custom.f64"] == 1.5 and header.metadata["custom.flag"] is True
    assert [(t.name, t.type_name, t.shape, t.nbytes) for t in header.tensors] == [
        ("token_embd.weight", "F32", (64, 100), 25600),
        ("blk.0.attn_q.weight", "Q4_K", (256, 64), 9216),
    ]
    assert header.data_start == path.stat().st_size + (-path.stat().st_size) % 32


def test_every_value_type_and_nested_arrays_and_version_2():
    kvs = [
        ("u8", U8, 255),
        ("i8", I8, -1),
        ("u16", U16, 65535),
        ("i16", I16, -2),
        ("u32", U32, 7),
        ("i32", I32, -3),
        ("f32", F32, 0.5),
        ("b", BOOL, True),
        ("s", STR, "héllo"),
        ("u64", U64, 1 << 40),
        ("i64", I64, -(1 << 40)),
        ("f64", F64, 0.25),
        ("nested", ARR, (ARR, [(I32, [1, 2]), (STR, ["a"])])),
    ]
    for version in (2, 3):
        header = parse(gguf_bytes(kvs, version=version))
        assert header.version == version
        assert [header.metadata[k] for k, _, _ in kvs[:-1]] == [
            255,
            -1,
            65535,
            -2,
            7,
            -3,
            0.5,
            True,
            "héllo",
            1 << 40,
            -(1 << 40),
            0.25,
        ]
        assert header.metadata["nested"] == [[1, 2], ["a"]]


# ---- crafted files: malformed input --------------------------------------------------------------


def test_bad_magic_big_endian_and_versions():
    with pytest.raises(MalformedFileError, match="magic") as info:
        parse(b"GGML" + bytes(20), "bad.gguf")
    assert info.value.file == "bad.gguf" and info.value.field == "magic"
    with pytest.raises(MalformedFileError, match="big-endian"):
        parse(b"GGUF" + struct.pack(">IQQ", 3, 0, 0))
    with pytest.raises(MalformedFileError, match="version"):
        parse(b"GGUF" + struct.pack("<IQQ", 1, 0, 0))


def test_big_endian_file_from_gguf_writer_is_rejected(tmp_path):
    path = tmp_path / "be.gguf"
    writer = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian.BIG)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    with pytest.raises(MalformedFileError, match="big-endian"):
        read_gguf_file(path)


@pytest.mark.parametrize(
    "data, field",
    [
        (b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0), "tensor_count"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 40), "kv_count"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("k") + struct.pack("<I", 13), "k"),  # unknown type
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("k") + struct.pack("<IQ", 8, 1 << 60), "k"),  # string
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("k") + struct.pack("<IIQ", 9, 5, 1 << 60), "k"),  # array
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("k") + struct.pack("<IB", 7, 2), "k"),  # bool 2
        (
            b"GGUF"
            + struct.pack("<IQQ", 3, 0, 2)
            + gguf_string("k")
            + struct.pack("<IB", 0, 1)
            + gguf_string("k")
            + struct.pack("<IB", 0, 1),
            "k",
        ),  # duplicate key
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string(b"\xff\xfe") + struct.pack("<IB", 0, 1),
            "metadata[0].key",
        ),  # non-UTF-8 key
    ],
)
def test_malformed_metadata(data, field):
    with pytest.raises(MalformedFileError) as info:
        parse(data, "m.gguf")
    assert info.value.field == field and info.value.file == "m.gguf"


def test_malformed_tensor_infos_name_the_tensor():
    def one_tensor(n_dims: int, dims: list[int], gtype: int, offset: int = 0) -> bytes:
        return (
            b"GGUF"
            + struct.pack("<IQQ", 3, 1, 0)
            + gguf_string("blk.0.attn_q.weight")
            + struct.pack("<I", n_dims)
            + struct.pack(f"<{len(dims)}Q", *dims)
            + struct.pack("<IQ", gtype, offset)
        )

    cases = [
        (one_tensor(5, [1, 1, 1, 1, 1], 0), "dimensions"),  # dims > 4
        (one_tensor(2, [32, 4], 4), "unknown ggml type 4"),  # removed Q4_2
        (one_tensor(2, [32, 4], 99), "unknown ggml type 99"),
        (one_tensor(2, [33, 4], 8), "multiple"),  # Q8_0 rows must be whole blocks
        (one_tensor(2, [1 << 40, 1 << 40], 0), "overflows"),
        (one_tensor(2, [32, 4], 0, offset=64), "offset"),
    ]
    for data, message in cases:
        with pytest.raises(MalformedFileError, match=message) as info:
            parse(data)
        assert info.value.field == "blk.0.attn_q.weight"


def test_truncated_everywhere_is_malformed():
    data = gguf_bytes(llama_kvs(), block_tensors(1))
    for cut in range(0, len(data), 7):
        with pytest.raises(MalformedFileError):
            parse(data[:cut])


def test_bad_alignment_and_block_count():
    with pytest.raises(MalformedFileError, match="power of two"):
        parse(gguf_bytes([("general.alignment", U32, 24)]))
    with pytest.raises(MalformedFileError, match="block_count"):
        spec_from_gguf([parse(gguf_bytes([("general.architecture", STR, "llama")]))], filename="x")
    with pytest.raises(MalformedFileError, match=r"layers|numbers"):
        spec_from_gguf([parse(gguf_bytes(llama_kvs(**{"attention.head_count_kv": (ARR, (I32, [1]))})))], filename="x")


class _TrickleStream:
    """A stream that returns at most 7 bytes per read, as a network stream may."""

    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)

    def read(self, n: int) -> bytes:
        return self.buffer.read(min(n, 7))


def test_short_reads_are_retried():
    data = gguf_bytes(llama_kvs(), block_tensors(2))
    trickled = read_gguf_header(_TrickleStream(data), filename="net.gguf")
    assert trickled == parse(data, "net.gguf")


def test_file_size_counts_the_padding_after_the_last_tensor(tmp_path):
    """gguf-py's GGUFWriter pads after every tensor, the last one included: the size from tensor infos alone
    equals the size of the file it writes."""
    path = tmp_path / "full.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((3, 5), dtype=np.float32))  # 60 bytes, not a multiple of 32
    writer.add_tensor("output_norm.weight", np.zeros((7,), dtype=np.float16))  # 14 bytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert gguf_file_size(read_gguf_file(path)) == path.stat().st_size


def test_skipped_string_array_is_read_in_bulk_without_reading_past_the_header():
    """A vocabulary-sized string array (5,000 strings, one longer than the 64 KiB read-ahead) is skipped in bulk:
    the keys after it still parse, and the stream is never asked for a byte past the end of the header."""
    import io
    import struct

    from hfvram.readers.gguf import SkippedArray, read_gguf_header

    def gguf_string(text: bytes) -> bytes:
        return struct.pack("<Q", len(text)) + text

    strings = [b"t%d" % i for i in range(5000)]
    strings[2500] = b"x" * 70_000
    body = b"GGUF" + struct.pack("<IQQ", 3, 0, 2)
    body += gguf_string(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, len(strings))
    body += b"".join(gguf_string(s) for s in strings)
    body += gguf_string(b"general.alignment") + struct.pack("<II", 4, 32)

    class Counting(io.BytesIO):
        furthest = 0

        def read(self, n=-1):
            data = super().read(n)
            Counting.furthest = max(Counting.furthest, self.tell())
            return data

    header = read_gguf_header(Counting(body + b"\0" * 4096), filename="crafted.gguf")
    assert header.metadata["tokenizer.ggml.tokens"] == SkippedArray(length=5000, item_type="string")
    assert header.metadata["general.alignment"] == 32
    assert header.header_end == len(body) and Counting.furthest == len(body)


# ---- issue 17: hostile counts and bytes in a GGUF header -------------------------------------------------------


def _with(kvs: list, key: str, vtype: int, value) -> list:
    return [kv for kv in kvs if kv[0] != key] + [(key, vtype, value)]


@pytest.mark.parametrize(
    ("key", "vtype", "value"),
    [
        ("llama.block_count", F64, 1e200),
        ("llama.block_count", U64, 10**12),
        ("llama.attention.head_count", U64, 10**9),
        ("llama.attention.head_count_kv", ARR, (U64, [10**9, 10**9])),
        ("llama.embedding_length", F64, 1e300),
        ("llama.context_length", F64, 1e300),
        ("llama.feed_forward_length", I64, -5),
        ("llama.expert_count", U64, 10**9),
    ],
)
def test_hostile_gguf_counts_name_their_key(key, vtype, value):
    data = gguf_bytes(_with(llama_kvs(), key, vtype, value), block_tensors(2))
    with pytest.raises(MalformedFileError) as caught:
        spec_from_gguf([parse(data)], filename="t.gguf")
    assert caught.value.field is not None and caught.value.field.startswith(key), str(caught.value)
    assert len(str(caught.value)) < 300


def test_gguf_string_that_is_not_utf8_is_malformed():
    data = gguf_bytes([*llama_kvs(), ("general.name", STR, b"\xff\xfe bad")], block_tensors(2))
    with pytest.raises(MalformedFileError, match="not UTF-8"):
        parse(data)


def test_gguf_key_that_is_not_utf8_is_malformed():
    data = gguf_bytes([*llama_kvs(), (b"general.\xff", U32, 1)], block_tensors(2))
    with pytest.raises(MalformedFileError, match="not UTF-8"):
        parse(data)


def test_hostile_gguf_file_is_one_line_exit_3(tmp_path):
    from cli_support import run_hfvram

    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(_with(llama_kvs(), "llama.block_count", F64, 1e200), block_tensors(2)))
    result = run_hfvram("check", str(path), "--gpu", "h100", timeout=120)
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "llama.block_count" in lines[0] and "internal error" not in lines[0], result.stderr
