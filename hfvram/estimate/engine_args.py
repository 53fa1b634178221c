"""Reading what users type: a pasted engine command line, ``--set NAME=VALUE`` and sizes (``32k``, ``24GiB``).

A command line (``vllm serve MODEL …``, ``llama-server -m … -c …``, ``python -m sglang.launch_server …``,
``lmdeploy serve api_server …``, ``trtllm-serve …``, ``ollama run …``) becomes the engine's name, the model,
and its memory settings under the engine's own names: the long flag without dashes, ``_`` read as ``-``
(``max-num-batched-tokens``, ``ctx-size``, ``ubatch-size``, ``flash-attn``, ``cache-type-k``,
``mem-fraction-static``). The flag tables are data: each engine's ``hfvram/engines/<engine>/settings.toml``
[command_line], and ``hfvram/data/engine_args.toml`` for what every engine shares (the generic reading of an
unknown script, the minimum of whole-number settings). Every flag that does not change memory is returned in
``ignored`` so the CLI can say so.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from hfvram.datafiles import data_table
from hfvram.errors import UsageError
from hfvram.estimate.types import EngineChoice
from hfvram.redaction import HEADER_FLAGS, MASK, is_secret_name, redact, redact_words

if TYPE_CHECKING:
    from hfvram.engines.identity import CommandLine

_ENV_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$", re.S)
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
_TOKENS = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<suffix>[km]?)$", re.I)
_VLLM_INT = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<suffix>[kKmMgGtT]?)$")
_BYTES = re.compile(r"^(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[a-z]*)$", re.I)
_SETTING_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
#: interpreters and launchers that may precede the engine's own program
#: the canonical name a secret flag is filed under: never a setting, never shown with its value
SECRET_FLAG = "\0secret"
_LAUNCHERS = frozenset({"python", "python3", "uv", "run", "sudo", "env", "exec", "nohup", "time", "-u", "-m"})

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tib": 1 << 40,
}
#: LMDeploy ``--quant-policy`` -> KV dtype (lmdeploy/messages.py QuantPolicy: 0 none, 4 int4, 8 int8, 16 fp8 e4m3,
#: 17 fp8 e5m2)
_LMDEPLOY_QUANT_POLICY = {"0": None, "4": "int4", "8": "int8", "16": "fp8", "17": "fp8_e5m2"}


@dataclass(frozen=True)
class ParsedEngineArgs:
    """What a pasted engine command line says, under the engine's own setting names."""

    engine: str | None
    model: str | None
    #: memory-relevant settings, canonical name -> value as typed
    settings: dict[str, str] = field(default_factory=dict)
    tp: int | None = None
    pp: int | None = None
    #: the engine's memory fraction (vLLM gpu-memory-utilization, SGLang mem-fraction-static, …)
    gpu_util: float | None = None
    #: the engine's context setting as the engine reads it (llama.cpp: ctx-size over all slots)
    context: int | None = None
    kv_dtype: str | None = None
    #: one line per token or flag that was not used, with why
    ignored: list[str] = field(default_factory=list)

    def to_choice(self, version: str | None = None, extra_settings: Mapping[str, str] | None = None) -> EngineChoice:
        """The EngineChoice these arguments describe (``extra_settings``, e.g. from ``--set``, win)."""
        if self.engine is None:
            raise UsageError("could not tell which engine the command line starts; give --engine")
        settings = {**self.settings, **(extra_settings or {})}
        return EngineChoice(
            name=self.engine, version=version, settings=settings, tp=self.tp, pp=self.pp, gpu_util=self.gpu_util
        )


# ---- tables --------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _tables() -> Mapping[str, Any]:
    """What every engine shares: [generic] and [limits] of hfvram/data/engine_args.toml."""
    return data_table("engine_args.toml")


def engine_command_line(engine: str | None) -> CommandLine | None:
    """The command-line table of ``engine`` (its settings.toml [command_line]); None for no engine, an unknown one
    or one without a command line (transformers)."""
    from hfvram.engines import registry

    entry = registry().get(engine) if engine else None
    return entry.command_line_table() if entry else None


