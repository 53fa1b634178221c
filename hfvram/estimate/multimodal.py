"""Multimodal models and buffers built with the model, as the serving engines place them (pure arithmetic).

- **The encoder tower under TP** (docs/engines/vllm.md#vllm-multimodal): the checkpoint's ``vision`` component
  (vision / audio tower + projector, counted by the readers) is split over TP where the engine's class builds it
  from Column/Row/QKVParallel layers, and kept whole on every rank where it uses plain ``nn.Linear`` /
  transformers modules or ``--mm-encoder-tp-mode data`` (hfvram/data/multimodal.toml, one row per model_type).
- **Text-only serving**: ``--limit-mm-per-prompt`` at 0 for every modality the model serves: vLLM skips the
  tower (``SupportsMultiModal._mark_tower_model``), so neither its weights nor its profiling are counted.
- **The encoder cache at profiling**: vLLM V1's ``profile_run`` keeps the dummy encoder outputs (the encoder
  budget, ``max_num_batched_tokens`` tokens of the text hidden size) while the language model's dummy forward
  runs, so they add to the activation peak.
- **The rotary cos/sin cache** (every model, vLLM): ``RotaryEmbedding`` registers a
  ``[max positions, rotary_dim]`` buffer in the model dtype on every rank; ``Model loading took`` includes it.
  It is ~32 MiB for Llama-3.1 (131 072 positions) but 2.5 GiB for Llama-4-Scout (10 485 760).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from hfvram.datafiles import data_table
from hfvram.errors import UsageError
from hfvram.spec import LayerKind, ModelSpec

GiB = 1 << 30
#: --limit-mm-per-prompt text is untrusted input: cap what is parsed
MAX_LIMIT_TEXT = 2000
MAX_LIMIT_KEYS = 16
#: vLLM's --mm-encoder-tp-mode choices (MultiModalConfig.mm_encoder_tp_mode)
TP_MODES = ("weights", "data")
#: the first vLLM release that skips a tower limited to 0 (0.10.1, PR #22299, for the families of this table;
#: ``_mark_tower_model`` made it general later)
TEXT_ONLY_SINCE = (0, 10, 1)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@dataclass(frozen=True)
class Family:
    """One row of hfvram/data/multimodal.toml."""

    model_type: str
    modalities: tuple[str, ...]
    vllm_tower: str
    vllm_data_mode: bool
    vllm_source: str
    sglang_tower: str | None = None
    sglang_source: str | None = None
    vllm_caveat: str | None = None


@dataclass(frozen=True)
class MultimodalSettings:
    """What the engine command line says about the encoders: per-modality limits (None when not given) and
    --mm-encoder-tp-mode."""

    limits: Mapping[str, int] | None = None
    encoder_tp_mode: str = "weights"
    #: the engine version skips a tower whose modalities are all limited to 0 (vLLM >= 0.10.1, PR #22299)
    skips_unused_tower: bool = True


@dataclass(frozen=True)
class TowerPlacement:
    """How the checkpoint's ``vision`` component lands on each GPU."""

    #: multiplier of the vision component: 0.0 when the tower is skipped (text-only serving), else 1.0
    scale: float
    #: bytes of the (scaled) vision component kept whole on every TP rank
    replicated_bytes: float
    #: the encoder is profiled at start-up (the tower is built and a modality is allowed)
    profiled: bool
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def families() -> dict[str, Family]:
    rows = data_table("multimodal.toml")["families"]
    return {
        name: Family(
            model_type=name,
            modalities=tuple(row["modalities"]),
            vllm_tower=str(row["vllm_tower"]),
            vllm_data_mode=bool(row["vllm_data_mode"]),
            vllm_source=str(row["vllm_source"]),
            sglang_tower=row.get("sglang_tower"),
            sglang_source=row.get("sglang_source"),
            vllm_caveat=row.get("vllm_caveat"),
        )
        for name, row in rows.items()
    }


def parse_limits(text: str | None) -> dict[str, int] | None:
    """``--limit-mm-per-prompt`` as vLLM takes it: JSON (``{"image": 0, "video": 0}``, a modality may map to
    ``{"count": N, ...}``) or the older ``image=0,video=0``. None when not given; UsageError on bad input."""
    if text is None:
        return None
    raw = text.strip()
    if len(raw) > MAX_LIMIT_TEXT:
        raise UsageError(f"limit-mm-per-prompt is longer than {MAX_LIMIT_TEXT} characters")
    if not raw:
        return None
    items: dict[str, object] = {}
    if raw.startswith("{"):
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            raise UsageError(f"limit-mm-per-prompt is not valid JSON: {raw[:60]!r}") from exc
        if not isinstance(parsed, dict):
            raise UsageError("limit-mm-per-prompt must be a JSON object of modality -> count")
        items = parsed
    else:
        for part in raw.split(",")[: MAX_LIMIT_KEYS + 1]:
            key, sep, value = part.partition("=")
            if not sep:
                raise UsageError(f"limit-mm-per-prompt: expected modality=count, got {part.strip()[:40]!r}")
            items[key.strip()] = value.strip()
    if len(items) > MAX_LIMIT_KEYS:
        raise UsageError(f"limit-mm-per-prompt names more than {MAX_LIMIT_KEYS} modalities")
    limits: dict[str, int] = {}
    for key, entry in items.items():
        count = entry.get("count") if isinstance(entry, dict) else entry
        try:
            number = int(str(count))
        except ValueError as exc:
            raise UsageError(f"limit-mm-per-prompt: {str(key)[:20]!r} needs a whole count, got {count!r}") from exc
        if number < 0:
            raise UsageError(f"limit-mm-per-prompt: {str(key)[:20]!r} count must be >= 0, got {number}")
        limits[str(key)[:20]] = number
    return limits


