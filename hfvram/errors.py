"""Errors hfvram reports to users. Each carries the exit code of the contract (README.md, 'Exit codes')."""

from __future__ import annotations

import re

#: how much of a bad value an error quotes (a pasted value, a hostile file's text)
ECHO_CHARS = 80
#: the longest word of an error message shown whole (a path may be long; a value longer than this is cut)
WORD_CHARS = 200
#: the longest error message: one line of a terminal or a CI log, however long the input it quotes
MESSAGE_CHARS = 600


def shown_message(text: str) -> str:
    """An error message as it may be shown: secrets hidden (hfvram.redaction), one line, every word of more than
    WORD_CHARS characters cut to its first ECHO_CHARS, and at most MESSAGE_CHARS characters."""
    from hfvram.redaction import redact

    line = " ".join(str(text)[: MESSAGE_CHARS * 200].split())
    line = re.sub(rf"\S{{{WORD_CHARS + 1},}}", lambda m: m[0][:ECHO_CHARS] + "…", line)
    line = redact(line)
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 1] + "…"


class HfvramError(Exception):
    """Base class: a clean, one-line message for the user; never a traceback (unless --debug)."""

    exit_code = 3
    kind = "error"

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        where = ""
        if file and field:
            where = f"{file}: {field}: "
        elif file:
            where = f"{file}: "
        super().__init__(shown_message(where + message))


class UsageError(HfvramError, ValueError):
    """Bad input on the command line: unknown GPU, bad number, bad option value (exit 2)."""

    exit_code = 2
    kind = "usage"


class ModelReadError(HfvramError, OSError):
    """The model could not be read (exit 3)."""

    kind = "read"


class MalformedFileError(ModelReadError):
    """A config / header is not what its format says; names the file and the field."""

    kind = "malformed"


class RepoNotFoundError(ModelReadError):
    kind = "not_found"


class GgufRepoWithoutSelector(RepoNotFoundError):
    """A repo without config.json that holds GGUF files, named without ``:QUANT``."""


class OutputWriteError(HfvramError, OSError):
    """A file hfvram writes (--output, a saved calibration) could not be written: a full disk, a read-only folder
    (exit 3, as README.md 'Exit codes' says for output that cannot be written)."""

    kind = "output"


class GatedRepoError(ModelReadError):
    kind = "gated"


class NetworkError(ModelReadError):
    kind = "network"


class UnsupportedLayoutError(ModelReadError):
    kind = "unsupported"
