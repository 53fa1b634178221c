"""Which modules a checkpoint's quantization config quantizes, and how: its exclusions (modules left unquantized)
and, for compressed-tensors, which of its ``config_groups`` a module belongs to (a checkpoint may store its experts
in one format and its attention in another). Pure: the quantization facts in, names and schemes out.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hfvram.spec import Quantization


@dataclass(frozen=True)
class Exclusions:
    """Modules a quantization config leaves unquantized: exact dotted names (matching at any depth),
    fnmatch globs and ``re:`` regexes."""

    names: frozenset[str]
    pattern: re.Pattern[str] | None

    def match(self, name: str) -> bool:
        if not self.names:
            return bool(self.pattern and self.pattern.search(name))
        parts = name.split(".")
        for i in range(len(parts)):
            for j in range(i + 1, len(parts) + 1):
                if ".".join(parts[i:j]) in self.names:
                    return True
        return bool(self.pattern and self.pattern.search(name))

    def may_name_single_experts(self) -> bool:
        """Whether an exclusion could pick out some experts of a layer but not others: an exact name below
        ``experts``, or a pattern with digits or word classes in it (then experts are built one by one)."""
        if any("experts." in name or name.startswith("experts") for name in self.names):
            return True
        source = self.pattern.pattern if self.pattern else ""
        return any(ch.isdigit() for ch in source) or "\\d" in source or "\\w" in source


def exclusions(quant: Quantization) -> Exclusions:
    names: set[str] = set()
    regexes: list[str] = []
    details = quant.details or {}
    for key in ("modules_to_not_convert", "ignore", "exclude_modules", "llm_int8_skip_modules"):
        listed = details.get(key)
        for pattern in listed if isinstance(listed, (list, tuple)) else ():
            if not isinstance(pattern, str) or not pattern:
                continue
            if pattern.startswith("re:"):
                regexes.append(pattern[3:])
            elif any(ch in pattern for ch in "*?["):
                glob = fnmatch.translate(pattern).removeprefix("(?s:").removesuffix(")\\Z")
                regexes.append(f"(?:^|\\.){glob}(?:\\.|$)")
            else:
                names.add(pattern)
    try:
        compiled = re.compile("|".join(f"(?:{r})" for r in regexes)) if regexes else None
    except re.error:
        compiled = None
    return Exclusions(frozenset(names), compiled)


def _target_matches(target: str, value: str, *, contains: bool) -> bool:
    """vLLM's ``_is_equal_or_regex_match``: ``re:`` targets as a regex matched at the start, else the exact name
    (or, for a module's class name, the target contained in it, case-insensitive)."""
    if target.startswith("re:"):
        try:
            return re.match(target[3:], value) is not None
        except re.error:
            return False
    return target.lower() in value.lower() if contains else target == value


def compressed_tensors_scheme(schemes: Sequence[Any], name: str) -> Mapping[str, Any] | None:
    """The ``config_groups`` scheme that quantizes the Linear module ``name`` (``model.layers.0.mlp.down_proj``),
    None when no group targets it (the module is then stored unquantized).

    As vLLM's ``find_matched_target`` picks it (docs/engines/common.md#hf-quant-formats): the first target of any
    group that names the module (exactly or by an ``re:`` regex), else the first naming its class. Every module
    sized here is a ``Linear``; a routed expert is also part of vLLM's ``FusedMoE`` (a group targeting ``FusedMoE``
    holds the experts). A group without targets quantizes every Linear."""
    groups = [scheme for scheme in schemes if isinstance(scheme, Mapping)]
    classes = ("FusedMoE", "Linear") if ".experts." in name else ("Linear",)
    for contains, value in ((False, name), *((True, cls) for cls in classes)):
        for scheme in groups:
            targets = scheme.get("targets")
            if targets is None:
                if contains:
                    return scheme
                continue
            listed = targets if isinstance(targets, (list, tuple)) else ()
            if any(isinstance(target, str) and _target_matches(target, value, contains=contains) for target in listed):
                return scheme
    return None
