"""Per-layer structure of a decoder from its config: which cache each layer keeps, and its sizes.

Two steps: ``rule_layer_types`` names each layer's type (hfvram's own rules, mirroring how transformers
derives ``layer_types``), then ``build_layers`` turns names into ``Layer`` shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hfvram.readers.config_fields import ConfigView, aliases, config_rules
from hfvram.spec import Layer, LayerKind

#: DeepSeek-V4 layer types (transformers DeepseekV4Config), kept apart from LayerKind until build time
CSA = "compressed_sparse_attention"
HCA = "heavily_compressed_attention"
_V4_RATIO_TYPES = {0: LayerKind.SLIDING.value, 4: CSA, 128: HCA}

_LAYER_TYPE_NAMES = {
    "full_attention": LayerKind.FULL.value,
    "attention": LayerKind.FULL.value,
    "global_attention": LayerKind.FULL.value,
    "sliding_attention": LayerKind.SLIDING.value,
    "local_attention": LayerKind.SLIDING.value,
    "chunked_attention": LayerKind.CHUNKED.value,
    "linear_attention": LayerKind.LINEAR.value,
    "mamba": LayerKind.MAMBA.value,
    "mamba2": LayerKind.MAMBA.value,
    "indexed_attention": LayerKind.MLA.value,
    "mla": LayerKind.MLA.value,
    CSA: CSA,
    HCA: HCA,
}

#: Nemotron-H hybrid_override_pattern symbols (transformers NemotronHConfig): the mixer of each block
_NEMOTRON_H_SYMBOLS = {
    "M": LayerKind.MAMBA.value,
    "*": LayerKind.FULL.value,
    "-": LayerKind.NONE.value,
    "E": LayerKind.NONE.value,
}


def normalize_layer_type(name: str, model_type: str | None) -> str | None:
    """A transformers / config.json layer-type name in hfvram's vocabulary (LayerKind values, CSA, HCA)."""
    if model_type == "nemotron_h":
        # NemotronHConfig calls its Mamba2 mixers "linear_attention" and MLP / MoE blocks "mlp" / "moe"
        return {
            "linear_attention": LayerKind.MAMBA.value,
            "mamba": LayerKind.MAMBA.value,
            "mlp": LayerKind.NONE.value,
            "moe": LayerKind.NONE.value,
            "full_attention": LayerKind.FULL.value,
            "attention": LayerKind.FULL.value,
        }.get(name)
    return _LAYER_TYPE_NAMES.get(name)


def _is_mla(view: ConfigView) -> bool:
    return view.has("kv_lora_rank")


def _per_layer_kinds(
    view: ConfigView,
    values: Sequence[Any],
    path: str,
    num_layers: int,
    kind_of: Callable[[Any], str | None],
    unknown: str,
) -> list[str]:
    """One layer kind per entry of a per-layer list (at least ``num_layers`` entries; an entry ``kind_of``
    does not know fails with ``unknown`` formatted with it)."""
    if len(values) < num_layers:
        raise view.fail(path, f"has {len(values)} entries for {num_layers} layers")
    kinds = []
    for i, value in enumerate(values[:num_layers]):
        kind = kind_of(value)
        if kind is None:
            raise view.fail(f"{path}[{i}]", unknown.format(value))
        kinds.append(kind)
    return kinds


