"""The contract every staged engine implements, and the one ``run`` that composes it.

An engine answers a check in five steps, each a method of its profile (docs/architecture.md, "How an engine is
built"):

1. ``resolve``   — the engine's constants for the release, the user's settings and the hardware → its frozen
   ``Settings`` (the only step that reads ``--set`` values and the command line);
2. ``breakdown`` — arithmetic only: the spec and the settings → the engine's own frozen breakdown of memory;
3. ``terms``     — that breakdown → the typed :class:`Terms` the estimator shares across engines (per-GPU
   figures, capacity, the context and KV dtype the figures are for, the parallel layout, whether the engine
   refuses to start);
4. ``narrate``   — warnings and ``--explain`` lines, every number read from the breakdown (:class:`Narration`);
5. ``report``    — the settings the estimate assumed, under the engine's own names (``Estimate.engine``).

:meth:`StagedProfile.estimate` runs the five in that order and assembles the :class:`Estimate`; an engine writes
the steps, never the orchestration. An engine's constants are a frozen dataclass (a :class:`Constants`) built once
per rule version from its ``rules.toml`` and checked when they load: a key the dataclass does not declare, a
declared key the table lacks, or a value of the wrong type is a ``ValueError`` naming the file.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from hfvram.engines.base import ProfileBase
from hfvram.estimate import common
from hfvram.estimate.types import Capacity, EngineChoice, Estimate, Hardware, PerGpu, Workload
from hfvram.spec import ModelSpec

#: a TOML value's Python types, per annotation of a constants field (a float field takes a whole number too)
_ACCEPTS: dict[object, tuple[type, ...]] = {
    int: (int,),
    float: (int, float),
    str: (str,),
    bool: (bool,),
    list: (list,),
    dict: (dict,),
}


def _accepted(annotation: object) -> tuple[type, ...] | None:
    """The types a field annotated ``annotation`` accepts (None: the annotation is not one checked here)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        accepted: tuple[type, ...] = ()
        for member in typing.get_args(annotation):
            if member is type(None):
                accepted += (type(None),)
                continue
            one = _accepted(member)
            if one is None:
                return None
            accepted += one
        return accepted
    return _ACCEPTS.get(origin if origin is not None else annotation)


C = TypeVar("C", bound="Constants")


@dataclass(frozen=True)
class Constants:
    """Base of an engine's constants: subclass it as a frozen dataclass with one field per key of the engine's
    ``[defaults]`` (and of every ``[versions]`` table), then :meth:`load` the merged rules of one version."""

    #: which published measurements stand behind the engine's figures (``--explain``'s ``measurements`` line)
    measured: str

    @classmethod
    def load(cls: type[C], rules: Mapping[str, Any], source: str) -> C:
        """The constants of one rule version; ``ValueError`` naming ``source`` for an unknown or missing key or a
        value of the wrong type (a renamed TOML key fails here, at load, not on one branch at run time)."""
        hints = typing.get_type_hints(cls)
        fields = {field.name for field in dataclasses.fields(cls)}
        unknown, missing = sorted(set(rules) - fields), sorted(fields - set(rules))
        if unknown or missing:
            raise ValueError(f"{source}: keys the engine does not declare {unknown}, declared keys missing {missing}")
        for name in sorted(fields):
            value, accepted = rules[name], _accepted(hints[name])
            wrong_bool = isinstance(value, bool) and bool not in (accepted or ())
            if accepted is not None and (wrong_bool or not isinstance(value, accepted)):
                raise ValueError(f"{source}: {name} = {value!r} is not of type {hints[name]}")
        return cls(**dict(rules))


@dataclass(frozen=True)
class Terms:
    """What an engine's breakdown hands the estimator, the same shape for every engine."""

    per_gpu: PerGpu
    capacity: Capacity
    #: single-sequence decode tokens per second (an upper bound from bandwidth), None when not modelled
    decode: float | None
    #: the context and KV cache dtype the figures are for (the workload as the engine resolved it)
    context: int
    kv_dtype: str
    tp: int
    pp: int
    #: the engine refuses to start although the sum may look fine (no memory left for its KV pool)
    refused: bool = False


@dataclass(frozen=True)
class Narration:
    """The warnings and ``--explain`` lines of one estimate, every figure read from the breakdown."""

    warnings: tuple[str, ...]
    explain: Mapping[str, str]


S = TypeVar("S")
B = TypeVar("B")
K = TypeVar("K", bound=Constants)


