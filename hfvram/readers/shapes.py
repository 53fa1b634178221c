"""The checkpoint's tensor list derived from a config-derived ModelSpec, for when no header can be read.

Names and shapes follow the transformers modelling code (``nn.Linear(in, out)`` stores ``weight [out, in]``);
stored dtypes and companion tensors follow ``spec.quantization`` with the byte formulas of
docs/engines/common.md#hf-quant-formats. What a ModelSpec's own fields do not carry (attention biases, the MLA query rank,
shared-expert widths, mixer sizes, DeciLM block_configs, the vision tower) comes from ``shape_config(config)``,
which read_config stores in ``spec.extra["shape_config"]``: passing the raw config.json gives the same result.
The sums are estimates: ``Weights.exact`` is False.

The experts of a MoE layer are built once and counted ``num_experts`` times (``_Entry.copies``), so summing
a 384-expert model takes a few thousand entries, not hundreds of thousands of tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hfvram.readers.bounds import bound, config_bounds
from hfvram.readers.quant_modules import Exclusions, compressed_tensors_scheme, exclusions
from hfvram.readers.tensors import TensorInfo, hf_component, tensor_nbytes, weights_from_counted_tensors
from hfvram.spec import Layer, LayerKind, ModelSpec, Weights

DERIVED_SOURCE = "derived: tensor shapes from config.json"

_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
#: model types whose attention has per-head q/k RMSNorm (modelling code: q_norm / k_norm of head_dim)
_QK_NORM = {"qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmo2", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}
#: model types whose full-attention q_proj also produces the output gate (Qwen3-Next / Qwen3.5 gated attention)
_GATED_Q = {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}
#: model types with a bias on q/k/v only (Qwen2 attention: bias=True on q_proj, k_proj, v_proj)
_QKV_BIAS = {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"}
#: model types with the extra pre/post feed-forward norms (Gemma2Decoder / Gemma3Decoder)
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}
#: text-config keys the derived tensor list reads beyond the ModelSpec's own fields
SHAPE_KEYS = (
    "attention_bias",
    "q_lora_rank",
    "attn_output_gate",
    "shared_expert_intermediate_size",
    "topk_method",
    "intermediate_size_mlp",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "mamba_num_heads",
    "mamba_head_dim",
    "n_groups",
    "ssm_state_size",
    "use_bias",
    "conv_kernel",
    "use_conv_bias",
    "hybrid_override_pattern",
    "attention_head_dim",
    "head_dim",
    "num_key_value_heads",
    "mlp_bias",
    "moe_shared_expert_intermediate_size",
    "block_configs",
    # Gemma-4: K doubles as V on full layers, a dense MLP beside the experts, per-layer inputs, KV-sharing layers
    "attention_k_eq_v",
    "enable_moe_block",
    "hidden_size_per_layer_input",
    "vocab_size_per_layer_input",
    "num_kv_shared_layers",
    "use_double_wide_mlp",
    # not shapes: the rotary share of a head, for the engines' rotary caches (hfvram/estimate/multimodal.py)
    "partial_rotary_factor",
)
#: DeciLM (nemotron-nas) rounds each layer's FFN width up to this multiple (modeling_decilm._find_multiple)
_DECI_FFN_MULTIPLE = 256


def shape_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a raw config.json the derived tensor list needs (JSON-able; stored by read_config in
    ``spec.extra["shape_config"]``): SHAPE_KEYS of the text config (falling back to the top level), the
    vision_config, and whether (and as which model_type) the language model is nested in a text_config."""
    text = config.get("text_config")
    nested = isinstance(text, Mapping)
    merged: Mapping[str, Any] = {**config, **text} if isinstance(text, Mapping) else config
    facts: dict[str, Any] = {key: merged[key] for key in SHAPE_KEYS if key in merged}
    rope_parameters = merged.get("rope_parameters")
    # transformers 5 keeps partial_rotary_factor inside rope_parameters
    if isinstance(rope_parameters, Mapping) and "partial_rotary_factor" in rope_parameters:
        facts.setdefault("partial_rotary_factor", rope_parameters["partial_rotary_factor"])
    facts["nested_text_config"] = nested
    if isinstance(text, Mapping) and isinstance(text.get("model_type"), str):
        facts["text_model_type"] = text["model_type"]
    if isinstance(config.get("vision_config"), Mapping):
        facts["vision_config"] = dict(config["vision_config"])
    return facts


@dataclass
class _Entry:
    """One derived tensor, standing for ``copies`` tensors named ``head + str(i) + tail`` (i < copies) when
    ``slot`` is set (the experts of a MoE layer), else for itself alone."""

    info: TensorInfo
    copies: int = 1
    slot: tuple[str, str] | None = None

    def expand(self) -> Iterator[TensorInfo]:
        if self.slot is None:
            yield self.info
            return
        head, tail = self.slot
        info = self.info
        for i in range(self.copies):
            yield TensorInfo(name=f"{head}{i}{tail}", dtype=info.dtype, shape=info.shape, nbytes=info.nbytes)