def rule_layer_types(view: ConfigView, num_layers: int, model_type: str | None) -> tuple[list[str], str]:
    """hfvram's own per-layer types, and where they came from."""
    # 1. the file lists them
    listed, path = view.str_list("layer_types")
    if listed is not None:
        mla = _is_mla(view)

        def listed_kind(name: str) -> str | None:
            kind = normalize_layer_type(name, model_type)
            return LayerKind.MLA.value if mla and kind == LayerKind.FULL.value else kind

        return _per_layer_kinds(view, listed, path, num_layers, listed_kind, "unknown layer type {!r}"), view.where(
            path
        )

    pattern, path = _pattern(view, num_layers)
    if pattern is not None:
        return pattern, view.where(path)

    blocks, path = view.sequence("block_configs")
    if blocks is not None:
        return _block_types(view, blocks, path, num_layers), view.where(
            path
        ) + " (attention.no_op / replace_with_linear → none)"

    ratios, path = view.int_list("compress_ratios")
    if ratios is not None:
        types = _per_layer_kinds(
            view, ratios, path, num_layers, _V4_RATIO_TYPES.get, "unknown compress ratio {} (known: 0, 4, 128)"
        )
        return types, view.where(path) + " (0 → sliding only, 4 → compressed-sparse, 128 → heavily-compressed)"

    if _is_mla(view):
        return [LayerKind.MLA.value] * num_layers, view.where(view.locate("kv_lora_rank")[1])

    if model_type in config_rules()["encoder_only"]["model_types"]:
        return [
            LayerKind.NONE.value
        ] * num_layers, f"derived: model_type {model_type!r} is an encoder (no generation cache)"

    if model_type in ("mamba", "mamba2", "falcon_mamba"):
        return [LayerKind.MAMBA.value] * num_layers, f"derived: model_type {model_type!r} is attention-free"

    interval = view.integer("full_attention_interval", ["full_attention_interval"], use_hf_default=False)
    if interval is not None:
        types = [LayerKind.FULL.value if (i + 1) % interval == 0 else LayerKind.LINEAR.value for i in range(num_layers)]
        return types, view.where(view.locate("full_attention_interval")[1]) + " (every n-th layer full, others linear)"

    chunk = view.integer("attention_chunk_size", ["attention_chunk_size"], use_hf_default=False)
    if chunk is not None:
        return _chunked_types(view, num_layers)

    window = view.integer("sliding_window", ["sliding_window"], use_hf_default=False)
    if window is None:
        return [
            LayerKind.FULL.value
        ] * num_layers, "derived: no layer_types and no sliding_window → every layer full attention"
    return _sliding_types(view, num_layers, model_type)


def _pattern(view: ConfigView, num_layers: int) -> tuple[list[str] | None, str]:
    pattern = view.string("hybrid_override_pattern", "hybrid_override_pattern")
    path = view.locate("hybrid_override_pattern")[1]
    if pattern is None:
        return None, path
    if len(pattern) < num_layers:
        raise view.fail(path, f"has {len(pattern)} symbols for {num_layers} layers")
    unknown = sorted(set(pattern) - set(_NEMOTRON_H_SYMBOLS))
    if unknown:
        raise view.fail(path, f"unknown symbols {''.join(unknown)!r} (known: M * - E)")
    return [_NEMOTRON_H_SYMBOLS[s] for s in pattern[:num_layers]], path


def _block_types(view: ConfigView, blocks: list[Any], path: str, num_layers: int) -> list[str]:
    if len(blocks) < num_layers:
        raise view.fail(path, f"has {len(blocks)} entries for {num_layers} layers")
    types = []
    for i, block in enumerate(blocks[:num_layers]):
        attention = block.get("attention") if isinstance(block, Mapping) else None
        if not isinstance(attention, Mapping):
            raise view.fail(f"{path}[{i}].attention", "expected an object")
        if attention.get("no_op") is True or attention.get("replace_with_linear") is True:
            types.append(LayerKind.NONE.value)
        elif attention.get("window_length") is not None:
            types.append(LayerKind.SLIDING.value)
        else:
            types.append(LayerKind.FULL.value)
    return types


