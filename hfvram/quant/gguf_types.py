"""The GGUF quant family of the ``--quant`` what-if: Q2_K … Q8_0, the _S/_M/_L mixes, IQ types, F16, BF16, MXFP4.

``apply`` sizes the model as llama.cpp would write it: the converter's tensor list (:mod:`hfvram.quant.gguf_tensors`)
and, per tensor, the type llama-quantize picks (:mod:`hfvram.quant.llama_quant`). Every other fact of the spec is
the one read from the real files. Types that llama-quantize refuses without an importance matrix (IQ3_XXS, IQ2_*,
IQ1_*, Q2_K_S) are sized as it writes them with one (``has_imatrix``): the only way such a file is made.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from hfvram.quant.conserve import DROPPED
from hfvram.quant.gguf_tensors import converted_model, gguf_table
from hfvram.spec import COMPONENTS, ModelSpec, Quantization, Weights

FAMILY = "gguf"


def _ftypes() -> dict[str, Any]:
    return dict(gguf_table()["ftypes"])


#: canonical names, as llama-quantize spells them (tools/quantize/quantize.cpp QUANT_OPTIONS)
NAMES: tuple[str, ...] = (
    "Q2_K",
    "Q2_K_S",
    "Q3_K_S",
    "Q3_K_M",
    "Q3_K_L",
    "Q4_K_S",
    "Q4_K_M",
    "Q5_K_S",
    "Q5_K_M",
    "Q6_K",
    "Q8_0",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "IQ4_XS",
    "IQ4_NL",
    "IQ3_XXS",
    "IQ3_XS",
    "IQ3_S",
    "IQ3_M",
    "IQ2_XXS",
    "IQ2_XS",
    "IQ2_S",
    "IQ2_M",
    "IQ1_S",
    "IQ1_M",
    "F16",
    "BF16",
    "MXFP4_MOE",
)

#: the candidates of ``--quant auto``, largest first (the mixes people download)
AUTO: tuple[str, ...] = (
    "Q8_0",
    "Q6_K",
    "Q5_K_M",
    "Q5_K_S",
    "Q4_K_M",
    "Q4_K_S",
    "IQ4_XS",
    "Q3_K_L",
    "Q3_K_M",
    "IQ3_M",
    "Q3_K_S",
    "IQ3_XXS",
    "Q2_K",
    "IQ2_M",
    "IQ2_S",
    "IQ2_XS",
    "IQ2_XXS",
)


@dataclass(frozen=True)
class GgufChoice:
    """A GGUF file type to size the model as (``name`` as llama-quantize spells it)."""

    name: str
    #: llama_ftype id (general.file_type)
    ftype: int
    #: sized as written with an importance matrix (only for the types that need one)
    imatrix: bool = False
    family: str = FAMILY

    @property
    def label(self) -> str:
        return self.name


def parse(name: str) -> GgufChoice | None:
    """The GGUF type ``name`` spells (case-insensitive, llama-quantize's aliases too), else None."""
    key = name.strip().upper().replace("-", "_")
    key = str(gguf_table()["aliases"].get(key, key))
    entry = _ftypes().get(key)
    if entry is None:
        return None
    return GgufChoice(name=key, ftype=int(entry["ftype"]), imatrix=_needs_imatrix(key))


def _needs_imatrix(name: str) -> bool:
    return name in gguf_table()["imatrix"]["ftypes"]


def commit() -> str:
    return str(gguf_table()["source"]["llama_cpp_commit"])


def typed_tensors(spec: ModelSpec, choice: GgufChoice) -> tuple[list[tuple[Any, str]], list[str], str]:
    """(tensor, ggml type) in the loader's order, the warnings of the conversion, and the GGUF architecture."""
    from hfvram.quant.llama_quant import tensor_types

    model = converted_model(spec)
    return tensor_types(model, choice.name, has_imatrix=choice.imatrix), model.warnings, model.arch


def needs_imatrix(typed: list[tuple[Any, str]], choice: GgufChoice) -> bool:
    """Whether llama-quantize refuses to write these types without ``--imatrix`` (tensor_requires_imatrix of any
    tensor: a type whose rows all fall back, gpt-oss's IQ3_XXS, needs none)."""
    from hfvram.quant.llama_quant import requires_imatrix

    return any(requires_imatrix(tensor.name, ggml_type, choice.name) for tensor, ggml_type in typed)


def _what_if_source(choice: GgufChoice) -> str:
    """Where the what-if's weights come from, in words (the provenance of the weights and the quantization)."""
    return (
        f"what-if: as llama.cpp {commit()[:8]} would write {choice.name} from the config's tensor shapes "
        f"(convert_hf_to_gguf.py --outtype F16, then llama-quantize {choice.name}"
        + (" with an importance matrix" if choice.imatrix else "")
        + ")"
    )


def _what_if_extra(
    spec: ModelSpec,
    choice: GgufChoice,
    arch: str,
    bits: float | None,
    blocks: list[int],
    block_experts: list[int],
    token_embd_bytes: int,
    source: str,
    dropped: Mapping[str, int],
) -> dict[str, Any]:
    """``spec.extra`` with the GGUF facts the engines read (file type, per-block bytes), the what-if record and
    what the converter leaves out."""
    extra = dict(spec.extra or {})
    extra.update(
        {
            "file_type": choice.name,
            "bits_per_weight": bits,
            "gguf_arch": arch,
            "gguf_block_bytes": blocks,
            "gguf_block_expert_bytes": block_experts,
            "token_embd_bytes": token_embd_bytes,
            "what_if": {"quant": choice.name, "family": FAMILY, "source": source},
        }
    )
    extra.pop(DROPPED, None)
    if dropped:
        extra[DROPPED] = dict(dropped)
    return extra


def _imatrix_notes(warnings: list[str], typed: list[tuple[Any, str]], choice: GgufChoice) -> list[str]:
    """The conversion's warnings, and a note when llama-quantize writes ``choice`` only with an importance matrix."""
    notes = list(warnings)
    if needs_imatrix(typed, choice):
        notes.append(
            f"{choice.name}: llama-quantize makes this type only with an importance matrix (--imatrix); sized as "
            "it writes it with one"
        )
    return notes


def apply(spec: ModelSpec, choice: GgufChoice) -> ModelSpec:
    """``spec`` with its weights sized as llama.cpp would write ``choice`` (see the module docstring)."""
    from hfvram.quant.llama_quant import tensor_bytes
    from hfvram.readers.tensors import params_active

    typed, warnings, arch = typed_tensors(spec, choice)
    dropped = converted_model(spec).dropped
    if not typed:
        raise ValueError("no tensor list can be derived from this model's config (hidden_size or vocab_size unknown)")
    by_component: dict[str, int] = defaultdict(int)
    params_by_component: dict[str, int] = defaultdict(int)
    by_dtype: dict[str, int] = defaultdict(int)
    blocks = [0] * max(1, spec.num_layers)
    block_experts = [0] * max(1, spec.num_layers)
    total = params = 0
    for tensor, ggml_type in typed:
        nbytes = tensor_bytes(tensor.ne, ggml_type)
        by_component[tensor.component] += nbytes
        params_by_component[tensor.component] += tensor.numel
        by_dtype[ggml_type] += nbytes
        total += nbytes
        params += tensor.numel
        if tensor.layer is not None and 0 <= tensor.layer < len(blocks):
            if tensor.component == "experts":
                block_experts[tensor.layer] += nbytes
            else:
                blocks[tensor.layer] += nbytes
    ordered = [c for c in COMPONENTS if c in by_component]
    source = _what_if_source(choice)
    weights = Weights(
        total_bytes=total,
        params_total=params,
        bytes_by_component={c: by_component[c] for c in ordered},
        params_by_component={c: params_by_component[c] for c in ordered},
        bytes_by_dtype=dict(sorted(by_dtype.items())),
        exact=False,
        source=source,
        num_tensors=len(typed),
    )
    bits = total * 8 / params if params else None
    quantization = Quantization(
        method="gguf",
        bits=bits,
        details={"file_type": choice.name, "ggml_types": dict(weights.bytes_by_dtype), "what_if": True},
        source=source,
    )
    embd = by_component.get("embeddings", 0)
    extra = _what_if_extra(spec, choice, arch, bits, blocks, block_experts, embd, source, dropped)
    provenance = {**spec.provenance, "weights": source, "quantization": source}
    notes = _imatrix_notes(warnings, typed, choice)
    out = replace(
        spec,
        weights=weights,
        quantization=quantization,
        extra=extra,
        provenance=provenance,
        warnings=tuple(dict.fromkeys([*spec.warnings, *notes])),
    )
    return replace(out, params_active=params_active(weights, out))


def engine_rule(choice: GgufChoice, engine: str, hardware: Any) -> tuple[str | None, tuple[str, ...]]:
    """(refusal reason or None, warnings): llama.cpp and Ollama run GGUF; vLLM with a warning; others refuse."""
    table = gguf_table()["engines"]
    if engine in table["runs"]:
        return None, ()
    if engine in table.get("warned", {}):
        return None, (str(table["warned"][engine]),)
    reason = table.get("refused", {}).get(engine)
    return (str(reason) if reason else f"{engine} does not load GGUF files ({choice.name})"), ()
