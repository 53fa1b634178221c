"""Raw facts of a checkpoint (file texts and headers, as read) → one ModelSpec, through the readers.

Every source (Hub, local folder, HF cache, facts cache, embedded catalogue) gathers the same raw facts;
the readers derive the spec from them at load time, so a reader fix applies to cached facts too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hfvram.errors import MalformedFileError
from hfvram.memo import IdentityCache, ValueCache
from hfvram.spec import ModelSpec, Weights

if TYPE_CHECKING:
    from hfvram.readers.config_hf import HfFacts
    from hfvram.sources.cache import FactsCache

#: Files read next to config.json when a repo has them (quantization details the config may lack).
COMPANION_FILES: tuple[str, ...] = ("quantize_config.json", "hf_quant_config.json", "quant_config.json")
INDEX_FILE = "model.safetensors.index.json"


@dataclass(frozen=True)
class CheckpointFacts:
    """What was read of one checkpoint. Texts are kept raw; readers parse them."""

    config_text: str
    companions: Mapping[str, str] = field(default_factory=dict)
    #: shard file name -> the raw safetensors header JSON text (a local file), or its parsed facts
    #: (:func:`header_facts`: what the Hub path reads and the facts cache stores)
    headers: Mapping[str, str | Mapping[str, object]] = field(default_factory=dict)
    #: Hub model info `safetensors.parameters`: element count per stored dtype (real, from the Hub)
    dtype_parameters: Mapping[str, int] | None = None
    #: index metadata (total_size / total_parameters) when the index was read
    index_metadata: Mapping[str, object] | None = None
    #: where the facts came from, for provenance ("Hub model info", "local folder /x", …)
    origin: str = ""
    #: shard file name -> bytes after its header (local files, whose size is known): the tensors must end there
    data_sizes: Mapping[str, int] = field(default_factory=dict)


def _parse_json(text: str, filename: str) -> dict:
    from hfvram.readers.config import load_json_tolerant

    parsed = load_json_tolerant(text.encode("utf-8"), filename)
    if not isinstance(parsed, dict):
        raise MalformedFileError("expected a JSON object", file=filename)
    return parsed


def transformers_facts(config: Mapping[str, Any], cache: FactsCache | None = None) -> HfFacts | None:
    """transformers' facts for ``config``, the cheapest way: the facts cache's entry for the installed transformers
    version, the embedded catalogue's precomputed facts (any version, labelled so), else computed now by the
    reader (importing transformers) and stored in the facts cache. None for a config the reader asks transformers
    about itself (no model_type, or not JSON-able); ``cache``: the facts cache (default: ``HFVRAM_CACHE_DIR``)."""
    import hashlib

    from hfvram.readers.config_hf import (
        HfFacts,
        canonical_config,
        hf_facts_for,
        installed_transformers_version,
        precomputed_label,
    )
    from hfvram.sources.cache import FactsCache

    canonical = canonical_config(config)
    if canonical is None or not isinstance(config.get("model_type"), str):
        return None
    if cache is None:
        cache = FactsCache()
    installed = installed_transformers_version()
    if installed:
        cached = cache.transformers_facts(canonical, installed)
        if cached is not None:
            return cached
    from hfvram.sources.catalog import catalogue_hf_facts

    shipped = catalogue_hf_facts(hashlib.sha256(canonical.encode("utf-8")).hexdigest())
    if shipped is not None:
        try:
            facts: HfFacts | None = HfFacts.from_json(shipped, origin="hfvram catalogue")
        except ValueError:
            facts = None
        # a failure recorded by another transformers (e.g. an unknown model_type) is asked again of this one
        if facts is not None and (facts.ok or installed is None or facts.version == installed):
            return precomputed_label(facts, installed)
    computed = hf_facts_for(config)
    if installed and computed.version == installed:
        cache.put_transformers_facts(canonical, installed, computed)  # a cache that cannot be written costs only time
    return computed


def spec_from_facts(facts: CheckpointFacts, cache: FactsCache | None = None) -> ModelSpec:
    """Config (+ companions) through the config reader, with transformers' facts for the config looked up first
    (:func:`transformers_facts`), then the best weights the facts give (see :func:`best_weights`), so the
    estimator always reads weights from the spec."""
    from hfvram.readers.config import read_config

    config = _parse_json(facts.config_text, "config.json")
    companions = {name: _parse_json(text, name) for name, text in facts.companions.items()}
    from hfvram.readers.bounds import validate_config

    validate_config(config, filename="config.json")  # before transformers iterates over a count (read_config too)
    hf = transformers_facts(config, cache)
    spec = read_config(config, filename="config.json", companions=companions or None, hf_facts=hf, validated=True)
    weights, warning = best_weights(spec, facts, config)
    if weights is not None:
        spec = _with_weights(spec, weights)
    if warning:
        spec = replace(spec, warnings=(*spec.warnings, warning))
    return spec


def _with_weights(spec: ModelSpec, weights: Weights) -> ModelSpec:
    from hfvram.readers.tensors import spec_with_weights

    return spec_with_weights(spec, weights)


def best_weights(
    spec: ModelSpec, facts: CheckpointFacts, config: Mapping[str, object] | None = None
) -> tuple[Weights | None, str | None]:
    """Weights from the best fact available, and a warning when they are not exact.

    Real safetensors headers (exact, per tensor) > the Hub's per-dtype parameter counts (exact total) >
    the index ``total_size`` (exact total) > config shapes (estimate). An exact total without per-tensor
    facts takes its component split from the config shapes, scaled to that total."""
    if facts.headers:
        weights = weights_from_headers(facts.headers, spec, origin=facts.origin, data_sizes=facts.data_sizes)
        if weights.total_bytes <= 0:  # a header `{}` (or only __metadata__): no weights, not 0 bytes of them
            return None, "weights unknown: the safetensors headers list no tensors"
        return weights, None
    derived = _derived_once(spec, config, facts)
    if facts.dtype_parameters:
        exact = weights_from_dtype_parameters(facts.dtype_parameters, origin=facts.origin)
        if exact.total_bytes <= 0:
            return None, "weights unknown: the Hub's safetensors parameter counts sum to 0"
        if derived is None:
            return exact, None
        weights = split_like(exact, derived)
        if spec.quantization is not None:
            # a quantized tensor packs several weights per stored element: the Hub's element counts give exact
            # bytes but not parameters, which the config shapes count unpacked
            weights = replace(
                weights,
                params_total=derived.params_total,
                params_by_component=dict(derived.params_by_component),
                source=weights.source + "; parameters counted unpacked from config shapes",
            )
        return weights, None
    total = (facts.index_metadata or {}).get("total_size")
    if total is not None:
        _check_index_metadata(facts.index_metadata or {})
    if isinstance(total, int) and total > 0:
        if derived is None:
            return None, "weights unknown: the index states a total_size but the config shapes give no split"
        return scaled_to_total(derived, facts.index_metadata or {}), None
    if derived is None:
        return None, "weights unknown: no safetensors headers were available and shapes cannot be derived"
    return derived, "weights derived from config shapes (no safetensors headers were available); sizes are estimates"


def _check_index_metadata(metadata: Mapping[str, object]) -> None:
    """The index's total_size / total_parameters are untrusted numbers: whole, non-negative, within bounds."""
    from hfvram.readers.bounds import bound, check_count

    for key, section in (("total_size", "maximum_bytes"), ("total_parameters", "maximum_parameters")):
        value = metadata.get(key)
        if value is not None and not isinstance(value, bool) and isinstance(value, (int, float)):
            check_count(value, bound("safetensors", section), file=INDEX_FILE, field=f"metadata.{key}")


