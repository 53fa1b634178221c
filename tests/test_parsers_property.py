"""Property tests: the safetensors and GGUF parsers either return or raise MalformedFileError — never anything
else — on random bytes, on mutated real headers, and round-trip structured random valid headers.

Real headers: fixtures/headers/ (SOURCES.md rows in fixtures/README.md). ~300 examples per property; the number
of examples run is printed (``pytest -s``) and checked.
"""

from __future__ import annotations

import io
import json
import struct
from functools import cache, lru_cache
from pathlib import Path

import gguf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_gguf import ARR, BOOL, F32, F64, I8, I16, I32, I64, STR, U8, U16, U32, U64, gguf_bytes

from hfvram.errors import MalformedFileError
from hfvram.readers.gguf import SkippedArray, read_gguf_file, read_gguf_header, spec_from_gguf
from hfvram.readers.safetensors import parse_header, read_safetensors_header
from hfvram.readers.tensors import safetensors_dtypes, tensor_nbytes

HEADERS = Path(__file__).resolve().parent.parent / "fixtures" / "headers"
MINILM = (HEADERS / "sentence-transformers--all-MiniLM-L6-v2--model.safetensors-header").read_bytes()
EXAMPLES = 300
PROPERTY = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
RUNS: dict[str, int] = {}


def _count(name: str) -> None:
    RUNS[name] = RUNS.get(name, 0) + 1


def _report(name: str) -> None:
    print(f"{name}: {RUNS.get(name, 0)} examples")
    assert RUNS.get(name, 0) >= EXAMPLES // 2


def gguf_outcome(data: bytes):
    """Parse and build a spec; return the spec, or None when the parser rejected the input cleanly."""
    try:
        header = read_gguf_header(io.BytesIO(data), filename="f.gguf")
        if "general.architecture" in header.metadata:
            return spec_from_gguf([header], filename="f.gguf")
        return header
    except MalformedFileError as exc:
        assert exc.file == "f.gguf"
        return None


def safetensors_outcome(data: bytes):
    try:
        return read_safetensors_header(lambda offset, length: data[offset : offset + length], filename="f.st")
    except MalformedFileError as exc:
        assert exc.file == "f.st"
        return None


# ---- a compact real GGUF header: SmolLM2's metadata (without its 49k-token vocabulary) + its 272 tensors ---


def _vtype(value) -> tuple[int, object]:
    if isinstance(value, bool):
        return BOOL, value
    if isinstance(value, int):
        return (U32, value) if 0 <= value < 1 << 32 else (I64, value)
    if isinstance(value, float):
        return F32, value
    if isinstance(value, list):
        items = [_vtype(v) for v in value]
        return ARR, (items[0][0] if items else U32, [v for _, v in items])
    return STR, value


@lru_cache(maxsize=1)
def real_gguf() -> bytes:
    header = read_gguf_file(HEADERS / "SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf")
    kvs = [
        (key, *_vtype(value))
        for key, value in header.metadata.items()
        if not isinstance(value, SkippedArray) and isinstance(value, (str, int, float, list))
    ]
    tensors = [(t.name, t.shape, t.ggml_type) for t in header.tensors]
    return gguf_bytes(kvs, tensors)


def test_compact_real_gguf_is_valid():
    spec = gguf_outcome(real_gguf())
    assert spec is not None and spec.num_layers == 30 and spec.weights.num_tensors == 272


# ---- random bytes -------------------------------------------------------------------------------


@PROPERTY
@given(st.binary(max_size=512))
def test_gguf_random_bytes(data):
    _count("gguf random bytes")
    gguf_outcome(data)
    gguf_outcome(b"GGUF" + struct.pack("<I", 3) + data)  # past the magic, into counts and metadata


@PROPERTY
@given(st.binary(max_size=512))
def test_safetensors_random_bytes(data):
    _count("safetensors random bytes")
    safetensors_outcome(data)
    safetensors_outcome(struct.pack("<Q", len(data)) + data)  # a plausible length, random JSON bytes


# ---- mutated real headers -----------------------------------------------------------------------


def _mutate(base: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    data = bytearray(base)
    for position, value in edits:
        data[position % len(data)] = value
    return bytes(data[:cut] if cut is not None else data)


@PROPERTY
@given(
    st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=8),
    st.none() | st.integers(0, 40_000),
)
def test_gguf_mutated_real_header(edits, cut):
    _count("gguf mutated real header")
    gguf_outcome(_mutate(real_gguf(), edits, cut))


