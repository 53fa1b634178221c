"""What an engine is, as typed facts read from its folder: ``engine.toml`` (who it is and the identity-level facts
other code asks the registry for) and ``settings.toml`` (how its own command line gives it settings).

Each table is checked when it loads: a key the dataclass does not declare, a missing required key or a value of the
wrong type raises ``ValueError`` naming the file. The facts, and the values they take:

- ``kv_pool_sized_by`` (the ``capacity.kv_pool_sized_by`` of hfvram.check/1): ``memory``: the pool is what the
  engine's memory budget leaves after weights, activations and overhead, so it does not change with ``--context``
  (vLLM gpu_memory_utilization, SGLang mem_fraction_static, TensorRT-LLM free_gpu_memory_fraction, LMDeploy
  cache_max_entry_count); ``context``: the pool is the context setting times the parallel slots (llama.cpp -c,
  Ollama num_ctx, MLX and ExLlamaV2 max_seq_len), so it grows with ``--context`` and free memory stays free;
  ``none``: the engine keeps one cache per request, grown as it decodes (transformers' DynamicCache).
- ``mixed_set``: how the engine runs on a mixed GPU set (``--gpu rtx4090+rtx3090``, hfvram/estimate/mixed.py):
  ``layer_split``: whole layers per GPU in proportion to each GPU's free memory (llama.cpp's default tensor split,
  docs/engines/llamacpp.md#llamacpp-mixed-sets), the per-GPU terms differ by device; ``equal_shards``: tensor
  parallelism gives every rank the same share of weights and KV cache, so the card with the least memory sets the
  budget of every rank (docs/engines/vllm.md#vllm-mixed-sets); ``even_split``: the engine can split by memory, but
  hfvram counts an even split (its own per-device split is not modelled), said as such; ``one_gpu``: the engine runs
  on one device, a mixed set is refused (an engine rule, exit 1).
- ``[[refused_on]]``: the accelerators the engine does NOT run on (:class:`PlatformRefusal`, read by
  hfvram/estimate/engine_rules.py platform_refusal): a check there is the verdict does not fit, exit 1.
- ``[[default_when]]``: when a check without ``--engine`` assumes this engine (:class:`DefaultRule`, applied by
  hfvram/estimate/defaults.py; README.md: "--engine … default: vllm; llama.cpp for GGUF").
- ``[hub_quant]``: which Hugging Face quantization formats of the ``--quant`` what-if it loads, on which GPUs
  (:class:`HubQuant`, read by hfvram/quant/hub_formats.py engine_rule; docs/engines/quantization.md).
- ``[weights_on_gpu]``: the engine loads every weight onto its GPUs (none into RAM) unless one of the settings in
  ``unless`` is given (vLLM / SGLang ``--cpu-offload-gb``, an online ``--quantization``): a scan then answers a
  repo whose checkpoint alone outweighs the GPUs' memory from the Hub listing's counts (hfvram/pipeline/listed.py).
  Absent: the engine may place weights in RAM (llama.cpp, Ollama), or it is not known not to.
- ``command_line``: whether the engine has a command line of its own; its flags are ``settings.toml``
  (:class:`CommandLine`, read by hfvram/estimate/engine_args.py and launch.py). transformers has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

KV_POOLS = frozenset({"memory", "context", "none"})
MIXED_SETS = frozenset({"layer_split", "equal_shards", "even_split", "one_gpu"})
WEIGHT_FORMATS = frozenset({"gguf", "safetensors"})


class Table:
    """One TOML table being read into a dataclass: its keys are checked against the declared ones, each value
    against its type; every error names the file and the table."""

    def __init__(
        self, table: object, where: str, required: AbstractSet[str], optional: AbstractSet[str] = frozenset()
    ) -> None:
        if not isinstance(table, Mapping):
            raise ValueError(f"{where}: expected a table, got {type(table).__name__}")
        unknown, missing = set(table) - required - optional, required - set(table)
        if unknown or missing:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}, missing {sorted(missing)}")
        self.table, self.where = table, where

    def _fail(self, key: str, expected: str) -> ValueError:
        return ValueError(f"{self.where}: {key} must be {expected}, got {self.table[key]!r}")

    def text(self, key: str, default: str | None = None, choices: frozenset[str] | None = None) -> str | None:
        if key not in self.table:
            return default
        value = self.table[key]
        if not isinstance(value, str) or (choices is not None and value not in choices):
            raise self._fail(key, f"one of {sorted(choices)}" if choices else "text")
        return value

    def required_text(self, key: str, choices: frozenset[str] | None = None) -> str:
        value = self.text(key, choices=choices)
        assert value is not None  # a required key: Table checked it is present
        return value

    def flag(self, key: str) -> bool | None:
        value = self.table.get(key)
        if value is not None and not isinstance(value, bool):
            raise self._fail(key, "true or false")
        return value

    def required_flag(self, key: str) -> bool:
        value = self.flag(key)
        assert value is not None  # a required key: Table checked it is present
        return value

    def whole(self, key: str) -> int:
        value = self.table[key]
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._fail(key, "a whole number")
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._fail(key, "a list of texts")
        return tuple(value)

    def wholes(self, key: str) -> tuple[int, ...] | None:
        if key not in self.table:
            return None
        value = self.table[key]
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self._fail(key, "a list of whole numbers")
        return tuple(value)

    def names(self, key: str) -> dict[str, str]:
        """A table of text -> text (flag spellings, environment variables)."""
        value = self.table.get(key, {})
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise self._fail(key, "a table of names")
        return dict(value)

    def rows(self, key: str) -> list[Any]:
        value = self.table.get(key, [])
        if not isinstance(value, list):
            raise self._fail(key, "an array of tables")
        return value


# ---- engine.toml -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlatformRefusal:
    """One ``[[refused_on]]`` row: a vendor (the ``vendor`` of gpus.toml), or a device family of a vendor, the
    engine does not run on, with the reason the verdict gives and its source."""

    vendor: str
    reason: str
    source: str
    #: a regex on gpus.toml's ``architecture`` field (Intel's Gaudi is vendor "intel", architecture "Habana Gaudi …")
    architecture: str | None = None
    #: the row holds only while the engine's ``backend`` setting is this one (unset counts as the engine's default)
    backend: str | None = None


def _platform(table: object, where: str) -> PlatformRefusal:
    row = Table(table, where, {"vendor", "reason", "source"}, {"architecture", "backend"})
    return PlatformRefusal(
        vendor=row.required_text("vendor"),
        reason=row.required_text("reason"),
        source=row.required_text("source"),
        architecture=row.text("architecture"),
        backend=row.text("backend"),
    )


@dataclass(frozen=True)
class DefaultRule:
    """One ``[[default_when]]`` row: the rules of all engines are tried by ``order``; the first whose conditions
    all hold picks its engine. A condition left out matches anything: exactly one rule (the fallback) has none,
    and it is tried last."""

    order: int
    #: the checkpoint's weight format: "gguf" (a .gguf file, or a config whose quantization is GGUF) or
    #: "safetensors" (everything else)
    format: str | None = None
    #: the vendor of the GPU asked for with --gpu (gpus.toml ``vendor``); never matches without --gpu
    vendor: str | None = None
    #: added to the check's warnings when this rule chose the engine (the choice follows the hardware)
    note: str | None = None

    @property
    def conditional(self) -> bool:
        return self.format is not None or self.vendor is not None


def _default(table: object, where: str) -> DefaultRule:
    row = Table(table, where, {"order"}, {"format", "vendor", "note"})
    return DefaultRule(
        order=row.whole("order"),
        format=row.text("format", choices=WEIGHT_FORMATS),
        vendor=row.text("vendor"),
        note=row.text("note"),
    )


@dataclass(frozen=True)
class HubFormatRule:
    """How the engine runs one Hub format (a ``[hub_quant.formats.<format>]`` table)."""

    #: the architecture families (hfvram/data/quant/hub_formats.toml [families]) whose GPUs run it; None: no GPU rule
    runs: tuple[str, ...] | None = None
    #: families where it runs through a weight-only kernel (a warning: the same bytes, 16-bit arithmetic)
    weight_only: tuple[str, ...] = ()
    weight_only_note: str | None = None
    #: the bit widths and group sizes it accepts (None: any)
    bits: tuple[int, ...] | None = None
    group_sizes: tuple[int, ...] | None = None
    #: False: it refuses act-order (desc_act) checkpoints
    desc_act: bool | None = None
    #: a warning said whenever the format is asked for under this engine
    note: str | None = None


def _format_rule(table: object, where: str) -> HubFormatRule:
    keys = {"runs", "weight_only", "weight_only_note", "bits", "group_sizes", "desc_act", "note"}
    row = Table(table, where, set(), keys)
    return HubFormatRule(
        runs=row.texts("runs") if "runs" in row.table else None,
        weight_only=row.texts("weight_only"),
        weight_only_note=row.text("weight_only_note"),
        bits=row.wholes("bits"),
        group_sizes=row.wholes("group_sizes"),
        desc_act=row.flag("desc_act"),
        note=row.text("note"),
    )


@dataclass(frozen=True)
class HubQuant:
    """The ``[hub_quant]`` table: either ``refused`` (the engine loads no Hugging Face quantized checkpoint: the
    reason given for every format) or the formats it loads; a format not listed is refused with ``unlisted``."""

    #: the section of docs/engines/quantization.md its messages cite
    doc: str
    refused: str | None = None
    #: the engine as the messages name it ("vLLM")
    name: str = ""
    #: formats it runs on AMD GPUs (ROCm)
    amd: tuple[str, ...] = ()
    unlisted: str = ""
    formats: Mapping[str, HubFormatRule] = field(default_factory=dict, hash=False)


def _hub_quant_table(table: object, where: str) -> Table:
    """The ``[hub_quant]`` table with its own keys checked (its per-format rules are checked by :func:`hub_quant`)."""
    if isinstance(table, Mapping) and "refused" in table:
        return Table(table, where, {"refused", "doc"})
    return Table(table, where, {"name", "doc", "amd", "unlisted", "formats"})


def hub_quant(table: object, where: str) -> HubQuant:
    """The typed ``[hub_quant]`` table of one ``engine.toml`` (``where``: its path and table, for the errors)."""
    row = _hub_quant_table(table, where)
    if "refused" in row.table:
        return HubQuant(doc=row.required_text("doc"), refused=row.required_text("refused"))
    formats = row.table["formats"]
    if not isinstance(formats, Mapping):
        raise ValueError(f"{where}: formats must be a table of formats")
    return HubQuant(
        doc=row.required_text("doc"),
        name=row.required_text("name"),
        amd=row.texts("amd"),
        unlisted=row.required_text("unlisted"),
        formats={name: _format_rule(rule, f"{where}.formats.{name}") for name, rule in formats.items()},
    )


#: the keys an ``engine.toml`` must hold, and those it may; any other key is refused when the registry loads
ENGINE_KEYS = frozenset(
    {"name", "aliases", "rank", "docs", "kv_pool_sized_by", "mixed_set", "command_line", "hub_quant"}
)
ENGINE_OPTIONAL_KEYS = frozenset({"refused_on", "default_when", "weights_on_gpu"})


def engine_facts(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The typed facts of one ``engine.toml`` (``where``: its path, for the errors), as the keyword arguments of
    :class:`hfvram.engines.EngineEntry` besides its package."""
    row = Table(table, where, ENGINE_KEYS, ENGINE_OPTIONAL_KEYS)
    aliases = row.texts("aliases")
    if not all(alias == alias.lower() for alias in aliases):
        raise ValueError(f"{where}: aliases must be a list of lower-case names")
    return {
        "name": row.required_text("name"),
        "aliases": aliases,
        "rank": row.whole("rank"),
        "docs": row.required_text("docs"),
        "kv_pool_sized_by": row.required_text("kv_pool_sized_by", KV_POOLS),
        "mixed_set": row.required_text("mixed_set", MIXED_SETS),
        "command_line": row.required_flag("command_line"),
        # read into a HubQuant when first asked for (only --quant needs it; most of the file, so the registry stays
        # cheap to build on every run); its own keys are checked here, its per-format rules then
        "hub_quant_table": _hub_quant_table(table["hub_quant"], f"{where} [hub_quant]").table,
        "refused_on": tuple(
            _platform(item, f"{where} [[refused_on]] row {n + 1}") for n, item in enumerate(row.rows("refused_on"))
        ),
        "default_when": tuple(
            _default(item, f"{where} [[default_when]] row {n + 1}") for n, item in enumerate(row.rows("default_when"))
        ),
        "weights_on_gpu_unless": _weights_on_gpu(table.get("weights_on_gpu"), f"{where} [weights_on_gpu]"),
    }


