"""The engine a check assumes when none is asked for: llama.cpp for GGUF, MLX for safetensors on Apple Silicon,
vLLM otherwise. The policy is the table ``hfvram/data/engine_defaults.toml`` (rules tried in order, then a
fallback); this module only applies it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hfvram.datafiles import data_table

if TYPE_CHECKING:
    from hfvram.estimate.types import Hardware
    from hfvram.spec import ModelSpec

TABLE = "engine_defaults.toml"


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


def _matches(rule: dict[str, Any], weight_format: str, hardware: Hardware | None) -> bool:
    if "format" in rule and rule["format"] != weight_format:
        return False
    return "vendor" not in rule or (hardware is not None and hardware.gpu.vendor == rule["vendor"])


def default_engine(spec: ModelSpec, source_kind: str, hardware: Hardware | None = None) -> DefaultEngine:
    """The engine for a model read from a ``source_kind`` source (``LoadedModel.source.kind``) on ``hardware``
    (None without --gpu), by the first rule of engine_defaults.toml that matches."""
    table = data_table(TABLE)
    weight_format = checkpoint_format(spec, source_kind)
    for rule in table["rules"]:
        if _matches(rule, weight_format, hardware):
            return DefaultEngine(str(rule["engine"]), rule.get("note"))
    return DefaultEngine(str(table["fallback"]))