def _chunked_types(view: ConfigView, num_layers: int) -> tuple[list[str], str]:
    """Llama-4: layers with RoPE attend within a chunk; the NoPE layers (every 4th by default) are global."""
    flags, path = view.int_list("no_rope_layers")
    if flags:
        if len(flags) < num_layers:
            raise view.fail(path, f"has {len(flags)} entries for {num_layers} layers")
        types = [LayerKind.CHUNKED.value if flags[i] else LayerKind.FULL.value for i in range(num_layers)]
        return types, view.where(path) + " (1 = RoPE → chunked, 0 = NoPE → full)"
    interval = view.integer("no_rope_layer_interval", ["no_rope_layer_interval"], use_hf_default=False) or 4
    types = [LayerKind.FULL.value if (i + 1) % interval == 0 else LayerKind.CHUNKED.value for i in range(num_layers)]
    return (
        types,
        f"derived: attention_chunk_size with no no_rope_layers → every {interval}th layer NoPE full, others chunked (Llama4TextConfig rule)",
    )


def _sliding_types(view: ConfigView, num_layers: int, model_type: str | None) -> tuple[list[str], str]:
    sliding, full = LayerKind.SLIDING.value, LayerKind.FULL.value
    use_sliding = view.boolean("use_sliding_window", "use_sliding_window")
    if use_sliding is not None:  # Qwen2 family: SWA only when switched on, and only from max_window_layers up
        if not use_sliding:
            return [full] * num_layers, view.where(
                view.locate("use_sliding_window")[1]
            ) + " is false → every layer full"
        start = view.integer("max_window_layers", ["max_window_layers"], minimum=0, use_hf_default=False) or 0
        types = [sliding if i >= start else full for i in range(num_layers)]
        return types, view.where(view.locate("max_window_layers")[1]) + " (layers >= max_window_layers slide)"
    pattern = view.integer("sliding_window_pattern", ["sliding_window_pattern"], use_hf_default=False)
    if pattern is None and model_type in ("gemma3", "gemma3_text"):
        pattern = 6  # Gemma3TextConfig default: five local layers, then one global
    if pattern is not None:
        types = [full if (i + 1) % pattern == 0 else sliding for i in range(num_layers)]
        return types, f"derived: sliding_window_pattern {pattern} → every {pattern}th layer full, others sliding"
    if model_type in ("gemma2", "cohere2"):
        types = [sliding if i % 2 == 0 else full for i in range(num_layers)]
        return types, f"derived: {model_type} alternates (even layers sliding, odd layers full)"
    return [sliding] * num_layers, view.where(
        view.locate("sliding_window")[1]
    ) + " with no layer pattern → every layer sliding"


# ---- shapes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionDims:
    num_attention_heads: int | None
    num_kv_heads: int
    head_dim: int


def attention_dims(view: ConfigView, hidden_size: int | None, heads: int | None) -> AttentionDims:
    """KV heads and head_dim of an ordinary attention layer (vLLM get_total_num_kv_heads / get_head_size order)."""
    head_dim = view.integer("head_dim", aliases("head_dim"), use_hf_default=False)
    if head_dim is None:
        hf_head_dim = view.hf_default("head_dim")
        if isinstance(hf_head_dim, int) and not isinstance(hf_head_dim, bool) and hf_head_dim > 0:
            head_dim = hf_head_dim
            view.note("head_dim", f"{view.hf_label}: head_dim (default)")
    if head_dim is None:
        if hidden_size is None or heads is None:
            raise view.fail(
                view.text_prefix + "head_dim", "no head_dim and no hidden_size / num_attention_heads to derive it"
            )
        head_dim = hidden_size // heads
        if head_dim == 0:
            raise view.fail(
                view.text_prefix + "num_attention_heads", f"{heads} heads do not fit hidden_size {hidden_size}"
            )
        view.note("head_dim", "derived: hidden_size / num_attention_heads")
        if hidden_size % heads:
            view.warn(f"head_dim: hidden_size {hidden_size} is not a multiple of {heads} heads; using {head_dim}")
    kv_heads = view.integer("num_kv_heads", aliases("num_kv_heads"))
    if kv_heads is None:
        if heads is None:
            raise view.fail(view.text_prefix + "num_attention_heads", "no attention head count")
        kv_heads = heads
        view.note("num_kv_heads", "derived: no num_key_value_heads → multi-head attention (= num_attention_heads)")
    return AttentionDims(heads, kv_heads, head_dim)


