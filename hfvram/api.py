"""hfvram as a library: ``check``, ``inspect`` and ``fit`` with the command line's options and typed results.

    >>> from hfvram import check
    >>> result = check("meta-llama/Llama-3.1-8B-Instruct", gpu="rtx4090", context="32k", offline=True)
    >>> result.verdict, result.per_gpu.total, result.capacity.max_context

The command line runs the same code: ``hfvram check`` calls :func:`check_with_options` and prints
``result.document`` (the ``hfvram.check/1`` object that ``--json`` prints). Errors are raised, never printed:
:class:`hfvram.errors.UsageError` for bad input (the CLI's exit 2), :class:`hfvram.errors.ModelReadError` and
the other :class:`hfvram.errors.HfvramError` subclasses when a model cannot be read (exit 3). The library reads
no config file and no ``HFVRAM_GPU``-style defaults (those are the command line's, see ``hfvram.settings``):
what a call does depends on its arguments only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from hfvram.errors import UsageError

if TYPE_CHECKING:
    from hfvram.estimate.types import EngineChoice, Hardware, Workload
    from hfvram.pipeline import RunOptions
    from hfvram.spec import ModelSpec

__all__ = [
    "Capacity",
    "CheckResult",
    "FitResult",
    "FitRow",
    "InspectResult",
    "MemoryTerms",
    "check",
    "check_with_options",
    "fit",
    "fit_with_options",
    "inspect",
]

Verdict = Literal["fits", "tight", "offload", "does_not_fit"]
#: a setting as ``{"max-num-batched-tokens": 8192}`` or as the CLI's ``["max-num-batched-tokens=8192"]``
Settings = Mapping[str, object] | Sequence[str]


# ---- results -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryTerms:
    """Bytes on the worst GPU: the four terms, their sum and the usable memory (``None`` where unknown; ``usable``
    is ``None`` without a GPU)."""

    weights: int | None
    kv_cache: int | None
    activations: int | None
    overhead: int | None
    total: int | None
    usable: int | None

    @classmethod
    def from_document(cls, per_gpu: Mapping[str, Any]) -> MemoryTerms:
        return cls(
            weights=per_gpu.get("weights"),
            kv_cache=per_gpu.get("kv_cache"),
            activations=per_gpu.get("activations"),
            overhead=per_gpu.get("overhead"),
            total=per_gpu.get("total"),
            usable=per_gpu.get("usable"),
        )


@dataclass(frozen=True)
class Capacity:
    """What the KV pool holds: tokens in all, full-length requests at the context, longest context at the
    concurrency (``None`` without a GPU)."""

    kv_tokens: int | None
    max_concurrency: float | None
    max_context: int | None


@dataclass(frozen=True)
class CheckResult:
    """One model on one machine: what ``hfvram check`` reports. ``document`` is the ``hfvram.check/1`` object."""

    source: str
    verdict: Verdict | None
    verdict_reason: str | None
    gpu: str | None
    gpu_count: int | None
    engine: str
    engine_version: str | None
    context: int | None
    concurrency: int
    kv_dtype: str
    per_gpu: MemoryTerms
    utilization: float | None
    capacity: Capacity
    warnings: tuple[str, ...]
    document: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> CheckResult:
        hardware = document.get("hardware") or {}
        engine = document.get("engine") or {}
        workload = document.get("workload") or {}
        capacity = document.get("capacity") or {}
        return cls(
            source=_source_name(document.get("source") or {}),
            verdict=document.get("verdict"),
            verdict_reason=document.get("verdict_reason"),
            gpu=hardware.get("gpu"),
            gpu_count=hardware.get("count"),
            engine=engine.get("name", ""),
            engine_version=engine.get("version"),
            context=workload.get("context"),
            concurrency=workload.get("concurrency", 1),
            kv_dtype=workload.get("kv_dtype", ""),
            per_gpu=MemoryTerms.from_document(document.get("per_gpu") or {}),
            utilization=document.get("utilization"),
            capacity=Capacity(capacity.get("kv_tokens"), capacity.get("max_concurrency"), capacity.get("max_context")),
            warnings=tuple(document.get("warnings") or ()),
            document=document,
        )

    def exit_code(self, fail_on_tight: bool = False, fail_on: str | None = None) -> int:
        """The command line's exit code for this result: 1 when it does not fit (or, with ``fail_on="offload"``,
        runs only with offload; with ``fail_on="tight"`` / ``fail_on_tight``, is tight or offload), else 0."""
        from hfvram.pipeline import exit_code_for

        return exit_code_for([self.verdict], fail_on or fail_on_tight)

    def to_json(self) -> str:
        """The ``hfvram.check/1`` document as ``hfvram check --json`` prints it."""
        return json.dumps(self.document, indent=2, ensure_ascii=False)


@dataclass(frozen=True)
class FitRow:
    """One row of the fit table: full-length requests that fit at ``context`` with ``kv_dtype``."""

    context: int
    kv_dtype: str
    verdict: Verdict | None
    max_concurrency: float | None
    #: the KV cache of one full-length request, bytes per GPU
    kv_cache_bytes: int | None
    utilization: float | None


@dataclass(frozen=True)
class FitResult:
    """The inverse view for one model on one GPU type: what ``hfvram fit`` reports (``hfvram.fit/1``)."""

    source: str
    gpu: str
    hardware: str
    engine: str
    context: int | None
    concurrency: int
    verdict: Verdict | None
    verdict_reason: str | None
    total: int | None
    usable: int | None
    max_context: int | None
    max_concurrency: float | None
    smallest_gpu_count: int | None
    context_table: tuple[FitRow, ...]
    warnings: tuple[str, ...]
    document: dict[str, Any] = field(repr=False, compare=False)
    #: the model's facts and the engine setup the figures were computed for (what ``--plot`` draws from)
    spec: ModelSpec | None = field(default=None, repr=False, compare=False)
    engine_choice: EngineChoice | None = field(default=None, repr=False, compare=False)
    workload: Workload | None = field(default=None, repr=False, compare=False)
    hardware_spec: Hardware | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> str:
        return json.dumps(self.document, indent=2, ensure_ascii=False)


@dataclass(frozen=True)
class InspectResult:
    """The model's facts only (no GPU, no engine): what ``hfvram inspect`` reports (``hfvram.inspect/1``)."""

    source: str
    architecture: str | None
    model_type: str | None
    params_total: int | None
    params_active: int | None
    weights_bytes: int | None
    num_layers: int | None
    kv_bytes_per_token: int | None
    kv_fixed_bytes_per_sequence: int | None
    max_position_embeddings: int | None
    dtype: str | None
    kv_dtype: str | None
    warnings: tuple[str, ...]
    document: dict[str, Any] = field(repr=False, compare=False)
    spec: ModelSpec | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> str:
        return json.dumps(self.document, indent=2, ensure_ascii=False)


