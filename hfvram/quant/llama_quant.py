"""Which ggml type llama-quantize gives each tensor: a port of ``src/llama-quant.cpp`` (llama.cpp 0c1e5709).

Mirrors ``llama_model_quantize_impl``'s preliminary loop: tensors in the model loader's order (block number, then
name: ``weight_name_comparer``), the counters of ``init_quantize_state_counters`` (``n_attention_wv`` counts the
attn_v / attn_qkv / attn_kv_b tensors; ``n_ffn_down`` = the block count), ``tensor_allows_quantization`` (only 2-D
and 3-D ``…weight`` tensors; norms, routers and the names of ``[keep]`` keep the converter's type),
``llama_tensor_get_type_impl`` (the per-category rules of each mix, written out below in the C++ order) and
``tensor_type_fallback`` (``[fallback]``). The tables are data (``hfvram/data/quant/gguf.toml``); the decisions are
code. Each rule is explained with a permalink in docs/engines/llamacpp.md#llamacpp-quantize ("What llama-quantize writes").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from hfvram.quant.gguf_tensors import ConvertedModel, GgufTensor, gguf_table

# tensor categories (tensor_get_category)
OUTPUT, TOKEN_EMBD, QKV, KV_B, ATTN_V, ATTN_K, ATTN_Q, ATTN_OUT, FFN_UP, FFN_GATE, FFN_DOWN, OTHER = (
    "output",
    "token_embd",
    "attn_qkv",
    "attn_kv_b",
    "attn_v",
    "attn_k",
    "attn_q",
    "attn_output",
    "ffn_up",
    "ffn_gate",
    "ffn_down",
    "other",
)
_UNQUANTIZED = frozenset({"F32", "F16", "BF16"})
_IQ2_MIXES = frozenset({"IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"})


@cache
def _ggml_blocks() -> dict[str, tuple[int, int]]:
    """ggml type name -> (block size, bytes per block) from hfvram/data/ggml_types.json."""
    from hfvram.datafiles import ggml_types

    types, _ = ggml_types()
    return {name: (block, size) for name, block, size in types.values()}


def block_size(ggml_type: str) -> int:
    return _ggml_blocks()[ggml_type][0]


def tensor_bytes(ne: Sequence[int], ggml_type: str) -> int:
    """``ggml_nrows · ggml_row_size(type, ne[0])``."""
    block, size = _ggml_blocks()[ggml_type]
    rows = 1
    for n in ne[1:]:
        rows *= n
    return rows * (ne[0] // block) * size


def category(name: str) -> str:
    """tensor_get_category: the first substring that matches, in the C++ order."""
    if name == "output.weight":
        return OUTPUT
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return TOKEN_EMBD
    for needle, cat in (
        ("attn_qkv.weight", QKV),
        ("attn_kv_b.weight", KV_B),
        ("attn_v.weight", ATTN_V),
        ("attn_k.weight", ATTN_K),
        ("attn_q.weight", ATTN_Q),
        ("attn_output.weight", ATTN_OUT),
        ("ffn_up", FFN_UP),
        ("ffn_gate", FFN_GATE),
        ("ffn_down", FFN_DOWN),
    ):
        if needle in name:
            return cat
    return OTHER


def _is_attn_v(cat: str) -> bool:
    return cat in (ATTN_V, QKV, KV_B)


def allows_quantization(tensor: GgufTensor) -> bool:
    """tensor_allows_quantization for the default parameters (quantize_output_tensor on, only_copy off)."""
    if tensor.n_dims < 2 or not tensor.name.endswith("weight"):
        return False
    keep = gguf_table()["keep"]
    if any(part in tensor.name for part in keep["substrings"]):
        return False
    return tensor.name not in keep["exact"]


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """The layers the _M mixes give more bits: the first and last eighth, and every third in between."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def _cdiv8(n: int) -> int:
    return n // 8


