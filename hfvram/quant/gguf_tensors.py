"""The tensor list llama.cpp's converter (``convert_hf_to_gguf.py``) writes for a model, from its config shapes.

The Hugging Face tensor list comes from :func:`hfvram.readers.shapes.tensors_from_spec` (the modelling code's
names and shapes, unquantized); each tensor is renamed as gguf-py's ``TensorNameMap`` maps it (the tables of
``hfvram/data/quant/gguf.toml`` ``[names.*]``), the experts of a layer are stacked into one 3-D ``*_exps``
tensor as the converters do, and each tensor gets the type the converter writes at ``--outtype F16``: F32 for
1-D tensors, norms, biases and routers, else F16. The vision tower is left out (llama.cpp writes it to a
separate ``mmproj`` file) and so are multi-token-prediction layers. Shapes are in ggml order (``ne[0]`` is the
row length: the HF ``[out, in]`` weight is ``ne = (in, out)``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from hfvram.datafiles import data_table
from hfvram.memo import IdentityCache
from hfvram.spec import LayerKind, ModelSpec

TABLE = "quant/gguf.toml"

_BLOCK = re.compile(r"^(?:.*\.)?layers\.(\d+)\.(.+)\.(weight|bias)$")
#: a block tensor without a ".weight" / ".bias" suffix (Mamba-2's ``mixer.A_log``, ``mixer.D``; Gemma-4's
#: ``layer_scalar`` right under the block)
_BARE = re.compile(r"^(?:.*\.)?layers\.(\d+)\.((?:.+\.)?[A-Za-z_]+)$")
#: experts stored fused as 3-D tensors (gpt-oss, Llama 4): [E, hidden, 2·ff] gate_up, [E, ff, hidden] down
_FUSED = re.compile(r"^(?:.*\.)?layers\.(\d+)\.(?:mlp|feed_forward)\.experts\.(gate_up_proj|down_proj)(_bias)?$")
_SINKS = re.compile(r"^(?:.*\.)?layers\.(\d+)\.self_attn\.sinks$")
_EXPERT = re.compile(r"^(.+)\.(\d+)\.([A-Za-z0-9_]+)$")


@cache
def gguf_table() -> Mapping[str, Any]:
    return data_table(TABLE)


@dataclass(frozen=True)
class GgufTensor:
    """One tensor of the converted GGUF: name, ggml shape (``ne[0]`` first), the converter's type, component."""

    name: str
    ne: tuple[int, ...]
    src_type: str
    component: str
    layer: int | None = None

    @property
    def n_dims(self) -> int:
        return len(self.ne)

    @property
    def numel(self) -> int:
        total = 1
        for n in self.ne:
            total *= n
        return total


@dataclass
class ConvertedModel:
    """What the quantizer reads of a model: its GGUF architecture, hyper-parameters and tensor list."""

    arch: str
    n_layer: int
    n_head: int
    n_head_kv: int
    n_expert: int
    tensors: list[GgufTensor]
    warnings: list[str] = field(default_factory=list)
    #: parameters per component the converter leaves out of this file (the vision tower, MTP layers)
    dropped: dict[str, int] = field(default_factory=dict)


def gguf_arch_of(spec: ModelSpec) -> str:
    """The GGUF architecture name the converter writes for ``spec`` (a GGUF source keeps its own)."""
    arch = (spec.extra or {}).get("gguf_arch")
    if isinstance(arch, str) and arch:
        return arch
    facts = (spec.extra or {}).get("shape_config") or {}
    model_type = (facts.get("text_model_type") if isinstance(facts, Mapping) else None) or spec.model_type or ""
    return str(gguf_table()["gguf_arch"].get(model_type, model_type or "unknown"))


def _names(arch: str) -> tuple[dict[str, str], Mapping[str, str], Mapping[str, Any]]:
    names = gguf_table()["names"]
    block = dict(names["block"])
    block.update(names.get("block_by_arch", {}).get(arch, {}))
    return block, names["global"], names["experts"]


def _converter_type(name: str, n_dims: int) -> str:
    """conversion/base.py prepare_tensors: F32 for 1-D tensors, norms, non-".weight" names, routers and conv1d."""
    conv = gguf_table()["converter"]
    if n_dims <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return "F32"
    if any(part in name for part in conv["f32_substrings"]):
        return "F32"
    return str(conv["outtype"])


def _hf_component(name: str, num_layers: int) -> str:
    from hfvram.readers.tensors import hf_component

    return hf_component(name, num_layers=num_layers)


#: the last specs converted: ``--quant auto`` sizes one model as many file types (a spec is keyed by identity:
#: hashing it by value would cost what the conversion does)
_CONVERTED: IdentityCache[ModelSpec, ConvertedModel] = IdentityCache("quant.converted_model", 4)