def parse_tp_mode(text: str | None) -> str:
    mode = (text or "weights").strip().lower()
    if mode not in TP_MODES:
        raise UsageError(f"mm-encoder-tp-mode must be one of {', '.join(TP_MODES)}, got {mode[:20]!r}")
    return mode


def flag_warnings(spec: ModelSpec, settings: MultimodalSettings, given: Mapping[str, str]) -> list[str]:
    """The multimodal flags given for a model that has no encoder change nothing: say so."""
    if spec.multimodal:
        return []
    named = {key.replace("_", "-").lower().lstrip("-") for key in given}
    flags = [flag for flag in ("limit-mm-per-prompt", "mm-encoder-tp-mode") if flag in named]
    return [f"--{flag}: a text-only model has no encoder, the flag changes no memory" for flag in flags]


def text_only(family: Family | None, settings: MultimodalSettings) -> bool:
    """Every modality the model serves limited to 0 (a modality left out keeps vLLM's default of 1 item)."""
    if settings.limits is None:
        return False
    modalities = family.modalities if family is not None else tuple(settings.limits)
    return bool(modalities) and all(settings.limits.get(m, 1) == 0 for m in modalities)


def tower_placement(spec: ModelSpec, engine: str, tp: int, settings: MultimodalSettings) -> TowerPlacement:
    """The vision component's scale and the bytes of it kept whole per rank, for ``engine`` ("vllm",
    "sglang") at TP ``tp``."""
    vision = (spec.weights.bytes_by_component.get("vision", 0) if spec.weights else 0) or 0
    if not spec.multimodal:
        return TowerPlacement(scale=1.0, replicated_bytes=0.0, profiled=False)
    family = families().get(spec.model_type or "")
    if engine == "vllm" and settings.skips_unused_tower and text_only(family, settings):
        shown = ", ".join(f"{k}=0" for k in (family.modalities if family else settings.limits or {}))
        return TowerPlacement(
            scale=0.0,
            replicated_bytes=0.0,
            profiled=False,
            notes=(
                f"--limit-mm-per-prompt {shown}: text-only serving, the encoder tower is not built "
                f"({vision / GiB:.2f} GiB of the checkpoint not loaded) and not profiled",
            ),
        )
    name = spec.model_type or "this model"
    if family is None:
        warning = (
            f"multimodal {name}: how {engine} places its encoder under tensor parallelism is not in hfvram's "
            "table; its weights are counted as split over TP"
        )
        return TowerPlacement(scale=1.0, replicated_bytes=0.0, profiled=True, warnings=(warning,) if tp > 1 else ())
    if engine == "vllm":
        whole = family.vllm_tower == "replicated" or (settings.encoder_tp_mode == "data" and family.vllm_data_mode)
        how = (
            "built from plain nn.Linear layers"
            if family.vllm_tower == "replicated"
            else "--mm-encoder-tp-mode data"
            if whole
            else "Column/RowParallel layers"
        )
        warnings: tuple[str, ...] = ()
        if settings.encoder_tp_mode == "data" and not family.vllm_data_mode and family.vllm_tower != "replicated":
            warnings = (f"--mm-encoder-tp-mode data: {name}'s encoder does not read it; its weights stay split",)
        if family.vllm_caveat and tp > 1 and not whole:
            warnings = (*warnings, f"{name}: {family.vllm_caveat}")
    elif engine == "sglang" and family.sglang_tower is not None:
        whole = family.sglang_tower == "replicated"
        how = "built from transformers modules" if whole else "parallel layers"
        warnings = ()
    else:
        warning = f"multimodal {name}: how {engine} places its encoder under TP is not known; counted as split"
        return TowerPlacement(scale=1.0, replicated_bytes=0.0, profiled=True, warnings=(warning,) if tp > 1 else ())
    notes: tuple[str, ...] = ()
    if tp > 1 and vision:
        if whole:
            notes = (
                f"encoder tower ({vision / GiB:.2f} GiB) kept whole on every GPU ({how}): "
                f"+{vision * (1 - 1 / tp) / GiB:.2f} GiB per GPU over an even split",
            )
        else:
            notes = (f"encoder tower ({vision / GiB:.2f} GiB) split over TP={tp} ({how})",)
    return TowerPlacement(
        scale=1.0, replicated_bytes=float(vision) if whole else 0.0, profiled=True, notes=notes, warnings=warnings
    )


