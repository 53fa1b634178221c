"""The vision towers of the derived tensor list (hfvram/readers/shapes.py): one function per vision_config
model_type, each adding the tower's tensors (names and shapes as the transformers modelling code stores them) to
the builder. Every tower's tensors are named so that ``hf_component`` counts them as ``vision``: the hub formats
keep them in 16 bits, llama.cpp's converter writes them to the ``mmproj`` file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hfvram.readers.shapes import _Builder


def vit_layer(b: _Builder, p: str, hidden: int, inter: int, norms: tuple[str, str], out_proj: str) -> None:
    """One ViT encoder layer: two biased LayerNorms, biased q/k/v/out projections, a biased fc1 → fc2 MLP."""
    for norm in norms:
        b.plain(f"{p}.{norm}.weight", (hidden,))
        b.plain(f"{p}.{norm}.bias", (hidden,))
    for proj in ("q_proj", "k_proj", "v_proj", out_proj):
        b.plain(f"{p}.self_attn.{proj}.weight", (hidden, hidden))
        b.plain(f"{p}.self_attn.{proj}.bias", (hidden,))
    b.plain(f"{p}.mlp.fc1.weight", (inter, hidden))
    b.plain(f"{p}.mlp.fc1.bias", (inter,))
    b.plain(f"{p}.mlp.fc2.weight", (hidden, inter))
    b.plain(f"{p}.mlp.fc2.bias", (hidden,))


def siglip_vision(b: _Builder, vision: Mapping[str, Any], text_hidden: int) -> None:
    """SigLIP tower + Gemma-3 projector (transformers SiglipVisionModel, Gemma3MultiModalProjector)."""
    hidden, inter = int(vision["hidden_size"]), int(vision["intermediate_size"])
    patch, image = int(vision["patch_size"]), int(vision["image_size"])
    channels = int(vision.get("num_channels", 3))
    base = "vision_tower.vision_model"
    b.plain(f"{base}.embeddings.patch_embedding.weight", (hidden, channels, patch, patch))
    b.plain(f"{base}.embeddings.patch_embedding.bias", (hidden,))
    b.plain(f"{base}.embeddings.position_embedding.weight", ((image // patch) ** 2, hidden))
    for il in range(int(vision["num_hidden_layers"])):
        vit_layer(b, f"{base}.encoder.layers.{il}", hidden, inter, ("layer_norm1", "layer_norm2"), "out_proj")
    b.plain(f"{base}.post_layernorm.weight", (hidden,))
    b.plain(f"{base}.post_layernorm.bias", (hidden,))
    b.plain("multi_modal_projector.mm_input_projection_weight", (hidden, text_hidden))
    b.plain("multi_modal_projector.mm_soft_emb_norm.weight", (hidden,))


def qwen_vision(b: _Builder, vision: Mapping[str, Any], text_hidden: int) -> None:
    """Qwen3-VL / Qwen3.5 vision tower (transformers Qwen3VLVisionModel; Qwen3.5 drops the deepstack mergers):
    a biased Conv3d patch embedding, a learned position table, ``depth`` ViT blocks (LayerNorms, fused qkv,
    fc1 → fc2) and the spatial-merge merger into the text hidden size, all under ``model.visual.``."""
    hidden, inter = int(vision["hidden_size"]), int(vision["intermediate_size"])
    patch, temporal = int(vision["patch_size"]), int(vision.get("temporal_patch_size", 2))
    channels = int(vision.get("in_channels", 3))
    merged = hidden * int(vision.get("spatial_merge_size", 2)) ** 2
    out = int(vision.get("out_hidden_size", text_hidden))
    base = "model.visual"
    b.plain(f"{base}.patch_embed.proj.weight", (hidden, channels, temporal, patch, patch))
    b.plain(f"{base}.patch_embed.proj.bias", (hidden,))
    if vision.get("num_position_embeddings"):
        b.plain(f"{base}.pos_embed.weight", (int(vision["num_position_embeddings"]), hidden))
    for il in range(int(vision["depth"])):
        p = f"{base}.blocks.{il}"
        for norm in ("norm1", "norm2"):
            b.plain(f"{p}.{norm}.weight", (hidden,))
            b.plain(f"{p}.{norm}.bias", (hidden,))
        for proj, n_out, n_in in (
            ("attn.qkv", 3 * hidden, hidden),
            ("attn.proj", hidden, hidden),
            ("mlp.linear_fc1", inter, hidden),
            ("mlp.linear_fc2", hidden, inter),
        ):
            b.plain(f"{p}.{proj}.weight", (n_out, n_in))
            b.plain(f"{p}.{proj}.bias", (n_out,))
    deepstack = vision.get("deepstack_visual_indexes") or []
    mergers = [(f"{base}.merger", hidden)] + [
        (f"{base}.deepstack_merger_list.{i}", merged)
        for i in range(len(deepstack) if isinstance(deepstack, list) else 0)
    ]
    for merger, norm_width in mergers:
        b.plain(f"{merger}.norm.weight", (norm_width,))
        b.plain(f"{merger}.norm.bias", (norm_width,))
        b.plain(f"{merger}.linear_fc1.weight", (merged, merged))
        b.plain(f"{merger}.linear_fc1.bias", (merged,))
        b.plain(f"{merger}.linear_fc2.weight", (out, merged))
        b.plain(f"{merger}.linear_fc2.bias", (out,))


def llama4_vision(b: _Builder, vision: Mapping[str, Any], text_hidden: int) -> None:
    """Llama-4 vision tower + pixel-shuffle adapter + projector (transformers Llama4VisionModel,
    Llama4VisionPixelShuffleMLP, Llama4MultiModalProjector)."""
    hidden, inter = int(vision["hidden_size"]), int(vision["intermediate_size"])
    patch, image = int(vision["patch_size"]), int(vision["image_size"])
    channels = int(vision.get("num_channels", 3))
    projector_in, projector_out = int(vision["projector_input_dim"]), int(vision["projector_output_dim"])
    output_dim = int(vision.get("vision_output_dim", projector_out))
    base = "vision_model"
    b.plain(f"{base}.patch_embedding.linear.weight", (hidden, channels * patch * patch))
    b.plain(f"{base}.class_embedding", (hidden,))
    b.plain(f"{base}.positional_embedding_vlm", ((image // patch) ** 2 + 1, hidden))
    for norm in ("layernorm_pre", "layernorm_post"):
        b.plain(f"{base}.{norm}.weight", (hidden,))
        b.plain(f"{base}.{norm}.bias", (hidden,))
    for il in range(int(vision["num_hidden_layers"])):
        norms = ("input_layernorm", "post_attention_layernorm")
        vit_layer(b, f"{base}.model.layers.{il}", hidden, inter, norms, "o_proj")
    b.plain(f"{base}.vision_adapter.mlp.fc1.weight", (projector_in, inter))
    b.plain(f"{base}.vision_adapter.mlp.fc2.weight", (projector_out, projector_out))
    b.plain("multi_modal_projector.linear_1.weight", (text_hidden, output_dim))


#: the four RMSNorms of a Gemma-4 block (vision and text alike)
_GEMMA_NORMS = (
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
)


def gemma4_vision(b: _Builder, vision: Mapping[str, Any], text_hidden: int) -> None:
    """Gemma-4 vision tower and its embedder (transformers models/gemma4/modeling_gemma4.py at huggingface/
    transformers@c308a309e651a7e033f683353f3f75aa66d29502: Gemma4VisionPatchEmbedder, Gemma4VisionEncoderLayer,
    Gemma4VisionModel, Gemma4MultimodalEmbedder): a bias-free patch projection of 3·patch² pixels, a learned
    position table of two axes, ``num_hidden_layers`` blocks (q/k/v/o without bias, q_norm and k_norm of a head,
    the four RMSNorms of a Gemma block, a gated MLP), the ``standardize`` bias and scale, and the projection into
    the text hidden size. The pooler and the value norm hold no weights; ``use_clipped_linears`` adds four
    scalar bounds per Linear."""
    hidden, inter = int(vision["hidden_size"]), int(vision["intermediate_size"])
    heads, patch = int(vision["num_attention_heads"]), int(vision["patch_size"])
    kv_heads = int(vision.get("num_key_value_heads") or heads)
    head = int(vision.get("head_dim") or hidden // heads)
    clipped = bool(vision.get("use_clipped_linears"))
    base = "model.vision_tower"
    b.plain(f"{base}.patch_embedder.input_proj.weight", (hidden, 3 * patch * patch))
    b.plain(f"{base}.patch_embedder.position_embedding_table", (2, int(vision["position_embedding_size"]), hidden))

    def clippable(name: str, n_out: int, n_in: int) -> None:
        b.plain(f"{name}.linear.weight", (n_out, n_in))
        if clipped:
            for bound in ("input_min", "input_max", "output_min", "output_max"):
                b.plain(f"{name}.{bound}", ())

    for il in range(int(vision["num_hidden_layers"])):
        p = f"{base}.encoder.layers.{il}"
        for norm in _GEMMA_NORMS:
            b.plain(f"{p}.{norm}.weight", (hidden,))
        for proj, n_out, n_in in (
            ("q_proj", heads * head, hidden),
            ("k_proj", kv_heads * head, hidden),
            ("v_proj", kv_heads * head, hidden),
            ("o_proj", hidden, heads * head),
        ):
            clippable(f"{p}.self_attn.{proj}", n_out, n_in)
        b.plain(f"{p}.self_attn.q_norm.weight", (head,))
        b.plain(f"{p}.self_attn.k_norm.weight", (head,))
        for proj, n_out, n_in in (
            ("gate_proj", inter, hidden),
            ("up_proj", inter, hidden),
            ("down_proj", hidden, inter),
        ):
            clippable(f"{p}.mlp.{proj}", n_out, n_in)
    if vision.get("standardize"):
        b.plain(f"{base}.std_bias", (hidden,))
        b.plain(f"{base}.std_scale", (hidden,))
    b.plain("model.embed_vision.embedding_projection.weight", (text_hidden, hidden))


#: vision_config model_type -> the function that derives its tower
VISION_TOWERS: dict[str, Callable[[_Builder, Mapping[str, Any], int], None]] = {
    "siglip_vision_model": siglip_vision,
    "llama4_vision_model": llama4_vision,
    "qwen3_5": qwen_vision,
    "qwen3_5_moe": qwen_vision,
    "qwen3_vl": qwen_vision,
    "qwen3_vl_moe": qwen_vision,
    "gemma4_vision": gemma4_vision,
}
