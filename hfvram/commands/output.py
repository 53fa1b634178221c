"""What the commands print through: rich's console on stdout / stderr, text and JSON on stdout, one-line errors on
stderr, and the contract's exits when the output cannot be written (a closed pipe, a full disk).

Light on purpose (every command imports it at start-up): rich and the report helpers are imported inside.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
from typing import Any

import click

from hfvram.pipeline import EXIT_UNREADABLE

EXIT_INTERRUPTED = 130


def _fail(message: str, code: int) -> None:
    from hfvram.report.text import safe

    _write_stderr(f"hfvram: error: {safe(message)}")
    sys.exit(code)


def _write_stderr(line: str) -> None:
    """One line on stderr, in ASCII where stderr cannot encode Unicode; a closed stderr is not an error."""
    from hfvram.report.text import encodes_unicode, to_ascii

    with contextlib.suppress(OSError, ValueError):
        click.echo(line if encodes_unicode(sys.stderr) else to_ascii(line), err=True)


#: errno values that mean the output could not be written (a full disk or /dev/full, a quota, a read-only file system)
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS})
#: exit status when the reader of stdout went away (``hfvram scan … | head -1``): 128 + SIGPIPE, as a shell reports
EXIT_BROKEN_PIPE = 141


def _quiet_broken_pipe() -> None:
    """The reader closed the pipe: stop quietly, and keep Python from complaining when it flushes stdout at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    sys.exit(EXIT_BROKEN_PIPE)


def _flush_stdout() -> None:
    """Flush stdout here, where a failure can still be one line and an exit code (not Python's own message)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_broken_pipe()
    except (OSError, ValueError) as error:
        _write_stderr(f"hfvram: error: cannot write the output: {getattr(error, 'strerror', None) or error}")
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        os._exit(EXIT_UNREADABLE)


def _console(stderr: bool = False) -> Any:
    """rich's Console on stdout (or stderr): the width of ``report_width``, plain ASCII where the stream cannot
    encode Unicode (``LANG=C``, ``PYTHONIOENCODING=ascii``)."""
    from rich.console import Console

    from hfvram.report.text import AsciiStream, TrimmedStream, encodes_unicode, report_width

    stream = sys.stderr if stderr else sys.stdout
    file: Any = TrimmedStream(stream if encodes_unicode(stream) else AsciiStream(stream))
    console = Console(file=file, highlight=False, soft_wrap=False, width=report_width(stream))
    # rich ends a broken pipe with SystemExit(1), which the contract reads as "does not fit": 141 instead, as scan
    console.on_broken_pipe = _quiet_broken_pipe  # type: ignore[method-assign]
    return console


def _echo(text: str, nl: bool = True) -> None:
    """Text output (Markdown, CSV, JSON) on stdout, transliterated to ASCII where stdout cannot encode Unicode."""
    from hfvram.report.text import encodes_unicode, to_ascii

    click.echo(text if encodes_unicode(sys.stdout) else to_ascii(text), nl=nl)


def _stdout_unicode() -> bool:
    from hfvram.report.text import encodes_unicode

    return encodes_unicode(sys.stdout)


def _echo_json(document: Any) -> None:
    from hfvram.report.text import encodes_unicode, safe_json

    # where stdout cannot encode Unicode, \uXXXX escapes keep the document exact
    click.echo(safe_json(json.dumps(document, indent=2, ensure_ascii=not encodes_unicode(sys.stdout))))