def attention_layer(kind: LayerKind, dims: AttentionDims, window: int | None, moe: bool) -> Layer:
    return Layer(
        kind=kind,
        num_kv_heads=dims.num_kv_heads,
        head_dim_k=dims.head_dim,
        head_dim_v=dims.head_dim,
        window=window if kind in (LayerKind.SLIDING, LayerKind.CHUNKED) else None,
        moe=moe,
    )


def mla_layer(view: ConfigView, heads: int | None, moe: bool) -> Layer:
    rank = view.required_integer("kv_lora_rank", ["kv_lora_rank"])
    rope = view.required_integer("qk_rope_head_dim", ["qk_rope_head_dim"])
    nope = view.integer("qk_nope_head_dim", ["qk_nope_head_dim"], minimum=0) or 0
    v_dim = view.integer("v_head_dim", ["v_head_dim"]) or 0
    q_rank = view.integer("q_lora_rank", ["q_lora_rank"], minimum=0, use_hf_default=False) or 0
    return Layer(
        kind=LayerKind.MLA,
        num_kv_heads=heads or 0,
        head_dim_k=nope + rope,
        head_dim_v=v_dim,
        kv_lora_rank=rank,
        qk_rope_head_dim=rope,
        q_lora_rank=q_rank,
        moe=moe,
    )


def linear_layer(view: ConfigView, moe: bool) -> Layer:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5): vLLM MambaStateShapeCalculator, docs/engines/vllm.md#vllm-kv-specs."""
    k_heads = view.required_integer("linear_num_key_heads", ["linear_num_key_heads"])
    k_dim = view.required_integer("linear_key_head_dim", ["linear_key_head_dim"])
    v_heads = view.required_integer("linear_num_value_heads", ["linear_num_value_heads"])
    v_dim = view.required_integer("linear_value_head_dim", ["linear_value_head_dim"])
    kernel = view.required_integer("linear_conv_kernel_dim", ["linear_conv_kernel_dim"])
    ssm_dtype = _state_dtype_bytes(view, "mamba_ssm_dtype")
    view.note(
        "recurrent_state",
        "derived: conv (linear_conv_kernel_dim − 1) × (2 × linear_num_key_heads × "
        "linear_key_head_dim + linear_num_value_heads × linear_value_head_dim) + ssm linear_num_value_heads × "
        "linear_value_head_dim × linear_key_head_dim",
    )
    return Layer(
        kind=LayerKind.LINEAR,
        conv_state_elems=(kernel - 1) * (2 * k_heads * k_dim + v_heads * v_dim),
        ssm_state_elems=v_heads * v_dim * k_dim,
        state_dtype_bytes=ssm_dtype,
        state_heads=k_heads,
        moe=moe,
    )


