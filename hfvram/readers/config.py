"""The config.json reader: one Hugging Face config (+ companion files) → a ModelSpec without weights.

transformers, when it knows the model_type, is the authority on defaults and on derived per-layer
structure (``layer_types``); hfvram's own rules (hfvram.readers.config_layers) cover the rest and are
checked against transformers over the test corpus.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hfvram.errors import MalformedFileError
from hfvram.readers.bounds import bound, validate_config
from hfvram.readers.config_fields import ConfigView, aliases, config_rules
from hfvram.readers.config_hf import HfFacts, hf_facts_for
from hfvram.readers.config_layers import (
    CSA,
    HCA,
    AttentionDims,
    attention_dims,
    attention_layer,
    linear_layer,
    mamba_layer,
    mla_layer,
    moe_flags,
    normalize_layer_type,
    rule_layer_types,
)
from hfvram.readers.config_quant import read_quantization
from hfvram.readers.shapes import shape_config
from hfvram.spec import Layer, LayerKind, ModelSpec

__all__ = [
    "COMPANION_FILES",
    "hf_layer_types",
    "load_json_tolerant",
    "read_config",
    "read_config_files",
    "rule_layer_types",
]

#: files next to config.json that read_config uses when present
COMPANION_FILES = ("hf_quant_config.json", "quantize_config.json", "model.safetensors.index.json")

_UTF8_BOM = b"\xef\xbb\xbf"


def load_json_tolerant(raw: bytes, filename: str) -> dict:
    """Parse a JSON object as Hub files really are: BOM, CRLF, Infinity/-Infinity/NaN, no trailing newline."""
    if raw.startswith(_UTF8_BOM):
        raw = raw[len(_UTF8_BOM) :]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedFileError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=filename) from None
    try:
        value = json.loads(text)  # the json module accepts Infinity / -Infinity / NaN literals
    except json.JSONDecodeError as exc:
        raise MalformedFileError(
            f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", file=filename
        ) from None
    except RecursionError:
        raise MalformedFileError("JSON nested too deeply", file=filename) from None
    except ValueError:  # an integer over Python's digit limit (int_max_str_digits)
        limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
        raise MalformedFileError(f"not valid JSON (a number of more than {limit} digits)", file=filename) from None
    if not isinstance(value, dict):
        raise MalformedFileError(f"expected a JSON object, got {type(value).__name__}", file=filename)
    return value


def hf_layer_types(config: Mapping[str, Any]) -> list[str] | None:
    """transformers' per-layer types for ``config`` in hfvram's vocabulary, or None where it gives none."""
    return _normalized_hf_types(hf_facts_for(config), config)


def _normalized_hf_types(hf: HfFacts, config: Mapping[str, Any]) -> list[str] | None:
    text_model_type = _text_model_type(config)
    types = hf.layer_types
    if types is None:
        return None
    normalized = [normalize_layer_type(t, text_model_type) for t in types]
    return None if any(t is None for t in normalized) else [t for t in normalized if t is not None]


def _stated_path(view: ConfigView, keys: list[str]) -> str:
    """The dotted path of the first of ``keys`` the config states (the first key's path when none)."""
    for key in keys:
        if view.has(key):
            return view.locate(key)[1]
    return view.text_prefix + keys[0]


def _text_part(config: Mapping[str, Any], filename: str) -> tuple[Mapping[str, Any], str]:
    for key in aliases("text_config"):
        value = config.get(key)
        if value is None:
            continue
        if not isinstance(value, Mapping):
            raise MalformedFileError(f"expected an object, got {type(value).__name__}", file=filename, field=key)
        return value, key + "."
    return config, ""


def _text_model_type(config: Mapping[str, Any]) -> str | None:
    for key in aliases("text_config"):
        value = config.get(key)
        if isinstance(value, Mapping) and isinstance(value.get("model_type"), str):
            return value["model_type"]
    model_type = config.get("model_type")
    return model_type if isinstance(model_type, str) else None


def _canonical_dtype(view: ConfigView) -> str | None:
    for key in aliases("dtype"):
        name = view.string("dtype", key)
        if name is None:
            continue
        for canonical, spellings in config_rules()["dtypes"].items():
            if name.lower() in spellings:
                return canonical
        view.warn(f"dtype: {key} {name!r} is not a dtype hfvram knows; the estimator assumes 2 bytes")
        return None
    view.warn("dtype: config.json states no torch_dtype/dtype; the estimator assumes 2 bytes per element")
    return None


def _architecture(config: Mapping[str, Any], view: ConfigView) -> str | None:
    archs = config.get("architectures")
    if archs is None:
        view.warn("architecture: config.json lists no architectures")
        return None
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        raise view.fail("architectures", "expected a non-empty list of strings")
    view.note("architecture", view.where("architectures[0]"))
    return archs[0]


def _experts(view: ConfigView) -> tuple[int | None, int | None, int | None, int | None]:
    """(num_experts, num_shared_experts, experts_per_token, moe_intermediate_size); None when not MoE."""
    num_experts = view.integer("num_experts", aliases("num_experts"), minimum=0, use_hf_default=False)
    if not num_experts or num_experts < 2:
        view.provenance.pop("num_experts", None)
        return None, None, None, None
    keys = aliases("experts_per_token")
    per_token = view.integer("experts_per_token", [k for k in keys if k != "top_k"], use_hf_default=False)
    if per_token is None:
        top_k, path = view.locate("top_k")
        if isinstance(top_k, int) and not isinstance(top_k, bool) and 0 < top_k < num_experts:
            per_token = top_k
            view.note("experts_per_token", view.where(path))
    if per_token is None:
        view.warn("experts_per_token: a MoE config without num_experts_per_tok; active parameters cannot be counted")
    elif per_token > num_experts:  # more experts per token than the model has: active parameters above the total
        from hfvram.errors import MalformedFileError

        raise MalformedFileError(
            f"{per_token:,} experts per token but only {num_experts:,} experts", file="config.json",
            field="num_experts_per_tok",
        )  # fmt: skip
    shared = view.integer("num_shared_experts", aliases("num_shared_experts"), minimum=0, use_hf_default=False)
    if shared is None:
        shared_size = view.integer(
            "shared_expert_intermediate_size", ["shared_expert_intermediate_size"], minimum=0, use_hf_default=False
        )
        if shared_size:
            shared = 1
            view.note("num_shared_experts", "derived: shared_expert_intermediate_size is set → one shared expert")
        else:
            shared = 0
            view.note("num_shared_experts", "derived: no shared-expert field → none")
    moe_size = view.integer("moe_intermediate_size", aliases("moe_intermediate_size"), use_hf_default=False)
    if moe_size is None:
        moe_size = view.integer("moe_intermediate_size", ["intermediate_size"], use_hf_default=False)
        if moe_size is not None:
            view.note("moe_intermediate_size", "derived: intermediate_size (experts carry the FFN; no separate size)")
        else:
            view.warn("moe_intermediate_size: not stated in config.json")
    return num_experts, shared, per_token, moe_size


def _rope_scaling(view: ConfigView) -> Mapping[str, object] | None:
    for key in ("rope_scaling", "rope_parameters"):
        value, path = view.mapping(key)
        if value is not None:
            view.note("rope_scaling", view.where(path))
            return dict(value)
    return None


def _layer_kinds(view: ConfigView, config: Mapping[str, Any], num_layers: int, hf: HfFacts) -> tuple[list[str], str]:
    """Per-layer types: transformers' when it derives them, hfvram rules otherwise (compared in tests)."""
    text_model_type = _text_model_type(config)
    rules, rules_source = rule_layer_types(view, num_layers, text_model_type)
    hf_types = _normalized_hf_types(hf, config) if hf.ok else None
    if hf_types is None or len(hf_types) < num_layers:
        if hf.ok:
            return rules, f"{rules_source} ({hf.label} gives no layer_types)"
        return rules, rules_source
    hf_types = hf_types[:num_layers]
    if view.has("kv_lora_rank"):
        hf_types = [LayerKind.MLA.value if t == LayerKind.FULL.value else t for t in hf_types]
    differ = [i for i, (a, b) in enumerate(zip(rules, hf_types)) if a != b]
    if differ:
        view.warn(
            f"layers: transformers and hfvram rules differ at layers {differ[:8]}; using transformers ({hf.label})"
        )
    return hf_types, f"{hf.label}: layer_types"


def _per_layer_kv_heads(view: ConfigView, heads: int | None, num_layers: int) -> list[int | None]:
    """Nemotron-Super (DeciLM) block_configs: KV heads = heads / n_heads_in_group, per layer."""
    blocks, path = view.sequence("block_configs")
    if blocks is None:
        return [None] * num_layers
    if len(blocks) < num_layers:
        raise view.fail(path, f"has {len(blocks)} entries for {num_layers} layers")
    result: list[int | None] = []
    for i, block in enumerate(blocks[:num_layers]):
        attention = block.get("attention", {}) if isinstance(block, Mapping) else {}
        group = attention.get("n_heads_in_group") if isinstance(attention, Mapping) else None
        if group is None:
            result.append(None)
            continue
        group = view.to_int(f"{path}[{i}].attention.n_heads_in_group", group, 1)
        if heads is None:
            raise view.fail(view.text_prefix + "num_attention_heads", "block_configs need num_attention_heads")
        result.append(max(1, heads // group))
    view.note(
        "num_kv_heads",
        view.where(path) + "[*].attention.n_heads_in_group (KV heads = num_attention_heads / n_heads_in_group)",
    )
    return result


def _build_layers(
    view: ConfigView, types: list[str], moe: list[bool], hidden: int | None, heads: int | None, model_type: str | None
) -> tuple[list[Layer], dict[str, object]]:
    extra: dict[str, object] = {}
    needs_attention = not {LayerKind.FULL.value, LayerKind.SLIDING.value, LayerKind.CHUNKED.value, CSA, HCA}.isdisjoint(
        types
    )
    dims = attention_dims(view, hidden, heads) if needs_attention else None
    window, chunk = _windows(view, types)
    global_dims = _global_dims(view, dims)
    block_kv = _per_layer_kv_heads(view, heads, len(types))
    shared_kv = view.integer("num_kv_shared_layers", ["num_kv_shared_layers"], minimum=0, use_hf_default=False) or 0
    shapes = _LayerShapes(dims, global_dims, window, chunk, heads, hidden, model_type)
    layers: list[Layer] = []
    # one Layer per distinct (type, MoE, KV heads): a model's layers mostly repeat, so each is read once and the
    # estimator's per-layer sums run once per distinct layer (hfvram.estimate.common.layer_counts)
    made: dict[tuple[str, bool, int | None], Layer] = {}
    attention_made: dict[tuple[LayerKind, AttentionDims, int | None, bool], Layer] = {}
    first_shared = len(types) - shared_kv
    for i, (name, is_moe) in enumerate(zip(types, moe)):
        if i >= first_shared:
            name = LayerKind.NONE.value  # reuses an earlier layer's cache (Gemma-3n style)
        if name in (CSA, HCA):
            layers.append(_deepseek_v4_layer(view, name, dims, is_moe, extra))  # counts its layers
            continue
        key = (name, is_moe, block_kv[i])
        layer = made.get(key)
        if layer is None:
            layer = made[key] = _typed_layer(view, name, is_moe, block_kv[i], shapes, attention_made)
        layers.append(layer)
    if shared_kv:
        view.note(
            "num_kv_shared_layers",
            view.where(view.locate("num_kv_shared_layers")[1]) + " (last layers reuse earlier caches → none)",
        )
    return layers, extra


@dataclass(frozen=True)
class _LayerShapes:
    """What the config gives every layer of a type: attention dims (Gemma-4's full layers: their own), the sliding
    window and attention chunk, heads, hidden size and model type."""

    dims: AttentionDims | None
    global_dims: AttentionDims | None
    window: int | None
    chunk: int | None
    heads: int | None
    hidden: int | None
    model_type: str | None


def _typed_layer(
    view: ConfigView,
    name: str,
    is_moe: bool,
    block_kv: int | None,
    shapes: _LayerShapes,
    attention_made: dict[tuple[LayerKind, AttentionDims, int | None, bool], Layer],
) -> Layer:
    """The layer of type ``name`` (a layer_types entry; unknown -> no cache), ``block_kv``: its KV heads from
    block_configs (None: the config's)."""
    dims = shapes.dims
    if name == LayerKind.SLIDING.value and dims is not None and shapes.model_type == "deepseek_v4":
        return Layer(
            kind=LayerKind.SLIDING,
            num_kv_heads=dims.num_kv_heads,
            head_dim_k=dims.head_dim,
            head_dim_v=0,
            window=shapes.window,
            moe=is_moe,
        )
    if name in _ATTENTION_KINDS:
        kind = LayerKind(name)
        layer_dims = shapes.global_dims if kind is LayerKind.FULL and shapes.global_dims is not None else dims
        assert layer_dims is not None
        if block_kv is not None:
            layer_dims = AttentionDims(layer_dims.num_attention_heads, block_kv or 1, layer_dims.head_dim)
        window = shapes.window if kind is LayerKind.SLIDING else shapes.chunk
        return _shared_attention_layer(attention_made, kind, layer_dims, window, is_moe)
    if name == LayerKind.MLA.value:
        return mla_layer(view, shapes.heads, is_moe)
    if name == LayerKind.LINEAR.value:
        return linear_layer(view, is_moe)
    if name == LayerKind.MAMBA.value:
        return mamba_layer(view, shapes.hidden, shapes.model_type, is_moe)
    return Layer(kind=LayerKind.NONE, moe=is_moe)


_ATTENTION_KINDS = (LayerKind.FULL.value, LayerKind.SLIDING.value, LayerKind.CHUNKED.value)


def _shared_attention_layer(
    made: dict[tuple[LayerKind, AttentionDims, int | None, bool], Layer],
    kind: LayerKind,
    dims: AttentionDims,
    window: int | None,
    moe: bool,
) -> Layer:
    """The attention layer of this shape, made once per model: its layers mostly repeat (one frozen Layer each)."""
    shape = (kind, dims, window, moe)
    layer = made.get(shape)
    if layer is None:
        layer = made[shape] = attention_layer(kind, dims, window, moe)
    return layer


def _windows(view: ConfigView, types: list[str]) -> tuple[int | None, int | None]:
    """The sliding window and the attention chunk, each required where a layer of that kind exists."""
    window = (
        view.integer("sliding_window", ["sliding_window", "sliding_window_size"])
        if LayerKind.SLIDING.value in types
        else None
    )
    if LayerKind.SLIDING.value in types and window is None:
        raise view.fail(view.text_prefix + "sliding_window", "sliding layers without a sliding_window size")
    chunk = view.integer("attention_chunk_size", ["attention_chunk_size"]) if LayerKind.CHUNKED.value in types else None
    if LayerKind.CHUNKED.value in types and chunk is None:
        raise view.fail(view.text_prefix + "attention_chunk_size", "chunked layers without an attention_chunk_size")
    return window, chunk


def _global_dims(view: ConfigView, dims: AttentionDims | None) -> AttentionDims | None:
    """Gemma-4: full-attention layers use global_head_dim / num_global_key_value_heads."""
    if dims is None or not (view.has("global_head_dim") or view.has("num_global_key_value_heads")):
        return None
    head_dim = view.integer("global_head_dim", ["global_head_dim"], use_hf_default=False) or dims.head_dim
    kv_heads = (
        view.integer("num_global_key_value_heads", ["num_global_key_value_heads"], use_hf_default=False)
        or dims.num_kv_heads
    )
    if view.boolean("attention_k_eq_v", "attention_k_eq_v"):
        view.warn(
            "layers: attention_k_eq_v — full layers derive V from K, but K (with RoPE) and V (without) are cached separately, so both are counted"
        )
    return AttentionDims(dims.num_attention_heads, kv_heads, head_dim)


def _deepseek_v4_layer(
    view: ConfigView, name: str, dims: AttentionDims | None, moe: bool, extra: dict[str, object]
) -> Layer:
    """DeepSeek-V4 compressed layer as hfvram reads it: one shared K=V entry of head_dim per `ratio` tokens,
    counted as a full-attention layer of head_dim / ratio elements per token."""
    assert dims is not None
    ratio = 4 if name == CSA else 128  # DeepseekV4Config.compress_rates defaults (compress_ratios 4 / 128)
    per_token = dims.head_dim // ratio
    if dims.head_dim % ratio:
        view.warn(f"layers: DeepSeek-V4 head_dim {dims.head_dim} is not a multiple of compress ratio {ratio}")
    view.warn(
        "layers: DeepSeek-V4 compressed attention read as 1 shared K=V entry of head_dim per compress ratio tokens "
        "(counted as full attention with head_dim/ratio elements per token); each compressed layer's extra "
        "sliding-window branch (sliding_window × head_dim) and compressor buffers are not counted — uncertain, newer than hfvram's sources"
    )
    view.note(
        "deepseek_v4_layers",
        "derived: transformers DeepseekV4 cache (HCA/CSA caches: sliding K=V branch + one compressed entry per compress_rate tokens)",
    )
    view.note("head_dim_v", "derived: DeepSeek-V4 compressed layers cache one shared K=V entry (no separate V)")
    counts = extra.setdefault("deepseek_v4_compressed_layers", {CSA: 0, HCA: 0})
    assert isinstance(counts, dict)
    counts[name] += 1
    return Layer(kind=LayerKind.FULL, num_kv_heads=dims.num_kv_heads, head_dim_k=per_token, head_dim_v=0, moe=moe)


def _indexer(view: ConfigView, types: list[str], layers: list[Layer], extra: dict[str, object]) -> None:
    """DeepSeek-V3.2 / GLM-5 / V4 lightning-indexer key cache: index_head_dim per (compressed) token per layer."""
    index_dim = view.integer("index_head_dim", ["index_head_dim"], use_hf_default=False)
    if index_dim is None:
        return
    view.integer("index_n_heads", ["index_n_heads"], use_hf_default=False)
    if CSA in types:
        elems = sum(index_dim // 4 for t in types if t == CSA)
        how = "derived: index_head_dim / 4 (CSA compress ratio) per compressed-sparse layer"
    else:
        elems = sum(index_dim for layer in layers if layer.kind is LayerKind.MLA)
        how = "derived: index_head_dim per MLA layer (one indexer key per token; index_n_heads are query heads only)"
    extra["indexer_elems_per_token"] = elems
    view.note("indexer_elems_per_token", f"{view.where(view.locate('index_head_dim')[1])}; {how}")
    view.warn(
        f"indexer: the sparse-attention indexer caches {elems} more elements per token (extra.indexer_elems_per_token), not in kv_bytes_per_token"
    )


def read_config(
    config: dict,
    *,
    filename: str = "config.json",
    companions: Mapping[str, dict] | None = None,
    use_transformers: bool = True,
    hf_facts: HfFacts | Mapping[str, Any] | None = None,
    validated: bool = False,
) -> ModelSpec:
    """A ModelSpec (weights=None) from a parsed config.json and its companion files.

    Longer than 60 lines: one linear pass that reads each ModelSpec field once, in the order later fields depend
    on (split up, a dozen half-read facts would travel between the pieces as arguments).

    ``hf_facts``: transformers' facts for this config found earlier (an ``HfFacts`` or its JSON form: the sources
    look them up in the facts cache and the embedded catalogue), used instead of asking transformers; otherwise
    ``config_hf.hf_facts_for`` computes them (importing transformers) unless use_transformers=False.
    ``validated``: the caller has already passed ``config`` (not the companions) through ``validate_config``."""
    if not isinstance(config, Mapping):
        raise MalformedFileError(f"expected a JSON object, got {type(config).__name__}", file=filename)
    companions = dict(companions or {})
    if not validated:
        validate_config(config, filename=filename)  # before transformers or anything else iterates over a count
    for name, companion in companions.items():
        validate_config(companion, filename=name)
    text, prefix = _text_part(config, filename)
    hf = _transformers_facts(config, use_transformers, hf_facts)
    view = ConfigView(
        text=text,
        top=config,
        filename=filename,
        text_prefix=prefix,
        hf_defaults=hf.defaults if hf.ok else None,
        hf_label=hf.label,
    )

    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise view.fail("model_type", "expected a string")
    if model_type is None:
        view.warn("model_type: config.json has no model_type")
    text_model_type = _text_model_type(config)
    architecture = _architecture(config, view)
    num_layers = view.integer("num_layers", aliases("num_layers"), required=True, use_hf_default=False)
    assert num_layers is not None
    if num_layers > 100_000:
        raise view.fail(view.text_prefix + "num_hidden_layers", f"implausible layer count {num_layers}")
    hidden = view.integer("hidden_size", aliases("hidden_size"))
    heads = view.integer("num_attention_heads", aliases("num_attention_heads"))
    intermediate = view.integer("intermediate_size", aliases("intermediate_size"), use_hf_default=False)
    if intermediate is None:
        reason = "varies per layer (block_configs ffn_mult)" if view.has("block_configs") else "not stated"
        view.warn(f"intermediate_size: {reason} in config.json")
    vocab = view.integer("vocab_size", aliases("vocab_size"))
    max_positions = view.integer("max_position_embeddings", aliases("max_position_embeddings"))
    for fact, value in (
        ("hidden_size", hidden),
        ("num_attention_heads", heads),
        ("vocab_size", vocab),
        ("max_position_embeddings", max_positions),
    ):
        if value is None:
            view.warn(f"{fact}: not stated in config.json")
    tied = view.boolean("tie_word_embeddings", "tie_word_embeddings")
    if tied is None:
        default = view.hf_default("tie_word_embeddings")
        rule = config_rules()["tie_word_embeddings_default"].get(text_model_type or "")
        if isinstance(default, bool):
            tied = default
            view.note("tie_word_embeddings", f"{hf.label}: tie_word_embeddings (default)")
        elif isinstance(rule, bool):
            tied = rule
            view.note(
                "tie_word_embeddings",
                f"hfvram rules: transformers' {text_model_type} config default "
                f"(data/config_rules.toml tie_word_embeddings_default)",
            )
        else:
            view.warn("tie_word_embeddings: not stated in config.json and no transformers default")
    dtype = _canonical_dtype(view)
    num_experts, shared, per_token, moe_size = _experts(view)
    mtp = view.integer("num_mtp_layers", aliases("num_mtp_layers"), minimum=0, use_hf_default=False) or 0
    instances = (num_experts or 0) * (num_layers + mtp)
    if instances > bound("model", "maximum_expert_instances"):
        raise view.fail(
            _stated_path(view, aliases("num_experts")),
            f"implausible {num_experts:,} experts in each of {num_layers + mtp:,} layers "
            f"(hfvram's bound: at most {bound('model', 'maximum_expert_instances'):,} expert instances)",
        )

    types, layers_source = _layer_kinds(view, config, num_layers, hf)
    view.note("layers", layers_source)
    pattern = view.string("hybrid_override_pattern", "hybrid_override_pattern")
    moe, moe_source = moe_flags(view, types, num_experts, pattern)
    view.note("moe_layers", moe_source)
    layers, extra = _build_layers(view, types, moe, hidden, heads, text_model_type)
    _indexer(view, types, layers, extra)
    if text_model_type and text_model_type != model_type:
        extra["text_model_type"] = text_model_type
    extra["shape_config"] = shape_config(config)

    quant_config, quant_path = view.mapping("quantization_config")
    if quant_config is None:
        quant_config, quant_path = view.mapping("compression_config")
    quantization, quant_warnings = read_quantization(quant_config, quant_path, filename, companions)
    for warning in quant_warnings:
        view.warn(warning)
    if quantization is not None:
        view.note("quantization", quantization.source)

    if hf.ok:
        decided_by = f"transformers {hf.version}"
        if hf.origin:
            view.note("decided_by", f"{hf.label}, from the {hf.origin}")
    else:
        decided_by = "hfvram rules"
        if use_transformers and hf.failure:
            view.note("decided_by", f"hfvram rules: {hf.failure}")
    multimodal = bool(prefix) or isinstance(config.get("vision_config"), Mapping)

    return ModelSpec(
        architecture=architecture,
        model_type=model_type,
        dtype=dtype,
        num_layers=num_layers,
        layers=tuple(layers),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_attention_heads=heads,
        vocab_size=vocab,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tied,
        num_experts=num_experts,
        num_shared_experts=shared,
        experts_per_token=per_token,
        moe_intermediate_size=moe_size,
        num_mtp_layers=mtp,
        rope_scaling=_rope_scaling(view),
        multimodal=multimodal,
        quantization=quantization,
        provenance=dict(view.provenance),
        warnings=tuple(view.warnings),
        decided_by=decided_by,
        extra=extra,
    )


def _transformers_facts(
    config: Mapping[str, Any], use_transformers: bool, hf_facts: HfFacts | Mapping[str, Any] | None
) -> HfFacts:
    if hf_facts is not None:
        if isinstance(hf_facts, HfFacts):
            return hf_facts
        try:
            from hfvram.readers.config_hf import installed_transformers_version, precomputed_label

            return precomputed_label(
                HfFacts.from_json(hf_facts, origin="precomputed facts"), installed_transformers_version()
            )
        except ValueError as exc:
            return HfFacts("transformers", None, f"precomputed transformers facts unusable ({exc})")
    if not use_transformers:
        return HfFacts("transformers", None, "not asked")
    return hf_facts_for(config)


def read_config_files(files: Mapping[str, bytes], *, use_transformers: bool = True) -> ModelSpec:
    """read_config on raw file bytes by file name: "config.json" (required) and any of COMPANION_FILES."""
    if "config.json" not in files:
        raise MalformedFileError("no config.json among the model's files", file="config.json")
    companions = {name: load_json_tolerant(files[name], name) for name in COMPANION_FILES if name in files}
    return read_config(
        load_json_tolerant(files["config.json"], "config.json"),
        companions=companions,
        use_transformers=use_transformers,
    )