def _source_name(source: Mapping[str, Any]) -> str:
    files = source.get("files") or []
    return str(source.get("repo_id") or source.get("text") or (files[0] if files else ""))


# ---- the calls --------------------------------------------------------------------------------------------------


def check(
    source: str | os.PathLike[str] | None = None,
    *,
    gpu: str | None = None,
    engine: str | None = None,
    context: int | str | None = None,
    concurrency: int | str | None = None,
    kv_dtype: str | None = None,
    settings: Settings = (),
    engine_args: str | None = None,
    tp: int | None = None,
    pp: int | None = None,
    gpu_util: float | None = None,
    unified_fraction: float | None = None,
    revision: str | None = None,
    token: str | None = None,
    offline: bool | None = None,
    explain: bool = False,
    calibration: str | os.PathLike[str] | None = None,
    quant: str | None = None,
) -> CheckResult:
    """Will ``source`` fit ``gpu`` with ``engine`` at ``context`` × ``concurrency``? Same as ``hfvram check``.

    Args:
        source: ``org/name[@revision]``, ``org/name:Q4_K_M``, a local folder, a ``.gguf`` file or a cached repo;
            may be omitted when ``engine_args`` names the model.
        gpu: GPU id or alias with an optional count (``"rtx4090"``, ``"h100x8"``, ``"24GiB"``); without it the
            result has the four terms but no verdict.
        engine: ``"vllm"``, ``"sglang"``, ``"llama.cpp"``, … with an optional ``@version`` (default: vLLM,
            llama.cpp for GGUF, MLX on Apple Silicon).
        context: tokens per sequence, ``32768`` or ``"32k"`` (default: the engine's).
        concurrency: sequences held at full context (default 1).
        kv_dtype: KV cache type (``"auto"``, ``"fp8"``, ``"q8_0"``, …).
        settings: engine settings under the engine's own names, ``{"max-num-batched-tokens": 8192}``.
        engine_args: a pasted engine command line (``"vllm serve org/model -tp 2"``); explicit arguments win.
        tp, pp: tensor- and pipeline-parallel degrees.
        gpu_util: the engine's memory fraction, 0 < F <= 1.
        unified_fraction: on unified-memory devices, the share of RAM the GPU may use, 0 < F <= 1.
        revision, token, offline: how the Hub is read (``token`` is never printed or stored).
        explain: add every input figure with where it came from (``document["explain"]``).
        calibration: a file written by ``hfvram calibrate --save``.
        quant: a what-if format (``"Q4_K_M"``, ``"IQ4_XS"``, …) or ``"auto"`` (the largest that fits ``gpu``):
            the weights sized as that format would store them, every other fact read from the real files;
            ``document["what_if"]`` says how.

    Raises:
        UsageError: bad input (unknown GPU or engine, a bad number).
        HfvramError: the model could not be read (its subclasses say why).

    Longer than 60 lines: its length is its keyword arguments and their documentation (the public API); the body
    is one call.
    """
    options = _run_options(
        gpu=gpu,
        engine=engine,
        context=context,
        concurrency=concurrency,
        kv_dtype=kv_dtype,
        settings=settings,
        engine_args=engine_args,
        tp=tp,
        pp=pp,
        gpu_util=gpu_util,
        unified_fraction=unified_fraction,
        revision=revision,
        token=token,
        offline=offline,
        explain=explain,
        calibration=calibration,
        quant=quant,
    )
    return check_with_options(options, None if source is None else os.fspath(source))


