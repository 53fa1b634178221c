"""Typed, provenance-keeping access to the fields of a config.json (used by hfvram.readers.config)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hfvram.datafiles import data_table
from hfvram.errors import MalformedFileError

_MISSING = object()


def config_rules() -> dict[str, Any]:
    """The alias tables of hfvram/data/config_rules.toml."""
    return data_table("config_rules.toml")


def aliases(fact: str) -> list[str]:
    return list(config_rules()["aliases"][fact])


@dataclass
class ConfigView:
    """The text (language-model) part of a config, with the top level as fallback.

    Every read records where the value came from in ``provenance``; every wrong type raises
    MalformedFileError naming the file and the field.
    """

    text: Mapping[str, Any]
    top: Mapping[str, Any]
    filename: str
    text_prefix: str = ""  # "text_config." when the language model is nested
    #: transformers' int/bool values by key (its defaults for keys the file leaves out); see config_hf.HfFacts
    hf_defaults: Mapping[str, Any] | None = None
    hf_label: str = ""
    provenance: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    # ---- locating keys --------------------------------------------------------------------

    def locate(self, key: str) -> tuple[Any, str]:
        """(value, dotted path) of ``key`` in the text config, else the top level; _MISSING if absent."""
        if key in self.text:
            return self.text[key], self.text_prefix + key
        if self.text is not self.top and key in self.top:
            return self.top[key], key
        return _MISSING, key

    def has(self, key: str) -> bool:
        value, _ = self.locate(key)
        return value is not _MISSING and value is not None

    def where(self, path: str) -> str:
        return f"{self.filename}: {path}"

    def fail(self, path: str, message: str) -> MalformedFileError:
        return MalformedFileError(message, file=self.filename, field=path)

    def note(self, fact: str, source: str) -> None:
        self.provenance[fact] = source

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def hf_default(self, key: str) -> Any:
        """The value transformers' config class gives ``key`` (its default when the file leaves it out)."""
        if self.hf_defaults is None:
            return _MISSING
        return self.hf_defaults.get(key, _MISSING)

    # ---- typed reads ----------------------------------------------------------------------

    def integer(
        self,
        fact: str,
        keys: Sequence[str],
        *,
        minimum: int = 1,
        required: bool = False,
        use_hf_default: bool = True,
    ) -> int | None:
        """The first of ``keys`` present and not null, as an int >= minimum.

        Explicit null in a required fact is malformed; in an optional fact it counts as absent.
        """
        first_null_path = None
        for key in keys:
            value, path = self.locate(key)
            if value is _MISSING:
                continue
            if value is None:
                first_null_path = first_null_path or path
                continue
            number = self.to_int(path, value, minimum)
            self.note(fact, self.where(path))
            return number
        if use_hf_default:
            for key in keys:
                value = self.hf_default(key)
                if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
                    self.note(fact, f"{self.hf_label}: {key} (default)")
                    return value
        if required:
            path = first_null_path or (self.text_prefix + keys[0])
            raise self.fail(
                path, "required number is missing" if first_null_path is None else "required number is null"
            )
        return None

    def required_integer(self, fact: str, keys: Sequence[str], *, minimum: int = 1, use_hf_default: bool = True) -> int:
        """:meth:`integer` of a fact the config must state (MalformedFileError naming the field otherwise)."""
        number = self.integer(fact, keys, minimum=minimum, required=True, use_hf_default=use_hf_default)
        assert number is not None  # integer(required=True) raises instead of returning None
        return number

    def to_int(self, path: str, value: Any, minimum: int = 0) -> int:
        if isinstance(value, bool):
            raise self.fail(path, f"expected an integer, got a boolean ({value!r})")
        if isinstance(value, float):
            if not math.isfinite(value) or not value.is_integer():
                raise self.fail(path, f"expected an integer, got {value!r}")
            value = int(value)
        if not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {type(value).__name__} {value!r:.40}")
        if value < minimum:
            raise self.fail(path, f"expected an integer >= {minimum}, got {value}")
        return value

    def number(self, fact: str, key: str, *, minimum: float = 0.0) -> float | None:
        value, path = self.locate(key)
        if value is _MISSING or value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(path, f"expected a number, got {type(value).__name__}")
        if not math.isfinite(value) or value < minimum:
            raise self.fail(path, f"expected a finite number >= {minimum}, got {value!r}")
        self.note(fact, self.where(path))
        return float(value)

    def boolean(self, fact: str, key: str) -> bool | None:
        value, path = self.locate(key)
        if value is _MISSING or value is None:
            return None
        if not isinstance(value, bool):
            raise self.fail(path, f"expected true/false, got {type(value).__name__} {value!r:.40}")
        self.note(fact, self.where(path))
        return value

    def string(self, fact: str, key: str) -> str | None:
        value, path = self.locate(key)
        if value is _MISSING or value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {type(value).__name__}")
        self.note(fact, self.where(path))
        return value

    def mapping(self, key: str) -> tuple[Mapping[str, Any] | None, str]:
        value, path = self.locate(key)
        if value is _MISSING or value is None:
            return None, path
        if not isinstance(value, Mapping):
            raise self.fail(path, f"expected an object, got {type(value).__name__}")
        return value, path

    def sequence(self, key: str) -> tuple[list[Any] | None, str]:
        value, path = self.locate(key)
        if value is _MISSING or value is None:
            return None, path
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, got {type(value).__name__}")
        return value, path

    def int_list(self, key: str, *, minimum: int = 0) -> tuple[list[int] | None, str]:
        values, path = self.sequence(key)
        if values is None:
            return None, path
        return [self.to_int(f"{path}[{i}]", v, minimum) for i, v in enumerate(values)], path

    def str_list(self, key: str) -> tuple[list[str] | None, str]:
        values, path = self.sequence(key)
        if values is None:
            return None, path
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise self.fail(f"{path}[{i}]", f"expected a string, got {type(v).__name__}")
        return values, path
