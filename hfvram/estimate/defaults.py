"""The engine a check assumes when none is asked for: llama.cpp for GGUF, MLX for safetensors on Apple Silicon,
vLLM otherwise. The policy is the ``[[default_when]]`` rules of the engines' hfvram/engines/<engine>/engine.toml
(every engine's rules tried by their ``order``, the one rule without conditions last); this module only applies
it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hfvram.engines.identity import DefaultRule
    from hfvram.estimate.types import Hardware
    from hfvram.spec import ModelSpec


@dataclass(frozen=True)
class DefaultEngine:
    """The engine picked, and the sentence that says why where the choice follows the hardware (else None)."""

    name: str
    note: str | None = None


def checkpoint_format(spec: ModelSpec, source_kind: str) -> str:
    """ "gguf" for a .gguf file or a config whose quantization is GGUF, else "safetensors"."""
    quant = spec.quantization
    if source_kind == "gguf" or (quant is not None and quant.method == "gguf"):
        return "gguf"
    return "safetensors"


def _matches(rule: DefaultRule, weight_format: str, hardware: Hardware | None) -> bool:
    if rule.format is not None and rule.format != weight_format:
        return False
    return rule.vendor is None or (hardware is not None and hardware.gpu.vendor == rule.vendor)


def default_engine(spec: ModelSpec, source_kind: str, hardware: Hardware | None = None) -> DefaultEngine:
    """The engine for a model read from a ``source_kind`` source (``LoadedModel.source.kind``) on ``hardware``
    (None without --gpu), by the first ``[[default_when]]`` rule that matches (the registry checked that the last
    one, the fallback, matches anything)."""
    return default_engine_for(checkpoint_format(spec, source_kind), hardware)


def default_engine_for(weight_format: str, hardware: Hardware | None) -> DefaultEngine:
    """:func:`default_engine` for a checkpoint whose weight format (``gguf`` / ``safetensors``) is known before
    its config is read (a scan's row from the Hub listing)."""
    from hfvram.engines import default_rules

    for engine, rule in default_rules():
        if _matches(rule, weight_format, hardware):
            return DefaultEngine(engine, rule.note)
    raise AssertionError("the registry's default rules end with one that matches anything")