def fit(
    source: str | os.PathLike[str],
    *,
    gpu: str,
    engine: str | None = None,
    context: int | str | None = None,
    concurrency: int | str | None = None,
    kv_dtype: str | None = None,
    settings: Settings = (),
    engine_args: str | None = None,
    tp: int | None = None,
    pp: int | None = None,
    gpu_util: float | None = None,
    unified_fraction: float | None = None,
    revision: str | None = None,
    token: str | None = None,
    offline: bool | None = None,
    quant: str | None = None,
) -> FitResult:
    """The inverse questions for ``source`` on ``gpu``: the longest context, the most concurrent requests and the
    smallest GPU count that fit, and the table by context and KV type. Same as ``hfvram fit``; the arguments
    mean what they mean for :func:`check` (``gpu`` is required)."""
    if not gpu:
        raise UsageError("fit needs a gpu (for example gpu='rtx4090')")
    options = _run_options(
        gpu=gpu,
        engine=engine,
        context=context,
        concurrency=concurrency,
        kv_dtype=kv_dtype,
        settings=settings,
        engine_args=engine_args,
        tp=tp,
        pp=pp,
        gpu_util=gpu_util,
        unified_fraction=unified_fraction,
        revision=revision,
        token=token,
        offline=offline,
        quant=quant,
    )
    return fit_with_options(options, os.fspath(source))


def inspect(
    source: str | os.PathLike[str],
    *,
    kv_dtype: str | None = None,
    revision: str | None = None,
    token: str | None = None,
    offline: bool | None = None,
) -> InspectResult:
    """The model's facts only (no GPU, no engine), each with the file and field it came from
    (``document["provenance"]``). Same as ``hfvram inspect``; ``kv_dtype`` gives the KV figures at that type
    (default: the checkpoint's)."""
    from hfvram.redaction import redact_document
    from hfvram.report.jsonout import inspect_dict, kv_dtype_bytes
    from hfvram.sources import load_model

    loaded = load_model(os.fspath(source), revision=revision, token=token, offline=offline, need_split=True)
    kv_dtype_bytes(kv_dtype, loaded.spec)  # validates the name (UsageError)
    document = redact_document(inspect_dict(loaded.source, loaded.spec, kv_dtype))
    model = document.get("model") or {}
    return InspectResult(
        source=_source_name(document.get("source") or {}),
        architecture=model.get("architecture"),
        model_type=model.get("model_type"),
        params_total=model.get("params_total"),
        params_active=model.get("params_active"),
        weights_bytes=model.get("weights_bytes"),
        num_layers=model.get("num_layers"),
        kv_bytes_per_token=model.get("kv_bytes_per_token"),
        kv_fixed_bytes_per_sequence=model.get("kv_fixed_bytes_per_sequence"),
        max_position_embeddings=model.get("max_position_embeddings"),
        dtype=model.get("dtype"),
        kv_dtype=model.get("kv_dtype"),
        warnings=tuple(document.get("warnings") or ()),
        document=document,
        spec=loaded.spec,
    )


