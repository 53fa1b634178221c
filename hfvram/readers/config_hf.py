"""transformers as the authority on defaults and derived per-layer structure (imported lazily)."""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class HfConfig:
    """What transformers made of a config.json: its text config object, or why there is none."""

    text_config: Any  # a transformers PreTrainedConfig, or None
    label: str  # "transformers 5.24.0 Gemma2Config"
    version: str | None
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.text_config is not None

    def layer_types(self) -> list[str] | None:
        if self.text_config is None:
            return None
        try:
            types = getattr(self.text_config, "layer_types", None)
        except Exception:
            return None
        if isinstance(types, (list, tuple)) and all(isinstance(t, str) for t in types):
            return list(types)
        return None


def load_hf_config(config: Mapping[str, Any]) -> HfConfig:
    """transformers' reading of ``config`` (cached in-process on its canonical JSON)."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        return HfConfig(None, "transformers", None, "config.json has no model_type")
    canonical = canonical_config(config)
    if canonical is None:
        return HfConfig(None, "transformers", None, "config not serialisable as JSON")
    return _load_canonical(canonical)


@lru_cache(maxsize=256)
def _load_canonical(canonical: str) -> HfConfig:
    try:
        import transformers
        from transformers import AutoConfig
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except Exception as exc:  # transformers missing or broken: the rules decide
        return HfConfig(None, "transformers", None, f"transformers unavailable ({type(exc).__name__})")
    version = transformers.__version__
    config = json.loads(canonical)
    from hfvram.errors import MalformedFileError
    from hfvram.readers.bounds import validate_config

    try:  # transformers' config classes iterate over the counts: bounded first (read_config checks this too)
        validate_config(config)
    except MalformedFileError as exc:
        return HfConfig(None, f"transformers {version}", version, f"not given to transformers ({exc})")
    model_type = config.pop("model_type")
    if model_type not in CONFIG_MAPPING_NAMES:
        return HfConfig(
            None, f"transformers {version}", version, f"transformers {version} does not know model_type {model_type!r}"
        )
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():  # deprecation notices about the file's own keys are not the user's business
            warnings.simplefilter("ignore")
            hf = AutoConfig.for_model(model_type, **config)
        text = hf.get_text_config() if hasattr(hf, "get_text_config") else hf
    except Exception as exc:  # strict dataclass validation, bad values: fall back to hfvram rules
        return HfConfig(
            None,
            f"transformers {version}",
            version,
            f"transformers {version} rejected the config ({type(exc).__name__}: {str(exc)[:120]})",
        )
    finally:
        transformers.logging.set_verbosity(verbosity)
    return HfConfig(text, f"transformers {version} {type(text).__name__}", version)


# ---- transformers facts: the little read_config needs from transformers, as JSON ---------------------------

#: bump when the facts' shape or meaning changes (old facts-cache entries are then computed again)
FACTS_FORMAT = 1
#: keys asked of transformers' defaults besides every int/bool attribute its config serialises (attribute_map
#: aliases and the per-family keys hfvram.readers.config_layers reads)
_EXTRA_DEFAULT_KEYS = (
    "head_dim",
    "tie_word_embeddings",
    "sliding_window",
    "sliding_window_size",
    "attention_chunk_size",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "linear_num_key_heads",
    "linear_key_head_dim",
    "linear_num_value_heads",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "ssm_state_size",
    "state_size",
    "d_state",
    "conv_kernel",
    "d_conv",
    "mamba_d_conv",
    "mamba_num_heads",
    "mamba_head_dim",
    "expand",
    "intermediate_size",
    "mamba_intermediate_size",
    "d_inner",
    "n_groups",
    "ngroups",
    "mamba_n_groups",
)


@dataclass(frozen=True)
class HfFacts:
    """transformers' reading of one config, reduced to JSON-able facts: its label, per-layer types and the
    int/bool values its config class gives (defaults for keys the file leaves out)."""

    label: str
    version: str | None
    failure: str | None = None
    layer_types: tuple[str, ...] | None = None
    defaults: Mapping[str, int | bool] | None = None
    #: where the facts came from when not computed in this process ("facts cache", "hfvram catalogue …")
    origin: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None and self.version is not None

    def default(self, key: str, missing: Any = None) -> Any:
        return (self.defaults or {}).get(key, missing)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FACTS_FORMAT,
            "label": self.label,
            "version": self.version,
            "failure": self.failure,
            "layer_types": list(self.layer_types) if self.layer_types is not None else None,
            "defaults": dict(self.defaults or {}),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any], origin: str | None = None) -> HfFacts:
        """Facts from their JSON form; ValueError when it is not facts of this FACTS_FORMAT."""
        if not isinstance(data, Mapping) or data.get("format") != FACTS_FORMAT:
            raise ValueError(f"not transformers facts of format {FACTS_FORMAT}")
        label, version, failure = data.get("label"), data.get("version"), data.get("failure")
        types, defaults = data.get("layer_types"), data.get("defaults")
        if (
            not isinstance(label, str)
            or not isinstance(version, (str, type(None)))
            or not isinstance(failure, (str, type(None)))
        ):
            raise ValueError("transformers facts: label/version/failure of the wrong type")
        if types is not None and not (isinstance(types, list) and all(isinstance(t, str) for t in types)):
            raise ValueError("transformers facts: layer_types is not a list of strings")
        if not isinstance(defaults, Mapping) or not all(
            isinstance(k, str) and isinstance(v, (int, bool)) for k, v in defaults.items()
        ):
            raise ValueError("transformers facts: defaults are not int/bool values by key")
        _check_bounded(types, defaults)
        return HfFacts(label, version, failure, tuple(types) if types is not None else None, dict(defaults), origin)


def _check_bounded(types: list[str] | None, defaults: Mapping[str, int | bool]) -> None:
    """Facts read back from a file (cache, catalogue) hold no count beyond hfvram's bounds: ValueError otherwise."""
    from hfvram.errors import MalformedFileError
    from hfvram.readers.bounds import bound, check_count, config_bounds

    if types is not None and len(types) > bound("lists", "maximum"):
        raise ValueError(f"transformers facts: {len(types)} layer_types")
    counts = config_bounds()
    for key, value in defaults.items():
        if key in counts and not isinstance(value, bool):
            try:
                check_count(value, counts[key][1], file="transformers facts", field=key)
            except MalformedFileError as exc:
                raise ValueError(str(exc)) from None


