"""Tensor-level rules shared by the safetensors and GGUF readers and the derived tensor list.

* ``TensorInfo``: one tensor of a checkpoint (name, stored dtype, stored shape, exact bytes).
* dtype sizes (data file ``hfvram/data/dtypes.toml``),
* which component a tensor belongs to (embeddings, attention, experts, …),
* how many parameters a stored tensor holds (packed integers unpacked, scales not parameters),
* summing tensors into ``Weights`` and counting the parameters active per token.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from hfvram.datafiles import data_table
from hfvram.spec import COMPONENTS, ModelSpec, Quantization, Weights


@dataclass(frozen=True)
class TensorInfo:
    """One stored tensor: its dtype and shape as the file stores them, and its exact size in bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    #: (start, end) byte offsets inside the data section, when read from a real header
    offsets: tuple[int, int] | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


# ---- dtype sizes --------------------------------------------------------------------------------


def _dtype_table() -> dict[str, int]:
    return data_table("dtypes.toml")["safetensors_bits"]


def safetensors_dtypes() -> frozenset[str]:
    return frozenset(_dtype_table())


def dtype_bits(dtype: str) -> int | None:
    """Bits per element of a safetensors dtype name; None when the name is unknown."""
    return _dtype_table().get(dtype)


def tensor_nbytes(dtype: str, shape: Sequence[int]) -> int | None:
    """Exact bytes of a tensor (sub-byte dtypes rounded up to whole bytes); None for an unknown dtype."""
    bits = dtype_bits(dtype)
    if bits is None:
        return None
    return (math.prod(shape) * bits + 7) // 8


# ---- components ---------------------------------------------------------------------------------

_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)\.")
_GGUF_BLOCK = re.compile(r"^blk\.(\d+)\.")

_VISION_MARKERS = (
    "vision_tower",
    "visual.",
    "vision_backbone",
    "vision_model",
    "multi_modal_projector",
    "mm_projector",
    "vision_embed",
    "image_newline",
    "vision_encoder",
    "vision.",
)
_EMBEDDING_SEGMENTS = {
    "embed_tokens",
    "wte",
    "wpe",
    "word_embeddings",
    "tok_embeddings",
    "position_embeddings",
    "token_type_embeddings",
    "embedding",
    "embeddings",
}
_NORM_SEGMENTS = {"ln_1", "ln_2", "ln_f", "ln_attn", "ln_mlp", "norm"}
_ATTENTION_SEGMENTS = {"self_attn", "attn", "attention", "self_attention", "cross_attn", "linear_attn", "indexer"}
_MLP_SEGMENTS = {"mlp", "feed_forward", "ffn", "intermediate", "output", "block_sparse_moe", "moe"}


def _segments(name: str) -> list[str]:
    return name.split(".")


def _is_norm(segments: Sequence[str]) -> bool:
    return any("norm" in seg.lower() for seg in segments[:-1]) or any(seg in _NORM_SEGMENTS for seg in segments)


_DIGITS = re.compile(r"\.\d+\.")


def hf_component(name: str, *, num_layers: int | None = None) -> str:
    """Component (a key of ``hfvram.spec.COMPONENTS``) of a Hugging Face checkpoint tensor name."""
    if num_layers is not None:
        layer = _LAYER_INDEX.search(name)
        if (
            layer
            and int(layer.group(1)) >= num_layers
            and ".layers." in f".{name}"
            and not any(marker in name for marker in _VISION_MARKERS)
        ):
            return "mtp"
    return _hf_component_by_pattern(_DIGITS.sub(".#.", name))