def command_line_fields(engine: str | None) -> Mapping[str, str]:
    """ParsedEngineArgs field -> the engine's own flag for it (``context`` -> ``max-model-len``); empty without one."""
    table = engine_command_line(engine)
    return table.fields if table else {}


def _command_lines() -> Iterable[tuple[str, CommandLine]]:
    """(engine, its command-line table) of every engine that has one, in the registry's order."""
    from hfvram.engines import registry

    for name, entry in registry().items():
        table = entry.command_line_table()
        if table is not None:
            yield name, table


# ---- sizes and --set -----------------------------------------------------------------------------


def parse_size_tokens(text: str) -> int:
    """``"32k"`` -> 32768, ``"128k"``, ``"1m"`` -> 1048576, ``"131072"``, ``"131,072"``; k = 1024 tokens.

    UsageError for anything else (``12q``, ``0``, ``-5``, ``1.3k`` that is not a whole token count)."""
    cleaned = str(text).strip().replace(",", "").replace("_", "")
    shown = repr(str(text)[:80])
    match = _TOKENS.match(cleaned) if len(cleaned) <= 40 else None
    if not match:
        raise UsageError(f"{shown} is not a token count (examples: 8k, 32k, 128k, 131072, 1m)")
    multiplier = {"": 1, "k": 1024, "m": 1024 * 1024}[match["suffix"].lower()]
    value = float(match["number"]) * multiplier
    maximum = int(data_table("bounds.toml")["config"]["positions"]["maximum"])
    if not value <= maximum:  # also inf: a 40-digit number overflows nothing, but no model reads that far
        raise UsageError(f"{shown} tokens: implausible (hfvram's bound: at most {maximum:,})")
    if value != int(value) or value < 1:
        raise UsageError(f"{shown} is not a whole, positive number of tokens")
    return int(value)


def parse_bytes(text: str) -> int:
    """``"24GiB"``, ``"80GB"`` (10^9), ``"512MiB"``, ``"24g"`` (binary), ``"1024"`` (bytes) -> bytes."""
    match = _BYTES.match(str(text).strip().replace("_", ""))
    unit = match["unit"].lower() if match else None
    if not match or unit not in _BYTE_UNITS:
        raise UsageError(f"{text!r} is not a size (examples: 24GiB, 80GB, 512MiB, 24g)")
    return int(float(match["number"]) * _BYTE_UNITS[unit])


_SETTING_NUMBER = re.compile(r"^(?P<sign>[-+]?)(?P<number>\d+(?:\.\d+)?)(?P<suffix>[kmgt]?)$")
_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _setting_number(value: str) -> float | None:
    """A setting's value as a number the way the engines read them (``32k``, ``131,072``, ``-1``), roughly
    (``k`` taken as 1024 whatever the engine's convention); None when it is not a number at all."""
    match = _SETTING_NUMBER.match(value.strip().lower().replace(",", "").replace("_", ""))
    if match is None:
        return None
    number = float(match["number"]) * _SUFFIX[match["suffix"]]  # inf for a 400-digit number
    return -number if match["sign"] == "-" else number


def check_setting(name: str, value: str) -> None:
    """UsageError (exit 2) for a whole-number setting the engine refuses: below its minimum
    (engine_args.toml [limits]) or above bounds.toml [settings] maximum. Other values are left to the engine."""
    shown = value if len(value) <= 24 else value[:21] + "..."
    number = _setting_number(value) if name != "revision" else None
    if number is None and name != "revision":
        try:  # what else Python reads as a number (1e308, nan, inf) must be a finite, bounded one too
            number = float(value.strip().replace("_", "")) if len(value) <= 400 else None
        except ValueError:
            number = None
        if number is not None and not math.isfinite(number):
            raise UsageError(f"setting {name}={shown}: not a finite number")
    if number is None:
        return
    maximum = int(data_table("bounds.toml")["settings"]["maximum"])
    if abs(number) > maximum:
        raise UsageError(f"setting {name}={shown}: implausible value (hfvram's bound: at most {maximum:,})")
    limit = _tables().get("limits", {}).get(name)
    if limit is None:
        return
    minimum, also = int(limit["minimum"]), [float(v) for v in limit.get("also", ())]
    if number < minimum and number not in also:
        allowed = " or ".join([f">= {minimum}", *(str(int(v)) for v in also)])
        raise UsageError(f"setting {name}={shown}: the engine refuses it (expected a whole number {allowed})")