#: config-shape weights by the config text (and companions) they are derived from
_DERIVED: ValueCache[tuple[str, tuple[tuple[str, str], ...]], Weights | None] = ValueCache(
    "sources.derived_weights", 256
)


def _derived_once(spec: ModelSpec, config: Mapping[str, object] | None, facts: CheckpointFacts) -> Weights | None:
    """:func:`derived_or_none`, computed once per config.json text (and companions): the shapes depend on
    nothing else, and a scan meets the same config many times (fine-tunes of one base ship it unchanged)."""
    key = (facts.config_text, tuple(sorted(facts.companions.items())))
    return _DERIVED.get_or_compute(key, lambda: derived_or_none(spec, config))


def derived_or_none(spec: ModelSpec, config: Mapping[str, object] | None = None) -> Weights | None:
    """The readers' config-shape weights (``exact=False``); None when the shapes give no tensors."""
    from hfvram.readers.shapes import derived_weights

    try:
        weights = derived_weights(spec, config)
    except (ValueError, KeyError, TypeError, ZeroDivisionError):
        return None
    return weights if weights is not None and weights.total_bytes > 0 else None


def header_facts(raw: bytes, *, filename: str, data_bytes: int | None) -> dict[str, object]:
    """A safetensors header's facts as the facts cache keeps them: its tensor table (``header_table``: names,
    dtypes, shapes, offsets; never the header's text, whose ``__metadata__`` and padding no reader needs) and the
    bytes after the header (``data_bytes``, from the file's real size where the Hub states it: tensors running
    past it are a read error here, before anything is cached)."""
    from hfvram.readers.safetensors import check_data_end, header_table, parse_header

    tensors = parse_header(raw, filename=filename)
    if data_bytes is not None:
        check_data_end(tensors.values(), data_bytes, filename=filename, past_only=True)
    table = header_table(tensors)
    _CHECKED_TABLES.get_or_compute(table, lambda: tensors)  # this run's readers need not check its rows again
    return {"tensors": table, "data_bytes": data_bytes}