@dataclass
class _State:
    """quantize_state_impl."""

    model: ConvertedModel
    ftype: str
    has_imatrix: bool
    type_70b: bool
    n_attention_wv: int = 0
    n_ffn_down: int = 0
    n_ffn_gate: int = 0
    n_ffn_up: int = 0
    i_attention_wv: int = 0
    i_ffn_down: int = 0
    i_ffn_gate: int = 0
    i_ffn_up: int = 0
    n_fallback: int = 0
    has_tied_embeddings: bool = True

    @property
    def n_gqa(self) -> int:
        m = self.model
        return m.n_head // m.n_head_kv if m.n_head_kv else 0


def _layer_info(qs: _State, i_counter: int, n_layer: int, tensor: GgufTensor) -> tuple[int, int]:
    """layer_info: MoE models take the block number from the name (blk.N.); others the running counter."""
    if max(1, qs.model.n_expert) > 1:
        if tensor.layer is None or not 0 <= tensor.layer < n_layer:
            raise ValueError(f"Failed to determine layer for tensor {tensor.name}")
        return tensor.layer, n_layer
    return i_counter, n_layer


def _impl(qs: _State, new_type: str, tensor: GgufTensor, cat: str) -> str:
    """llama_tensor_get_type_impl, branch for branch.

    Longer than 60 lines: a faithful port of llama.cpp's ``llama_tensor_get_type_impl`` whose branch order is the
    rule (the first category and file type that match decide; split up, the order would be lost), from
    https://github.com/ggml-org/llama.cpp/blob/0c1e57098bba43ac29e6e3b677cdceebdd22334f/src/llama-quant.cpp#L490-L511
    on; each branch's permalink is in docs/engines/llamacpp.md#llamacpp-quantize.
    """
    ftype, arch, m = qs.ftype, qs.model.arch, qs.model
    name = tensor.name
    if arch == "glm5-next" and any(s in name for s in ("attn_q_a", "attn_q_b", "nextn.eh_proj")):  # noqa: SIM102
        if new_type not in _UNQUANTIZED:
            return "Q8_0"
    if cat == OUTPUT or (qs.has_tied_embeddings and cat == TOKEN_EMBD):
        nx, qk_k = tensor.ne[0], block_size(new_type)
        if ftype == "MXFP4_MOE":  # noqa: SIM114 - the C++ branches, one for one
            new_type = "Q8_0"
        elif arch == "falcon" or nx % qk_k != 0:
            new_type = "Q8_0"
        elif ftype in ("IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"):
            new_type = "Q5_K"
        elif new_type != "Q8_0":
            new_type = "Q6_K"
    elif ftype == "MXFP4_MOE":
        is_bailing_expert = arch == "bailingmoe3" and cat in (FFN_UP, FFN_GATE, FFN_DOWN)
        three_d = len(tensor.ne) > 2 and tensor.ne[2] > 1
        new_type = "MXFP4" if three_d and (arch != "bailingmoe3" or is_bailing_expert) else "Q8_0"
    elif cat == TOKEN_EMBD:
        if ftype in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
            new_type = "Q2_K"
        elif ftype in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
            new_type = "IQ3_S"
        elif ftype in ("TQ1_0", "TQ2_0", "Q2_0"):
            new_type = "Q4_K"
    elif ftype in _IQ2_MIXES:
        if _is_attn_v(cat):
            if qs.n_gqa >= 4 or m.n_expert >= 4:
                new_type = "Q4_K"
            else:
                new_type = "IQ3_S" if ftype in ("IQ2_S", "IQ2_M") else "Q2_K"
            qs.i_attention_wv += 1
        elif m.n_expert == 8 and cat == ATTN_K:
            new_type = "Q4_K"
        elif cat == FFN_DOWN:
            if qs.i_ffn_down < _cdiv8(qs.n_ffn_down):
                new_type = "IQ3_S" if ftype in ("IQ2_S", "IQ2_M") else "Q2_K"
            qs.i_ffn_down += 1
        elif cat == ATTN_OUT:
            if m.n_expert == 8:
                new_type = "Q5_K"
            elif ftype in ("IQ1_S", "IQ1_M"):
                new_type = "IQ2_XXS"
            elif ftype in ("IQ2_S", "IQ2_M"):
                new_type = "IQ3_S"
    elif _is_attn_v(cat):
        gqa = qs.n_gqa
        if ftype == "Q2_K":
            new_type = "Q4_K" if gqa >= 4 else "Q3_K"
        elif ftype == "Q2_K_S" and gqa >= 4:
            new_type = "Q4_K"
        elif ftype == "IQ3_XXS":
            new_type = "Q4_K" if gqa >= 4 else ("IQ3_S" if not qs.has_imatrix else "IQ3_XXS")
        elif ftype in ("IQ3_XS", "IQ3_S") and gqa >= 4:  # noqa: SIM114
            new_type = "Q4_K"
        elif ftype == "IQ3_M":
            new_type = "Q4_K"
        elif ftype == "Q3_K_M":
            new_type = "Q5_K" if qs.i_attention_wv < 2 else "Q4_K"
        elif ftype == "Q3_K_L":  # noqa: SIM114
            new_type = "Q5_K"
        elif ftype in ("IQ4_NL", "IQ4_XS") and gqa >= 4:
            new_type = "Q5_K"
        elif ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(qs.i_attention_wv, qs.n_attention_wv):
            new_type = "Q6_K"
        elif ftype == "Q4_K_S" and qs.i_attention_wv < 4:
            new_type = "Q5_K"
        if qs.type_70b and new_type in ("Q3_K", "Q4_K"):
            new_type = "Q5_K"
        if m.n_expert == 8:
            new_type = "Q8_0"
        qs.i_attention_wv += 1
    elif cat == ATTN_K:
        if m.n_expert == 8:
            new_type = "Q8_0"
        elif ftype == "IQ3_XS":
            new_type = "IQ3_XXS"
        elif ftype == "IQ3_XXS":
            new_type = "IQ2_S"
    elif cat == ATTN_Q:
        if ftype == "IQ3_XS":
            new_type = "IQ3_XXS"
        elif ftype == "IQ3_XXS":
            new_type = "IQ2_S"
    elif cat == FFN_DOWN:
        i_layer, n_layer = _layer_info(qs, qs.i_ffn_down, qs.n_ffn_down, tensor)
        if ftype == "Q2_K":
            new_type = "Q3_K"
        elif ftype == "Q2_K_S":
            if i_layer < _cdiv8(n_layer):
                new_type = "Q4_K"
        elif ftype == "IQ3_XXS" and not qs.has_imatrix:
            new_type = "Q4_K" if i_layer < _cdiv8(n_layer) else "Q3_K"
        elif ftype == "Q3_K_M":
            if i_layer < n_layer // 16:
                new_type = "Q5_K"
            elif arch != "falcon" or use_more_bits(i_layer, n_layer):
                new_type = "Q4_K"
            else:
                new_type = "Q3_K"
        elif ftype == "IQ3_M" and (i_layer < _cdiv8(n_layer) or (m.n_expert == 8 and use_more_bits(i_layer, n_layer))):
            new_type = "Q4_K"
        elif ftype == "Q3_K_L":
            new_type = "Q4_K" if arch == "falcon" else "Q5_K"
        elif ftype == "Q4_K_M":
            if arch == "falcon":
                if i_layer < n_layer // 16:
                    new_type = "Q6_K"
                elif use_more_bits(i_layer, n_layer):
                    new_type = "Q5_K"
                else:
                    new_type = "Q4_K"
            elif use_more_bits(i_layer, n_layer):
                new_type = "Q6_K"
        elif i_layer < _cdiv8(n_layer) and ftype in ("IQ4_NL", "IQ4_XS") and not qs.has_imatrix:
            new_type = "Q5_K"
        elif ftype == "Q5_K_M" and use_more_bits(i_layer, n_layer):
            new_type = "Q6_K"
        elif ftype == "Q4_K_S" and arch != "falcon" and i_layer < _cdiv8(n_layer):
            new_type = "Q5_K"
        elif ftype in ("Q4_0", "Q5_0") and qs.has_imatrix and i_layer < _cdiv8(n_layer):
            new_type = "Q4_1" if ftype == "Q4_0" else "Q5_1"
        qs.i_ffn_down += 1
    elif cat == ATTN_OUT:
        if arch != "falcon":
            if m.n_expert == 8:
                if ftype in (
                    "Q2_K",
                    "IQ3_XS",
                    "IQ3_XXS",
                    "Q3_K_S",
                    "Q3_K_M",
                    "IQ4_NL",
                    "Q4_K_S",
                    "Q4_K_M",
                    "IQ3_S",
                    "IQ3_M",
                    "IQ4_XS",
                ):
                    new_type = "Q5_K"
            else:
                new_type = {
                    "Q2_K": "Q3_K",
                    "IQ3_XXS": "IQ3_S",
                    "Q3_K_M": "Q4_K",
                    "Q3_K_L": "Q5_K",
                    "IQ3_M": "Q4_K",
                }.get(ftype, new_type)
        elif ftype == "Q3_K_L":
            new_type = "Q4_K"
    elif cat == QKV:  # unreachable after _is_attn_v above, as in the C++ (attn_qkv is attn_v-like)
        pass
    elif cat == FFN_GATE:
        i_layer, n_layer = _layer_info(qs, qs.i_ffn_gate, qs.n_ffn_gate, tensor)
        if ftype == "IQ3_XS" and _cdiv8(n_layer) <= i_layer < 7 * n_layer // 8:
            new_type = "IQ3_XXS"
        qs.i_ffn_gate += 1
    elif cat == FFN_UP:
        i_layer, n_layer = _layer_info(qs, qs.i_ffn_up, qs.n_ffn_up, tensor)
        if ftype == "IQ3_XS" and _cdiv8(n_layer) <= i_layer < 7 * n_layer // 8:
            new_type = "IQ3_XXS"
        qs.i_ffn_up += 1
    return new_type