def canonical_setting_name(name: str) -> str:
    """``--max_num_batched_tokens`` -> ``max-num-batched-tokens``."""
    return name.strip().lstrip("-").replace("_", "-")


def parse_set_options(options: Iterable[str]) -> dict[str, str]:
    """``["max-num-batched-tokens=8192", "flash-attn=on"]`` -> settings; the last of a repeated name wins.

    UsageError for an entry without ``=``, with an empty name or value, or a name that is not a flag name."""
    settings: dict[str, str] = {}
    for option in options:
        name, sep, value = str(option).partition("=")
        name, value = canonical_setting_name(name), value.strip()
        if not sep or not name or not value or not _SETTING_NAME.match(name):
            raise UsageError(f"--set {str(option)[:80]!r}: expected NAME=VALUE, e.g. max-num-batched-tokens=8192")
        check_setting(name, value)
        settings[name] = value
    return settings


# ---- command lines -------------------------------------------------------------------------------


#: the longest pasted command line read (a real one is a few KiB, a JSON-valued flag included); shlex's cost grows
#: with the square of a word's length, so a longer paste is refused before it is split
MAX_CMDLINE_CHARS = 32 * 1024


def _split(cmdline: str) -> list[str]:
    if len(cmdline) > MAX_CMDLINE_CHARS:
        raise UsageError(
            f"the engine command line is {len(cmdline):,} characters: hfvram reads at most {MAX_CMDLINE_CHARS:,}"
        )
    joined = re.sub(r"\\\r?\n", " ", cmdline)  # shell line continuations
    try:
        return shlex.split(joined, comments=True)
    except ValueError as exc:
        raise UsageError(f"cannot read the engine command line: {exc}") from exc


def _program_name(token: str) -> str:
    name = os.path.basename(token.replace("\\", "/"))
    return name[:-4] if name.lower().endswith(".exe") else name


def _match_at(tokens: list[str], index: int) -> tuple[str, int] | None:
    """(engine, index after the engine's program) when tokens[index] starts an engine."""
    token = tokens[index]
    for engine, table in _command_lines():
        # `sglang.launch_server …` run as a console script or through `python -m` without the -m in the paste
        if _program_name(token) in table.programs or token in table.modules:
            return engine, index + 1
        if token == "-m" and index + 1 < len(tokens) and tokens[index + 1] in table.modules:
            return engine, index + 2
    return None


def _match_image(token: str) -> str | None:
    for engine, table in _command_lines():
        if any(token.startswith(prefix) for prefix in table.images):
            return engine
    return None


def _find_engine(tokens: list[str]) -> tuple[str | None, int, int, dict[str, str]]:
    """(engine, index of the token naming it, index of its first argument, environment assignments before it)."""
    env: dict[str, str] = {}
    for index, token in enumerate(tokens):
        assignment = _ENV_ASSIGNMENT.match(token)
        if assignment:
            env[assignment["name"]] = assignment["value"]
            continue
        found = _match_at(tokens, index)
        if found:
            return found[0], index, found[1], env
        image = _match_image(token)
        if image:
            # a container whose command names the engine again (`lmsysorg/sglang python3 -m sglang.launch_server`)
            after = index + 1
            while after < len(tokens) and tokens[after] != "-m" and _is_launcher(tokens[after]):
                after += 1
            again = _match_at(tokens, after) if after < len(tokens) else None
            if again:
                return again[0], index, again[1], env
            return image, index, index + 1, env
    return None, 0, 0, env


def _is_launcher(token: str) -> bool:
    return token in _LAUNCHERS or _program_name(token).startswith("python") or bool(_ENV_ASSIGNMENT.match(token))


def _is_value(token: str) -> bool:
    return not token.startswith("-") or bool(_NUMBER.match(token))