def converted_model(spec: ModelSpec) -> ConvertedModel:
    """The GGUF tensor list of ``spec`` as the converter writes it (see the module docstring); the same object for
    the same spec (kept for the last few specs)."""
    return _CONVERTED.get_or_compute(spec, lambda: _convert(spec))


def _convert(spec: ModelSpec) -> ConvertedModel:
    from hfvram.readers.shapes import counted_tensors_from_spec

    arch = gguf_arch_of(spec)
    block_names, global_names, expert_names = _names(arch)
    slots = tuple(str(s) for s in expert_names["slots"])
    num_layers = spec.num_layers
    hf = counted_tensors_from_spec(replace(spec, quantization=None))
    tensors: list[GgufTensor] = []
    experts: dict[tuple[int, str], list[Any]] = {}
    unmapped: set[str] = set()
    dropped: dict[str, int] = {"vision": 0, "mtp": 0}
    for info, copies in hf:
        component = _hf_component(info.name, num_layers)
        if component in dropped:
            dropped[component] += math.prod(info.shape) * copies
            continue
        ne = tuple(int(n) for n in reversed(info.shape))
        fused = _fused_experts(info.name, info.shape, component)
        if fused is not None:
            tensors += fused
            continue
        sinks = _SINKS.match(info.name)
        if sinks is not None:
            layer = int(sinks.group(1))
            tensors.append(GgufTensor(f"blk.{layer}.attn_sinks.weight", ne, "F32", component, layer))
            continue
        match = _BLOCK.match(info.name)
        bare = _BARE.match(info.name) if match is None else None
        if bare is not None:
            layer, rest = int(bare.group(1)), bare.group(2)
            tensors.append(_bare_tensor(layer, rest, _stacked(ne, copies), component, block_names, unmapped))
            continue
        if match is None:
            tensors.append(_global_tensor(info.name, _stacked(ne, copies), component, global_names, unmapped))
            continue
        layer, rest, suffix = int(match.group(1)), match.group(2), match.group(3)
        expert = _EXPERT.match(rest)
        if expert is not None and expert.group(1) in slots and expert.group(3) in expert_names:
            slot = (layer, str(expert_names[expert.group(3)]))
            group = experts.setdefault(slot, [ne, 0, component])
            group[1] += copies
            continue
        # a tensor standing for several (experts under a name the table does not list) is stacked as the
        # converters stack experts: never counted once for many
        shape = _stacked(ne, copies)
        tensors.append(_block_tensor(layer, rest, suffix, shape, component, block_names, unmapped))
    tensors += _stacked_experts(experts)
    tensors += _rope_freqs(spec, arch)
    warnings = _conversion_warnings(unmapped, dropped)
    return ConvertedModel(
        arch=arch,
        n_layer=num_layers,
        n_head=spec.num_attention_heads or 0,
        n_head_kv=_n_head_kv(spec),
        n_expert=spec.num_experts or 0,
        tensors=tensors,
        warnings=warnings,
        dropped={c: n for c, n in dropped.items() if n},
    )


def _block_name(block_names: Mapping[str, str], rest: str, unmapped: set[str]) -> str:
    """The GGUF name of a block tensor's HF name ``rest``; an unknown one is kept as it is (and noted)."""
    gguf = block_names.get(rest)
    if gguf is None:
        unmapped.add(re.sub(r"\.\d+\.", ".#.", rest))
        gguf = rest
    return gguf


def _block_tensor(
    layer: int,
    rest: str,
    suffix: str,
    shape: tuple[int, ...],
    component: str,
    block_names: Mapping[str, str],
    unmapped: set[str],
) -> GgufTensor:
    """A block tensor ``blk.N.<GGUF name>.<suffix>`` in the type the converter writes it."""
    name = f"blk.{layer}.{_block_name(block_names, rest, unmapped)}.{suffix}"
    return GgufTensor(name, shape, _converter_type(name, len(shape)), component, layer)


def _bare_tensor(
    layer: int, rest: str, shape: tuple[int, ...], component: str, block_names: Mapping[str, str], unmapped: set[str]
) -> GgufTensor:
    """A block parameter without a ``.weight`` / ``.bias`` suffix (Mamba's ``A_log``, ``D``, ``dt_bias``), in F32."""
    gguf = _block_name(block_names, rest, unmapped)
    # gguf-py writes ``dt_bias`` / ``e_score_correction_bias`` as "<name>.bias", ``A_log`` / ``D`` bare
    name = f"blk.{layer}.{gguf}" + (".bias" if rest.endswith("_bias") else "")
    return GgufTensor(name, shape, "F32", component, layer)