#: tensor tables built or checked by this process (the very list object) -> their tensors
_CHECKED_TABLES: IdentityCache[list, dict] = IdentityCache("sources.checked_header_tables", 32)


def _header_tensors(name: str, value: str | Mapping[str, object], data_sizes: Mapping[str, int]):
    from hfvram.readers.safetensors import check_data_end, parse_header, tensors_from_table

    if isinstance(value, str):  # a local file's text: its size is known, the tensors must end exactly there
        tensors = parse_header(value.encode("utf-8"), filename=name)
        if name in data_sizes:
            check_data_end(tensors.values(), data_sizes[name], filename=name)
        return tensors
    rows = value.get("tensors")
    if isinstance(rows, list):
        tensors = _CHECKED_TABLES.get_or_compute(rows, lambda: tensors_from_table(rows, filename=name))
    else:
        tensors = tensors_from_table(rows, filename=name)
    size = value.get("data_bytes")
    if isinstance(size, int):
        check_data_end(tensors.values(), size, filename=name, past_only=True)
    return tensors


def weights_from_headers(
    headers: Mapping[str, str | Mapping[str, object]],
    spec: ModelSpec,
    *,
    origin: str,
    data_sizes: Mapping[str, int] | None = None,
) -> Weights:
    from hfvram.readers.safetensors import merge_shards, weights_from_tensors

    tables = {name: _header_tensors(name, value, data_sizes or {}) for name, value in headers.items()}
    tensors = merge_shards(tables)
    source = (
        f"safetensors headers ({len(headers)} file{'s' if len(headers) != 1 else ''}{', ' + origin if origin else ''})"
    )
    return weights_from_tensors(
        tensors.values(), quantization=spec.quantization, source=source, num_layers=spec.num_layers or None
    )


def weights_from_dtype_parameters(parameters: Mapping[str, int], *, origin: str) -> Weights:
    """Exact bytes per dtype from the Hub's per-dtype element counts (no per-component split)."""
    from hfvram.readers.bounds import bound, check_count
    from hfvram.readers.tensors import dtype_bits

    bytes_by_dtype: dict[str, int] = {}
    for dtype, count in parameters.items():
        count = check_count(
            count,
            bound("safetensors", "maximum_parameters"),
            file="Hub model info",
            field=f"safetensors.parameters.{str(dtype)[:40]}",
        )
        bits = dtype_bits(dtype)
        if bits is None:
            raise MalformedFileError(f"unknown dtype {dtype!r}", file="Hub model info", field="safetensors.parameters")
        bytes_by_dtype[dtype] = count * bits // 8
    return Weights(
        total_bytes=sum(bytes_by_dtype.values()),
        params_total=sum(parameters.values()),
        bytes_by_dtype=bytes_by_dtype,
        exact=True,
        source=f"Hub model info: safetensors.parameters{' (' + origin + ')' if origin else ''}",
    )