@lru_cache(maxsize=8192)
def _hf_component_by_pattern(name: str) -> str:
    if any(marker in name for marker in _VISION_MARKERS):
        return "vision"
    segments = _segments(name)
    if "mtp" in segments:
        return "mtp"
    if "lm_head" in segments:
        return "lm_head"
    if _is_norm(segments):
        return "norms"
    if any(seg in ("shared_experts", "shared_expert", "shared_mlp") for seg in segments):
        return "mlp"
    if "experts" in segments or any(seg.endswith("_exps") for seg in segments):
        return "experts"
    if (
        "gate" in segments
        or "router" in segments
        or "shared_expert_gate" in segments
        or segments[-1] == "e_score_correction_bias"
    ):
        return "router"
    if any(seg in _EMBEDDING_SEGMENTS for seg in segments):
        return "embeddings"
    if any(seg in _ATTENTION_SEGMENTS or seg.startswith("att") for seg in segments):
        return "attention"
    if any(seg in _MLP_SEGMENTS or seg.startswith("ff_") for seg in segments):
        return "mlp"
    return "other"


def gguf_component(name: str, *, num_layers: int | None = None) -> str:
    """Component of a GGUF tensor name (llama.cpp naming: token_embd, output, blk.N.attn_q, ffn_up_exps …)."""
    if name.startswith(("v.", "mm.", "a.")):
        return "vision"
    block = _GGUF_BLOCK.match(name)
    if block and num_layers is not None and int(block.group(1)) >= num_layers:
        return "mtp"
    if "nextn" in name:
        return "mtp"
    base = name[block.end() :] if block else name
    stem = base.rsplit(".", 1)[0] if base.endswith((".weight", ".bias")) else base
    if stem in ("token_embd", "per_layer_token_embd", "token_types", "position_embd"):
        return "embeddings"
    if stem == "output":
        return "lm_head"
    if "norm" in stem:
        return "norms"
    if stem.startswith("ffn_gate_inp") or stem == "exp_probs_b":
        return "router"
    if stem.endswith("_shexp"):
        return "mlp"
    if stem.endswith(("_exps", "_chexps")):
        return "experts"
    if stem.startswith(("attn_", "indexer")):
        return "attention"
    if stem.startswith("ffn_"):
        return "mlp"
    return "other"


# ---- parameters held by a stored tensor --------------------------------------------------------

#: tensor-name suffixes that store quantization metadata, never model parameters
_NOT_PARAMETER_SUFFIXES = (
    ".qzeros",
    ".scales",
    ".g_idx",
    ".weight_scale",
    ".weight_scale_inv",
    ".weight_scale_2",
    ".input_scale",
    ".weight_zero_point",
    ".weight_shape",
    ".weight_g_idx",
    ".output_scale",
    ".k_scale",
    ".v_scale",
    ".absmax",
    ".quant_map",
    ".nested_absmax",
    ".nested_quant_map",
    ".SCB",
    ".weight_format",
    ".position_ids",  # a registered buffer (BERT), stored but not a parameter
    "_scales",  # MXFP4 `*_scales` (E8M0 block scales)
)
_PACKED_INT32_SUFFIXES = (".qweight", ".weight_packed")


def _is_quant_state(name: str) -> bool:
    return ".quant_state." in name or name.endswith(_NOT_PARAMETER_SUFFIXES)


def _packed_bits(quantization: Quantization | None) -> float:
    if quantization and quantization.bits:
        return float(quantization.bits)
    return 4.0  # GPTQ / AWQ / compressed-tensors checkpoints without a stated width are 4-bit in practice


def params_of_tensors(tensors: Sequence[TensorInfo], quantization: Quantization | None = None) -> dict[str, int]:
    """Parameters held by each tensor, by name: packed integers unpacked, quantization metadata counted as 0."""
    names = {t.name for t in tensors}
    # stems ("….weight") whose packing a sibling reveals: NVFP4 weight_scale_2, bitsandbytes absmax / quant_state
    packed_4bit = {n[: -len("_scale_2")] for n in names if n.endswith(".weight_scale_2")}
    packed_4bit |= {n[: -len(".absmax")] for n in names if n.endswith(".weight.absmax")}
    packed_4bit |= {n.split(".quant_state.", 1)[0] for n in names if ".weight.quant_state." in n}
    counts: dict[str, int] = {}
    for tensor in tensors:
        counts[tensor.name] = _params_of_tensor(tensor, packed_4bit, quantization)
    return counts