def _canonical_flag(raw: str, aliases: Mapping[str, str]) -> str:
    name = raw.lstrip("-")
    return aliases.get(name) or aliases.get(name.replace("_", "-")) or name.replace("_", "-")


def _flags(tokens: list[str], table: CommandLine | None) -> tuple[list[tuple[str, str, str]], list[str]]:
    """([(canonical, value, as typed)], positional tokens)."""
    aliases = table.aliases if table else {}
    booleans = set(table.booleans) if table else set()
    flags: list[tuple[str, str, str]] = []
    positionals: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not token.startswith("-") or token in ("-", "--") or _NUMBER.match(token):
            if token not in ("-", "--"):
                positionals.append(token)
            continue
        name, sep, value = token.partition("=")
        if _secret_flag(name):
            # a secret's value is never kept or shown, even when it starts with "-" (``--api-key -x``) or runs over
            # several words (``--api-key two words``): everything up to the next long flag goes with it
            if not sep:
                index = _skip_secret_value(tokens, index)
            flags.append((SECRET_FLAG, "", f"{name} {MASK}"))
            continue
        attached = _attached_short_value(name, aliases) if not sep else None
        if attached:  # argparse's "-O3" / "-c8192": a short flag with its value attached
            name, value, sep = attached[0], attached[1], "="
        canonical = _canonical_flag(name, aliases)
        if not sep:
            if canonical in booleans or index >= len(tokens) or not _is_value(tokens[index]):
                value = "true"
            else:
                value = tokens[index]
                index += 1
        flags.append((canonical, value, token if sep else f"{token} {value}" if value != "true" else token))
    return flags, positionals


def _secret_flag(name: str) -> bool:
    return is_secret_name(name) or name.lower() in HEADER_FLAGS


def _skip_secret_value(tokens: list[str], index: int) -> int:
    """The index after a secret flag's value: its next word whatever it starts with, and the plain words after it."""
    if index < len(tokens):
        index += 1
    while index < len(tokens) and not tokens[index].startswith("--"):
        index += 1
    return index


def _attached_short_value(token: str, aliases: Mapping[str, str]) -> tuple[str, str] | None:
    """("-c", "8192") for ``-c8192`` when ``c`` is a short flag of the engine and the rest is a number; only cuts
    within the engine's longest alias are tried, so a megabyte-long word costs one pass."""
    if token.startswith("--") or not token.startswith("-") or token[1:] in aliases:
        return None
    body = token[1:]
    longest = max((len(alias) for alias in aliases), default=0)
    for cut in range(min(len(body) - 1, longest), 0, -1):
        if body[:cut] in aliases and _NUMBER.match(body[cut:]):
            return "-" + body[:cut], body[cut:]
    return None


def _to_int(value: str, flag: str, engine: str | None) -> int:
    if engine == "vllm":
        return vllm_human_readable_int(value, flag)
    try:
        return int(value)
    except ValueError as exc:
        raise UsageError(f"--{flag} {value!r} is not a whole number") from exc


def vllm_human_readable_int(value: str, flag: str = "value") -> int:
    """vLLM's own reading of a number (``vllm/engine/arg_utils.py::human_readable_int``): ``32k`` = 32000,
    ``32K`` = 32768, ``25.6k`` = 25600; decimals are refused with a binary suffix."""
    match = _VLLM_INT.match(value.strip())
    if not match:
        raise UsageError(f"--{flag} {value!r} is not a number vLLM accepts")
    number, suffix = match["number"], match["suffix"]
    if suffix in ("k", "m", "g", "t"):
        return int(float(number) * 10 ** {"k": 3, "m": 6, "g": 9, "t": 12}[suffix])
    if "." in number:
        raise UsageError(f"--{flag} {value!r}: vLLM refuses decimals with a binary suffix or none")
    return int(number) * (1 << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[suffix])


def _to_float(value: str, flag: str) -> float:
    try:
        return float(value)
    except ValueError as exc:
        raise UsageError(f"--{flag} {value!r} is not a number") from exc