def settings_of(
    spec: ModelSpec, given: Mapping[str, str], tp: int, version: str
) -> tuple[MultimodalSettings, list[str]]:
    """vLLM's --limit-mm-per-prompt and --mm-encoder-tp-mode from the engine settings (UsageError on bad
    values); warnings when they are given for a model without an encoder, when the tower's placement under TP
    ``tp`` is not known, or when vLLM ``version`` (asked for, else the rules') predates text-only serving."""
    normalized = {key.replace("_", "-").lower().lstrip("-"): value for key, value in given.items()}
    settings = MultimodalSettings(
        limits=parse_limits(normalized.get("limit-mm-per-prompt")),
        encoder_tp_mode=parse_tp_mode(normalized.get("mm-encoder-tp-mode")),
        skips_unused_tower=_version(version) >= TEXT_ONLY_SINCE,
    )
    warnings = [*flag_warnings(spec, settings, given)]
    if (
        spec.multimodal
        and not settings.skips_unused_tower
        and text_only(families().get(spec.model_type or ""), settings)
    ):
        warnings.append(
            f"--limit-mm-per-prompt at 0 for every modality: vLLM skips the encoder tower only from 0.10.1 ({version} "
            "predates it); the tower is counted"
        )
    warnings.extend(tower_placement(spec, "vllm", tp, settings).warnings)
    return settings, warnings


def place_tower(
    spec: ModelSpec, tp: int, settings: MultimodalSettings, scale: dict[str, float], kept: dict[str, float]
) -> list[str]:
    """vLLM's placement of the vision component into ``weights_per_rank``'s inputs: ``scale["vision"]`` (0 when
    the tower is skipped) and ``kept["vision"]`` (bytes whole on every rank); returns the notes."""
    tower = tower_placement(spec, "vllm", tp, settings)
    if tower.scale != 1.0:
        scale["vision"] = scale.get("vision", 1.0) * tower.scale
    if tower.replicated_bytes:
        kept["vision"] = tower.replicated_bytes * scale.get("vision", 1.0)
    return list(tower.notes)


def encoder_cache_bytes(spec: ModelSpec, max_num_batched_tokens: int, dtype_bytes: float) -> int:
    """The dummy encoder outputs vLLM V1's ``profile_run`` holds during the language model's dummy forward:
    the encoder budget (``compute_encoder_budget``: ``max_num_batched_tokens``, the log's "Encoder cache will
    be initialized with a budget of N tokens") × the text hidden size × the model dtype."""
    return int(max(0, max_num_batched_tokens) * (spec.hidden_size or 0) * dtype_bytes)


#: rope types whose vLLM class caches ``positions × factor`` rows (the others cache ``max_position_embeddings``)
_SCALED_LENGTH = ("linear", "dynamic", "yarn")
#: rope types read from vLLM's classes (others: not counted, a note says so)
_KNOWN_ROPE = ("default", "llama3", "linear", "dynamic", "yarn")


def rope_cache(spec: ModelSpec, dtype_bytes: float) -> tuple[int, str | None]:
    """Bytes of vLLM's rotary cos/sin cache on every rank and a note (None when the model has no rotary
    attention). ``RotaryEmbeddingBase`` stores ``[length, rotary_dim]`` (cos ‖ sin) in the model dtype, one
    instance per distinct configuration (``get_rope`` caches them); rotary_dim = head_dim × partial_rotary_factor
    (MLA: qk_rope_head_dim); length = ``max_position_embeddings``
    (default, llama3), × factor (linear, dynamic), ``original_max_position_embeddings`` × factor (yarn)."""
    cache_free = (LayerKind.LINEAR, LayerKind.MAMBA, LayerKind.NONE)
    layer = next((layer for layer in spec.layers if layer.kind not in cache_free), None)
    if layer is None or not spec.max_position_embeddings:
        return 0, None
    if layer.kind is LayerKind.MLA:
        rotary_dim = layer.qk_rope_head_dim
    else:
        rotary_dim = layer.head_dim_k or (spec.head_dim or 0)
    shape = spec.extra.get("shape_config")
    partial = shape.get("partial_rotary_factor") if isinstance(shape, Mapping) else None
    if isinstance(partial, (int, float)) and not isinstance(partial, bool) and 0 < partial < 1:
        rotary_dim = int(rotary_dim * partial)
    if rotary_dim <= 0:
        return 0, None
    scaling = dict(spec.rope_scaling or {})
    kind = str(scaling.get("rope_type") or scaling.get("type") or "default").lower()
    if kind not in _KNOWN_ROPE:
        return 0, f"rotary cache of rope type {kind!r} not counted"
    length = float(spec.max_position_embeddings)
    factor = scaling.get("factor")
    if kind in _SCALED_LENGTH and isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 0:
        original = scaling.get("original_max_position_embeddings")
        if kind == "yarn" and isinstance(original, int) and not isinstance(original, bool) and original > 0:
            length = float(original)
        length *= float(factor)
    length = min(length, float(1 << 31))
    size = int(length * rotary_dim * dtype_bytes)
    return size, f"rotary cos/sin cache {int(length):,} positions × {rotary_dim} on every GPU: {size / GiB:.2f} GiB"