@dataclass
class _Builder:
    spec: ModelSpec
    config: Mapping[str, Any]
    dtype: str
    entries: list[_Entry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _excluded: Exclusions | None = None
    #: while building expert 0 of ``count`` experts: (name prefix "….experts.", count); None otherwise
    _expert_group: tuple[str, int] | None = None
    #: set when a quantization exclusion treats expert 0 and the last expert differently
    _experts_differ: bool = False
    #: experts still allowed to be built one by one (bounds.toml [shapes] maximum_experts_one_by_one)
    _one_by_one_left: int = field(default_factory=lambda: bound("shapes", "maximum_experts_one_by_one"))

    @property
    def tensors(self) -> list[TensorInfo]:
        return [info for entry in self.entries for info in entry.expand()]

    # ---- primitives ----------------------------------------------------------------------------

    def plain(self, name: str, shape: tuple[int, ...], dtype: str | None = None) -> None:
        dtype = dtype or self.dtype
        nbytes = tensor_nbytes(dtype, shape)
        assert nbytes is not None
        self.entries.append(_Entry(TensorInfo(name=name, dtype=dtype, shape=tuple(shape), nbytes=nbytes)))

    def linear(self, name: str, n_out: int, n_in: int, *, bias: bool = False) -> None:
        """A Linear layer ``name`` (without ``.weight``) stored as the checkpoint's quantization says."""
        self.quantized_linear(name, n_out, n_in) if self._quantized(name) else self.plain(
            f"{name}.weight", (n_out, n_in)
        )
        if bias:
            self.plain(f"{name}.bias", (n_out,))

    def _quantized(self, name: str) -> bool:
        quant = self.spec.quantization
        if quant is None or quant.method in ("mxfp4", "gguf"):
            return False
        if self._excluded is None:
            self._excluded = exclusions(quant)
        excluded = self._excluded.match(name)
        if self._expert_group is not None:
            head, count = self._expert_group
            last = head + str(count - 1) + name[len(head) + 1 :]
            if self._excluded.match(last) != excluded:
                self._experts_differ = True
        return not excluded

    def each_expert(self, base: str, count: int, build: Callable[[str], None]) -> None:
        """``build(f"{base}.{e}")`` for every expert e < count: built once and counted ``count`` times, unless
        the quantization's exclusions could single out some experts (then built one by one)."""
        if count > 1 and not self._exclusions_name_experts():
            start = len(self.entries)
            self._expert_group, self._experts_differ = (f"{base}.", count), False
            try:
                build(f"{base}.0")
            finally:
                self._expert_group = None
            if not self._experts_differ:
                head = f"{base}."
                for entry in self.entries[start:]:
                    entry.copies, entry.slot = count, (head, entry.info.name[len(head) + 1 :])
                return
            del self.entries[start:]
        if count > self._one_by_one_left:
            # a hostile (or huge) expert count: grouped like expert 0 rather than built one by one
            self.warnings.append(
                f"{base}: quantization exclusions may single out experts, but {count} experts exceed what is "
                f"built one by one ({bound('shapes', 'maximum_experts_one_by_one'):,} in all): every expert counted "
                "like expert 0"
            )
            start = len(self.entries)
            build(f"{base}.0")
            head = f"{base}."
            for entry in self.entries[start:]:
                if entry.info.name.startswith(head + "0."):
                    entry.copies, entry.slot = count, (head, entry.info.name[len(head) + 1 :])
            return
        self._one_by_one_left -= count
        for e in range(count):
            build(f"{base}.{e}")

    def _exclusions_name_experts(self) -> bool:
        quant = self.spec.quantization
        if quant is None or quant.method in ("mxfp4", "gguf"):
            return False
        if self._excluded is None:
            self._excluded = exclusions(quant)
        return self._excluded.may_name_single_experts()

    def quantized_linear(self, name: str, n_out: int, n_in: int) -> None:
        quant = self.spec.quantization
        assert quant is not None
        method = quant.method
        details = quant.details or {}
        bits = min(max(int(quant.bits or 4), 1), 32)
        group = quant.group_size if quant.group_size and quant.group_size > 0 else max(n_in, 1)
        if method == "fp8":
            block = details.get("weight_block_size")
            self.plain(f"{name}.weight", (n_out, n_in), "F8_E4M3")
            if (
                isinstance(block, (list, tuple))
                and len(block) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in block)
            ):
                self.plain(f"{name}.weight_scale_inv", (math.ceil(n_out / block[0]), math.ceil(n_in / block[1])), "F32")
            else:  # per-tensor scales (ModelOpt FP8): weight_scale and input_scale scalars
                self.plain(f"{name}.weight_scale", (), "F32")
                self.plain(f"{name}.input_scale", (), "F32")
        elif method == "gptq":
            pack = 32 // bits
            self.plain(f"{name}.qweight", (n_in // pack, n_out), "I32")
            self.plain(f"{name}.qzeros", (math.ceil(n_in / group), n_out // pack), "I32")
            self.plain(f"{name}.scales", (math.ceil(n_in / group), n_out), "F16")
            self.plain(f"{name}.g_idx", (n_in,), "I32")
            self.plain(f"{name}.bias", (n_out,), "F16")  # AutoGPTQ QuantLinear always saves a bias
        elif method == "awq":
            pack = 32 // bits
            self.plain(f"{name}.qweight", (n_in, n_out // pack), "I32")
            self.plain(f"{name}.qzeros", (math.ceil(n_in / group), n_out // pack), "I32")
            self.plain(f"{name}.scales", (math.ceil(n_in / group), n_out), "F16")
        elif method == "compressed-tensors":
            self._compressed_tensors_linear(name, n_out, n_in, details, bits)
        elif method in ("nvfp4", "modelopt"):
            self.plain(f"{name}.weight", (n_out, n_in // 2), "U8")
            self.plain(f"{name}.weight_scale", (n_out, math.ceil(n_in / 16)), "F8_E4M3")
            self.plain(f"{name}.weight_scale_2", (), "F32")
            self.plain(f"{name}.input_scale", (), "F32")
        elif method == "bitsandbytes" and bits == 4:
            numel = n_out * n_in
            block = quant.group_size or 64
            self.plain(f"{name}.weight", ((numel + 1) // 2, 1), "U8")
            self.plain(f"{name}.weight.absmax", (math.ceil(numel / max(block, 1)),), "F32")
            self.plain(f"{name}.weight.quant_map", (16,), "F32")
            self.plain(f"{name}.weight.quant_state.bitsandbytes__nf4", (80,), "U8")
        elif method == "bitsandbytes":
            self.plain(f"{name}.weight", (n_out, n_in), "I8")
            self.plain(f"{name}.SCB", (n_out,), "F32")
        else:
            self.warnings.append(f"quantization {method!r}: tensor layout unknown, counted at the model dtype")
            self.plain(f"{name}.weight", (n_out, n_in))

    def _compressed_tensors_linear(
        self, name: str, n_out: int, n_in: int, details: Mapping[str, Any], bits: int
    ) -> None:
        """One Linear of a compressed-tensors checkpoint, in the format of the config group that targets it
        (docs/engines/common.md#hf-quant-formats); a module no group targets is stored unquantized."""
        schemes = details.get("schemes") or [{}]
        scheme = compressed_tensors_scheme(schemes, name)
        if scheme is None:
            self.plain(f"{name}.weight", (n_out, n_in))
            return
        # a mixed-precision checkpoint states the format per group; the top-level format is the others'
        fmt = str(scheme.get("format") or details.get("format", ""))
        stated_bits = scheme.get("num_bits")
        bits = min(max(int(stated_bits), 1), 32) if isinstance(stated_bits, (int, float)) else bits
        strategy = scheme.get("strategy")
        stated = scheme.get("group_size")
        group = max(stated, 0) if isinstance(stated, int) else 0
        if fmt in ("nvfp4-pack-quantized", "mxfp4-pack-quantized") or (scheme.get("type") == "float" and bits == 4):
            # FP4 E2M1, two per byte; NVFP4: an FP8 scale per 16 and FP32 global scales, MXFP4: a UE8M0 scale per 32
            self.plain(f"{name}.weight_packed", (n_out, n_in // 2), "U8")
            if fmt == "mxfp4-pack-quantized":
                self.plain(f"{name}.weight_scale", (n_out, n_in // (group or 32)), "U8")
                return
            self.plain(f"{name}.weight_scale", (n_out, n_in // (group or 16)), "F8_E4M3")
            self.plain(f"{name}.weight_global_scale", (1,), "F32")
            self.plain(f"{name}.input_global_scale", (1,), "F32")
            return
        if fmt == "pack-quantized" or (scheme.get("type") == "int" and bits < 8):
            pack = 32 // bits
            self.plain(f"{name}.weight_packed", (n_out, n_in // pack), "I32")
            self.plain(f"{name}.weight_scale", (n_out, n_in // group if group else 1))
            self.plain(f"{name}.weight_shape", (2,), "I64")
            return
        stored = "F8_E4M3" if fmt == "float-quantized" or scheme.get("type") == "float" else "I8"
        self.plain(f"{name}.weight", (n_out, n_in), stored)
        if strategy == "tensor":
            self.plain(f"{name}.weight_scale", (1,), "F32")
        else:
            self.plain(f"{name}.weight_scale", (n_out, 1), self.dtype if stored == "I8" else "BF16")

    # ---- model parts ---------------------------------------------------------------------------

    def attention(self, prefix: str, layer: Layer) -> None:
        spec, cfg = self.spec, self.config
        hidden = spec.hidden_size or 0
        heads = spec.num_attention_heads or layer.num_kv_heads
        model_type = _text_model_type(spec, cfg)
        bias_all = bool(cfg.get("attention_bias", model_type == "gpt_oss"))
        qkv_bias = bias_all or model_type in _QKV_BIAS
        attn = f"{prefix}.self_attn"
        if layer.kind is LayerKind.MLA:
            rope, rank = layer.qk_rope_head_dim, layer.kv_lora_rank
            q_rank = cfg.get("q_lora_rank")
            if q_rank:
                self.linear(f"{attn}.q_a_proj", q_rank, hidden)
                self.plain(f"{attn}.q_a_layernorm.weight", (q_rank,))
                self.linear(f"{attn}.q_b_proj", heads * layer.head_dim_k, q_rank)
            else:
                self.linear(f"{attn}.q_proj", heads * layer.head_dim_k, hidden)
            self.linear(f"{attn}.kv_a_proj_with_mqa", rank + rope, hidden)
            self.plain(f"{attn}.kv_a_layernorm.weight", (rank,))
            self.linear(f"{attn}.kv_b_proj", heads * (layer.head_dim_k - rope + layer.head_dim_v), rank)
            self.linear(f"{attn}.o_proj", hidden, heads * layer.head_dim_v)
            return
        head_k, head_v, kv = layer.head_dim_k, layer.head_dim_v, layer.num_kv_heads
        gated = model_type in _GATED_Q or bool(cfg.get("attn_output_gate"))
        self.linear(f"{attn}.q_proj", heads * head_k * (2 if gated else 1), hidden, bias=qkv_bias)
        self.linear(f"{attn}.k_proj", kv * head_k, hidden, bias=qkv_bias)
        self.linear(f"{attn}.v_proj", kv * head_v, hidden, bias=qkv_bias)
        self.linear(f"{attn}.o_proj", hidden, heads * head_v, bias=bias_all)
        if model_type in _QK_NORM:
            self.plain(f"{attn}.q_norm.weight", (head_k,))
            self.plain(f"{attn}.k_norm.weight", (head_k,))
        if model_type == "gpt_oss":
            self.plain(f"{attn}.sinks", (heads,))

    def dense_mlp(self, prefix: str, intermediate: int) -> None:
        hidden = self.spec.hidden_size or 0
        self.linear(f"{prefix}.gate_proj", intermediate, hidden)
        self.linear(f"{prefix}.up_proj", intermediate, hidden)
        self.linear(f"{prefix}.down_proj", hidden, intermediate)

    def moe(self, prefix: str) -> None:
        spec, cfg = self.spec, self.config
        hidden = spec.hidden_size or 0
        experts = spec.num_experts or 0
        size = spec.moe_intermediate_size or spec.intermediate_size or 0
        model_type = _text_model_type(spec, cfg)
        if model_type == "gpt_oss":
            self._gpt_oss_experts(f"{prefix}.mlp", experts, hidden, size)
            return
        if model_type == "llama4_text":
            self._llama4_moe(f"{prefix}.feed_forward", experts, hidden, size)
            return
        if model_type == "mixtral":
            self.plain(f"{prefix}.block_sparse_moe.gate.weight", (experts, hidden))

            def mixtral_expert(base: str) -> None:
                self.linear(f"{base}.w1", size, hidden)
                self.linear(f"{base}.w3", size, hidden)
                self.linear(f"{base}.w2", hidden, size)

            self.each_expert(f"{prefix}.block_sparse_moe.experts", experts, mixtral_expert)
            return
        self.plain(f"{prefix}.mlp.gate.weight", (experts, hidden))
        if model_type in ("deepseek_v3", "kimi_k2", "glm4_moe") or cfg.get("topk_method") == "noaux_tc":
            self.plain(f"{prefix}.mlp.gate.e_score_correction_bias", (experts,), "F32")
        self.each_expert(f"{prefix}.mlp.experts", experts, lambda base: self.dense_mlp(base, size))
        shared = spec.num_shared_experts or 0
        shared_size = cfg.get("shared_expert_intermediate_size")
        if shared_size:  # Qwen2-MoE style: one shared expert of its own width plus a sigmoid gate
            self.dense_mlp(f"{prefix}.mlp.shared_expert", int(shared_size))
            self.plain(f"{prefix}.mlp.shared_expert_gate.weight", (1, hidden))
        elif shared:
            self.dense_mlp(f"{prefix}.mlp.shared_experts", size * shared)

    def _llama4_moe(self, prefix: str, experts: int, hidden: int, size: int) -> None:
        """Llama 4 MoE block (transformers Llama4TextMoe): router, fused experts, one always-on shared expert."""
        self.plain(f"{prefix}.router.weight", (experts, hidden))
        if self.spec.quantization is None:
            self.plain(f"{prefix}.experts.gate_up_proj", (experts, hidden, 2 * size))
            self.plain(f"{prefix}.experts.down_proj", (experts, size, hidden))
        else:  # quantized checkpoints store the experts one by one
            self.each_expert(f"{prefix}.experts", experts, lambda base: self.dense_mlp(base, size))
        self.dense_mlp(f"{prefix}.shared_expert", size)

    def _gpt_oss_experts(self, prefix: str, experts: int, hidden: int, size: int) -> None:
        self.plain(f"{prefix}.router.weight", (experts, hidden))
        self.plain(f"{prefix}.router.bias", (experts,))
        quant = self.spec.quantization
        for proj, n_out, n_in in (("gate_up_proj", 2 * size, hidden), ("down_proj", hidden, size)):
            if quant is not None and quant.method == "mxfp4":
                # MXFP4 (docs/engines/common.md#hf-quant-formats): *_blocks [E, out, in/32, 16] + *_scales [E, out, in/32]
                self.plain(f"{prefix}.experts.{proj}_blocks", (experts, n_out, n_in // 32, 16), "U8")
                self.plain(f"{prefix}.experts.{proj}_scales", (experts, n_out, n_in // 32), "U8")
            else:
                self.plain(f"{prefix}.experts.{proj}", (experts, n_in, n_out))
            self.plain(f"{prefix}.experts.{proj}_bias", (experts, n_out))

    def decoder_layer(self, prefix: str, layer: Layer, index: int = 0) -> None:
        hidden = self.spec.hidden_size or 0
        model_type = _text_model_type(self.spec, self.config)
        if model_type == "gemma4_text":
            self.gemma4_layer(prefix, layer, index)
            return
        self.plain(f"{prefix}.input_layernorm.weight", (hidden,))
        self.plain(f"{prefix}.post_attention_layernorm.weight", (hidden,))
        if model_type in _FOUR_NORMS:
            self.plain(f"{prefix}.pre_feedforward_layernorm.weight", (hidden,))
            self.plain(f"{prefix}.post_feedforward_layernorm.weight", (hidden,))
        if layer.kind is LayerKind.LINEAR and "linear_num_value_heads" in self.config:
            self.gated_delta_net(f"{prefix}.linear_attn")
        elif layer.kind in (LayerKind.LINEAR, LayerKind.MAMBA):
            self.warnings.append(f"{prefix}: {layer.kind.value} mixer weights are not derived")
        elif layer.kind is not LayerKind.NONE:
            self.attention(prefix, layer)
        dense_size = self.config.get("intermediate_size_mlp") if model_type == "llama4_text" else None
        if layer.moe and self.spec.num_experts:
            self.moe(prefix)
        elif dense_size:
            self.dense_mlp(f"{prefix}.feed_forward", int(dense_size))
        elif self.spec.intermediate_size:
            self.dense_mlp(f"{prefix}.mlp", self.spec.intermediate_size)
        else:
            self.warnings.append(f"{prefix}: intermediate_size unknown, MLP not derived")

    def gemma4_layer(self, prefix: str, layer: Layer, index: int) -> None:
        """One Gemma-4 decoder layer (transformers models/gemma4/modeling_gemma4.py at huggingface/transformers@
        c308a309e651a7e033f683353f3f75aa66d29502: Gemma4TextAttention, Gemma4TextDecoderLayer): four RMSNorms and a
        layer_scalar; q/k/v/o with per-head q/k norms, no v_proj where K doubles as V (attention_k_eq_v, full
        layers) and no k/v at all on a layer that reads another's cache (num_kv_shared_layers); a dense gated MLP
        (twice as wide on those layers with use_double_wide_mlp); the per-layer-input gate of E2B/E4B; with
        enable_moe_block the router (projection, scale, per-expert scale), the experts beside the dense MLP and
        their three norms. The experts are listed one by one as the quantizers store them (llm-compressor unpacks
        the fused gate_up_proj / down_proj of an unquantized checkpoint): the same parameters."""
        cfg, spec = self.config, self.spec
        hidden, heads = spec.hidden_size or 0, spec.num_attention_heads or 0
        head, kv = layer.head_dim_k, layer.num_kv_heads
        shared_from = spec.num_layers - int(cfg.get("num_kv_shared_layers") or 0)
        shared = index >= shared_from > 0
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm"):
            self.plain(f"{prefix}.{norm}.weight", (hidden,))
        self.plain(f"{prefix}.post_feedforward_layernorm.weight", (hidden,))
        self.plain(f"{prefix}.layer_scalar", (1,))
        attn = f"{prefix}.self_attn"
        self.linear(f"{attn}.q_proj", heads * head, hidden)
        self.plain(f"{attn}.q_norm.weight", (head,))
        if not shared:
            self.linear(f"{attn}.k_proj", kv * head, hidden)
            if not (cfg.get("attention_k_eq_v") and layer.kind is LayerKind.FULL):
                self.linear(f"{attn}.v_proj", kv * head, hidden)
            self.plain(f"{attn}.k_norm.weight", (head,))
        self.linear(f"{attn}.o_proj", hidden, heads * head)
        wide = 2 if shared and cfg.get("use_double_wide_mlp") else 1
        self.dense_mlp(f"{prefix}.mlp", (spec.intermediate_size or 0) * wide)
        per_layer = int(cfg.get("hidden_size_per_layer_input") or 0)
        if per_layer:
            self.linear(f"{prefix}.per_layer_input_gate", per_layer, hidden)
            self.linear(f"{prefix}.per_layer_projection", hidden, per_layer)
            self.plain(f"{prefix}.post_per_layer_input_norm.weight", (hidden,))
        if cfg.get("enable_moe_block") and spec.num_experts:
            experts, size = spec.num_experts, spec.moe_intermediate_size or 0
            self.plain(f"{prefix}.router.proj.weight", (experts, hidden))
            self.plain(f"{prefix}.router.scale", (hidden,))
            self.plain(f"{prefix}.router.per_expert_scale", (experts,))
            self.each_expert(f"{prefix}.experts", experts, lambda base: self.dense_mlp(base, size))
            for norm in ("post_feedforward_layernorm_1", "post_feedforward_layernorm_2", "pre_feedforward_layernorm_2"):
                self.plain(f"{prefix}.{norm}.weight", (hidden,))

    def gemma4_globals(self, prefix: str) -> None:
        """Gemma-4's per-layer input embedding, its projection and norm (E2B/E4B: hidden_size_per_layer_input)."""
        cfg, spec = self.config, self.spec
        per_layer = int(cfg.get("hidden_size_per_layer_input") or 0)
        if not per_layer:
            return
        width = spec.num_layers * per_layer
        vocab = int(cfg.get("vocab_size_per_layer_input") or spec.vocab_size or 0)
        self.plain(f"{prefix}.embed_tokens_per_layer.weight", (vocab, width))
        self.linear(f"{prefix}.per_layer_model_projection", width, spec.hidden_size or 0)
        self.plain(f"{prefix}.per_layer_projection_norm.weight", (per_layer,))

    def deci_layer(self, prefix: str, layer: Layer, block: Mapping[str, Any]) -> None:
        """One DeciLM (nemotron-nas) block as modeling_decilm builds it: attention may be absent (no_op) or a
        single hidden×hidden Linear (replace_with_linear), likewise the FFN, whose width is set per layer by
        ffn_mult (``_ffn_mult_to_intermediate_size``)."""
        hidden = self.spec.hidden_size or 0
        attention: Mapping[str, Any] = block["attention"] if isinstance(block.get("attention"), Mapping) else {}
        ffn: Mapping[str, Any] = block["ffn"] if isinstance(block.get("ffn"), Mapping) else {}
        if not attention.get("no_op"):
            self.plain(f"{prefix}.input_layernorm.weight", (hidden,))
            if attention.get("replace_with_linear"):
                self.linear(f"{prefix}.self_attn.linear_attn", hidden, hidden)
            elif layer.kind is not LayerKind.NONE:
                self.attention(prefix, layer)
        if ffn.get("no_op"):
            return
        self.plain(f"{prefix}.post_attention_layernorm.weight", (hidden,))
        if ffn.get("replace_with_linear"):
            self.linear(f"{prefix}.mlp.linear_mlp", hidden, hidden)
            return
        width = deci_ffn_width(ffn.get("ffn_mult"), hidden)
        if width is None:
            self.warnings.append(f"{prefix}: block_configs ffn_mult missing or implausible, MLP not derived")
            return
        self.dense_mlp(f"{prefix}.mlp", width)

    def gated_delta_net(self, prefix: str) -> None:
        """Gated DeltaNet mixer (transformers Qwen3NextGatedDeltaNet): fused q/k/v/z and b/a projections,
        a depthwise causal conv over q/k/v, per-head decay parameters, a gated RMSNorm and the output projection."""
        cfg, hidden = self.config, self.spec.hidden_size or 0
        k_heads, v_heads = int(cfg.get("linear_num_key_heads") or 0), int(cfg.get("linear_num_value_heads") or 0)
        k_dim = k_heads * int(cfg.get("linear_key_head_dim") or 0)
        head_v = int(cfg.get("linear_value_head_dim") or 0)
        v_dim = v_heads * head_v
        kernel = int(cfg.get("linear_conv_kernel_dim") or 4)
        self.linear(f"{prefix}.in_proj_qkvz", 2 * k_dim + 2 * v_dim, hidden)
        self.linear(f"{prefix}.in_proj_ba", 2 * v_heads, hidden)
        self.plain(f"{prefix}.conv1d.weight", (2 * k_dim + v_dim, 1, kernel))
        self.plain(f"{prefix}.dt_bias", (v_heads,))
        self.plain(f"{prefix}.A_log", (v_heads,))
        self.plain(f"{prefix}.norm.weight", (head_v,))
        self.linear(f"{prefix}.out_proj", hidden, v_dim)

    def mamba2_mixer(self, prefix: str) -> None:
        """Mamba-2 mixer (transformers NemotronHMamba2Mixer): in_proj → [gate, x·B·C, dt], depthwise conv,
        per-head A/D/dt, gated norm, out_proj."""
        cfg, hidden = self.config, self.spec.hidden_size or 0
        heads, head_dim = int(cfg.get("mamba_num_heads") or 0), int(cfg.get("mamba_head_dim") or 0)
        inner = heads * head_dim
        conv_dim = inner + 2 * int(cfg.get("n_groups") or 1) * int(cfg.get("ssm_state_size") or 0)
        bias = bool(cfg.get("use_bias"))
        self.linear(f"{prefix}.in_proj", inner + conv_dim + heads, hidden, bias=bias)
        self.plain(f"{prefix}.conv1d.weight", (conv_dim, 1, int(cfg.get("conv_kernel") or 4)))
        if cfg.get("use_conv_bias", True):
            self.plain(f"{prefix}.conv1d.bias", (conv_dim,))
        for name in ("dt_bias", "A_log", "D"):
            self.plain(f"{prefix}.{name}", (heads,))
        self.plain(f"{prefix}.norm.weight", (inner,))
        self.linear(f"{prefix}.out_proj", hidden, inner, bias=bias)

    def nemotron_h_block(self, prefix: str, symbol: str, layer: Layer) -> None:
        """One Nemotron-H block: a norm and ONE mixer — Mamba-2 (M), attention (*), MLP (-) or MoE (E)."""
        hidden, cfg = self.spec.hidden_size or 0, self.config
        self.plain(f"{prefix}.norm.weight", (hidden,))
        mixer = f"{prefix}.mixer"
        if symbol == "M":
            self.mamba2_mixer(mixer)
        elif symbol == "*":
            heads = self.spec.num_attention_heads or 0
            head = layer.head_dim_k or int(cfg.get("attention_head_dim") or cfg.get("head_dim") or 0)
            kv = layer.num_kv_heads or int(cfg.get("num_key_value_heads") or 0)
            bias = bool(cfg.get("attention_bias"))
            self.linear(f"{mixer}.q_proj", heads * head, hidden, bias=bias)
            self.linear(f"{mixer}.k_proj", kv * head, hidden, bias=bias)
            self.linear(f"{mixer}.v_proj", kv * head, hidden, bias=bias)
            self.linear(f"{mixer}.o_proj", hidden, heads * head, bias=bias)
        elif symbol == "-":
            inter = self.spec.intermediate_size or 0
            self.linear(f"{mixer}.up_proj", inter, hidden, bias=bool(cfg.get("mlp_bias")))
            self.linear(f"{mixer}.down_proj", hidden, inter, bias=bool(cfg.get("mlp_bias")))
        elif symbol == "E":
            experts, size = self.spec.num_experts or 0, self.spec.moe_intermediate_size or 0
            self.plain(f"{mixer}.gate.weight", (experts, hidden))
            self.plain(f"{mixer}.gate.e_score_correction_bias", (experts,), "F32")

            def nemotron_expert(base: str) -> None:
                self.linear(f"{base}.up_proj", size, hidden)
                self.linear(f"{base}.down_proj", hidden, size)

            self.each_expert(f"{mixer}.experts", experts, nemotron_expert)
            shared = int(cfg.get("moe_shared_expert_intermediate_size") or 0)
            if shared:
                self.linear(f"{mixer}.shared_experts.up_proj", shared, hidden)
                self.linear(f"{mixer}.shared_experts.down_proj", hidden, shared)
        else:
            self.warnings.append(f"{prefix}: hybrid_override_pattern symbol {symbol!r} unknown")

    def qwen_mtp_layer(self, index: int, layer: Layer) -> None:
        """Qwen3.5 / Qwen3-Next multi-token prediction: one decoder layer and a fusion projection under ``mtp.``."""
        hidden = self.spec.hidden_size or 0
        self.decoder_layer(f"mtp.layers.{index}", layer)
        if index == 0:
            self.plain("mtp.fc.weight", (hidden, 2 * hidden))
            for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
                self.plain(f"mtp.{norm}.weight", (hidden,))

    def mtp_layer(self, prefix: str, layer: Layer) -> None:
        """DeepSeek-V3 next-token-prediction block: a decoder layer plus its own embedding, projections, head."""
        hidden, vocab = self.spec.hidden_size or 0, self.spec.vocab_size or 0
        self.decoder_layer(prefix, layer)
        self.plain(f"{prefix}.embed_tokens.weight", (vocab, hidden))
        self.plain(f"{prefix}.enorm.weight", (hidden,))
        self.plain(f"{prefix}.hnorm.weight", (hidden,))
        self.plain(f"{prefix}.eh_proj.weight", (hidden, 2 * hidden))
        self.plain(f"{prefix}.shared_head.norm.weight", (hidden,))
        self.plain(f"{prefix}.shared_head.head.weight", (vocab, hidden))


def _text_model_type(spec: ModelSpec, facts: Mapping[str, Any]) -> str | None:
    for value in (facts.get("text_model_type"), (spec.extra or {}).get("text_model_type"), spec.model_type):
        if isinstance(value, str) and value:
            return value
    return None


def _text_prefix(spec: ModelSpec, facts: Mapping[str, Any]) -> str:
    """Where the decoder lives in the checkpoint's names (Gemma-3 multimodal: ``language_model.model``)."""
    if facts.get("nested_text_config") and spec.model_type in ("gemma3", "mistral3", "llava", "llama4"):
        return "language_model.model"
    if facts.get("nested_text_config") and (spec.model_type or "").startswith(("qwen3_5", "qwen3_vl", "gemma4")):
        return "model.language_model"
    return "model"


def _facts(spec: ModelSpec, config: Mapping[str, Any] | None) -> dict[str, Any]:
    if config:
        return shape_config(config)
    stored = (spec.extra or {}).get("shape_config")
    return dict(stored) if isinstance(stored, Mapping) else {}


def tensors_from_spec(spec: ModelSpec, config: Mapping[str, Any] | None = None) -> list[TensorInfo]:
    """The tensor list a checkpoint of ``spec`` holds (HF names, shapes, stored dtypes)."""
    return _build(spec, _facts(spec, config)).tensors


def counted_tensors_from_spec(spec: ModelSpec, config: Mapping[str, Any] | None = None) -> list[tuple[TensorInfo, int]]:
    """The tensor list of :func:`tensors_from_spec` with each layer's experts counted, not listed: (tensor, how many
    tensors it stands for); an expert group is named after its expert 0."""
    return [
        (next(entry.expand()) if entry.slot else entry.info, entry.copies if entry.slot else 1)
        for entry in _build(spec, _facts(spec, config)).entries
    ]


def derive_warnings(spec: ModelSpec, config: Mapping[str, Any] | None = None) -> list[str]:
    """What the derived tensor list leaves out or guesses, one line each (deduplicated)."""
    return list(dict.fromkeys(_build(spec, _facts(spec, config)).warnings))


def counted_tensors(spec: ModelSpec, config: Mapping[str, Any] | None = None) -> list[tuple[TensorInfo, int]]:
    """The derived tensor list as ``(tensor, copies)`` pairs: each layer's experts built once and counted (what
    ``derived_weights`` sums; the ``--quant`` what-if re-stores these tensors in another format)."""
    return [(entry.info, entry.copies) for entry in _build(spec, _facts(spec, config)).entries]


def derived_weights(spec: ModelSpec, config: Mapping[str, Any] | None = None) -> Weights | None:
    """``Weights`` summed from the derived tensor list (``exact=False``); the same sums as summing
    ``tensors_from_spec`` tensor by tensor, with each layer's experts counted rather than listed. None when no
    tensor list can be derived (hidden_size or vocab_size unknown): unknown, never 0 bytes."""
    builder = _build(spec, _facts(spec, config))
    if not builder.entries:
        return None
    return weights_from_counted_tensors(
        ((entry.info, entry.copies) for entry in builder.entries),
        component_of=lambda n: hf_component(n, num_layers=spec.num_layers),
        quantization=spec.quantization,
        source=DERIVED_SOURCE,
        exact=False,
    )


def _build(spec: ModelSpec, facts: Mapping[str, Any]) -> _Builder:
    dtype = _DTYPES.get(spec.dtype or "", "BF16")
    builder = _Builder(spec=spec, config=facts, dtype=dtype)
    if spec.dtype not in _DTYPES:
        builder.warnings.append(f"dtype {spec.dtype!r} not stated: unquantized tensors counted as BF16")
    hidden, vocab = spec.hidden_size, spec.vocab_size
    if not hidden or not vocab:
        builder.warnings.append("hidden_size or vocab_size unknown: no tensor list derived")
        return builder
    prefix = _text_prefix(spec, facts)
    pattern = facts.get("hybrid_override_pattern")
    if _text_model_type(spec, facts) == "nemotron_h" and isinstance(pattern, str):
        builder.plain("backbone.embeddings.weight", (vocab, hidden))
        for il, layer in enumerate(spec.layers):
            builder.nemotron_h_block(f"backbone.layers.{il}", pattern[il] if il < len(pattern) else "?", layer)
        builder.plain("backbone.norm_f.weight", (hidden,))
    else:
        builder.plain(f"{prefix}.embed_tokens.weight", (vocab, hidden))
        blocks = facts.get("block_configs")
        for il, layer in enumerate(spec.layers):
            block = blocks[il] if isinstance(blocks, list) and il < len(blocks) else None
            if isinstance(block, Mapping):
                builder.deci_layer(f"{prefix}.layers.{il}", layer, block)
            else:
                builder.decoder_layer(f"{prefix}.layers.{il}", layer, il)
        if _text_model_type(spec, facts) == "gemma4_text":
            builder.gemma4_globals(prefix)
        qwen_style_mtp = (_text_model_type(spec, facts) or "").startswith(("qwen3_5", "qwen3_next"))
        for extra in range(spec.num_mtp_layers):
            full = [layer for layer in spec.layers if layer.kind in (LayerKind.FULL, LayerKind.MLA)]
            template = next((layer for layer in reversed(full) if layer.moe), full[-1] if full else None)
            if template is None:
                continue
            if qwen_style_mtp:
                builder.qwen_mtp_layer(extra, template)
            else:
                builder.mtp_layer(f"{prefix}.layers.{spec.num_layers + extra}", template)
        builder.plain(f"{prefix}.norm.weight", (hidden,))
    if spec.tie_word_embeddings is None:
        # transformers' PretrainedConfig default is tie_word_embeddings=True
        builder.warnings.append("tie_word_embeddings not stated: lm_head assumed tied to the embeddings")
    elif not spec.tie_word_embeddings:
        head = "language_model.lm_head" if spec.model_type == "llama4" else "lm_head"
        builder.plain(f"{head}.weight", (vocab, hidden))
    vision = facts.get("vision_config")
    if spec.multimodal and not isinstance(vision, Mapping):
        builder.warnings.append("multimodal model without its vision_config: vision tower weights not derived")
    if isinstance(vision, Mapping):
        from hfvram.readers.shapes_towers import VISION_TOWERS

        tower = VISION_TOWERS.get(str(vision.get("model_type")))
        if tower is not None:
            try:
                tower(builder, vision, hidden)
            except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
                builder.warnings.append(f"vision_config incomplete ({exc!r}): vision tower not derived")
        else:
            builder.warnings.append(f"vision tower {vision.get('model_type')!r}: weights not derived")
    return builder


def deci_ffn_width(ffn_mult: Any, hidden: int) -> int | None:
    """DeciLM ``_ffn_mult_to_intermediate_size``: int(2 · ffn_mult · hidden / 3) rounded up to a multiple of 256."""
    if (
        isinstance(ffn_mult, bool)
        or not isinstance(ffn_mult, (int, float))
        or not math.isfinite(ffn_mult)
        or ffn_mult <= 0
    ):
        return None
    width = 2 * ffn_mult * hidden / 3
    if not math.isfinite(width) or width > config_bounds()["intermediate_size"][1]:
        return None  # an implausible multiplier (1e308): the MLP is not derived, said in a warning
    return -(-int(width) // _DECI_FFN_MULTIPLE) * _DECI_FFN_MULTIPLE
