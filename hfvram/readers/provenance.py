"""Which facts of a ModelSpec the estimator uses, and whether each says where it came from.

A reader records provenance under these names (``ModelSpec.provenance``): a file and field
("config.json: num_key_value_heads", "x.gguf: qwen2.block_count") or a rule ("derived: …").
"""

from __future__ import annotations

from hfvram.spec import RECURRENT_KINDS, LayerKind, ModelSpec

_ATTENTION_KINDS = frozenset({LayerKind.FULL, LayerKind.SLIDING, LayerKind.CHUNKED})

#: scalar facts the estimator reads whenever they are stated (a None fact carries a warning instead)
SCALAR_FACTS: tuple[str, ...] = (
    "architecture",
    "dtype",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "vocab_size",
    "max_position_embeddings",
    "tie_word_embeddings",
    "num_experts",
    "num_shared_experts",
    "experts_per_token",
    "moe_intermediate_size",
    "rope_scaling",
    "quantization",
    "weights",
)


def required_provenance(spec: ModelSpec) -> set[str]:
    """Provenance names the estimator's inputs for ``spec`` call for."""
    needed = {"num_layers", "layers"}
    needed.update(name for name in SCALAR_FACTS if getattr(spec, name) is not None)
    kinds = {layer.kind for layer in spec.layers}
    attention = [layer for layer in spec.layers if layer.kind in _ATTENTION_KINDS]
    if attention:
        needed.update({"num_kv_heads", "head_dim"})
        if any(layer.head_dim_v != layer.head_dim_k for layer in attention):
            needed.add("head_dim_v")
    if LayerKind.SLIDING in kinds:
        needed.add("sliding_window")
    if LayerKind.CHUNKED in kinds:
        needed.add("attention_chunk_size")
    if LayerKind.MLA in kinds:
        needed.update({"kv_lora_rank", "qk_rope_head_dim"})
    if kinds & RECURRENT_KINDS:
        needed.add("recurrent_state")
        if any(layer.state_dtype_bytes is not None for layer in spec.layers if layer.kind in RECURRENT_KINDS):
            needed.add("state_dtype_bytes")
    if any(layer.moe for layer in spec.layers):
        needed.add("moe_layers")
    if spec.num_mtp_layers:
        needed.add("num_mtp_layers")
    return needed


def missing_provenance(spec: ModelSpec) -> list[str]:
    """Facts the estimator uses that ``spec`` states without saying where they came from (sorted)."""
    return sorted(name for name in required_provenance(spec) if not spec.provenance.get(name))
