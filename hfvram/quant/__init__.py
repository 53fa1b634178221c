"""The ``--quant Q`` what-if: size any model as if its weights were stored in another format.

Each format family is a module of this package named in ``_FAMILIES`` and imported by name when a quant is asked
for (nothing here is on the start-up path). A family module implements:

- ``NAMES: tuple[str, ...]``: its canonical names (listed in the "unknown quant" error);
- ``parse(name) -> Choice | None``: a frozen dataclass *defined in that module* (dispatch goes by the class's
  module), or None when the name is not of this family;
- ``apply(spec, choice) -> ModelSpec``: the spec with ``weights`` (``exact=False``, a ``source`` that says it is a
  what-if) and ``quantization`` replaced; every other fact stays the one read from the real files;
- ``engine_rule(choice, engine, hardware) -> (refusal reason | None, warnings)``;
- optionally ``AUTO: tuple[str, ...]``: the candidates of ``--quant auto``, largest first.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from hfvram.errors import UsageError

_FAMILIES: tuple[str, ...] = ("gguf_types", "hub_formats")

#: the value that asks for the best quant that fits (fit / check / models)
AUTO = "auto"


def families() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{name}") for name in _FAMILIES]


def names() -> list[str]:
    """Every canonical quant name, family by family."""
    return [name for module in families() for name in module.NAMES]


def parse(name: str, engine: str | None = None) -> Any:
    """The choice ``name`` spells; a usage error (exit 2) listing every known name otherwise. A name two families
    spell (``MXFP4``: a GGUF type and a Hub format) is the first family's, unless ``engine`` runs another family's
    without a refusal or a warning (``--quant mxfp4 --engine vllm`` is the Hub format, under llama.cpp the GGUF type)."""
    text = (name or "").strip()
    if not text:
        raise UsageError("--quant is empty: give a quant such as Q4_K_M (or auto)")
    matches = [choice for module in families() if (choice := module.parse(text)) is not None]
    if not matches:
        shown = text if len(text) <= 40 else text[:40] + "…"
        raise UsageError(f"unknown quant {shown!r}; known: {', '.join(names())}, auto")
    if engine is not None and len(matches) > 1:
        rules = [(choice, engine_rule(choice, engine, None)) for choice in matches]
        runs = [choice for choice, (reason, notes) in rules if reason is None and not notes]
        runs = runs or [choice for choice, (reason, _) in rules if reason is None]
        if runs:
            return runs[0]
    return matches[0]


def _family(choice: Any) -> ModuleType:
    """The family module of ``choice``: the module its class is defined in, else the family that parses its name
    back to an equal choice."""
    module = importlib.import_module(type(choice).__module__)
    if module.__name__.rpartition(".")[2] in _FAMILIES:
        return module
    for family in families():
        if family.parse(label(choice)) == choice:
            return family
    raise TypeError(f"{type(choice).__name__} is not a quant choice of {', '.join(_FAMILIES)}")


def apply(spec: Any, choice: Any) -> Any:
    """``spec`` as if stored as ``choice`` (the family's ``apply``), holding the checkpoint's own parameter count
    (:func:`hfvram.quant.conserve.conserve`)."""
    from hfvram.quant.conserve import conserve

    return conserve(spec, _family(choice).apply(spec, choice), label(choice))


def engine_rule(choice: Any, engine: str, hardware: Any) -> tuple[str | None, tuple[str, ...]]:
    """Whether ``engine`` runs ``choice`` on ``hardware``: (refusal reason or None, warnings)."""
    return _family(choice).engine_rule(choice, engine, hardware)


def label(choice: Any) -> str:
    return str(getattr(choice, "label", None) or getattr(choice, "name", choice))


def auto_candidates(engine: str | None, hardware: Any) -> list[Any]:
    """The ``--quant auto`` candidates, family by family, largest first. Without ``engine``: the first family's (the
    GGUF types, which llama.cpp serves by default). With ``engine``: the families it runs without a refusal or a
    warning (vLLM: the Hub formats, not its experimental GGUF loader; llama.cpp: the GGUF types), else every family
    it does not refuse; and of those, the candidates it runs on ``hardware``."""
    per_family = []
    for module in families():
        choices = [choice for name in getattr(module, "AUTO", ()) if (choice := module.parse(name)) is not None]
        per_family.append((module, choices))
    if engine is None:
        per_family = per_family[:1]
    else:
        clean = [(m, cs) for m, cs in per_family if any(m.engine_rule(c, engine, None) == (None, ()) for c in cs)]
        per_family = clean or per_family
    out = []
    for module, choices in per_family:
        for choice in choices:
            if engine is None or module.engine_rule(choice, engine, hardware)[0] is None:
                out.append(choice)
    return out