def split_in_proportion(shares: Mapping[str, int], total: int) -> dict[str, int]:
    """``total`` split over the keys of ``shares`` in their proportions; the parts sum to ``total`` exactly
    (the rounding remainder goes to the largest part)."""
    base = sum(shares.values())
    if not shares or base <= 0:
        return {}
    split = {name: value * total // base for name, value in shares.items()}
    largest = max(split, key=lambda k: split[k])
    split[largest] += total - sum(split.values())
    return split


def split_like(exact: Weights, derived: Weights) -> Weights:
    """Exact totals (bytes, parameters, bytes per dtype) with the component split of the config shapes."""
    return replace(
        exact,
        bytes_by_component=split_in_proportion(derived.bytes_by_component, exact.total_bytes),
        params_by_component=split_in_proportion(derived.params_by_component, exact.params_total),
        source=exact.source + "; component split derived from config shapes, scaled to that total",
    )


def scaled_to_total(derived: Weights, metadata: Mapping[str, object]) -> Weights:
    """The index's exact total_size, split over components in the proportions the config shapes give.

    Parameters: the index's total_parameters when it states one, else the shapes' count scaled like the bytes."""
    total = int(metadata["total_size"])  # type: ignore[call-overload]
    stated = metadata.get("total_parameters")
    implied = derived.params_total * total // derived.total_bytes if derived.total_bytes else derived.params_total
    note = ""
    if isinstance(stated, int) and stated > 0:
        params = stated
        embeddings = derived.params_by_component.get("embeddings", 0)
        tied = "lm_head" not in derived.params_by_component
        # some writers count a tied embedding twice in total_parameters (medgemma-27b-it: 28.84B stated, its
        # 54.86 GB of BF16 hold 27.43B): the bytes decide when the excess is that one matrix
        if tied and embeddings and abs(stated - embeddings - implied) <= implied * 0.005 < abs(stated - implied):
            params = stated - embeddings
            note = (
                f"; total_parameters {stated:,} counts the tied embedding twice (total_size holds {params:,}):"
                " counted once"
            )
    else:
        params = implied
    return replace(
        derived,
        total_bytes=total,
        params_total=params,
        bytes_by_component=split_in_proportion(derived.bytes_by_component, total),
        params_by_component=split_in_proportion(derived.params_by_component, params),
        bytes_by_dtype={},  # per-dtype bytes are not known from a total
        exact=True,
        source="model.safetensors.index.json: metadata.total_size; component split derived from config shapes, "
        "scaled to that total" + note,
    )


# ---- GGUF header summaries (for the facts cache) ---------------------------------------------------


def _encode_value(value: object) -> object:
    from hfvram.readers.gguf import SkippedArray, SkippedString

    if isinstance(value, SkippedArray):
        return {"$skipped_array": [value.length, value.item_type]}
    if isinstance(value, SkippedString):
        return {"$skipped_string": value.length}
    if isinstance(value, (list, tuple)):
        return [_encode_value(v) for v in value]
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    return value


def _decode_value(value: object) -> object:
    from hfvram.readers.gguf import SkippedArray, SkippedString

    if isinstance(value, dict):
        if "$skipped_array" in value:
            length, item_type = value["$skipped_array"]
            return SkippedArray(int(length), str(item_type))
        if "$skipped_string" in value:
            return SkippedString(int(value["$skipped_string"]))
        if "$bytes" in value:
            return bytes.fromhex(value["$bytes"])
    if isinstance(value, list):
        return [_decode_value(v) for v in value]
    return value


def gguf_header_to_json(header) -> dict:
    """A GGUF header's facts (metadata with skipped arrays as lengths, tensor infos) as JSON."""
    return {
        "version": header.version,
        "metadata": {key: _encode_value(value) for key, value in header.metadata.items()},
        "tensors": [[t.name, t.ggml_type, t.type_name, list(t.shape), t.offset, t.nbytes] for t in header.tensors],
        "header_end": header.header_end,
        "alignment": header.alignment,
        "data_start": header.data_start,
        "filename": header.filename,
    }


def gguf_header_from_json(data: Mapping[str, Any]):
    from hfvram.readers.gguf import GGUFHeader, GGUFTensor

    tensors = tuple(
        GGUFTensor(name, int(gt), tn, tuple(shape), int(off), int(nb))
        for name, gt, tn, shape, off, nb in data["tensors"]
    )
    return GGUFHeader(
        version=int(data["version"]),
        metadata={key: _decode_value(value) for key, value in data["metadata"].items()},
        tensors=tensors,
        header_end=int(data["header_end"]),
        alignment=int(data["alignment"]),
        data_start=int(data["data_start"]),
        filename=str(data.get("filename", "")),
    )
