"""A what-if keeps every parameter: it re-stores the model's tensors, it neither loses nor invents any.

A family's ``apply`` sizes the what-if from a tensor list derived from config.json. Where the checkpoint's own
count is known (safetensors headers, or an index's ``total_size`` / ``total_parameters``) and that derived list
holds another count (an architecture whose tensor map hfvram does not know in full: a custom vision backbone, a
fused MLP the config does not spell), :func:`conserve` brings each component of the what-if to the checkpoint's
parameters, at the bytes per parameter the what-if gives that component, and says so. What the real conversion
leaves out (a GGUF's vision tower, which llama.cpp writes to a separate ``mmproj`` file; multi-token-prediction
layers the converter or the quantizer does not write) is not counted, and the family states it in a warning and
in ``spec.extra["what_if_dropped"]`` (parameters per component).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from hfvram.spec import COMPONENTS, ModelSpec, Weights

#: the share of the checkpoint's parameters a what-if may differ by before it is brought back to the checkpoint's
TOLERANCE = 0.005

DROPPED = "what_if_dropped"


def dropped_params(spec: ModelSpec) -> dict[str, int]:
    """Parameters per component the what-if's conversion leaves out (empty for a checkpoint as stored)."""
    stated = (spec.extra or {}).get(DROPPED)
    if not isinstance(stated, Mapping):
        return {}
    return {str(k): int(v) for k, v in stated.items() if isinstance(v, int) and v > 0}


def tie_note(before: ModelSpec, after: ModelSpec, label: str) -> str | None:
    """The what-if's tied ``lm_head`` stated as an assumption when no tensor header showed whether the checkpoint
    stores one: some checkpoints keep ``lm_head.weight`` despite ``tie_word_embeddings: true``, and the
    converters (llama.cpp's ``output.weight``, a quantizer's copy) then write it."""
    real, what_if = before.weights, after.weights
    if before.tie_word_embeddings is not True or what_if is None or "lm_head" in what_if.params_by_component:
        return None
    if real is not None and real.exact and "derived from config shapes" not in real.source:
        return None  # summed from the checkpoint's own headers: no lm_head tensor there
    embeddings = what_if.params_by_component.get("embeddings", 0)
    if not embeddings:
        return None
    return (
        f"--quant {label}: lm_head assumed tied to the embeddings as config.json says (tie_word_embeddings: true); "
        f"no tensor header was read to tell, and a checkpoint that stores lm_head anyway adds {embeddings / 1e9:.2f}B "
        "parameters the conversion writes too"
    )


def conserve(before: ModelSpec, after: ModelSpec, label: str) -> ModelSpec:
    """``after`` (the what-if of ``before``) with each component holding the checkpoint's parameters when the
    derived tensor list disagrees with the checkpoint's own count by more than :data:`TOLERANCE`; the tied
    ``lm_head`` stated when it is an assumption (:func:`tie_note`)."""
    note = tie_note(before, after, label)
    if note is not None and note not in after.warnings:
        after = replace(after, warnings=(*after.warnings, note))
    real, what_if = before.weights, after.weights
    if real is None or what_if is None or not real.exact or not real.params_by_component:
        # no count of the checkpoint's own (the base is the same derived list): nothing to hold it to
        return after
    dropped = dropped_params(after)
    target = {c: p for c, p in real.params_by_component.items() if c not in dropped and p > 0}
    wanted = sum(target.values())
    if not wanted or abs(what_if.params_total - wanted) <= wanted * TOLERANCE:
        return after
    per_param = what_if.total_bytes / what_if.params_total if what_if.params_total else 2.0
    new_bytes: dict[str, int] = {}
    factors: dict[str, float] = {}
    for component in COMPONENTS:
        params = target.get(component)
        if not params:
            continue
        derived = what_if.params_by_component.get(component, 0)
        if derived > 0:
            factors[component] = params / derived
            new_bytes[component] = round(what_if.bytes_by_component.get(component, 0) * factors[component])
        else:
            new_bytes[component] = round(params * per_param)
    total = sum(new_bytes.values())
    ratio = total / what_if.total_bytes if what_if.total_bytes else 1.0
    weights = Weights(
        total_bytes=total,
        params_total=wanted,
        bytes_by_component=new_bytes,
        params_by_component={c: target[c] for c in new_bytes},
        bytes_by_dtype={k: round(v * ratio) for k, v in what_if.bytes_by_dtype.items()},
        exact=False,
        source=what_if.source + "; each component scaled to the checkpoint's own parameter count",
        num_tensors=what_if.num_tensors,
    )
    note = (
        f"--quant {label}: the tensor list derived from config.json holds {what_if.params_total / 1e9:.2f}B "
        f"parameters where the checkpoint holds {wanted / 1e9:.2f}B"
        + (" (less what the conversion leaves out)" if dropped else "")
        + f"; hfvram's tensor map of {before.model_type or 'this architecture'} is incomplete, so each component's "
        "what-if bytes are scaled to the checkpoint's parameters"
    )
    extra = dict(after.extra or {})
    _scale_gguf_blocks(extra, factors)
    quantization = after.quantization
    if quantization is not None and quantization.method == "gguf" and wanted:
        quantization = replace(quantization, bits=total * 8 / wanted)
        extra["bits_per_weight"] = quantization.bits
    from hfvram.readers.tensors import params_active

    out = replace(after, extra=extra, quantization=quantization, warnings=(*after.warnings, note))
    return out.with_weights(weights, params_active(weights, out))


def _scale_gguf_blocks(extra: dict[str, object], factors: Mapping[str, float]) -> None:
    """The per-block byte lists a GGUF what-if carries (llama.cpp's offload plan), scaled like their components."""
    dense = [factors[c] for c in ("attention", "mlp", "norms", "other") if c in factors]
    dense_factor = sum(dense) / len(dense) if dense else 1.0
    for key, factor in (
        ("gguf_block_bytes", dense_factor),
        ("gguf_block_expert_bytes", factors.get("experts", 1.0)),
    ):
        blocks = extra.get(key)
        if isinstance(blocks, list):
            extra[key] = [round(b * factor) for b in blocks]
    embd = extra.get("token_embd_bytes")
    if isinstance(embd, int):
        extra["token_embd_bytes"] = round(embd * factors.get("embeddings", 1.0))
