"""Measure what real llama.cpp allocates, without downloading any weights (issue 6).

Each model is a GGUF written here with the ``gguf`` package from a real ``config.json`` of the corpus (real
tensor names, shapes and ggml types, as ``src/models/<arch>.cpp::load_arch_tensors`` of llama.cpp expects them),
or a real GGUF header of the corpus; the file is then extended to its full size as a *sparse* file (no weight
bytes on disk). llama.cpp (through llama-cpp-python's C API) loads it on the CPU in a subprocess per setting,
with ``no_alloc`` (the dry run that ``--fit`` uses: every buffer is sized, none is allocated, so 128k contexts
cost nothing) or, for a few small settings, with real allocation to show both give the same numbers. Its log
is parsed with the regexes of docs/engines/common.md#calibration-logs-llamacpp and one JSON line per (model, setting) is written to
``benchmarks/data/llamacpp_truth.jsonl``, with the llama.cpp version and every setting.

Run:  python3 benchmarks/llamacpp_truth.py [--out benchmarks/data/llamacpp_truth.jsonl] [--only NAME] [--jobs 1]
Needs: ``pip install llama-cpp-python`` (CPU build); configs and headers come from ``fixtures/`` (or --corpus).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

REPO = Path(__file__).resolve().parents[1]
#: the corpus copies in fixtures/ (hub/<org>/<name>/config.json, headers/*.gguf-header.gguf)
DEFAULT_CORPUS = REPO / "fixtures"
DEFAULT_OUT = REPO / "benchmarks" / "data" / "llamacpp_truth.jsonl"
#: the written GGUFs' headers (metadata + tensor infos, no data): the estimator's tests read them with
#: hfvram.readers.gguf, so the truth file is checked through the real reader
HEADERS_DIR = REPO / "benchmarks" / "data" / "llamacpp_headers"

# ---------------------------------------------------------------------------------------------------------
# Tensor lists
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    name: str
    #: ggml order: ne0 first (the row length)
    ne: tuple[int, ...]
    ggml_type: T


def nbytes(ne: tuple[int, ...], ggml_type: T) -> int:
    block, size = gguf.GGML_QUANT_SIZES[ggml_type]
    if ne[0] % block:
        raise ValueError(f"row of {ne[0]} is not a multiple of the {ggml_type.name} block {block}")
    total = ne[0] // block * size
    for n in ne[1:]:
        total *= n
    return total


def matrix_type(ne0: int, preferred: T) -> T:
    """The preferred quant type when the row fits its block, else Q8_0 (block 32), else F16."""
    for candidate in (preferred, T.Q8_0, T.F16):
        if ne0 % gguf.GGML_QUANT_SIZES[candidate][0] == 0:
            return candidate
    return T.F16


@dataclass
class ModelRecipe:
    """A GGUF to write: architecture, metadata and tensor list, plus the facts the estimator needs."""

    name: str
    source: str
    arch: str
    metadata: dict[str, Any]
    tensors: list[TensorSpec] = field(default_factory=list)

    def add(self, name: str, ne: Iterable[int], ggml_type: T = T.F32) -> None:
        ne = tuple(int(n) for n in ne)
        if ggml_type not in (T.F32, T.F16, T.BF16):
            ggml_type = matrix_type(ne[0], ggml_type)
        self.tensors.append(TensorSpec(name, ne, ggml_type))


# Q4_K_M-like mix (llama.cpp `llama_model_quantize`: Q4_K for most matrices, Q6_K for attn_v / ffn_down /
# output); exactness of the mix does not matter, only that real ggml types and byte sizes are used.
Q_MAIN, Q_HIGH = T.Q4_K, T.Q6_K


def _cfg(corpus: Path, repo: str) -> dict[str, Any]:
    data = json.loads((corpus / "hub" / repo / "config.json").read_text())
    return data.get("text_config", data) if "text_config" in data and "hidden_size" not in data else data


def _common_kv(arch: str, cfg: dict[str, Any], n_ctx_train: int, n_ff: int | None) -> dict[str, Any]:
    kv: dict[str, Any] = {
        f"{arch}.context_length": n_ctx_train,
        f"{arch}.embedding_length": cfg["hidden_size"],
        f"{arch}.block_count": cfg["num_hidden_layers"],
        f"{arch}.attention.head_count": cfg["num_attention_heads"],
        f"{arch}.attention.head_count_kv": cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
        f"{arch}.attention.layer_norm_rms_epsilon": float(cfg.get("rms_norm_eps", 1e-6)),
        f"{arch}.rope.freq_base": float(cfg.get("rope_theta", 10000.0)),
        f"{arch}.vocab_size": cfg["vocab_size"],
    }
    if n_ff is not None:
        kv[f"{arch}.feed_forward_length"] = n_ff
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv[f"{arch}.attention.key_length"] = head_dim
    kv[f"{arch}.attention.value_length"] = head_dim
    kv[f"{arch}.rope.dimension_count"] = head_dim
    return kv


def _attn(r: ModelRecipe, i: int, n_embd: int, n_q: int, n_kv: int, *, bias: bool = False) -> None:
    r.add(f"blk.{i}.attn_norm.weight", [n_embd])
    r.add(f"blk.{i}.attn_q.weight", [n_embd, n_q], Q_MAIN)
    r.add(f"blk.{i}.attn_k.weight", [n_embd, n_kv], Q_MAIN)
    r.add(f"blk.{i}.attn_v.weight", [n_embd, n_kv], Q_HIGH)
    r.add(f"blk.{i}.attn_output.weight", [n_q, n_embd], Q_MAIN)
    if bias:
        r.add(f"blk.{i}.attn_q.bias", [n_q])
        r.add(f"blk.{i}.attn_k.bias", [n_kv])
        r.add(f"blk.{i}.attn_v.bias", [n_kv])


def _ffn(r: ModelRecipe, i: int, n_embd: int, n_ff: int) -> None:
    r.add(f"blk.{i}.ffn_norm.weight", [n_embd])
    r.add(f"blk.{i}.ffn_gate.weight", [n_embd, n_ff], Q_MAIN)
    r.add(f"blk.{i}.ffn_up.weight", [n_embd, n_ff], Q_MAIN)
    r.add(f"blk.{i}.ffn_down.weight", [n_ff, n_embd], Q_HIGH)


def _io(r: ModelRecipe, n_embd: int, n_vocab: int, *, tied: bool) -> None:
    r.add("token_embd.weight", [n_embd, n_vocab], Q_MAIN)
    r.add("output_norm.weight", [n_embd])
    if not tied:
        r.add("output.weight", [n_embd, n_vocab], Q_HIGH)


def recipe_llama(corpus: Path) -> ModelRecipe:
    """Llama-3.1-8B-Instruct: dense GQA (llama.cpp src/models/llama.cpp)."""
    repo = "meta-llama/Llama-3.1-8B-Instruct"
    c = _cfg(corpus, repo)
    e, hd = c["hidden_size"], c["hidden_size"] // c["num_attention_heads"]
    r = ModelRecipe(
        "llama-3.1-8b",
        f"corpus/hub/{repo}/config.json",
        "llama",
        _common_kv("llama", c, c["max_position_embeddings"], c["intermediate_size"]),
    )
    _io(r, e, c["vocab_size"], tied=c.get("tie_word_embeddings", False))
    for i in range(c["num_hidden_layers"]):
        _attn(r, i, e, hd * c["num_attention_heads"], hd * c["num_key_value_heads"])
        _ffn(r, i, e, c["intermediate_size"])
    return r


def recipe_qwen3moe(corpus: Path) -> ModelRecipe:
    """Qwen3-30B-A3B: MoE, 128 experts, 8 used (src/models/qwen3moe.cpp)."""
    repo = "Qwen/Qwen3-30B-A3B"
    c = _cfg(corpus, repo)
    e, hd, nx, ff = c["hidden_size"], c["head_dim"], c["num_experts"], c["moe_intermediate_size"]
    kv = _common_kv("qwen3moe", c, c["max_position_embeddings"], c["intermediate_size"])
    kv.update(
        {
            "qwen3moe.expert_count": nx,
            "qwen3moe.expert_used_count": c["num_experts_per_tok"],
            "qwen3moe.expert_feed_forward_length": ff,
        }
    )
    r = ModelRecipe("qwen3-30b-a3b", f"corpus/hub/{repo}/config.json", "qwen3moe", kv)
    _io(r, e, c["vocab_size"], tied=c.get("tie_word_embeddings", False))
    for i in range(c["num_hidden_layers"]):
        _attn(r, i, e, hd * c["num_attention_heads"], hd * c["num_key_value_heads"])
        r.add(f"blk.{i}.attn_k_norm.weight", [hd])
        r.add(f"blk.{i}.attn_q_norm.weight", [hd])
        r.add(f"blk.{i}.ffn_norm.weight", [e])
        r.add(f"blk.{i}.ffn_gate_inp.weight", [e, nx])
        r.add(f"blk.{i}.ffn_gate_exps.weight", [e, ff, nx], Q_MAIN)
        r.add(f"blk.{i}.ffn_up_exps.weight", [e, ff, nx], Q_MAIN)
        r.add(f"blk.{i}.ffn_down_exps.weight", [ff, e, nx], Q_HIGH)
    return r


def recipe_gemma2(corpus: Path) -> ModelRecipe:
    """gemma-2-9b-it: every other layer sliding window 4096, tied embeddings (src/models/gemma2.cpp)."""
    repo = "google/gemma-2-9b-it"
    c = _cfg(corpus, repo)
    e, hd = c["hidden_size"], c["head_dim"]
    kv = _common_kv("gemma2", c, c["max_position_embeddings"], c["intermediate_size"])
    kv.update(
        {
            "gemma2.attention.sliding_window": c["sliding_window"],
            "gemma2.attn_logit_softcapping": float(c["attn_logit_softcapping"]),
            "gemma2.final_logit_softcapping": float(c["final_logit_softcapping"]),
        }
    )
    r = ModelRecipe("gemma-2-9b", f"corpus/hub/{repo}/config.json", "gemma2", kv)
    _io(r, e, c["vocab_size"], tied=True)
    for i in range(c["num_hidden_layers"]):
        _attn(r, i, e, hd * c["num_attention_heads"], hd * c["num_key_value_heads"])
        r.add(f"blk.{i}.post_attention_norm.weight", [e])
        _ffn(r, i, e, c["intermediate_size"])
        r.add(f"blk.{i}.post_ffw_norm.weight", [e])
    return r


def recipe_gemma3(corpus: Path) -> ModelRecipe:
    """medgemma-27b-it text model (Gemma 3 27B): 5 of 6 layers sliding window 1024 (src/models/gemma3.cpp)."""
    repo = "google/medgemma-27b-it"
    c = _cfg(corpus, repo)
    e, hd = c["hidden_size"], c["head_dim"]
    kv = _common_kv("gemma3", c, c["max_position_embeddings"], c["intermediate_size"])
    kv.update(
        {
            "gemma3.attention.sliding_window": c["sliding_window"],
            "gemma3.rope.freq_base_swa": float(c.get("rope_local_base_freq", 10000)),
        }
    )
    r = ModelRecipe("gemma-3-27b", f"corpus/hub/{repo}/config.json (text_config)", "gemma3", kv)
    _io(r, e, c["vocab_size"], tied=True)
    for i in range(c["num_hidden_layers"]):
        _attn(r, i, e, hd * c["num_attention_heads"], hd * c["num_key_value_heads"])
        r.add(f"blk.{i}.post_attention_norm.weight", [e])
        r.add(f"blk.{i}.attn_k_norm.weight", [hd])
        r.add(f"blk.{i}.attn_q_norm.weight", [hd])
        _ffn(r, i, e, c["intermediate_size"])
        r.add(f"blk.{i}.post_ffw_norm.weight", [e])
    return r


def recipe_gpt_oss(corpus: Path) -> ModelRecipe:
    """gpt-oss-20b: MoE with MXFP4 experts, even layers sliding window 128, attention sinks
    (src/models/openai-moe.cpp)."""
    repo = "openai/gpt-oss-20b"
    c = _cfg(corpus, repo)
    e, hd, nx, ff = c["hidden_size"], c["head_dim"], c["num_local_experts"], c["intermediate_size"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    arch = "gpt-oss"
    kv = _common_kv(arch, c, c["max_position_embeddings"], ff)
    kv.update(
        {
            f"{arch}.expert_count": nx,
            f"{arch}.expert_used_count": c["experts_per_token"],
            f"{arch}.expert_feed_forward_length": ff,
            f"{arch}.attention.sliding_window": c["sliding_window"],
        }
    )
    r = ModelRecipe("gpt-oss-20b", f"corpus/hub/{repo}/config.json", arch, kv)
    r.add("token_embd.weight", [e, c["vocab_size"]], T.Q8_0)
    r.add("output_norm.weight", [e])
    r.add("output.weight", [e, c["vocab_size"]], T.Q8_0)
    for i in range(c["num_hidden_layers"]):
        r.add(f"blk.{i}.attn_norm.weight", [e])
        r.add(f"blk.{i}.post_attention_norm.weight", [e])
        r.add(f"blk.{i}.attn_q.weight", [e, nh * hd], T.Q8_0)
        r.add(f"blk.{i}.attn_k.weight", [e, nkv * hd], T.Q8_0)
        r.add(f"blk.{i}.attn_v.weight", [e, nkv * hd], T.Q8_0)
        r.add(f"blk.{i}.attn_output.weight", [nh * hd, e], T.Q8_0)
        r.add(f"blk.{i}.attn_q.bias", [nh * hd])
        r.add(f"blk.{i}.attn_k.bias", [nkv * hd])
        r.add(f"blk.{i}.attn_v.bias", [nkv * hd])
        r.add(f"blk.{i}.attn_output.bias", [e])
        r.add(f"blk.{i}.attn_sinks.weight", [nh])
        r.add(f"blk.{i}.ffn_gate_inp.weight", [e, nx])
        r.add(f"blk.{i}.ffn_gate_inp.bias", [nx])
        r.add(f"blk.{i}.ffn_gate_exps.weight", [e, ff, nx], T.MXFP4)
        r.add(f"blk.{i}.ffn_up_exps.weight", [e, ff, nx], T.MXFP4)
        r.add(f"blk.{i}.ffn_down_exps.weight", [ff, e, nx], T.MXFP4)
        r.add(f"blk.{i}.ffn_gate_exps.bias", [ff, nx])
        r.add(f"blk.{i}.ffn_up_exps.bias", [ff, nx])
        r.add(f"blk.{i}.ffn_down_exps.bias", [e, nx])
    return r


def recipe_deepseek2(corpus: Path) -> ModelRecipe:
    """DeepSeek-V2-Lite in the MLA layout current convert_hf_to_gguf writes (k_b / v_b split, key_length =
    kv_lora_rank + rope, head_count_kv = 1; src/models/deepseek2.cpp)."""
    repo = "deepseek-ai/DeepSeek-V2-Lite"
    c = _cfg(corpus, repo)
    e, nh = c["hidden_size"], c["num_attention_heads"]
    rank, rope, nope, vdim = c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
    nx, ffx, nsh = c["n_routed_experts"], c["moe_intermediate_size"], c["n_shared_experts"]
    arch = "deepseek2"
    kv = _common_kv(arch, c, c["max_position_embeddings"], c["intermediate_size"])
    kv.update(
        {
            f"{arch}.attention.head_count_kv": 1,
            f"{arch}.attention.key_length": rank + rope,
            f"{arch}.attention.value_length": rank,
            f"{arch}.attention.key_length_mla": nope + rope,
            f"{arch}.attention.value_length_mla": vdim,
            f"{arch}.attention.kv_lora_rank": rank,
            f"{arch}.rope.dimension_count": rope,
            f"{arch}.leading_dense_block_count": c["first_k_dense_replace"],
            f"{arch}.expert_count": nx,
            f"{arch}.expert_used_count": c["num_experts_per_tok"],
            f"{arch}.expert_feed_forward_length": ffx,
            f"{arch}.expert_shared_count": nsh,
            f"{arch}.expert_weights_scale": float(c.get("routed_scaling_factor", 1.0)),
        }
    )
    r = ModelRecipe("deepseek-v2-lite", f"corpus/hub/{repo}/config.json", arch, kv)
    _io(r, e, c["vocab_size"], tied=False)
    for i in range(c["num_hidden_layers"]):
        r.add(f"blk.{i}.attn_norm.weight", [e])
        r.add(f"blk.{i}.attn_kv_a_norm.weight", [rank])
        r.add(f"blk.{i}.attn_q.weight", [e, nh * (nope + rope)], Q_MAIN)
        r.add(f"blk.{i}.attn_kv_a_mqa.weight", [e, rank + rope], Q_MAIN)
        r.add(f"blk.{i}.attn_k_b.weight", [nope, rank, nh], T.Q8_0)
        r.add(f"blk.{i}.attn_v_b.weight", [rank, vdim, nh], Q_HIGH)
        r.add(f"blk.{i}.attn_output.weight", [nh * vdim, e], Q_MAIN)
        if i < c["first_k_dense_replace"]:
            _ffn(r, i, e, c["intermediate_size"])
        else:
            r.add(f"blk.{i}.ffn_norm.weight", [e])
            r.add(f"blk.{i}.ffn_gate_inp.weight", [e, nx])
            r.add(f"blk.{i}.ffn_gate_exps.weight", [e, ffx, nx], Q_MAIN)
            r.add(f"blk.{i}.ffn_up_exps.weight", [e, ffx, nx], Q_MAIN)
            r.add(f"blk.{i}.ffn_down_exps.weight", [ffx, e, nx], Q_HIGH)
            r.add(f"blk.{i}.ffn_gate_shexp.weight", [e, ffx * nsh], Q_MAIN)
            r.add(f"blk.{i}.ffn_up_shexp.weight", [e, ffx * nsh], Q_MAIN)
            r.add(f"blk.{i}.ffn_down_shexp.weight", [ffx * nsh, e], Q_HIGH)
    return r


def recipe_nemotron_h(corpus: Path) -> ModelRecipe:
    """Nemotron-H-56B-Base-8K: hybrid of Mamba-2 (M), attention-only (*) and MLP-only (-) blocks, as
    ``hybrid_override_pattern`` lists them (src/models/nemotron-h.cpp: a layer with head_count_kv = 0 and
    feed_forward_length = 0 is recurrent)."""
    repo = "nvidia/Nemotron-H-56B-Base-8K"
    c = _cfg(corpus, repo)
    e, hd, nh, nkv = c["hidden_size"], c["attention_head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    pattern = c["hybrid_override_pattern"]
    d_conv, d_state, n_group = c["conv_kernel"], c["ssm_state_size"], c["n_groups"]
    n_ssm_head, d_inner = c["mamba_num_heads"], c["mamba_num_heads"] * c["mamba_head_dim"]
    arch = "nemotron_h"
    kv = _common_kv(arch, c, c["max_position_embeddings"], None)
    kv.update(
        {
            f"{arch}.attention.head_count_kv": [nkv if ch == "*" else 0 for ch in pattern],
            f"{arch}.feed_forward_length": [c["intermediate_size"] if ch == "-" else 0 for ch in pattern],
            f"{arch}.attention.key_length": hd,
            f"{arch}.attention.value_length": hd,
            f"{arch}.rope.dimension_count": hd,
            f"{arch}.ssm.conv_kernel": d_conv,
            f"{arch}.ssm.inner_size": d_inner,
            f"{arch}.ssm.state_size": d_state,
            f"{arch}.ssm.time_step_rank": n_ssm_head,
            f"{arch}.ssm.group_count": n_group,
            f"{arch}.attention.layer_norm_epsilon": float(c["layer_norm_epsilon"]),
        }
    )
    r = ModelRecipe("nemotron-h-56b", f"corpus/hub/{repo}/config.json", arch, kv)
    _io(r, e, c["vocab_size"], tied=c.get("tie_word_embeddings", False))
    d_in_proj = 2 * d_inner + 2 * n_group * d_state + n_ssm_head
    for i, ch in enumerate(pattern):
        r.add(f"blk.{i}.attn_norm.weight", [e])
        if ch == "M":
            r.add(f"blk.{i}.ssm_in.weight", [e, d_in_proj], Q_MAIN)
            r.add(f"blk.{i}.ssm_conv1d.weight", [d_conv, d_inner + 2 * n_group * d_state])
            r.add(f"blk.{i}.ssm_conv1d.bias", [d_inner + 2 * n_group * d_state])
            r.add(f"blk.{i}.ssm_dt.bias", [n_ssm_head])
            r.add(f"blk.{i}.ssm_a", [1, n_ssm_head])
            r.add(f"blk.{i}.ssm_d", [1, n_ssm_head])
            r.add(f"blk.{i}.ssm_norm.weight", [d_inner // n_group, n_group])
            r.add(f"blk.{i}.ssm_out.weight", [d_inner, e], Q_MAIN)
        elif ch == "*":
            r.add(f"blk.{i}.attn_q.weight", [e, hd * nh], Q_MAIN)
            r.add(f"blk.{i}.attn_k.weight", [e, hd * nkv], Q_MAIN)
            r.add(f"blk.{i}.attn_v.weight", [e, hd * nkv], Q_HIGH)
            r.add(f"blk.{i}.attn_output.weight", [hd * nh, e], Q_MAIN)
        else:
            r.add(f"blk.{i}.ffn_up.weight", [e, c["intermediate_size"]], Q_MAIN)
            r.add(f"blk.{i}.ffn_down.weight", [c["intermediate_size"], e], Q_HIGH)
    return r


RECIPES: dict[str, Callable[[Path], ModelRecipe]] = {
    "llama-3.1-8b": recipe_llama,
    "qwen3-30b-a3b": recipe_qwen3moe,
    "gemma-2-9b": recipe_gemma2,
    "gemma-3-27b": recipe_gemma3,
    "gpt-oss-20b": recipe_gpt_oss,
    "deepseek-v2-lite": recipe_deepseek2,
    "nemotron-h-56b": recipe_nemotron_h,
}

#: real GGUF headers of the corpus (cut after the tensor infos), extended to their full size
REAL_HEADERS: dict[str, str] = {
    "gemma-3-270m-q4_k_m": "headers/hugginllam--gemma-3-270m-Q4_K_M-GGUF--gemma-3-270m-q4_k_m.gguf-header.gguf",
    "smollm2-135m-q4_1": "headers/SmolLM2-135M-Instruct.Q4_1.gguf-header.gguf",
    "r1-distill-qwen-7b-q4_k_m": "headers/DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf-header.gguf",
}

# ---------------------------------------------------------------------------------------------------------
# Writing sparse GGUFs
# ---------------------------------------------------------------------------------------------------------


def write_sparse_gguf(recipe: ModelRecipe, path: Path, header_copy: Path | None = None) -> int:
    """Write the header with the gguf package, then extend the file to its full size without data; keep a copy
    of the header (metadata + tensor infos, what hfvram's GGUF reader reads) at ``header_copy``.
    Returns the file size."""
    writer = gguf.GGUFWriter(str(path), recipe.arch)
    writer.add_string("general.name", recipe.name)
    writer.add_string("tokenizer.ggml.model", "none")  # no vocab: {arch}.vocab_size gives n_vocab
    for key, value in recipe.metadata.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)
    for t in recipe.tensors:
        writer.add_tensor_info(
            t.name, tuple(reversed(t.ne)), np.dtype(np.float32), nbytes(t.ne, t.ggml_type), raw_dtype=t.ggml_type
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    fout = writer.fout[0]
    header_end = fout.tell()
    data_start = gguf.GGUFWriter.ggml_pad(header_end, writer.data_alignment)
    data = sum(gguf.GGUFWriter.ggml_pad(nbytes(t.ne, t.ggml_type), writer.data_alignment) for t in recipe.tensors)
    fout.close()
    if header_copy is not None:
        header_copy.parent.mkdir(parents=True, exist_ok=True)
        with path.open("rb") as handle:
            header_copy.write_bytes(handle.read(header_end))
    size = data_start + data
    os.truncate(path, size)
    return size


def extend_real_header(header: Path, path: Path) -> int:
    """Copy a real (truncated) GGUF header and extend it to the full file size its tensor infos imply."""
    raw = header.read_bytes()
    path.write_bytes(raw)
    os.truncate(path, len(raw) + (1 << 36))  # big enough for GGUFReader's memmap views
    reader = gguf.GGUFReader(str(path))
    end = max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)
    del reader
    os.truncate(path, end)
    return end


def _scalar(reader: gguf.GGUFReader, key: str) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return None
    if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return len(f.data)
        return [f.parts[i].tolist()[0] for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode()
    return f.parts[f.data[0]].tolist()[0]


#: which layers llama.cpp makes sliding-window, per architecture (``set_swa_pattern(n)``: layer il is SWA when
#: ``il % n < n - 1``; src/models/gemma2.cpp 2, gemma3.cpp 6, openai-moe.cpp 2; docs/engines/llamacpp.md#llamacpp-swa)
SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2}


def facts_from_gguf(path: Path) -> dict[str, Any]:
    """The model facts the estimator needs, read back from the written GGUF (metadata + tensor infos)."""
    reader = gguf.GGUFReader(str(path))
    arch = _scalar(reader, "general.architecture")
    get = lambda key: _scalar(reader, f"{arch}.{key}")  # noqa: E731
    n_layer = get("block_count")
    n_vocab = get("vocab_size") or _scalar(reader, "tokenizer.ggml.tokens")
    by_role: dict[str, int] = {"token_embd": 0, "output": 0, "blocks": 0, "experts": 0, "other": 0}
    by_type: dict[str, int] = {}
    for t in reader.tensors:
        size = int(t.n_bytes)
        by_type[t.tensor_type.name] = by_type.get(t.tensor_type.name, 0) + size
        if t.name == "token_embd.weight":
            by_role["token_embd"] += size
        elif t.name.startswith("output."):
            by_role["output"] += size
        elif t.name.startswith("blk.") and "_exps" in t.name:
            by_role["experts"] += size
        elif t.name.startswith("blk."):
            by_role["blocks"] += size
        else:
            by_role["other"] += size
    n_swa = get("attention.sliding_window")
    pattern = SWA_PATTERN.get(arch) if n_swa else None
    facts = {
        "arch": arch,
        "n_layer": n_layer,
        "n_embd": get("embedding_length"),
        "n_head": get("attention.head_count"),
        "n_head_kv": get("attention.head_count_kv"),
        "key_length": get("attention.key_length"),
        "value_length": get("attention.value_length"),
        "n_ff": get("feed_forward_length"),
        "n_vocab": n_vocab,
        "n_ctx_train": get("context_length"),
        "n_swa": n_swa,
        "swa_layers": [il for il in range(n_layer) if pattern and il % pattern < pattern - 1],
        "n_expert": get("expert_count"),
        "n_expert_used": get("expert_used_count"),
        "n_ff_exp": get("expert_feed_forward_length"),
        "n_expert_shared": get("expert_shared_count"),
        "n_layer_dense_lead": get("leading_dense_block_count"),
        "kv_lora_rank": get("attention.kv_lora_rank"),
        "key_length_mla": get("attention.key_length_mla"),
        "rope_dims": get("rope.dimension_count"),
        "ssm_d_conv": get("ssm.conv_kernel"),
        "ssm_d_inner": get("ssm.inner_size"),
        "ssm_d_state": get("ssm.state_size"),
        "ssm_n_group": get("ssm.group_count"),
        "ssm_dt_rank": get("ssm.time_step_rank"),
        "tied_embeddings": by_role["output"] == 0,
        "tensor_bytes": sum(by_role.values()),
        "tensor_bytes_by_role": by_role,
        "tensor_bytes_by_type": by_type,
        "n_tensors": len(reader.tensors),
    }
    return facts


# ---------------------------------------------------------------------------------------------------------
# Loading in llama.cpp (one subprocess per setting) and parsing its log
# ---------------------------------------------------------------------------------------------------------

KV_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30, "iq4_nl": 20}

LOADER = r"""
import ctypes, json, sys
import llama_cpp as L
s = json.loads(sys.argv[1])
last = [2]
def log(level, text, user):
    if level == 5:  # GGML_LOG_LEVEL_CONT continues the previous line
        level = last[0]
    last[0] = level
    if level >= 2:  # skip DEBUG (1)
        sys.stderr.write(text.decode('utf-8', 'replace'))
cb = L.llama_log_callback(log)
L.llama_log_set(cb, ctypes.c_void_p(0))
L.llama_backend_init()
mp = L.llama_model_default_params()
mp.n_gpu_layers = 0
mp.use_extra_bufts = False  # no CPU_REPACK copies of the weights
mp.no_alloc = bool(s['no_alloc'])
mp.use_mmap = not mp.no_alloc  # the dry run maps nothing (common/fit.cpp sets load_mode NONE)
if mp.no_alloc and hasattr(mp, 'load_mode'):
    mp.load_mode = 0
m = L.llama_model_load_from_file(s['path'].encode(), mp)
if not m:
    sys.exit(3)
cp = L.llama_context_default_params()
cp.n_ctx = s['n_ctx']; cp.n_batch = s['n_batch']; cp.n_ubatch = s['n_ubatch']; cp.n_seq_max = s['n_seq_max']
cp.flash_attn_type = {'on': 1, 'off': 0, 'auto': -1}[s['flash_attn']]
cp.type_k = s['type_k_id']; cp.type_v = s['type_v_id']
cp.swa_full = bool(s['swa_full']); cp.kv_unified = bool(s['kv_unified'])
cp.n_threads = 1; cp.n_threads_batch = 1
if s.get('n_outputs_max'):
    cp.n_outputs_max = s['n_outputs_max']
ctx = L.llama_init_from_model(m, cp)
if not ctx:
    sys.exit(4)
sys.stderr.write('HFVRAM_LLAMA_CPP_VERSION=' + L.__version__ + '\n')
sys.stderr.flush()
"""

_F = r"[\d.]+"
PATTERNS: dict[str, re.Pattern[str]] = {
    "model_buffer": re.compile(rf"\w+:\s+(?P<buf>\S+) model buffer size =\s+(?P<mib>{_F}) MiB"),
    "kv_buffer": re.compile(rf"\w+:\s+(?P<buf>\S+) KV buffer size =\s+(?P<mib>{_F}) MiB"),
    "kv_size": re.compile(
        rf"\w+: size =\s+(?P<mib>{_F}) MiB \(\s*(?P<cells>\d+) cells,\s+(?P<layers>\d+) layers,\s+(?P<seqs>\d+)/(?P<streams>\d+) seqs\), "
        rf"K \((?P<tk>\w+)\):\s+(?P<k>{_F}) MiB, V \((?P<tv>\w+)\):\s+(?P<v>{_F}) MiB"
    ),
    "rs_size": re.compile(
        rf"\w+: size =\s+(?P<mib>{_F}) MiB \(\s*(?P<cells>\d+) cells,\s+(?P<layers>\d+) layers,\s+(?P<seqs>\d+) seqs\s+(?P<rs_seq>\d+) rs_seq\), "
        rf"R \((?P<tr>\w+)\):\s+(?P<r>{_F}) MiB, S \((?P<ts>\w+)\):\s+(?P<s>{_F}) MiB"
    ),
    "rs_buffer": re.compile(rf"\w+:\s+(?P<buf>\S+) RS buffer size =\s+(?P<mib>{_F}) MiB"),
    "compute_buffer": re.compile(rf"\w+:\s+(?P<buf>\S+) compute buffer size =\s+(?P<mib>{_F}) MiB"),
    "output_buffer": re.compile(rf"\w+:\s+(?P<buf>\S+)\s+output buffer size =\s+(?P<mib>{_F}) MiB"),
    "swa_cells": re.compile(r"\w+: creating\s+(?P<kind>non-SWA|SWA) KV cache, size = (?P<cells>\d+) cells"),
    "n_ctx": re.compile(r"\w+: n_ctx\s+= (?P<v>\d+)"),
    "n_ctx_seq": re.compile(r"\w+: n_ctx_seq\s+= (?P<v>\d+)"),
    "flash_attn": re.compile(r"Flash Attention was auto, set to (?P<v>enabled|disabled)"),
    "version": re.compile(r"HFVRAM_LLAMA_CPP_VERSION=(?P<v>\S+)"),
}


def parse_log(text: str) -> dict[str, Any]:
    """The figures of one load's log, in MiB as printed (docs/engines/common.md#calibration-logs-llamacpp)."""
    out: dict[str, Any] = {"model_buffer_mib": {}, "kv_buffer_mib": {}, "compute_buffer_mib": {}, "rs_buffer_mib": {}}
    for m in PATTERNS["model_buffer"].finditer(text):
        out["model_buffer_mib"][m["buf"]] = out["model_buffer_mib"].get(m["buf"], 0.0) + float(m["mib"])
    for m in PATTERNS["kv_buffer"].finditer(text):
        out["kv_buffer_mib"][m["buf"]] = out["kv_buffer_mib"].get(m["buf"], 0.0) + float(m["mib"])
    for m in PATTERNS["rs_buffer"].finditer(text):
        out["rs_buffer_mib"][m["buf"]] = out["rs_buffer_mib"].get(m["buf"], 0.0) + float(m["mib"])
    for m in PATTERNS["compute_buffer"].finditer(text):
        out["compute_buffer_mib"][m["buf"]] = float(m["mib"])
    m = PATTERNS["output_buffer"].search(text)
    out["output_buffer_mib"] = float(m["mib"]) if m else None
    out["kv_caches"] = [
        {
            "mib": float(m["mib"]),
            "cells": int(m["cells"]),
            "layers": int(m["layers"]),
            "seqs": int(m["seqs"]),
            "streams": int(m["streams"]),
            "type_k": m["tk"],
            "k_mib": float(m["k"]),
            "type_v": m["tv"],
            "v_mib": float(m["v"]),
        }
        for m in PATTERNS["kv_size"].finditer(text)
    ]
    out["rs_caches"] = [
        {
            "mib": float(m["mib"]),
            "cells": int(m["cells"]),
            "layers": int(m["layers"]),
            "seqs": int(m["seqs"]),
            "r_mib": float(m["r"]),
            "s_mib": float(m["s"]),
        }
        for m in PATTERNS["rs_size"].finditer(text)
    ]
    out["swa_cells"] = {m["kind"]: int(m["cells"]) for m in PATTERNS["swa_cells"].finditer(text)}
    for key in ("n_ctx", "n_ctx_seq"):
        m = PATTERNS[key].search(text)
        out[key] = int(m["v"]) if m else None
    m = PATTERNS["flash_attn"].search(text)
    out["flash_attn_auto"] = m["v"] if m else None
    m = PATTERNS["version"].search(text)
    out["llama_cpp_python"] = m["v"] if m else None
    return out


def load_and_measure(path: Path, settings: dict[str, Any]) -> tuple[int, str]:
    args = dict(
        settings, path=str(path), type_k_id=KV_TYPES[settings["type_k"]], type_v_id=KV_TYPES[settings["type_v"]]
    )
    proc = subprocess.run([sys.executable, "-c", LOADER, json.dumps(args)], capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stderr


# ---------------------------------------------------------------------------------------------------------
# The grid
# ---------------------------------------------------------------------------------------------------------


def setting(
    n_ctx: int,
    *,
    n_ubatch: int = 512,
    n_batch: int | None = None,
    flash_attn: str = "on",
    type_k: str = "f16",
    type_v: str = "f16",
    swa_full: bool = False,
    n_seq_max: int = 1,
    kv_unified: bool = False,
    no_alloc: bool = True,
    n_outputs_max: int | None = None,
) -> dict[str, Any]:
    return {
        "n_ctx": n_ctx,
        "n_batch": n_batch or max(n_ubatch, 2048),
        "n_ubatch": n_ubatch,
        "flash_attn": flash_attn,
        "type_k": type_k,
        "type_v": type_v,
        "swa_full": swa_full,
        "n_seq_max": n_seq_max,
        "kv_unified": kv_unified,
        "no_alloc": no_alloc,
        "n_outputs_max": n_outputs_max,
    }


#: real-allocation loads map the whole file and llama.cpp prefetches it (madvise WILLNEED): page cache the size
#: of the file, even sparse. Only files below this size get the real-allocation rows.
REAL_ALLOC_MAX_BYTES = 6 << 30


def grid_for(name: str, file_size: int = 0) -> list[dict[str, Any]]:
    """Settings per model: context sizes incl. 32k / 128k, ubatch, FA on/off, K/V types, sequences, unified,
    swa_full; a few small ones with real allocation to show no_alloc sizes equal real ones."""
    base = [
        setting(4096),
        setting(5000),
        setting(32768),
        setting(131072),
        setting(32768, flash_attn="off"),
        setting(8192, flash_attn="off"),
        setting(32768, n_ubatch=2048),
        setting(8192, n_ubatch=128, n_batch=128),
        setting(32768, type_k="q8_0", type_v="q8_0"),
        setting(32768, type_k="q4_0", type_v="q4_0"),
        setting(32768, type_k="q8_0", type_v="f16"),
        setting(16384, type_k="q5_1", type_v="q5_1"),
        setting(16384, n_seq_max=4, kv_unified=True),
        setting(16384, n_seq_max=4, kv_unified=False),
        setting(10000, n_seq_max=3, kv_unified=False),
        setting(16384, n_seq_max=4, kv_unified=True, n_outputs_max=4),
        setting(16384, n_seq_max=4, kv_unified=False, flash_attn="off"),
        setting(2048, no_alloc=False),
        setting(4096, flash_attn="off", no_alloc=False),
    ]
    if name in ("gemma-2-9b", "gemma-3-27b", "gpt-oss-20b", "gemma-3-270m-q4_k_m"):
        base += [
            setting(32768, swa_full=True),
            setting(16384, n_seq_max=4, kv_unified=True, swa_full=False),
            setting(8192, swa_full=True, flash_attn="off"),
        ]
    if name in ("smollm2-135m-q4_1", "gemma-3-270m-q4_k_m"):
        base = [s for s in base if s["n_ctx"] <= 32768]
    if file_size > REAL_ALLOC_MAX_BYTES:
        base = [s for s in base if s["no_alloc"]]
    return base


def model_paths(corpus: Path, workdir: Path, only: set[str] | None) -> Iterator[tuple[str, Path, dict[str, Any]]]:
    for name, build in RECIPES.items():
        if only and name not in only:
            continue
        recipe = build(corpus)
        path = workdir / f"{name}.gguf"
        header = HEADERS_DIR / f"{name}.gguf-header"
        size = write_sparse_gguf(recipe, path, header)
        yield (
            name,
            path,
            {
                "source": recipe.source,
                "header": str(header.relative_to(REPO)),
                "file_size": size,
                "written_by": "gguf.GGUFWriter",
                "facts": facts_from_gguf(path),
            },
        )
    for name, rel in REAL_HEADERS.items():
        if only and name not in only:
            continue
        path = workdir / f"{name}.gguf"
        size = extend_real_header(corpus / rel, path)
        yield (
            name,
            path,
            {
                "source": f"fixtures/{rel}",
                "header": f"fixtures/{rel}",
                "file_size": size,
                "written_by": "real header, sparse-extended",
                "facts": facts_from_gguf(path),
            },
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", action="append")
    parser.add_argument("--keep", type=Path, help="keep the sparse GGUFs in this folder")
    parser.add_argument("--append", action="store_true", help="append to --out instead of rewriting it")
    parser.add_argument(
        "--llama-cpp-commit",
        default="0c1e57098bba43ac29e6e3b677cdceebdd22334f (2026-10-01)",
        help="the llama.cpp commit llama-cpp-python vendors (its sdist's vendor/llama.cpp); recorded per row",
    )
    args = parser.parse_args(argv)
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="hfvram-gguf-"))
    workdir.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    with args.out.open("a" if args.append else "w") as out:
        for name, path, model in model_paths(args.corpus, workdir, set(args.only) if args.only else None):
            for s in grid_for(name, model["file_size"]):
                rc, log = load_and_measure(path, s)
                parsed = parse_log(log)
                row = {
                    "model": name,
                    **model,
                    "llama_cpp_commit": args.llama_cpp_commit,
                    "settings": s,
                    "rc": rc,
                    "measured": parsed,
                }
                if rc != 0:
                    row["log_tail"] = log[-1500:]
                out.write(json.dumps(row) + "\n")
                out.flush()
                rows += 1
                print(
                    name,
                    s["n_ctx"],
                    s["n_ubatch"],
                    s["flash_attn"],
                    s["type_k"],
                    s["type_v"],
                    s["n_seq_max"],
                    s["kv_unified"],
                    s["swa_full"],
                    "rc",
                    rc,
                    parsed["compute_buffer_mib"],
                    [k["mib"] for k in parsed["kv_caches"]],
                    flush=True,
                )
            if not args.keep:
                path.unlink()
    print(f"{rows} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