def _weights_on_gpu(table: object, where: str) -> tuple[str, ...] | None:
    """``[weights_on_gpu]``: the settings that let the engine hold less than the checkpoint on its GPUs (None: the
    table is absent)."""
    if table is None:
        return None
    row = Table(table, where, {"unless", "doc"})
    if not row.required_text("doc").startswith("docs/engines/"):
        raise ValueError(f"{where}: doc must name a docs/engines/ page and anchor")
    return row.texts("unless")


# ---- settings.toml -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommandLine:
    """How a pasted command line of the engine maps onto its settings (``settings.toml`` [command_line]; the
    meaning of each key is written at the top of every settings.toml)."""

    programs: tuple[str, ...]
    modules: tuple[str, ...]
    images: tuple[str, ...]
    subcommands: tuple[str, ...]
    positional_model: bool
    model_flags: tuple[str, ...]
    booleans: tuple[str, ...]
    settings: tuple[str, ...]
    aliases: Mapping[str, str] = field(default_factory=dict, hash=False)
    fields: Mapping[str, str] = field(default_factory=dict, hash=False)
    env: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: how the engine reads a number with a suffix ("vllm": vLLM's human_readable_int, 32k = 32000)
    number_style: str | None = None


#: the fields of ParsedEngineArgs a [command_line.fields] table may name
FIELDS = frozenset({"tp", "pp", "gpu_util", "context", "kv_dtype"})


def command_line(table: Mapping[str, Any], where: str) -> CommandLine:
    """The typed [command_line] table of one ``settings.toml`` (``where``: its path, for the errors)."""
    top = Table(table, where, {"command_line"})
    lists = ("programs", "modules", "images", "subcommands", "model_flags", "booleans", "settings")
    row = Table(
        top.table["command_line"],
        f"{where} [command_line]",
        {*lists, "positional_model", "aliases", "fields"},
        {"env", "number_style"},
    )
    fields = row.names("fields")
    if set(fields) - FIELDS:
        raise ValueError(f"{row.where}: fields names {sorted(set(fields) - FIELDS)}; known: {sorted(FIELDS)}")
    return CommandLine(
        **{key: row.texts(key) for key in lists},
        positional_model=row.required_flag("positional_model"),
        aliases=row.names("aliases"),
        fields=fields,
        env=row.names("env"),
        number_style=row.text("number_style"),
    )
