"""The facts of one model, as read from its files, each with where it came from.

Readers (``hfvram.readers``) produce these; the estimator (``hfvram.estimate``) only consumes them.
A fact that no file states is ``None`` with a warning: it is never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum


class LayerKind(str, Enum):
    """What a decoder layer keeps per sequence while generating."""

    FULL = "full_attention"  # K/V for every token of context
    SLIDING = "sliding_attention"  # K/V for the last `window` tokens
    CHUNKED = "chunked_attention"  # K/V for the current chunk of `window` tokens (Llama-4 local layers)
    MLA = "mla"  # one compressed latent per token (DeepSeek-V2/V3, Kimi-K2, GLM-5 …)
    LINEAR = "linear_attention"  # fixed-size recurrent state (Gated DeltaNet, KDA, lightning attention)
    MAMBA = "mamba"  # fixed-size SSM + conv state
    NONE = "none"  # no per-sequence cache (attention-free block, e.g. Nemotron-Super no-op attention)


#: Keys of the layer census in the JSON contract (``model.layers``); CHUNKED and NONE are added fields.
CENSUS_KEYS: tuple[str, ...] = (
    "full_attention",
    "sliding_attention",
    "chunked_attention",
    "linear_attention",
    "mamba",
    "mla",
    "none",
)

GROWING_KINDS = frozenset({LayerKind.FULL, LayerKind.MLA})
WINDOWED_KINDS = frozenset({LayerKind.SLIDING, LayerKind.CHUNKED})
RECURRENT_KINDS = frozenset({LayerKind.LINEAR, LayerKind.MAMBA})


@dataclass(frozen=True)
class Layer:
    """One decoder layer's cache shape (unsharded: the whole model, before any tensor parallelism)."""

    kind: LayerKind
    num_kv_heads: int = 0
    head_dim_k: int = 0
    head_dim_v: int = 0
    #: sliding-window size or attention-chunk size, in tokens (SLIDING / CHUNKED only)
    window: int | None = None
    #: MLA latent sizes (MLA only): the cache holds kv_lora_rank + qk_rope_head_dim elements per token
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    #: MLA query compression rank (q_a_proj's output; 0 = the query is projected whole, DeepSeek-V2-Lite)
    q_lora_rank: int = 0
    #: recurrent state per sequence in elements (LINEAR / MAMBA), before TP sharding
    conv_state_elems: int = 0
    ssm_state_elems: int = 0
    #: bytes per element of the recurrent state when the model fixes it (e.g. fp32 SSM); None = model dtype
    state_dtype_bytes: float | None = None
    #: number of heads the recurrent state is split over under TP (0 = not splittable)
    state_heads: int = 0
    #: whether the layer's FFN is a mixture of experts
    moe: bool = False

    @property
    def kv_elems_per_token(self) -> int:
        """K+V elements stored per token for this layer (0 for recurrent / cache-free layers)."""
        if self.kind is LayerKind.MLA:
            return self.kv_lora_rank + self.qk_rope_head_dim
        if self.kind in (LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED):
            return self.num_kv_heads * (self.head_dim_k + self.head_dim_v)
        return 0

    @property
    def state_elems(self) -> int:
        return self.conv_state_elems + self.ssm_state_elems


@dataclass(frozen=True)
class Quantization:
    """How the checkpoint's weights are stored, as its files declare it."""

    #: "fp8", "gptq", "awq", "mxfp4", "nvfp4", "compressed-tensors", "bitsandbytes", "modelopt", "gguf", …
    method: str
    bits: float | None = None
    group_size: int | None = None
    #: e.g. fp8 "weight_block_size", modules_to_not_convert, format, ggml file type name
    details: Mapping[str, object] = field(default_factory=dict)
    source: str = ""


#: Components the weights are split into (bytes), for --explain and TP sharding.
COMPONENTS: tuple[str, ...] = (
    "embeddings",
    "attention",
    "mlp",
    "experts",
    "router",
    "norms",
    "lm_head",
    "vision",
    "mtp",
    "other",
)


@dataclass(frozen=True)
class Weights:
    """The checkpoint's tensors, summed."""

    total_bytes: int
    params_total: int
    #: bytes per component (keys from COMPONENTS); sums to total_bytes
    bytes_by_component: Mapping[str, int] = field(default_factory=dict)
    #: parameters per component (packed integers unpacked)
    params_by_component: Mapping[str, int] = field(default_factory=dict)
    #: bytes per stored dtype / ggml type name ("BF16", "F8_E4M3", "I32", "Q4_K", …)
    bytes_by_dtype: Mapping[str, int] = field(default_factory=dict)
    #: True when summed from real tensor headers (safetensors / GGUF); False when derived from config shapes
    exact: bool = True
    source: str = ""
    #: number of tensors summed
    num_tensors: int = 0


