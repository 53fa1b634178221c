"""Weights for engine profiles when no tensor header was read (shared by the SGLang, TensorRT-LLM, LMDeploy
and transformers profiles; candidate for ``hfvram.estimate.common``)."""

from __future__ import annotations

from hfvram.spec import ModelSpec


def with_weights_or_derived(spec: ModelSpec, warnings: list[str]) -> ModelSpec:
    """The spec itself when it carries weights, else with weights derived from its config shapes by the
    readers' own rules (``hfvram.readers.shapes.derived_weights``, exact=False) and a warning saying so."""
    if spec.weights is not None:
        return spec
    try:
        from hfvram.readers.shapes import derived_weights  # lazy: readers are not needed for hand-built specs
    except ImportError:
        return spec
    try:
        weights = derived_weights(spec)
    except (ValueError, KeyError, TypeError) as exc:
        warnings.append(f"could not derive weights from the config: {exc}")
        return spec
    warnings.append("weights derived from config shapes (no tensor header read)")
    return spec.with_weights(weights)
