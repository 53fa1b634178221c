"""transformers as the authority on defaults and derived per-layer structure (imported lazily)."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping


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
    try:
        canonical = json.dumps(config, sort_keys=True, allow_nan=True)
    except (TypeError, ValueError) as exc:
        return HfConfig(None, "transformers", None, f"config not serialisable: {exc}")
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
    model_type = config.pop("model_type")
    if model_type not in CONFIG_MAPPING_NAMES:
        return HfConfig(None, f"transformers {version}", version, f"transformers {version} does not know model_type {model_type!r}")
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():  # deprecation notices about the file's own keys are not the user's business
            warnings.simplefilter("ignore")
            hf = AutoConfig.for_model(model_type, **config)
        text = hf.get_text_config() if hasattr(hf, "get_text_config") else hf
    except Exception as exc:  # strict dataclass validation, bad values: fall back to hfvram rules
        return HfConfig(None, f"transformers {version}", version, f"transformers {version} rejected the config ({type(exc).__name__}: {str(exc)[:120]})")
    finally:
        transformers.logging.set_verbosity(verbosity)
    return HfConfig(text, f"transformers {version} {type(text).__name__}", version)
