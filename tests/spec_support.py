"""Specs of the fixture repos (fixtures/hub) for the estimator tests.

Engines only read ``spec.weights``; a spec read from config.json alone carries none. The sources attach
weights before the estimator runs (headers > Hub counts > index total > config shapes); a test that starts
from a bare config attaches the last of these here, the readers' own derivation
(``hfvram.readers.shapes.derived_weights``, exact=False), so every engine test sizes weights the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from hfvram.readers.config import read_config
from hfvram.readers.shapes import derived_weights
from hfvram.spec import ModelSpec

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"


def config_of(repo: str) -> dict:
    return json.loads((HUB / repo / "config.json").read_text(encoding="utf-8"))


def with_derived_weights(spec: ModelSpec) -> ModelSpec:
    """The spec with weights from its config shapes (what the sources attach when no header was read)."""
    return spec.with_weights(derived_weights(spec))


def bare_spec(repo: str, *, use_transformers: bool = True) -> ModelSpec:
    """config.json through the config reader, without weights."""
    return read_config(config_of(repo), use_transformers=use_transformers)


def derived_spec(repo: str, *, use_transformers: bool = True) -> ModelSpec:
    """config.json through the config reader, with weights derived from its shapes."""
    return with_derived_weights(bare_spec(repo, use_transformers=use_transformers))
