"""Errors hfvram reports to users. Each carries the exit code of the contract (README.md, 'Exit codes')."""

from __future__ import annotations


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
        super().__init__(where + message)


class UsageError(HfvramError):
    """Bad input on the command line: unknown GPU, bad number, bad option value (exit 2)."""

    exit_code = 2
    kind = "usage"


class ModelReadError(HfvramError):
    """The model could not be read (exit 3)."""

    kind = "read"


class MalformedFileError(ModelReadError):
    """A config / header is not what its format says; names the file and the field."""

    kind = "malformed"


class RepoNotFoundError(ModelReadError):
    kind = "not_found"


class GgufRepoWithoutSelector(RepoNotFoundError):
    """A repo without config.json that holds GGUF files, named without ``:QUANT``."""


class GatedRepoError(ModelReadError):
    kind = "gated"


class NetworkError(ModelReadError):
    kind = "network"


class UnsupportedLayoutError(ModelReadError):
    kind = "unsupported"
