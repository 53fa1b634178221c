"""User defaults for ``check``, ``scan`` and ``fit``: ``HFVRAM_*`` variables and a TOML config file.

Precedence, highest first: the command line, then ``HFVRAM_GPU`` / ``HFVRAM_ENGINE`` / ``HFVRAM_CONTEXT`` /
``HFVRAM_CONCURRENCY`` / ``HFVRAM_KV_DTYPE`` / ``HFVRAM_UNIFIED_FRACTION``, then the config file, then the
built-in defaults. The file is ``$HFVRAM_CONFIG_DIR/config.toml``, else
``platformdirs.user_config_dir("hfvram")/config.toml`` (``~/.config/hfvram/config.toml`` on Linux)::

    gpu = "rtx4090x2"
    engine = "vllm"
    context = "32k"
    concurrency = 4

The values reach click as the commands' ``default_map``, so an explicit option always wins. They are read
lazily (only when a command looks up a default, never for ``--help``), bounded, and checked with the same
parsers as the options; a bad file or variable is one line naming where the value came from, exit 2.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hfvram.errors import UsageError

#: the commands these defaults apply to (calibrate's --gpu describes a log, never a default)
COMMANDS = ("check", "scan", "fit", "models")
#: config key -> the TOML types it accepts
KEYS: Mapping[str, tuple[type, ...]] = {
    "gpu": (str,),
    "engine": (str,),
    "context": (str, int),
    "concurrency": (str, int),
    "kv_dtype": (str,),
    "unified_fraction": (float, int),
}
ENV_PREFIX = "HFVRAM_"
CONFIG_FILENAME = "config.toml"
#: a config file is a few lines; anything larger is not one
MAX_CONFIG_BYTES = 64 * 1024


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper()


def config_path() -> Path:
    """``$HFVRAM_CONFIG_DIR/config.toml``, else the platform's user config folder for hfvram."""
    override = os.environ.get("HFVRAM_CONFIG_DIR")
    if override:
        return Path(override) / CONFIG_FILENAME
    from platformdirs import user_config_dir

    return Path(user_config_dir("hfvram")) / CONFIG_FILENAME


def _read_bounded(path: Path) -> bytes | None:
    """The file's bytes, None when it does not exist; a folder, FIFO or device is refused before reading."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as error:
        raise UsageError(f"config file {path}: cannot be read: {error.strerror or error}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"config file {path}: not a regular file")
        data = b""
        while len(data) <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, MAX_CONFIG_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise UsageError(f"config file {path}: larger than {MAX_CONFIG_BYTES // 1024} KiB, not a config file")
    return data


def read_config(path: Path | None = None) -> dict[str, Any]:
    """The config file's values (``{}`` when there is none), type-checked; UsageError (exit 2) otherwise."""
    path = path or config_path()
    data = _read_bounded(path)
    if data is None:
        return {}
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"config file {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"config file {path}: not valid TOML: {error}") from None
    except (ValueError, RecursionError) as error:  # an integer past Python's digit limit, nesting past the stack
        why = "nested too deeply" if isinstance(error, RecursionError) else "a number too long to read"
        raise UsageError(f"config file {path}: not valid TOML: {why}") from None
    values: dict[str, Any] = {}
    for key, value in document.items():
        if key not in KEYS:
            raise UsageError(f"config file {path}: unknown key {key!r} (known: {', '.join(KEYS)})")
        if isinstance(value, bool) or not isinstance(value, KEYS[key]):
            kinds = " or ".join("a number" if kind in (int, float) else "a string" for kind in KEYS[key])
            raise UsageError(f"config file {path}: {key} must be {kinds}, got {type(value).__name__}")
        values[key] = value
    return {key: _checked(key, value, f"config file {path}: {key}") for key, value in values.items()}


def read_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``HFVRAM_<KEY>`` values that are set and not empty (an empty variable counts as unset, as in click)."""
    environ = os.environ if environ is None else environ
    found = {}
    for key in KEYS:
        value = environ.get(env_name(key), "").strip()
        if value:
            found[key] = _checked(key, value, env_name(key))
    return found


def _checked(key: str, value: Any, origin: str) -> Any:
    """The value as the option would receive it (text), checked with the option's own parser."""
    text = str(value).strip()
    try:
        if not text:
            raise UsageError("is empty")
        if key == "gpu":
            from hfvram.estimate.hardware import parse_gpu_spec

            parse_gpu_spec(text)
        elif key == "engine":
            from hfvram.engines import parse_engine_name

            parse_engine_name(text)
        elif key == "concurrency":
            if not text.isdigit() or int(text) < 1:
                raise UsageError(f"must be a whole number of sequences, at least 1, got {text!r}")
        elif key == "context":
            from hfvram.estimate.engine_args import parse_size_tokens

            if parse_size_tokens(text) < 1:
                raise UsageError(f"must be at least 1, got {text!r}")
        elif key == "kv_dtype":
            from hfvram.estimate.common import kv_dtype_bytes

            kv_dtype_bytes(text)
        elif key == "unified_fraction":
            fraction = float(text)
            if not 0 < fraction <= 1:
                raise UsageError(f"must be in (0, 1], got {text}")
            return fraction
    except UsageError as error:
        raise UsageError(f"{origin}: {error}") from None
    except ValueError:
        raise UsageError(f"{origin}: not a number: {text!r}") from None
    return text


def user_defaults() -> dict[str, Any]:
    """The config file's values overlaid by the environment's (the environment wins)."""
    return {**read_config(), **read_environment()}


class LazyDefaults(Mapping[str, Any]):
    """A command's ``default_map``, read on the first look-up (so ``--help`` never reads the file)."""

    def __init__(self) -> None:
        self._values: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        if self._values is None:
            try:
                self._values = user_defaults()
            except UsageError:
                import click

                ctx = click.get_current_context(silent=True)
                if ctx is not None and ctx.resilient_parsing:
                    return {}  # rendering --help or completing a word: no defaults, the run itself says why
                raise
        return self._values

    def __getitem__(self, key: str) -> Any:
        if key not in KEYS:  # --help, --debug, --json…: never a reason to read the file
            raise KeyError(key)
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


def default_map() -> dict[str, Mapping[str, Any]]:
    """``ctx.default_map`` for the ``hfvram`` group: the same user defaults for every command in COMMANDS."""
    shared = LazyDefaults()
    return dict.fromkeys(COMMANDS, shared)