def _fields(engine: str | None, settings: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """tp / pp / gpu_util / context / kv_dtype from the engine's own settings, and the settings read but ignored."""
    ignored: list[str] = []
    table = engine_command_line(engine)
    if table is not None:
        names = {key: [flag] for key, flag in table.fields.items()}
    else:
        names = {key: list(flags) for key, flags in _tables()["generic"]["fields"].items() if key != "model"}
    found: dict[str, Any] = {}
    for key, flags in names.items():
        flag = next((f for f in flags if f in settings), None)
        if flag is None:
            continue
        value = settings[flag]
        if key in ("tp", "pp"):
            found[key] = _to_int(value, flag, engine)
        elif key == "gpu_util":
            found[key] = _to_float(value, flag)
        elif key == "context" and engine == "vllm" and value.strip().lower() in ("auto", "-1"):
            continue  # vLLM picks the length (docs/engines/vllm.md#vllm-auto-length): the setting says so
        elif key == "context":
            context = _to_int(value, flag, engine)
            if context > 0:
                found[key] = context
            else:  # llama.cpp -c 0 (and similar): the model's own trained length
                ignored.append(f"--{flag} {value}: 0 means the model's own maximum length")
        elif key == "kv_dtype":
            if engine == "lmdeploy":
                if value not in _LMDEPLOY_QUANT_POLICY:
                    raise UsageError(f"--quant-policy {value!r}: LMDeploy accepts 0, 4, 8, 16 or 17")
                found[key] = _LMDEPLOY_QUANT_POLICY[value]
            else:
                found[key] = value
    return found, ignored


def parse_engine_args(cmdline: str) -> ParsedEngineArgs:
    """Read a pasted engine command line (see the module docstring); UsageError when it cannot be split or
    a memory setting is not a number."""
    tokens = _split(cmdline)
    if not tokens:
        raise UsageError("empty engine command line")
    engine, program_index, start, env = _find_engine(tokens)
    table = engine_command_line(engine)
    ignored: list[str] = []
    launcher = [t for t in tokens[:program_index] if not _ENV_ASSIGNMENT.match(t)]
    if any(not _is_launcher(t) for t in launcher):
        ignored.append(f"{' '.join(redact_words(launcher))}: launcher, not the engine's arguments")
    if table is None:  # unknown program: skip its name (and a script) up to the first flag
        while start < len(tokens) and not tokens[start].startswith("-"):
            start += 1
        if start:
            shown = " ".join(redact_words(tokens[:start]))
            ignored.append(f"{shown}: not a known engine (flags read by their names only)")

    rest = tokens[start:]
    if table is not None:
        while rest and rest[0] in table.subcommands:
            rest = rest[1:]
    model: str | None = None
    if table is not None and table.positional_model and rest and not rest[0].startswith("-"):
        model, rest = rest[0], rest[1:]

    flags, positionals = _flags(rest, table)
    settings: dict[str, str] = {}
    model_flags = table.model_flags if table else _tables()["generic"]["fields"]["model"]
    allowed = set(table.settings) if table else None
    for canonical, value, typed in flags:
        if canonical == SECRET_FLAG:
            ignored.append(f"{typed}: not read (a secret; hfvram reads the flags that change memory only)")
        elif canonical in model_flags:
            model = value
        elif allowed is None or canonical in allowed:
            settings[canonical] = value
        else:
            close = difflib.get_close_matches(canonical, sorted(allowed), n=1, cutoff=0.8)
            hint = f"; did you mean --{close[0]}?" if close else ""
            ignored.append(f"{typed}: not read (hfvram reads the flags that change memory only{hint})")
    for token in positionals:
        ignored.append(f"{redact(token)}: unexpected positional argument")
    env_map = table.env if table else {}
    for name, value in env.items():
        if name in env_map:
            settings[env_map[name]] = value
        else:
            ignored.append(
                f"{name}={MASK if is_secret_name(name) else redact(value)}: environment variable not modelled"
            )

    for name, value in settings.items():
        check_setting(name, value)
    fields, ignored_fields = _fields(engine, settings)
    return ParsedEngineArgs(
        engine=engine, model=model, settings=settings, ignored=[*ignored, *ignored_fields], **fields
    )