# ---- what the command line calls --------------------------------------------------------------------------------


def check_with_options(options: RunOptions, source: str | None) -> CheckResult:
    """``check`` for options as the command line holds them (``hfvram.pipeline.RunOptions``)."""
    from hfvram.pipeline import check_report, resolve_request

    return CheckResult.from_document(check_report(resolve_request(options, source), options))


def fit_with_options(options: RunOptions, source: str) -> FitResult:
    """``fit`` for options as the command line holds them (``hfvram.pipeline.RunOptions``)."""
    from hfvram.pipeline import fit_report, resolve_request

    report = fit_report(resolve_request(options, source), options)
    document = report.document
    return FitResult(
        source=_source_name(document.get("source") or {}),
        gpu=document["gpu"],
        hardware=document.get("hardware", document["gpu"]),
        engine=document.get("engine", ""),
        context=document.get("context"),
        concurrency=document.get("concurrency", 1),
        verdict=document.get("verdict"),
        verdict_reason=document.get("verdict_reason"),
        total=document.get("total"),
        usable=document.get("usable"),
        max_context=document.get("max_context"),
        max_concurrency=document.get("max_concurrency"),
        smallest_gpu_count=document.get("smallest_gpu_count"),
        context_table=tuple(
            FitRow(
                context=row["context"],
                kv_dtype=row["kv_dtype"],
                verdict=row.get("verdict"),
                max_concurrency=row.get("max_concurrency"),
                kv_cache_bytes=row.get("kv_cache_bytes"),
                utilization=row.get("utilization"),
            )
            for row in document.get("context_table") or ()
        ),
        warnings=tuple(document.get("warnings") or ()),
        document=document,
        spec=report.spec,
        engine_choice=report.choice,
        workload=report.workload,
        hardware_spec=report.hardware,
    )


def _run_options(
    *,
    settings: Settings,
    context: int | str | None,
    concurrency: int | str | None,
    tp: int | None,
    pp: int | None,
    gpu_util: float | None,
    unified_fraction: float | None,
    calibration: str | os.PathLike[str] | None = None,
    **text: Any,
) -> RunOptions:
    """Python arguments -> the RunOptions the command line builds, with the checks click's option types make."""
    from hfvram.pipeline import RunOptions

    for name, value in (("tp", tp), ("pp", pp)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError(f"{name} must be a whole number of at least 1, got {value!r}")
    for name, fraction in (("gpu_util", gpu_util), ("unified_fraction", unified_fraction)):
        if fraction is not None and not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
            raise UsageError(f"{name} must be a fraction, 0 < F <= 1, got {str(fraction)[:80]!r}")
    for label, number in (("context", context), ("concurrency", concurrency)):
        if number is not None and (isinstance(number, bool) or not isinstance(number, (int, str))):
            raise UsageError(f"{label} must be a whole number or a text such as '32k', got {type(number).__name__}")
    for label, given in text.items():  # gpu, engine, kv_dtype, engine_args, revision, token, quant, …
        if given is not None and not isinstance(given, (str, bool)):
            raise UsageError(f"{label} must be a string, got {type(given).__name__}")
        if isinstance(given, str) and label != "engine_args" and len(given) > 4096:
            raise UsageError(f"{label}: {len(given):,} characters, at most 4,096")
    return RunOptions(
        context=None if context is None else str(context),
        concurrency=None if concurrency is None else str(concurrency),
        settings=_settings(settings),
        tp=tp,
        pp=pp,
        gpu_util=None if gpu_util is None else float(gpu_util),
        unified_fraction=None if unified_fraction is None else float(unified_fraction),
        calibration=None if calibration is None else os.fspath(calibration),
        **text,
    )


def _settings(settings: Settings) -> tuple[str, ...]:
    if isinstance(settings, str):
        return (settings,)
    if not isinstance(settings, (Mapping, list, tuple)):
        raise UsageError(f"settings must be a mapping or a list of 'NAME=VALUE', got {type(settings).__name__}")
    if isinstance(settings, Mapping):
        return tuple(
            f"{name}={str(value).lower() if isinstance(value, bool) else value}" for name, value in settings.items()
        )
    return tuple(str(item) for item in settings)