def canonical_config(config: Mapping[str, Any]) -> str | None:
    """The config as canonical JSON (sorted keys), the identity of its transformers facts; None if not JSON-able."""
    try:
        return json.dumps(config, sort_keys=True, allow_nan=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def config_sha256(config: Mapping[str, Any]) -> str | None:
    canonical = canonical_config(config)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest() if canonical is not None else None


def _int_or_bool(value: Any) -> bool:
    return isinstance(value, (int, bool))


def facts_from_hf_config(hf: HfConfig) -> HfFacts:
    """The JSON-able facts of a live transformers reading (pure given ``hf``)."""
    if not hf.ok:
        return HfFacts(hf.label, hf.version, hf.failure or "transformers gave no config")
    text = hf.text_config
    try:
        serialised = text.to_dict()
    except Exception:  # a config class that cannot serialise itself still has attributes to ask
        serialised = {}
    from hfvram.readers.config_fields import config_rules

    keys = set(serialised) | set(getattr(text, "attribute_map", {}) or {}) | set(_EXTRA_DEFAULT_KEYS)
    keys |= {key for names in config_rules()["aliases"].values() for key in names}
    defaults: dict[str, int | bool] = {}
    for key in sorted(keys):
        try:
            value = getattr(text, key)
        except Exception:  # transformers raises its own errors for ambiguous per-layer attributes
            continue
        if _int_or_bool(value):
            defaults[key] = value
    types = hf.layer_types()
    return HfFacts(hf.label, hf.version, None, tuple(types) if types is not None else None, defaults)


def compute_hf_facts(config: Mapping[str, Any]) -> HfFacts:
    """transformers' facts for ``config``, computed now (imports transformers)."""
    return _without_stated(facts_from_hf_config(load_hf_config(config)), config)


def _without_stated(facts: HfFacts, config: Mapping[str, Any]) -> HfFacts:
    """Facts less the values of keys the file states (not null) in its text config or top level: the reader
    takes those from the file and asks transformers only about the others."""
    if not facts.defaults:
        return facts
    text = config.get("text_config")
    parts = [config, text] if isinstance(text, Mapping) else [config]
    for key in ("llm_config", "language_config", "text_model_config"):
        if isinstance(config.get(key), Mapping):
            parts.append(config[key])
    stated = {key for part in parts for key, value in part.items() if value is not None}
    return replace(facts, defaults={k: v for k, v in facts.defaults.items() if k not in stated})


#: the installed transformers' version, once found (a scan asks for it once per repo)
_INSTALLED: list[str | None] = []


def installed_transformers_version() -> str | None:
    """The installed transformers' version from its package metadata (transformers is not imported): the name of
    its ``transformers-VERSION.dist-info`` folder on ``sys.path`` (what importlib.metadata finds first, without
    importing importlib.metadata and its email parser on a check's start-up), else importlib.metadata. Looked up
    once per process."""
    if not _INSTALLED:
        _INSTALLED.append(_find_transformers_version())
    return _INSTALLED[0]


def _find_transformers_version() -> str | None:
    import sys

    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("transformers-") and name.endswith(".dist-info"):
                return name.removeprefix("transformers-").removesuffix(".dist-info")
    from importlib import metadata

    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


def precomputed_label(facts: HfFacts, installed: str | None) -> HfFacts:
    """Facts made by another transformers than the installed one say so in their label."""
    if facts.version == installed:
        return facts
    now = f"installed: transformers {installed}" if installed else "transformers not installed"
    return replace(facts, label=f"{facts.label} (precomputed; {now})")


def hf_facts_for(config: Mapping[str, Any]) -> HfFacts:
    """transformers' facts for ``config``, computed by transformers (imported now) and remembered in this process.

    Readers never touch the disk: facts kept from an earlier process (the facts cache) or shipped in the
    embedded catalogue are looked up by ``hfvram.sources.facts.transformers_facts``, passed to ``read_config`` as
    ``hf_facts=``, and what is computed here is stored there."""
    canonical = canonical_config(config)
    if canonical is None or not isinstance(config.get("model_type"), str):
        return facts_from_hf_config(load_hf_config(config))
    return _memo_facts(canonical)


@lru_cache(maxsize=256)
def _memo_facts(canonical: str) -> HfFacts:
    return _without_stated(facts_from_hf_config(_load_canonical(canonical)), json.loads(canonical))
