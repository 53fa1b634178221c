"""The Hugging Face Hub quantization formats of the ``--quant`` what-if: awq, gptq (4/8-bit, group size, act-order),
fp8 (per-channel), fp8-tensor, fp8-block (128x128), nvfp4, mxfp4, bnb-nf4, bnb-int8, w8a8-int8.

``apply`` re-stores the model's tensor list (names and shapes derived from its config.json, the experts of a MoE layer
counted rather than listed) as the format's quantizer would write it: each quantized Linear ``[out, in]`` becomes the
format's packed weight plus its scales / zero points (docs/engines/quantization.md#quant-layouts), and the modules the
quantizer leaves alone (embeddings, lm_head, routers, norms, the vision tower; docs/engines/quantization.md#quant-kept-modules)
keep 16 bits. Every other fact of the spec stays the one read from the real files. ``engine_rule`` says whether an
engine loads the format on the GPU (docs/engines/quantization.md#quant-vllm and the sections after it).

The tables (formats, aliases, compute capabilities, GPU families) are ``hfvram/data/quant/hub_formats.toml``; which
formats each engine loads on which GPUs is the ``[hub_quant]`` table of its hfvram/engines/<engine>/engine.toml.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from hfvram.datafiles import data_table
from hfvram.errors import UsageError
from hfvram.quant.conserve import DROPPED
from hfvram.readers.tensors import TensorInfo, hf_component, params_active, tensor_nbytes
from hfvram.spec import COMPONENTS, ModelSpec, Quantization, Weights

if TYPE_CHECKING:
    from hfvram.engines.identity import HubQuant

FAMILY = "hub_formats"
TABLE = "quant/hub_formats.toml"

#: canonical names, listed in the "unknown quant" error (gptq takes any of its bit widths and group sizes)
NAMES: tuple[str, ...] = (
    "awq",
    "gptq-int4-g128",
    "gptq-int4-g64",
    "gptq-int4-g32",
    "gptq-int4-g128-act",
    "gptq-int8-g128",
    "fp8",
    "fp8-tensor",
    "fp8-block",
    "nvfp4",
    "mxfp4",
    "bnb-nf4",
    "bnb-int8",
    "w8a8-int8",
)

#: the candidates of ``--quant auto`` among the hub formats, largest first
AUTO: tuple[str, ...] = ("fp8", "w8a8-int8", "gptq-int8-g128", "awq", "gptq-int4-g128", "nvfp4", "bnb-nf4")

_GPTQ = re.compile(
    r"^gptq(?:-(?:int|w)?(?P<bits>[48])(?:bit|b)?)?(?:-g(?P<group>-1|\d{1,5}|none))?(?P<act>-act|-desc-act)?$"
)
_AWQ = re.compile(r"^awq(?:-(?:int4|4bit|w4))?(?:-g(?P<group>\d{1,5}))?$")


@lru_cache(maxsize=1)
def _table() -> Mapping[str, Any]:
    return data_table(TABLE)


@dataclass(frozen=True)
class HubChoice:
    """A Hub quantization format to size the model as (``name`` canonical, e.g. ``gptq-int4-g128-act``)."""

    name: str
    #: the [formats.<format>] table of hub_formats.toml
    format: str
    bits: int
    #: elements per scale group; 0 = per channel / per tensor / per block (the format says), -1 = one group per column
    group_size: int = 0
    desc_act: bool = False
    family: str = FAMILY

    @property
    def label(self) -> str:
        return self.name

    @property
    def spec_row(self) -> Mapping[str, Any]:
        return _table()["formats"][self.format]


def parse(name: str) -> HubChoice | None:
    """The Hub format ``name`` spells (case-insensitive, ``_`` or ``-``), else None."""
    key = name.strip().lower().replace("_", "-")
    if not key or len(key) > 40:
        return None
    key = str(_table()["aliases"].get(key, key))
    formats = _table()["formats"]
    gptq = _GPTQ.match(key)
    if gptq:
        row = formats["gptq"]
        bits = int(gptq.group("bits") or row["bits"])
        raw_group = gptq.group("group")
        group = int(row["group_size"]) if raw_group is None else (-1 if raw_group in ("-1", "none") else int(raw_group))
        if group not in row["group_sizes"]:
            return None
        act = bool(gptq.group("act"))
        canonical = f"gptq-int{bits}-g{group}" + ("-act" if act else "")
        return HubChoice(canonical, "gptq", bits, group, act)
    awq = _AWQ.match(key)
    if awq:
        row = formats["awq"]
        group = int(awq.group("group") or row["group_size"])
        if group not in row["group_sizes"]:
            return None
        return HubChoice("awq" if group == row["group_size"] else f"awq-g{group}", "awq", int(row["bits"]), group)
    if key in formats and key not in ("gptq", "awq"):
        row = formats[key]
        return HubChoice(key, key, int(row["bits"]), int(row.get("group_size", 0)))
    return None


# ---- byte layouts ------------------------------------------------------------------------------------------------


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _t(name: str, dtype: str, shape: Sequence[int]) -> TensorInfo:
    nbytes = tensor_nbytes(dtype, shape)
    assert nbytes is not None, dtype
    return TensorInfo(name=name, dtype=dtype, shape=tuple(int(s) for s in shape), nbytes=nbytes)


def _fits(choice: HubChoice, n_out: int, n_in: int) -> bool:
    """Whether the format can pack a Linear of this shape (else the quantizer leaves it in 16 bits)."""
    layout = choice.spec_row["layout"]
    if layout == "awq":
        return n_out % (32 // choice.bits) == 0 and n_in % choice.group_size == 0
    if layout == "gptq":
        return n_in % (32 // choice.bits) == 0 and n_out % (32 // choice.bits) == 0
    if layout == "nvfp4":
        return n_in % int(choice.spec_row["group_size"]) == 0
    if layout == "mxfp4":
        return n_in % int(choice.spec_row["group_size"]) == 0
    return True


def quantized_linear(choice: HubChoice, stem: str, n_out: int, n_in: int, model_dtype: str) -> list[TensorInfo]:
    """The tensors the format stores for one Linear ``stem`` of weight ``[n_out, n_in]``
    (docs/engines/quantization.md#quant-layouts)."""
    row = choice.spec_row
    layout = row["layout"]
    scale_dtype = str(row.get("scale_dtype", "F32"))
    if scale_dtype == "model":
        scale_dtype = model_dtype
    if layout == "awq":  # AutoAWQ WQLinear_GEMM: qweight [in, out/pf], qzeros [in/g, out/pf], scales fp16 [in/g, out]
        pf, groups = 32 // choice.bits, _cdiv(n_in, choice.group_size)
        return [
            _t(f"{stem}.qweight", "I32", (n_in, n_out // pf)),
            _t(f"{stem}.qzeros", "I32", (groups, n_out // pf)),
            _t(f"{stem}.scales", "F16", (groups, n_out)),
        ]
    if layout == "gptq":  # qweight [in/pf, out], qzeros [in/g, out/pf], scales fp16 [in/g, out], g_idx [in]
        pf = 32 // choice.bits
        groups = 1 if choice.group_size == -1 else _cdiv(n_in, choice.group_size)
        return [
            _t(f"{stem}.qweight", "I32", (n_in // pf, n_out)),
            _t(f"{stem}.qzeros", "I32", (groups, n_out // pf)),
            _t(f"{stem}.scales", "F16", (groups, n_out)),
            _t(f"{stem}.g_idx", "I32", (n_in,)),
        ]
    if layout == "fp8_channel":
        return [_t(f"{stem}.weight", "F8_E4M3", (n_out, n_in)), _t(f"{stem}.weight_scale", scale_dtype, (n_out, 1))]
    if layout == "fp8_tensor":
        return [
            _t(f"{stem}.weight", "F8_E4M3", (n_out, n_in)),
            _t(f"{stem}.weight_scale", "F32", ()),
            _t(f"{stem}.input_scale", "F32", ()),
        ]
    if layout == "fp8_block":
        bo, bi = (int(v) for v in row["block"])
        return [
            _t(f"{stem}.weight", "F8_E4M3", (n_out, n_in)),
            _t(f"{stem}.weight_scale_inv", "F32", (_cdiv(n_out, bo), _cdiv(n_in, bi))),
        ]
    if layout == "nvfp4":
        group = int(row["group_size"])
        return [
            _t(f"{stem}.weight", "U8", (n_out, n_in // 2)),
            _t(f"{stem}.weight_scale", "F8_E4M3", (n_out, _cdiv(n_in, group))),
            _t(f"{stem}.weight_scale_2", "F32", ()),
            _t(f"{stem}.input_scale", "F32", ()),
        ]
    if layout == "mxfp4":  # gpt-oss: *_blocks [out, in/32, 16] uint8 + *_scales [out, in/32] E8M0
        group = int(row["group_size"])
        return [
            _t(f"{stem}.weight_blocks", "U8", (n_out, n_in // group, group // 2)),
            _t(f"{stem}.weight_scales", "U8", (n_out, _cdiv(n_in, group))),
        ]
    if layout == "bnb4":
        return _bnb4_linear(row, stem, n_out, n_in)
    if layout == "bnb8":
        return [_t(f"{stem}.weight", "I8", (n_out, n_in)), _t(f"{stem}.SCB", "F32", (n_out,))]
    if layout == "int8_channel":
        return [_t(f"{stem}.weight", "I8", (n_out, n_in)), _t(f"{stem}.weight_scale", scale_dtype, (n_out, 1))]
    raise ValueError(f"hub_formats.toml: unknown layout {layout!r}")


def _bnb4_linear(row: Mapping[str, Any], stem: str, n_out: int, n_in: int) -> list[TensorInfo]:
    """bitsandbytes NF4: the packed weight and its double-quantized state (absmax, nested absmax, quant maps)."""
    numel, block = n_out * n_in, int(row["group_size"])
    blocks = _cdiv(numel, block)
    return [
        _t(f"{stem}.weight", "U8", ((numel + 1) // 2, 1)),
        _t(f"{stem}.weight.absmax", "U8", (blocks,)),
        _t(f"{stem}.weight.nested_absmax", "F32", (_cdiv(blocks, int(row["nested_block"])),)),
        _t(f"{stem}.weight.nested_quant_map", "F32", (int(row["nested_quant_map_elems"]),)),
        _t(f"{stem}.weight.quant_map", "F32", (int(row["quant_map_elems"]),)),
        _t(f"{stem}.weight.quant_state.bitsandbytes__nf4", "U8", (int(row["quant_state_bytes"]),)),
    ]


# ---- the what-if --------------------------------------------------------------------------------------------------

_FLOAT16 = {"BF16", "F16"}


def _linear(info: TensorInfo) -> tuple[str, list[tuple[int, int]]] | None:
    """(stem, [(out, in) per matrix]) when ``info`` is a Linear weight: ``….weight`` [out, in], or a fused expert
    tensor ``….experts.gate_up_proj`` [E, in, out] (gpt-oss, Llama 4); None for anything else."""
    name, shape = info.name, info.shape
    if name.endswith(".weight") and len(shape) == 2:
        return name[: -len(".weight")], [(shape[0], shape[1])]
    if len(shape) == 3 and ".experts." in name and name.endswith("_proj"):
        return name, [(shape[2], shape[1])] * shape[0]
    return None


#: module names of an MTP block that stay in 16 bits (DeepSeek-V3's FP8 checkpoint stores them in BF16)
_MTP_KEPT = {"embed_tokens", "head", "eh_proj"}


def _converted(component: str, name: str, quantize: set[str]) -> bool:
    """Whether the quantizer converts the Linear ``name`` of ``component``: an MTP block's layers follow the role
    they play (its router stays 16-bit), its embedding, head and ``eh_proj`` stay 16-bit."""
    if component != "mtp":
        return component in quantize
    if "mtp" not in quantize or _MTP_KEPT & set(name.split(".")):
        return False
    return hf_component(name) in ("attention", "mlp", "experts", "other")


@dataclass
class _Result:
    counted: list[tuple[TensorInfo, int]]
    kept_misfit: int = 0
    dropped_mtp: int = 0


def _restore(spec: ModelSpec, choice: HubChoice, base: list[tuple[TensorInfo, int]]) -> _Result:
    row = choice.spec_row
    quantize = set(row["quantize"])
    model_dtype = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}.get(spec.dtype or "", "BF16")
    kept = model_dtype if row["kept_dtype"] == "model" else str(row["kept_dtype"])
    result = _Result(counted=[])
    for info, copies in base:
        component = hf_component(info.name, num_layers=spec.num_layers)
        if component == "mtp" and row["mtp"] == "dropped":
            result.dropped_mtp += copies
            continue
        linear = _linear(info)
        if linear is not None and _converted(component, info.name, quantize):
            stem, matrices = linear
            n_out, n_in = matrices[0]
            if _fits(choice, n_out, n_in):
                tensors = quantized_linear(choice, stem, n_out, n_in, model_dtype)
                per_matrix = len(matrices)
                result.counted.extend((t, copies * per_matrix) for t in tensors)
                continue
            result.kept_misfit += copies * len(matrices)
        dtype = kept if info.dtype in _FLOAT16 else info.dtype
        nbytes = tensor_nbytes(dtype, info.shape) or info.nbytes
        result.counted.append((replace(info, dtype=dtype, nbytes=nbytes, offsets=None), copies))
    return result


def _sum(spec: ModelSpec, counted: list[tuple[TensorInfo, int]]) -> tuple[dict[str, int], dict[str, int], int]:
    by_component: dict[str, int] = {}
    by_dtype: dict[str, int] = {}
    tensors = 0
    for info, copies in counted:
        component = hf_component(info.name, num_layers=spec.num_layers)
        by_component[component] = by_component.get(component, 0) + info.nbytes * copies
        by_dtype[info.dtype] = by_dtype.get(info.dtype, 0) + info.nbytes * copies
        tensors += copies
    return by_component, by_dtype, tensors


def _params(spec: ModelSpec, base: list[tuple[TensorInfo, int]], dropped_mtp: bool) -> dict[str, int]:
    """Parameters per component of the unquantized tensor list (quantization stores them, it does not add any)."""
    params: dict[str, int] = {}
    for info, copies in base:
        component = hf_component(info.name, num_layers=spec.num_layers)
        if component == "mtp" and dropped_mtp:
            continue
        params[component] = params.get(component, 0) + math.prod(info.shape) * copies
    return params


def kept_modules(choice: HubChoice, present: set[str] | None = None) -> list[str]:
    """The components the format leaves in 16 bits, in the report's words (only those in ``present`` when given)."""
    quantize = set(choice.spec_row["quantize"])
    words = {
        "embeddings": "embed_tokens",
        "lm_head": "lm_head",
        "router": "MoE routers (gate, shared_expert_gate)",
        "norms": "norms",
        "vision": "vision tower",
        "attention": "attention",
        "mlp": "dense MLP",
        "other": "other linear layers",
    }
    order = ("embeddings", "lm_head", "router", "norms", "vision", "attention", "mlp")
    return [words[c] for c in order if c not in quantize and (present is None or c in present)]


def _keep_underived(
    spec: ModelSpec, by_component: dict[str, int], by_dtype: dict[str, int], params: dict[str, int], dropped: bool
) -> list[str]:
    """Components the tensor list cannot derive (e.g. an unknown vision tower) keep the real checkpoint's bytes
    (added to the three tallies in place); a note for each."""
    notes: list[str] = []
    real = spec.weights
    if real is not None and real.exact:
        for component, nbytes in real.bytes_by_component.items():
            if component in by_component or nbytes <= 0 or (component == "mtp" and dropped):
                continue
            by_component[component] = nbytes
            by_dtype["as stored"] = by_dtype.get("as stored", 0) + nbytes
            params[component] = real.params_by_component.get(component, 0)
            notes.append(f"{component} not derived from the config: kept at its real size ({nbytes / 2**30:.2f} GiB)")
    return notes


def _what_if_warnings(choice: HubChoice, kept_misfit: int, dropped: bool) -> list[str]:
    """What the format leaves unquantized: linear layers that do not fit its packing, the MTP layers."""
    row = choice.spec_row
    warnings = []
    if kept_misfit:
        warnings.append(
            f"--quant {choice.name}: {kept_misfit:,} linear layers whose shape does not fit the packing kept in "
            "16 bits (docs/engines/quantization.md#quant-layouts)"
        )
    if dropped:
        warnings.append(
            f"--quant {choice.name}: the multi-token-prediction layers are left out: {row['producer']} loads the model "
            "through transformers, which does not build them (docs/engines/quantization.md#quant-kept-modules)"
        )
    return warnings


def _what_if_quantization(choice: HubChoice, kept: list[str]) -> Quantization:
    """The what-if's quantization record, as the config reader records a checkpoint of that format."""
    row = choice.spec_row
    details: dict[str, object] = {
        "what_if": choice.name,
        "format": row["label"],
        "producer": row["producer"],
        "kept_in_16_bits": kept,
    }
    if choice.desc_act:
        details["desc_act"] = True
    if choice.group_size == -1:
        details["group_size"] = -1  # per channel, as the config reader records a checkpoint's -1
    if row["kept_dtype"] != "model":  # the dtype the quantizer writes: the checkpoint's torch_dtype (engine rules)
        details["torch_dtype"] = {"F16": "float16", "BF16": "bfloat16"}.get(str(row["kept_dtype"]), "")
    group = None if choice.group_size <= 0 else choice.group_size
    return Quantization(
        method=str(row["method"]),
        bits=float(choice.bits),
        group_size=group,
        details=details,
        source=f"what-if: --quant {choice.name}",
    )


def apply(spec: ModelSpec, choice: HubChoice) -> ModelSpec:
    """``spec`` with its weights sized as ``choice``'s quantizer would write them (``exact=False``) and its
    quantization replaced; every other fact stays the one read from the real files."""
    from hfvram.readers.shapes import counted_tensors, derive_warnings

    row = choice.spec_row
    base_spec = replace(spec, quantization=None)
    base = counted_tensors(base_spec)
    if not base:
        raise UsageError(
            f"--quant {choice.name}: the model's tensor list cannot be derived from its config "
            "(hidden_size or vocab_size unknown), so no what-if can be sized"
        )
    has_experts = any(hf_component(info.name, num_layers=spec.num_layers) == "experts" for info, _ in base)
    if row.get("needs_experts") and not has_experts:
        raise UsageError(
            f"--quant {choice.name}: {row['label']} quantizes only the experts of a mixture-of-experts model, and this "
            "model has none (docs/engines/quantization.md#quant-kept-modules)"
        )
    restored = _restore(spec, choice, base)
    dropped = row["mtp"] == "dropped" and restored.dropped_mtp > 0
    by_component, by_dtype, num_tensors = _sum(spec, restored.counted)
    params = _params(spec, base, dropped)
    notes = _keep_underived(spec, by_component, by_dtype, params, dropped)
    kept = kept_modules(choice, {hf_component(info.name, num_layers=spec.num_layers) for info, _ in base})
    derived = "tensor shapes from config.json"
    source = f"what-if: {row['label']}; kept in 16 bits: {', '.join(kept)}; {derived}"
    ordered = [c for c in COMPONENTS if c in by_component]
    weights = Weights(
        total_bytes=sum(by_component.values()),
        params_total=sum(params.values()),
        bytes_by_component={c: by_component[c] for c in ordered},
        params_by_component={c: params.get(c, 0) for c in ordered},
        bytes_by_dtype=dict(sorted(by_dtype.items())),
        exact=False,
        source=source,
        num_tensors=num_tensors,
    )
    warnings = [f"weights are a what-if: {row['label']} (--quant {choice.name}), not a file this repo holds"]
    warnings += [w for w in derive_warnings(base_spec) if w not in spec.warnings]
    warnings += _what_if_warnings(choice, restored.kept_misfit, dropped)
    warnings += notes
    quantization = _what_if_quantization(choice, kept)
    provenance = {**spec.provenance, "weights": source, "quantization": f"what-if: --quant {choice.name}"}
    extra = {k: v for k, v in (spec.extra or {}).items() if k != DROPPED}
    if dropped:
        extra[DROPPED] = {
            "mtp": sum(
                math.prod(info.shape) * copies
                for info, copies in base
                if hf_component(info.name, num_layers=spec.num_layers) == "mtp"
            )
        }
    out = replace(
        spec, quantization=quantization, provenance=provenance, warnings=(*spec.warnings, *warnings), extra=extra
    )
    return out.with_weights(weights, params_active(weights, out))


# ---- engine rules -------------------------------------------------------------------------------------------------


def compute_capability(architecture: str | None) -> int | None:
    """CUDA compute capability × 10 from a catalogue ``architecture`` field ("Ada Lovelace (AD102)" → 89)."""
    if not architecture:
        return None
    explicit = re.search(r"\bsm_(\d{2,3})\b", architecture)
    if explicit:
        return int(explicit.group(1))
    for pattern, sm in _table()["compute_capability"]["patterns"]:
        if re.search(pattern, architecture):
            return int(sm)
    return None


def family_of(sm: int) -> str | None:
    for family, members in _table()["families"].items():
        if sm in members:
            return str(family)
    return None


def _gpu_facts(hardware: Any) -> tuple[str, str, str | None]:
    """(vendor, GPU name, catalogue architecture or None) of ``hardware`` (a Hardware or a GPU)."""
    gpu = getattr(hardware, "gpu", hardware)
    vendor = str(getattr(gpu, "vendor", "unknown") or "unknown").lower()
    name = str(getattr(gpu, "name", None) or getattr(gpu, "id", "the GPU"))
    architecture = None
    gpu_id = getattr(gpu, "id", None)
    if gpu_id:
        from hfvram.estimate.hardware import catalog_row

        try:
            architecture = catalog_row(str(gpu_id)).get("architecture")
        except (UsageError, KeyError):
            architecture = None
    return vendor, name, architecture


def _engine_rules(engine: str) -> HubQuant | None:
    """The ``[hub_quant]`` rules of ``engine`` (a name or alias, ``@version`` allowed); None for an unknown engine."""
    from hfvram.engines import canonical_name, registry

    entry = registry().get(canonical_name(engine.strip().partition("@")[0]))
    return entry.hub_quant if entry else None


def engine_rule(choice: HubChoice, engine: str | None, hardware: Any) -> tuple[str | None, tuple[str, ...]]:
    """(refusal reason or None, warnings): whether ``engine`` loads ``choice`` and runs it on ``hardware``; no
    engine (None) is no rule."""
    if engine is None:
        return None, ()
    engine_row = _engine_rules(engine)
    if engine_row is None:
        return None, (
            f"--quant {choice.name}: no rule for engine {engine!r}: whether it loads this format is not checked",
        )
    if engine_row.refused is not None:
        return f"{engine_row.refused} ({engine_row.doc})", ()
    name, doc = engine_row.name, engine_row.doc
    rule = engine_row.formats.get(choice.format)
    if rule is None:
        return f"{name} does not run {choice.name}: {engine_row.unlisted} ({doc})", ()
    warnings: list[str] = []
    if rule.note:
        warnings.append(f"--quant {choice.name} under {name}: {rule.note} ({doc})")
    if rule.bits is not None and choice.bits not in rule.bits:
        allowed = "/".join(f"{b}-bit" for b in rule.bits)
        return f"{name} runs {choice.format} at {allowed} only, not {choice.bits}-bit ({doc})", tuple(warnings)
    if rule.group_sizes is not None and choice.group_size not in rule.group_sizes:
        allowed = ", ".join(str(g) for g in rule.group_sizes)
        return (
            f"{name} runs {choice.format} with group size {allowed} only, not {choice.group_size} ({doc})",
            tuple(warnings),
        )
    if rule.desc_act is False and choice.desc_act:
        return f"{name} does not run act-order (desc_act) GPTQ checkpoints ({doc})", tuple(warnings)
    if hardware is None or rule.runs is None:
        return None, tuple(warnings)
    vendor, gpu_name, architecture = _gpu_facts(hardware)
    if vendor == "amd":
        if choice.format in engine_row.amd:
            return None, tuple(warnings)
        return f"{name} has no {choice.format} kernel for AMD GPUs ({doc})", tuple(warnings)
    if vendor != "nvidia":
        warnings.append(f"--quant {choice.name}: {name}'s GPU rules cover NVIDIA and AMD GPUs; {gpu_name} not checked")
        return None, tuple(warnings)
    sm = compute_capability(architecture)
    family = family_of(sm) if sm is not None else None
    if family is None:
        warnings.append(
            f"--quant {choice.name}: the compute capability of {gpu_name} is not known to hfvram: {name}'s GPU rule "
            f"for {choice.format} not checked"
        )
        return None, tuple(warnings)
    names = _table()["family_names"]
    if family not in rule.runs:
        runs = ", ".join(str(names[f]) for f in rule.runs)
        return (
            f"{name} runs {choice.format} only on {runs} GPUs; the {gpu_name} is sm_{sm} "
            f"({str(names[family]).split(' (')[0]}) ({doc})",
            tuple(warnings),
        )
    if family in rule.weight_only:
        warnings.append(f"--quant {choice.name} on {gpu_name} (sm_{sm}) under {name}: {rule.weight_only_note} ({doc})")
    return None, tuple(warnings)