@PROPERTY
@given(
    st.lists(st.tuples(st.integers(0, 11_415), st.integers(0, 255)), min_size=1, max_size=8),
    st.none() | st.integers(0, 11_416),
)
def test_safetensors_mutated_real_header(edits, cut):
    _count("safetensors mutated real header")
    safetensors_outcome(_mutate(MINILM, edits, cut))


@PROPERTY
@given(
    st.sampled_from(["dtype", "shape", "data_offsets"]),
    st.one_of(
        st.integers(-(1 << 70), 1 << 70),
        st.text(max_size=5),
        st.none(),
        st.booleans(),
        st.lists(st.one_of(st.integers(-(1 << 70), 1 << 70), st.floats(), st.text(max_size=3)), max_size=5),
    ),
    st.integers(0, 103),
)
def test_safetensors_mutated_real_json_field(field, value, which):
    """Replace one field of one real tensor entry with an arbitrary JSON value."""
    _count("safetensors mutated real field")
    table = json.loads(MINILM[8:])
    name = sorted(k for k in table if k != "__metadata__")[which]
    table[name][field] = value
    raw = json.dumps(table).encode()
    try:
        parse_header(raw, filename="f.st")
    except MalformedFileError as exc:
        assert exc.file == "f.st"


# ---- structured random valid headers round-trip -------------------------------------------------

_SCALAR_VALUES = {
    U8: st.integers(0, 255),
    I8: st.integers(-128, 127),
    U16: st.integers(0, 65535),
    I16: st.integers(-32768, 32767),
    U32: st.integers(0, (1 << 32) - 1),
    I32: st.integers(-(1 << 31), (1 << 31) - 1),
    U64: st.integers(0, (1 << 64) - 1),
    I64: st.integers(-(1 << 63), (1 << 63) - 1),
    F32: st.floats(width=32, allow_nan=False),
    F64: st.floats(allow_nan=False),
    BOOL: st.booleans(),
    STR: st.text(max_size=20),
}
_value = st.sampled_from(sorted(_SCALAR_VALUES)).flatmap(
    lambda t: st.one_of(
        _SCALAR_VALUES[t].map(lambda v: (t, v)), st.lists(_SCALAR_VALUES[t], max_size=6).map(lambda vs: (ARR, (t, vs)))
    )
)
_QUANT_TYPES = sorted(int(t) for t in gguf.GGML_QUANT_SIZES)


@st.composite
def gguf_tensors(draw):
    tensors = []
    for index in range(draw(st.integers(0, 6))):
        gtype = draw(st.sampled_from(_QUANT_TYPES))
        block = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(gtype)][0]
        rest = draw(st.lists(st.integers(1, 5), max_size=3))
        tensors.append((f"blk.{index}.t", (block * draw(st.integers(1, 3)), *rest), gtype))
    return tensors


@PROPERTY
@given(st.dictionaries(st.text(min_size=1, max_size=12), _value, max_size=8), gguf_tensors(), st.sampled_from([2, 3]))
def test_gguf_random_valid_headers_round_trip(metadata, tensors, version):
    _count("gguf valid round trip")
    kvs = [(key, vtype, value) for key, (vtype, value) in metadata.items()]
    header = read_gguf_header(io.BytesIO(gguf_bytes(kvs, tensors, version=version)), filename="r.gguf")
    assert header.version == version
    for key, vtype, value in kvs:
        expected = value[1] if vtype == ARR else value
        assert header.metadata[key] == expected
    assert [(t.name, t.shape, t.ggml_type) for t in header.tensors] == [(n, tuple(s), g) for n, s, g in tensors]


_DTYPES = sorted(d for d in safetensors_dtypes() if (tensor_nbytes(d, (8,)) or 0) * 8 % 8 == 0)