@dataclass(frozen=True)
class ModelSpec:
    """Everything the estimator needs to know about a model; sizes are for the whole (unsharded) model."""

    architecture: str | None
    model_type: str | None
    #: the checkpoint's compute dtype name ("bfloat16", "float16", "float32"); None if no file says
    dtype: str | None
    num_layers: int
    layers: tuple[Layer, ...]
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_attention_heads: int | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    tie_word_embeddings: bool | None = None
    num_experts: int | None = None
    num_shared_experts: int | None = None
    experts_per_token: int | None = None
    moe_intermediate_size: int | None = None
    #: multi-token-prediction layers shipped in the checkpoint (DeepSeek-V3 `num_nextn_predict_layers`)
    num_mtp_layers: int = 0
    rope_scaling: Mapping[str, object] | None = None
    multimodal: bool = False
    quantization: Quantization | None = None
    weights: Weights | None = None
    #: active parameters per token when the reader could count them (MoE: experts_per_token of num_experts)
    params_active: int | None = None
    #: fact name -> where it came from ("config.json: text_config.num_key_value_heads",
    #: "derived: hidden_size / num_attention_heads", "transformers 4.57 Gemma2Config: layer_types", …)
    provenance: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    #: who decided per-layer structure and defaults: "transformers <version>" or "hfvram rules"
    decided_by: str = "hfvram rules"
    #: GGUF-only facts the engines need (e.g. {"file_type": "Q4_K_M", "alignment": 32})
    extra: Mapping[str, object] = field(default_factory=dict)

    # ---- derived figures (contract: README.md, 'The JSON contract') -------------------------------------

    @property
    def params_total(self) -> int | None:
        return self.weights.params_total if self.weights else None

    @property
    def weights_bytes(self) -> int | None:
        return self.weights.total_bytes if self.weights else None

    @property
    def head_dim(self) -> int | None:
        for layer in self.layers:
            if layer.head_dim_k:
                return layer.head_dim_k
        return None

    def dtype_bytes(self) -> float:
        """Bytes per element of the model's compute dtype (2 when the checkpoint does not say)."""
        return {"float32": 4.0, "float64": 8.0}.get(self.dtype or "", 2.0)

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> int:
        """KV bytes added per token of context, per sequence, over layers whose cache grows with context."""
        elems = sum(layer.kv_elems_per_token for layer in self.layers if layer.kind in GROWING_KINDS)
        return round(elems * kv_dtype_bytes)

    def kv_fixed_bytes_per_sequence(
        self, kv_dtype_bytes: float, context: int | None = None, state_dtype_bytes: float | None = None
    ) -> int:
        """Bytes per sequence that do not grow past a bound: windowed layers at their window (capped by
        ``context`` when given) plus recurrent state (at the layer's own state dtype, else
        ``state_dtype_bytes``, else the model dtype)."""
        total = 0.0
        for layer in self.layers:
            if layer.kind in WINDOWED_KINDS:
                window = layer.window or 0
                tokens = min(window, context) if context is not None else window
                total += layer.kv_elems_per_token * kv_dtype_bytes * tokens
            elif layer.kind in RECURRENT_KINDS:
                per_elem = layer.state_dtype_bytes or state_dtype_bytes or self.dtype_bytes()
                total += layer.state_elems * per_elem
        return round(total)

    def kv_bytes_per_sequence(self, context: int, kv_dtype_bytes: float) -> int:
        return self.kv_bytes_per_token(kv_dtype_bytes) * context + self.kv_fixed_bytes_per_sequence(
            kv_dtype_bytes, context
        )

    def layer_census(self) -> dict[str, int]:
        census = {key: 0 for key in CENSUS_KEYS}
        for layer in self.layers:
            census[layer.kind.value] += 1
        return census

    def with_weights(self, weights: Weights, params_active: int | None = None) -> ModelSpec:
        return replace(
            self, weights=weights, params_active=params_active if params_active is not None else self.params_active
        )


@dataclass(frozen=True)
class SourceInfo:
    """Where the model's bytes came from (contract: ``source`` object)."""

    kind: str  # "hub" | "local" | "gguf" | "cache" | "catalog"
    repo_id: str | None = None
    revision: str | None = None  # commit sha when known
    files: tuple[str, ...] = ()
    #: e.g. catalogue date, "offline", the HF cache snapshot path
    note: str | None = None


@dataclass(frozen=True)
class LoadedModel:
    spec: ModelSpec
    source: SourceInfo