def _params_of_tensor(tensor: TensorInfo, packed_4bit: set[str], quantization: Quantization | None) -> int:
    name, numel = tensor.name, tensor.numel
    if _is_quant_state(name):
        return 0
    if name.endswith(_PACKED_INT32_SUFFIXES) and tensor.dtype in ("I32", "U32"):
        return int(numel * 32 / _packed_bits(quantization))
    if name.endswith("_blocks") and tensor.dtype == "U8":  # MXFP4: two E2M1 values per byte
        return numel * 2
    if tensor.dtype in ("U8", "I8") and name in packed_4bit:  # NVFP4 / bitsandbytes 4-bit: two per byte
        return numel * 2
    return numel


# ---- summing ------------------------------------------------------------------------------------


def weights_from_tensor_list(
    tensors: Iterable[TensorInfo],
    *,
    component_of,
    quantization: Quantization | None = None,
    source: str = "",
    exact: bool = True,
) -> Weights:
    """Sum tensors into ``Weights``; ``component_of(name)`` names each tensor's component."""
    return weights_from_counted_tensors(
        ((t, 1) for t in tensors), component_of=component_of, quantization=quantization, source=source, exact=exact
    )


def weights_from_counted_tensors(
    counted: Iterable[tuple[TensorInfo, int]],
    *,
    component_of,
    quantization: Quantization | None = None,
    source: str = "",
    exact: bool = True,
) -> Weights:
    """Sum ``(tensor, copies)`` pairs into ``Weights``: each tensor stands for ``copies`` tensors of the same
    dtype, shape, component and parameter count (the experts of a MoE layer, summed without listing them)."""
    pairs = list(counted)
    params = params_of_tensors([t for t, _ in pairs], quantization)
    bytes_by_component: dict[str, int] = defaultdict(int)
    params_by_component: dict[str, int] = defaultdict(int)
    bytes_by_dtype: dict[str, int] = defaultdict(int)
    total_bytes = total_params = num_tensors = 0
    for tensor, copies in pairs:
        component = component_of(tensor.name)
        nbytes, count = tensor.nbytes * copies, params[tensor.name] * copies
        bytes_by_component[component] += nbytes
        params_by_component[component] += count
        bytes_by_dtype[tensor.dtype] += nbytes
        total_bytes += nbytes
        total_params += count
        num_tensors += copies
    ordered = [c for c in COMPONENTS if c in bytes_by_component]
    return Weights(
        total_bytes=total_bytes,
        params_total=total_params,
        bytes_by_component={c: bytes_by_component[c] for c in ordered},
        params_by_component={c: params_by_component[c] for c in ordered},
        bytes_by_dtype=dict(sorted(bytes_by_dtype.items())),
        exact=exact,
        source=source,
        num_tensors=num_tensors,
    )


def params_active(weights: Weights | Iterable[TensorInfo], spec: ModelSpec) -> int | None:
    """Parameters active per token: all parameters minus the unrouted share of the experts.

    ``total − expert_params × (1 − experts_per_token / num_experts)``; dense models: the total.
    None when the model is a MoE whose expert counts are unknown.
    """
    if not isinstance(weights, Weights):
        weights = weights_from_tensor_list(
            weights,
            component_of=lambda n: hf_component(n, num_layers=spec.num_layers),
            quantization=spec.quantization,
        )
    expert_params = weights.params_by_component.get("experts", 0)
    if not expert_params:
        return weights.params_total
    if not spec.num_experts or spec.experts_per_token is None:
        return None
    inactive = expert_params * (1 - spec.experts_per_token / spec.num_experts)
    return round(weights.params_total - inactive)


def spec_with_weights(spec: ModelSpec, weights: Weights) -> ModelSpec:
    """``spec`` carrying ``weights``, with their provenance (``weights.source``, so --explain names where the
    weights came from) and the active parameters per token."""
    provenance = {**spec.provenance, "weights": weights.source or "derived: weights attached without a source"}
    return replace(spec, provenance=provenance).with_weights(weights, params_active(weights, spec))