@PROPERTY
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=12).filter(lambda k: k != "__metadata__"),
        st.tuples(st.sampled_from(_DTYPES), st.lists(st.integers(0, 64), max_size=4)),
        max_size=8,
    ),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
)
def test_safetensors_random_valid_headers_round_trip(entries, metadata):
    _count("safetensors valid round trip")
    table: dict = {"__metadata__": metadata}
    offset = 0
    for name, (dtype, shape) in entries.items():
        size = tensor_nbytes(dtype, shape)
        table[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(table).encode()
    parsed = read_safetensors_header(lambda o, n: (struct.pack("<Q", len(raw)) + raw)[o : o + n], filename="r")
    assert {name: (info.dtype, list(info.shape)) for name, info in parsed.items()} == entries


def test_examples_were_run():
    """Runs last in this file (pytest keeps file order): every property ran its examples."""
    for name in (
        "gguf random bytes",
        "safetensors random bytes",
        "gguf mutated real header",
        "safetensors mutated real header",
        "safetensors mutated real field",
        "gguf valid round trip",
        "safetensors valid round trip",
    ):
        _report(name)


_ARCH_SUFFIXES = [
    "block_count",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.key_length_mla",
    "attention.kv_lora_rank",
    "rope.dimension_count",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "expert_count",
    "expert_used_count",
    "ssm.conv_kernel",
    "ssm.inner_size",
    "ssm.state_size",
    "ssm.group_count",
    "ssm.time_step_rank",
    "context_length",
    "vocab_size",
    "nextn_predict_layers",
    "full_attention_interval",
    "rope.scaling.type",
    "rope.scaling.factor",
]


@PROPERTY
@given(
    st.sampled_from(["llama", "gemma3", "gpt-oss", "deepseek2", "qwen3next", "nemotron_h", "llama4"]),
    st.dictionaries(st.sampled_from(_ARCH_SUFFIXES), _value, max_size=10),
    st.one_of(st.none(), _value),
    gguf_tensors(),
)
def test_spec_from_random_hparams(arch, hparams, file_type, tensors):
    """Any types and values under the architecture keys: a ModelSpec or MalformedFileError, nothing else."""
    _count("spec from random hparams")
    kvs = [("general.architecture", STR, arch)]
    kvs += [(f"{arch}.{suffix}", vtype, value) for suffix, (vtype, value) in hparams.items()]
    if file_type is not None:
        kvs.append(("general.file_type", *file_type))
    gguf_outcome(gguf_bytes(kvs, tensors))


def test_spec_property_ran():
    _report("spec from random hparams")


# ---- derived tensor lists never fail on odd specs -------------------------------------------------

from hfvram.readers.shapes import derive_warnings, derived_weights  # noqa: E402
from hfvram.spec import Layer, LayerKind, ModelSpec, Quantization  # noqa: E402

_small = st.one_of(st.none(), st.integers(0, 300))
_layer = st.builds(
    Layer,
    kind=st.sampled_from(list(LayerKind)),
    num_kv_heads=st.integers(0, 8),
    head_dim_k=st.integers(0, 64),
    head_dim_v=st.integers(0, 64),
    kv_lora_rank=st.integers(0, 64),
    qk_rope_head_dim=st.integers(0, 16),
    moe=st.booleans(),
)
_quant = st.one_of(
    st.none(),
    st.builds(
        Quantization,
        method=st.sampled_from(
            ["fp8", "gptq", "awq", "compressed-tensors", "nvfp4", "modelopt", "mxfp4", "bitsandbytes", "gguf", "hqq"]
        ),
        bits=st.one_of(st.none(), st.sampled_from([0.0, 2.0, 3.0, 4.0, 8.0, 64.0])),
        group_size=st.one_of(st.none(), st.integers(-1, 256)),
        details=st.fixed_dictionaries(
            {},
            optional={
                "weight_block_size": st.one_of(st.lists(st.integers(-1, 256), max_size=3), st.text(max_size=3)),
                "modules_to_not_convert": st.lists(st.text(max_size=12), max_size=4),
                "ignore": st.lists(st.text(max_size=12), max_size=4),
                "format": st.sampled_from(["pack-quantized", "float-quantized", "int-quantized", "x"]),
                "schemes": st.lists(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "group_size": st.one_of(st.none(), st.integers(-4, 256)),
                            "strategy": st.sampled_from(["tensor", "channel"]),
                            "type": st.sampled_from(["int", "float"]),
                        },
                    ),
                    min_size=1,
                    max_size=2,
                ),
            },
        ),
    ),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.lists(_layer, max_size=3),
    _small,
    _small,
    _small,
    _small,
    _small,
    _small,
    _small,
    _quant,
    st.sampled_from([None, "llama", "qwen2", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3", "gemma3"]),
    st.one_of(st.none(), st.booleans()),
    st.integers(0, 2),
    st.one_of(
        st.just({}),
        st.fixed_dictionaries(
            {},
            optional={
                "q_lora_rank": _small,
                "attention_bias": st.booleans(),
                "shared_expert_intermediate_size": _small,
                "vision_config": st.fixed_dictionaries(
                    {"model_type": st.just("siglip_vision_model")},
                    optional={
                        "hidden_size": st.integers(0, 16),
                        "intermediate_size": st.integers(0, 16),
                        "patch_size": st.integers(0, 4),
                        "image_size": st.integers(0, 16),
                        "num_hidden_layers": st.integers(0, 2),
                    },
                ),
            },
        ),
    ),
)
def test_derived_tensors_from_odd_specs(
    layers, hidden, inter, heads, vocab, experts, per_token, moe_size, quant, model_type, tied, mtp, config
):
    """Any ModelSpec (odd sizes, zeros, unknowns, odd quantization details): a tensor list and warnings,
    never an exception."""
    _count("derived from odd specs")
    spec = ModelSpec(
        architecture=None,
        model_type=model_type,
        dtype=None,
        num_layers=len(layers),
        layers=tuple(layers),
        hidden_size=hidden,
        intermediate_size=inter,
        num_attention_heads=heads,
        vocab_size=vocab,
        num_experts=experts,
        experts_per_token=per_token,
        moe_intermediate_size=moe_size,
        quantization=quant,
        tie_word_embeddings=tied,
        num_mtp_layers=mtp,
    )
    weights = derived_weights(spec, config)
    if not hidden or not vocab:  # nothing to derive from: unknown, not zero bytes
        assert weights is None
    else:
        assert weights is not None and weights.exact is False and weights.total_bytes > 0
    assert isinstance(derive_warnings(spec, config), list)


def test_derived_property_ran():
    _report("derived from odd specs")


# ---- the config reader on hostile counts (issue 17): a real config with one count replaced ----------------------

import copy  # noqa: E402
import math  # noqa: E402

from hfvram.readers.bounds import config_bounds  # noqa: E402
from hfvram.readers.config import read_config  # noqa: E402

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
#: real configs of different families (fixtures/hub; sources in fixtures/README.md)
CONFIG_REPOS = sorted(str(p.parent.relative_to(HUB)) for p in HUB.glob("*/*/config.json"))


@cache
def _real_config(repo: str) -> dict:
    return json.loads((HUB / repo / "config.json").read_text())


_HOSTILE_COUNT = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20),
    st.sampled_from([10**12, 10**400, -1, 0, 1, 2**63, 2**64 + 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e12, 1e200, 1e308, 2.5, -0.0, float("inf"), float("-inf"), float("nan")]),
    st.sampled_from(["1e12", "1000000000000", "-1", "inf"]),
)


