"""Text from files and servers, made safe to print, and a plain-ASCII fallback for streams that cannot encode
Unicode. No rich import: every renderer (table, Markdown, CSV, JSON Lines, warnings, errors) uses these.

A model's name, architecture, a log line or an error message is data, never markup and never a terminal command:
control characters (C0, DEL, C1 — ESC and CSI among them) and the bidirectional overrides are written as visible
escapes (``\\x1b``, ``\\u202e``); the table renderer passes the result to rich as ``Text``, never as markup.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

#: C0 controls, DEL, C1 controls, the bidi embeddings / overrides / isolates, and the line / paragraph
#: separators: each of them can move the cursor, change the terminal's state or reorder what is shown
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: the same without the line feed, for multi-line text (explanations) that keeps its line breaks
_UNSAFE_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(value: Any, *, keep_lines: bool = False) -> str:
    """``value`` as printable text: every control character escaped (``\\x1b[2J`` prints as those six
    characters, not as a screen clear); ``None`` as an empty string."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return (_UNSAFE_KEEP_LINES if keep_lines else _UNSAFE).sub(_escape, text)


def safe_json(document_text: str) -> str:
    """Serialised JSON with the C1 controls and bidi characters escaped as ``\\uXXXX`` (``json.dumps`` escapes
    only C0): the same document, safe for a terminal."""
    return re.sub("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]", lambda m: f"\\u{ord(m[0]):04x}", document_text)


#: what the reports draw, in plain ASCII (box drawing is mapped by range below)
ASCII_MAP = {
    "█": "#",
    "▓": "%",
    "▒": ":",
    "░": ".",
    "…": "...",
    "×": "x",
    "—": "-",
    "–": "-",
    "−": "-",
    "≤": "<=",
    "≥": ">=",
    "≈": "~",
    "▶": ">",
    "•": "*",
    "·": "-",
    "✅": "[ok]",
    "⚠": "[!]",
    "❌": "[x]",
    "\ufe0f": "",
}
_ASCII_TABLE = str.maketrans(ASCII_MAP)


def _box_char(char: str) -> str:
    name_code = ord(char)
    if 0x2500 <= name_code <= 0x257F:  # box drawing: horizontals, verticals, corners and crossings
        if char in "─━┄┅┈┉╌╍═╼╾":
            return "-"
        if char in "│┃┆┇┊┋╎╏║╽╿":
            return "|"
        return "+"
    return char


def to_ascii(text: str) -> str:
    """``text`` with the reports' glyphs and box drawing in ASCII; anything else outside ASCII becomes ``?``."""
    text = text.translate(_ASCII_TABLE)
    text = "".join(_box_char(char) if "\u2500" <= char <= "\u257f" else char for char in text)
    return text.encode("ascii", "replace").decode("ascii")


def encodes_unicode(stream: Any) -> bool:
    """Whether ``stream`` can write the reports' glyphs (False for an ASCII / Latin-1 locale)."""
    encoding = getattr(stream, "encoding", None) or "ascii"
    try:
        "█░▒…×—≤▶•┏━│✅".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


class _StreamProxy:
    """What rich's Console asks of a text stream, passed on to the wrapped one; subclasses change ``write``."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return bool(getattr(self._stream, "isatty", lambda: False)())

    def fileno(self) -> int:
        return int(self._stream.fileno())

    @property
    def encoding(self) -> str:
        return str(getattr(self._stream, "encoding", "utf-8"))


class AsciiStream(_StreamProxy):
    """A text stream that writes ``to_ascii`` of what it is given to the wrapped one (for rich's Console)."""

    def write(self, text: str) -> int:
        return self._stream.write(to_ascii(text))

    @property
    def encoding(self) -> str:
        return "ascii"


#: spaces at the end of a line, before any colour codes that close it
_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)(?=\n)")


class TrimmedStream(_StreamProxy):
    """A text stream that drops the spaces rich pads a line's end with (a table's last column, a wrapped line)
    before writing to the wrapped one: copied text and diffs carry no trailing blanks."""

    def write(self, text: str) -> int:
        self._stream.write(_TRAILING.sub(r"\1", text))
        return len(text)


#: the width of a report written where no terminal can be asked (a file, a CI log): logs are read in wide viewers
DEFAULT_WIDTH = 120


def report_width(stream: Any) -> int | None:
    """The width a report on ``stream`` is laid out for: ``COLUMNS`` when set; the terminal's own width when
    ``stream`` is a terminal (None: rich asks it) or, when it is piped (``hfvram scan … | less``), the width of the
    terminal the other standard stream is on; else ``DEFAULT_WIDTH``."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return None
    other = sys.stderr if stream is sys.stdout else sys.stdout
    try:
        return os.get_terminal_size(other.fileno()).columns or DEFAULT_WIDTH
    except (OSError, ValueError, AttributeError):
        return DEFAULT_WIDTH