def mamba_layer(view: ConfigView, hidden_size: int | None, model_type: str | None, moe: bool) -> Layer:
    """Mamba2 (Nemotron-H) / Mamba1 state per sequence: docs/engines/vllm.md#vllm-kv-specs."""
    d_state = view.required_integer("ssm_state_size", ["ssm_state_size", "state_size", "d_state"])
    kernel = view.required_integer("conv_kernel", ["conv_kernel", "d_conv", "mamba_d_conv"])
    heads = view.integer("mamba_num_heads", ["mamba_num_heads"])
    head_dim = view.integer("mamba_head_dim", ["mamba_head_dim"])
    if heads is not None and head_dim is not None:
        d_inner = heads * head_dim
        view.note("mamba_d_inner", "derived: mamba_num_heads × mamba_head_dim")
    else:
        expand = view.integer("expand", ["expand"])
        d_inner_stated = view.integer("intermediate_size", ["mamba_intermediate_size", "d_inner"])
        if d_inner_stated is not None:
            d_inner = d_inner_stated
        elif expand is not None and hidden_size is not None:
            d_inner = expand * hidden_size
            view.note("mamba_d_inner", "derived: expand × hidden_size")
        else:
            raise view.fail(
                view.text_prefix + "mamba_num_heads",
                "no Mamba inner size (mamba_num_heads × mamba_head_dim or expand × hidden_size)",
            )
    ssm_dtype = 4.0 if model_type == "nemotron_h" else _state_dtype_bytes(view, "mamba_ssm_cache_dtype")
    if model_type == "nemotron_h":
        view.note(
            "state_dtype_bytes",
            "derived: NemotronH keeps the SSM state in float32 (vLLM default); conv state counted at the same 4 bytes (small over-count)",
        )
    if heads is None:  # Mamba1: conv (k−1)·d_inner, ssm d_inner·d_state
        view.note("recurrent_state", "derived: conv (conv_kernel − 1) × d_inner + ssm d_inner × ssm_state_size")
        return Layer(
            kind=LayerKind.MAMBA,
            conv_state_elems=(kernel - 1) * d_inner,
            ssm_state_elems=d_inner * d_state,
            state_dtype_bytes=ssm_dtype,
            state_heads=0,
            moe=moe,
        )
    groups = view.integer("n_groups", ["n_groups", "ngroups", "mamba_n_groups"]) or 1
    view.note(
        "recurrent_state",
        "derived: conv (conv_kernel − 1) × (d_inner + 2 × n_groups × ssm_state_size) + "
        "ssm mamba_num_heads × mamba_head_dim × ssm_state_size",
    )
    return Layer(
        kind=LayerKind.MAMBA,
        conv_state_elems=(kernel - 1) * (d_inner + 2 * groups * d_state),
        ssm_state_elems=heads * (head_dim or 0) * d_state,
        state_dtype_bytes=ssm_dtype,
        state_heads=heads,
        moe=moe,
    )


def _state_dtype_bytes(view: ConfigView, key: str) -> float | None:
    name = view.string("state_dtype", key)
    if name is None:
        return None
    size = {"float32": 4.0, "fp32": 4.0, "float16": 2.0, "bfloat16": 2.0, "float64": 8.0}.get(name)
    if size is None:
        view.warn(f"state_dtype: {key} {name!r} is not a dtype hfvram knows; state counted at the cache dtype")
    elif size == 4.0:
        view.note(
            "state_dtype_bytes",
            view.where(view.locate(key)[1])
            + " (SSM state fp32; conv state counted at the same 4 bytes, a small over-count)",
        )
    return size


# ---- MoE ----------------------------------------------------------------------------------------


def moe_flags(
    view: ConfigView, types: list[str], num_experts: int | None, pattern_symbols: str | None
) -> tuple[list[bool], str]:
    """Which layers' FFN is a mixture of experts."""
    n = len(types)
    if pattern_symbols is not None:
        return [s == "E" for s in pattern_symbols[:n]], "derived: hybrid_override_pattern 'E' blocks"
    if not num_experts:
        return [False] * n, "derived: no experts"
    dense = set()
    mlp_only, _ = view.int_list("mlp_only_layers")
    if mlp_only:
        dense.update(mlp_only)
    first_dense = view.integer("first_k_dense_replace", ["first_k_dense_replace"], minimum=0, use_hf_default=False)
    freq = view.integer("moe_layer_freq", ["moe_layer_freq"], use_hf_default=False)
    step = view.integer(
        "decoder_sparse_step", ["decoder_sparse_step", "interleave_moe_layer_step"], use_hf_default=False
    )
    flags = []
    for i in range(n):
        moe = i not in dense
        if first_dense is not None:
            moe = moe and i >= first_dense and (freq is None or i % freq == 0)
        elif step is not None:
            moe = moe and (i + 1) % step == 0
        flags.append(moe)
    parts = [
        k
        for k, v in (
            ("mlp_only_layers", mlp_only),
            ("first_k_dense_replace", first_dense),
            ("moe_layer_freq", freq),
            ("decoder_sparse_step", step),
        )
        if v
    ]
    return flags, "derived: " + (", ".join(parts) if parts else "every layer MoE")