def _out_of_bounds(value: object, maximum: int) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return True  # numeric strings are refused before a config class can convert them
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return True
    return isinstance(value, (int, float)) and not 0 <= value <= maximum


@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    repo=st.sampled_from(CONFIG_REPOS),
    key=st.sampled_from(sorted(config_bounds())),
    value=_HOSTILE_COUNT,
    where=st.sampled_from(["", "text_config", "vision_config"]),
    use_transformers=st.booleans(),
)
def test_config_reader_on_hostile_counts(repo, key, value, where, use_transformers):
    """Either a spec (and a bounded derived tensor list) or MalformedFileError — and always the error, naming the
    field, when the count is out of its bounds.toml bound."""
    _count("config hostile counts")
    config = copy.deepcopy(_real_config(repo))
    target = config
    if where:
        target = config.setdefault(where, {}) if isinstance(config.get(where, {}), dict) else config
    target[key] = value
    path = f"{where}.{key}" if where and target is not config else key
    try:
        spec = read_config(config, use_transformers=use_transformers)
    except MalformedFileError as exc:
        assert exc.file == "config.json"
        if _out_of_bounds(value, config_bounds()[key][1]):
            assert exc.field == path, (str(exc), path)
        return
    assert not _out_of_bounds(value, config_bounds()[key][1]), (path, value)
    assert len(spec.layers) <= config_bounds()["num_hidden_layers"][1]
    try:
        weights = derived_weights(spec)
    except (ValueError, KeyError, TypeError, ZeroDivisionError):  # what the sources catch around derived_weights
        return
    assert weights is None or weights.total_bytes >= 0


def test_config_property_ran():
    _report("config hostile counts")


def test_fuzz_script_smoke_mode_runs_every_target():
    """scripts/fuzz_parsers.py covers headers, configs and logs; its --smoke mode (no atheris) runs mutated seeds of
    all of them through the same checks."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parent.parent / "scripts" / "fuzz_parsers.py"
    done = subprocess.run([sys.executable, str(script), "--smoke", "400"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "400 inputs ran without an unexpected exception" in done.stdout