def _fallback(qs: _State, tensor: GgufTensor, target: str) -> str:
    """tensor_type_fallback: a row that does not divide the block size gets the fallback type, else F16."""
    ncols, qk_k = tensor.ne[0], block_size(target)
    if ncols % qk_k == 0:
        return target
    qs.n_fallback += 1
    table: Mapping[str, str] = gguf_table()["fallback"]
    if target in table:
        result = table[target]
    elif qk_k <= 32:
        result = target
    else:
        raise ValueError(f"no tensor type fallback is defined for type {target}")
    if ncols % block_size(result) != 0:
        result = "F16"
    return result


def loader_order(tensors: Sequence[GgufTensor]) -> list[GgufTensor]:
    """weight_name_comparer: block number first (tensors outside blocks, -1, before them), then the name."""
    return sorted(tensors, key=lambda t: (t.layer if t.layer is not None else -1, t.name))


def is_type_70b(model: ConvertedModel) -> bool:
    rule = gguf_table()["llm_type_70b"].get(model.arch)
    if not rule or model.n_layer != int(rule["layers"]):
        return False
    return not rule.get("gqa") or model.n_head != model.n_head_kv


def tensor_types(model: ConvertedModel, ftype: str, *, has_imatrix: bool = False) -> list[tuple[GgufTensor, str]]:
    """Every tensor of ``model`` (in the loader's order) with the ggml type llama-quantize writes for ``ftype``
    (a key of ``[ftypes]``)."""
    default = str(gguf_table()["ftypes"][ftype]["default"])
    ordered = loader_order(model.tensors)
    qs = _State(model=model, ftype=ftype, has_imatrix=has_imatrix, type_70b=is_type_70b(model))
    for t in ordered:
        cat = category(t.name)
        if _is_attn_v(cat):
            qs.n_attention_wv += 1
        if cat == OUTPUT:
            qs.has_tied_embeddings = False
    qs.n_ffn_down = qs.n_ffn_gate = qs.n_ffn_up = model.n_layer
    out = []
    for t in ordered:
        if not allows_quantization(t):
            out.append((t, t.src_type))
            continue
        new_type = default
        if default not in _UNQUANTIZED:
            new_type = _impl(qs, new_type, t, category(t.name))
            new_type = _fallback(qs, t, new_type)
        out.append((t, new_type))
    return out


def requires_imatrix(name: str, ggml_type: str, ftype: str) -> bool:
    """tensor_requires_imatrix."""
    if name in ("token_embd.weight", "per_layer_token_embd.weight", "output.weight"):
        return False
    table = gguf_table()["imatrix"]
    if ggml_type in table["types"]:
        return True
    return ggml_type == "Q2_K" and ftype in table["q2_k_in"]