class StagedProfile(ProfileBase, Generic[K, S, B]):
    """An engine profile written as the five steps of the contract; :meth:`estimate` is the one ``run``."""

    #: the engine's constants (a frozen :class:`Constants` dataclass)
    constants_type: ClassVar[type[Constants]]
    #: whether the engine needs the weights' size to answer (all but those that size weights themselves)
    requires_weights: ClassVar[bool] = True
    #: the engine's rules are not versioned in hfvram: the newest applies to every release asked for
    unversioned: ClassVar[bool] = False
    #: whether ``--explain`` carries the line naming the published measurements behind the figures (the TOML's
    #: ``measured``); vLLM, SGLang, llama.cpp and Ollama not yet, since adding it changes their output
    explains_measurements: ClassVar[bool] = True

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(data)
        #: rule version -> its checked constants; per instance (a profile built from a test's own table keeps its own)
        self._constants: dict[str, Constants] = {}

    def constants(self, requested: str | None) -> tuple[str, K]:
        """The rule version ``requested`` maps to and the engine's constants in force at it (built and checked once
        per version; an unversioned engine always answers with its newest rules)."""
        version, merged = self.rules(None if self.unversioned else requested)
        cached = self._constants.get(version)
        if cached is None:
            source = f"hfvram/engines/{self.name}/rules.toml [versions] up to {version}"
            cached = self._constants[version] = self.constants_type.load(merged, source)
        constants: K = cached  # type: ignore[assignment]
        return version, constants

    @abstractmethod
    def resolve(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: K,
        version: str,
    ) -> S:
        """Step 1: the engine's settings for this check."""

    @abstractmethod
    def breakdown(
        self,
        spec: ModelSpec,
        hardware: Hardware | None,
        choice: EngineChoice,
        workload: Workload,
        constants: K,
        settings: S,
    ) -> B:
        """Step 2: the engine's memory breakdown (arithmetic only)."""

    @abstractmethod
    def terms(self, parts: B, spec: ModelSpec, hardware: Hardware | None, workload: Workload) -> Terms:
        """Step 3: the breakdown as the estimator's typed terms."""

    @abstractmethod
    def narrate(
        self, parts: B, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Narration:
        """Step 4: warnings and explain lines."""

    @abstractmethod
    def report(self, parts: B, choice: EngineChoice, version: str) -> dict[str, object]:
        """Step 5: the settings assumed, under the engine's names."""

    def measurements(self, constants: K) -> dict[str, str]:
        """The ``--explain`` line naming the published measurements behind the figures (the TOML's ``measured``),
        for an engine that ``explains_measurements``."""
        return {"measurements": str(constants.measured)} if self.explains_measurements else {}

    def finished(self, result: Estimate, parts: B) -> Estimate:
        """The assembled estimate as the engine hands it on: as it is, unless the engine adds what the breakdown
        says beyond the terms (vLLM: a set-up it refuses at start-up)."""
        return result

    def offload(self, result: Estimate, choice: EngineChoice, workload: Workload) -> Estimate:
        """The engine's own placement into CPU RAM applied to a finished estimate (``estimate.core.with_offload``,
        after the capacity search): unchanged unless the engine offloads what does not fit."""
        return result

    def estimate(
        self, spec: ModelSpec, hardware: Hardware | None, choice: EngineChoice, workload: Workload
    ) -> Estimate:
        """The one run: constants → settings → breakdown → terms, narration and report → the Estimate."""
        version, constants = self.constants(choice.version)
        if self.requires_weights:
            common.require_weights(spec)
        settings = self.resolve(spec, hardware, choice, workload, constants, version)
        parts = self.breakdown(spec, hardware, choice, workload, constants, settings)
        narration = self.narrate(parts, spec, hardware, choice, workload)
        terms = self.terms(parts, spec, hardware, workload)
        # which published measurements this profile was checked against (the TOML's `measured`)
        explain = {**narration.explain, **self.measurements(constants)}
        result = common.finish_estimate(
            spec=spec,
            hardware=hardware,
            engine=self.report(parts, choice, version),
            workload=dataclasses.replace(workload, context=terms.context, kv_dtype=terms.kv_dtype),
            per_gpu=terms.per_gpu,
            capacity=terms.capacity,
            decode=terms.decode,
            warnings=narration.warnings,
            explain=explain,
            tp=terms.tp,
            pp=terms.pp,
            force_does_not_fit=terms.refused,
        )
        return self.finished(result, parts)
