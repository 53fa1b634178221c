"""The command line that reproduces the setting a check judged (``launch`` in every check).

Each engine's writer lives next to that engine's profile (``hfvram/engines/<engine>/launch.py``, a
``launch(est, choice, ref)`` function) and is imported lazily; this module holds what they share: how the model is
named (:class:`ModelRef`), the result (:class:`Launch`), shell quoting (``shlex``) and the user's own settings carried
onto the line. Pure: no files, no network. Round trip (docs/engines/launch.md#launch-round-trip): the printed line,
pasted back with ``--engine-args``, gives the same figures and verdict.
"""

from __future__ import annotations

import importlib
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hfvram.estimate.types import EngineChoice, Estimate


@dataclass(frozen=True)
class ModelRef:
    """How an engine's command line names the model: the Hub repo (and the revision the user asked for), or the
    local folder / ``.gguf`` file as the user gave it."""

    kind: str
    #: the Hub repo id (None for a local folder or file)
    repo_id: str | None = None
    #: the revision as the user asked for it (a branch, tag or commit), None for the default branch
    revision: str | None = None
    #: the local folder or file, as the user gave it
    path: str | None = None
    #: a GGUF's quant tag on the Hub (``org/repo:Q4_K_M``), None otherwise
    quant: str | None = None
    #: a ``--quant`` what-if: the format the weights were sized as (no such file exists yet)
    what_if: str | None = None

    @property
    def name(self) -> str:
        """The model as a Hub repo id or a path."""
        return self.path or self.repo_id or "MODEL"

    @property
    def hub(self) -> bool:
        return self.path is None and self.repo_id is not None


@dataclass(frozen=True)
class Launch:
    """What to run: the command (environment assignments first), the environment apart, files to write first
    (Ollama's Modelfile, TabbyAPI's config.yml), commands to run after it, and notes on what the line cannot say."""

    engine: str
    command: str
    env: Mapping[str, str] = field(default_factory=dict)
    #: file name -> its lines
    files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: commands to run once the first is up (``ollama run …``)
    then: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "command": self.command,
            "env": dict(self.env),
            "files": {name: list(lines) for name, lines in self.files.items()},
            "then": list(self.then),
            "notes": list(self.notes),
        }


def launch_for(est: Estimate, choice: EngineChoice, ref: ModelRef) -> Launch | None:
    """The launch line of ``est`` (None for an engine without a command line: transformers is a library)."""
    name = str(est.engine.get("name") or choice.name)
    from hfvram.engines import registry

    entry = registry().get(name)
    module = entry.launch_module if entry is not None else None
    if module is None:
        return None
    writer: Any = importlib.import_module(module).launch
    result: Launch = writer(est, choice, ref)
    if ref.what_if:
        note = f"what-if: the weights were sized as {ref.what_if}; the line names the checkpoint, serve an export of it"
        result = replace(result, notes=(*result.notes, note))
    return result


# ---- shared helpers for the writers -------------------------------------------------------------------------


def join(parts: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """One shell line: ``NAME=value`` assignments, then the words, each quoted with :func:`shlex.quote`."""
    assignments = [f"{name}={shlex.quote(value)}" for name, value in (env or {}).items()]
    return " ".join([*assignments, shlex.join(parts)])


def number(value: object) -> str:
    """A figure as the engines read it: whole numbers without a point, fractions as Python prints them."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def carried(
    choice: EngineChoice,
    engine: str,
    written: Iterable[str],
    *,
    underscores: bool = False,
    skip: Iterable[str] = (),
) -> list[str]:
    """The user's own settings (``--set``, the pasted line) that the writer did not write itself, as the engine's
    long flags (a short spelling such as ``ub`` read through its hfvram/engines/<engine>/settings.toml): settings
    the engine reads are carried so that the line reproduces the check. ``written`` and ``skip`` are canonical
    names (dashes)."""
    from hfvram.estimate.engine_args import engine_command_line

    table = engine_command_line(engine)
    aliases = {key.replace("_", "-"): value for key, value in (table.aliases if table else {}).items()}
    bools = set(table.booleans if table else ())
    done = {aliases.get(name.replace("_", "-"), name.replace("_", "-")) for name in [*written, *skip]}
    words: list[str] = []
    for raw, value in choice.settings.items():
        name = raw.replace("_", "-").lstrip("-")
        name = aliases.get(name, name)
        if name in done or name.isupper() or name.startswith("VLLM-"):
            continue
        done.add(name)
        flag = f"--{name.replace('-', '_') if underscores else name}"
        if name in bools:
            words += [flag] if str(value).strip().lower() in ("", "1", "true", "on", "yes") else []
        else:
            words += [flag, str(value)]
    return words


def env_settings(choice: EngineChoice) -> dict[str, str]:
    """The user's settings that are environment variables (upper-case names: ``VLLM_USE_V1``)."""
    return {name: value for name, value in choice.settings.items() if name.isupper() and name.isidentifier()}


def largest_batch(est: Estimate) -> dict[str, Any] | None:
    """The largest sequence limit that starts at the estimate's context (docs/engines/launch.md#launch-largest-batch):
    vLLM's ``max_num_seqs`` when a recurrent state pool bounds it (one block per decode sequence), llama.cpp's /
    Ollama's slots when every slot holds a full-length sequence (``-np`` × context must fit). None for an engine
    whose limit hfvram does not model."""
    name = str(est.engine.get("name"))
    if name == "vllm":
        limit = est.engine.get("max_num_seqs_that_starts")
        if isinstance(limit, int):
            return {
                "setting": "max-num-seqs",
                "value": limit,
                "bound_by": "the recurrent state pool (Mamba cache blocks)",
            }
        return {
            "setting": "max-num-seqs",
            "value": None,
            "bound_by": "nothing at start-up (requests beyond the KV pool wait)",
        }
    if name in ("llama.cpp", "ollama") and est.capacity.max_concurrency is not None and est.hardware is not None:
        slots = int(est.capacity.max_concurrency + 1e-9)
        setting = "parallel" if name == "llama.cpp" else "OLLAMA_NUM_PARALLEL"
        return {
            "setting": setting,
            "value": slots if slots >= 1 else 0,
            "bound_by": "memory: every slot holds a full-length sequence",
        }
    return None