def _stacked_experts(experts: Mapping[tuple[int, str], list[Any]]) -> list[GgufTensor]:
    """The per-expert tensors of each (block, GGUF name), stacked into one 3-D tensor as the converter writes it."""
    tensors = []
    for (layer, gguf), (ne, count, component) in experts.items():
        name = f"blk.{layer}.{gguf}.weight"
        stacked = (*ne, count)
        tensors.append(GgufTensor(name, stacked, _converter_type(name, len(stacked)), component, layer))
    return tensors


def _global_tensor(
    hf_name: str, shape: tuple[int, ...], component: str, global_names: Mapping[str, str], unmapped: set[str]
) -> GgufTensor:
    """A tensor outside the blocks (embeddings, output, final norm) under its GGUF name."""
    base, _, suffix = hf_name.rpartition(".")
    key = base.rsplit(".", 1)[-1]
    gguf = global_names.get(key)
    if gguf is None:
        unmapped.add(key)
        gguf = base
    name = f"{gguf}.{suffix}"
    return GgufTensor(name, shape, _converter_type(name, len(shape)), component)


def _conversion_warnings(unmapped: set[str], dropped: Mapping[str, int]) -> list[str]:
    """What the what-if cannot name, and what the converter leaves out (the vision tower, MTP layers)."""
    warnings = []
    if unmapped:
        warnings.append(
            "GGUF what-if: no GGUF name known for "
            + ", ".join(sorted(unmapped)[:6])
            + (" …" if len(unmapped) > 6 else "")
            + ": quantized by the file type's default rule"
        )
    if dropped["vision"]:
        warnings.append(
            f"GGUF what-if: the vision tower ({dropped['vision'] / 1e9:.2f}B parameters) goes to a separate mmproj "
            "GGUF (not counted here; --mmproj loads it)"
        )
    if dropped["mtp"]:
        warnings.append(
            f"GGUF what-if: multi-token-prediction layers ({dropped['mtp'] / 1e9:.2f}B parameters) left out (the "
            "converter does not write them)"
        )
    return warnings


def _stacked(ne: tuple[int, ...], copies: int) -> tuple[int, ...]:
    """``ne`` of one tensor standing for ``copies`` tensors: stacked along a new last axis when more than one."""
    return (*ne, copies) if copies > 1 else ne


def _fused_experts(name: str, shape: Sequence[int], component: str) -> list[GgufTensor] | None:
    """gpt-oss / Llama 4 fused experts as the converters split them (conversion/gpt_oss.py, llama4.py):
    ``gate_up_proj [E, hidden, 2·ff]`` -> ``ffn_gate_exps`` + ``ffn_up_exps`` of ne (hidden, ff, E);
    ``down_proj [E, ff, hidden]`` -> ``ffn_down_exps`` of ne (ff, hidden, E); their biases likewise."""
    match = _FUSED.match(name)
    if match is None:
        return None
    layer, kind, bias = int(match.group(1)), match.group(2), bool(match.group(3))
    if bias and len(shape) == 2:
        experts, width = shape
        if kind == "gate_up_proj":
            half = (width // 2, experts)
            return [
                GgufTensor(f"blk.{layer}.ffn_{part}_exps.bias", half, "F32", component, layer)
                for part in ("gate", "up")
            ]
        return [GgufTensor(f"blk.{layer}.ffn_down_exps.bias", (width, experts), "F32", component, layer)]
    if bias or len(shape) != 3:
        return None
    experts, rows_in, cols_out = shape
    if kind == "gate_up_proj":
        stacked = (rows_in, cols_out // 2, experts)
        return [
            GgufTensor(f"blk.{layer}.ffn_{part}_exps.weight", stacked, _converter_type("x.weight", 3), component, layer)
            for part in ("gate", "up")
        ]
    return [
        GgufTensor(
            f"blk.{layer}.ffn_down_exps.weight",
            (rows_in, cols_out, experts),
            _converter_type("x.weight", 3),
            component,
            layer,
        )
    ]


def _n_head_kv(spec: ModelSpec) -> int:
    """``head_count_kv`` of layer 0 as the converter writes it (MLA models: 1, the shared latent)."""
    for layer in spec.layers[:1]:
        if layer.kind is LayerKind.MLA:
            return 1
        if layer.num_kv_heads:
            return layer.num_kv_heads
    return spec.num_attention_heads or 0


def _rope_freqs(spec: ModelSpec, arch: str) -> Sequence[GgufTensor]:
    """LlamaModel.generate_extra_tensors: Llama-3 rope scaling is written as ``rope_freqs.weight`` (head_dim / 2, F32)."""
    rope = spec.rope_scaling or {}
    kind = str(rope.get("rope_type") or rope.get("type") or "")
    if arch != "llama" or kind != "llama3" or not spec.head_dim:
        return []
    return [GgufTensor("rope_freqs.weight", (spec.head_dim // 2,), "F32", "other")]
