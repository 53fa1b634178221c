"""Tables that fit the terminal without cutting a figure (renders only).

Each column is a :class:`Col`: a figure column keeps its widest cell whole; a name column gives way by shortening
its names readably (the org of a repo id first, then a middle ``…``), two different names never becoming the same
text. When even that does not fit, the table first takes its compact form (a unit moved from the cells into the
header, shorter headers), then leaves out columns in the order the caller states, and says which.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

#: a shortened name keeps at least this many characters (a shorter name is shown whole)
MIN_NAME = 12
#: a borderless table adds one padding cell each side of a column but the outer ones, and a divider between
GAP = 3


@dataclass(frozen=True)
class Col:
    """One column: its header, justification, compact header and the unit its compact cells drop, the rank in
    which it is left out (lower first; ``None``: never) and whether it holds names."""

    header: str
    justify: JustifyMethod = "right"
    short: str | None = None
    unit: str | None = None
    drop: int | None = None
    name: bool = False


def middle_cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters: its head and its tail around a ``…`` (the head gets the odd one)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    keep = width - 1
    head = (keep + 1) // 2
    tail = keep - head
    return text[:head] + "…" + (text[-tail:] if tail else "")


def _forms(name: str, width: int) -> list[str]:
    """The readable short forms of one name in ``width``, best first: whole, the repo without its org, a middle
    cut of the repo, a middle cut of the whole name."""
    if len(name) <= width:
        return [name]
    forms = []
    repo = name.rsplit("/", 1)[-1] if "/" in name and not name.endswith("/") else name
    if len(repo) <= width:
        forms.append(repo)
    forms.append(middle_cut(repo, width))
    forms.append(middle_cut(name, width))
    return forms


def _splits(name: str, width: int) -> list[str]:
    """Every head/tail split of ``name`` (and of its repo part) in ``width``: the candidates that can tell two
    names apart when their default short forms are the same."""
    keep = max(1, width - 1)
    repo = name.rsplit("/", 1)[-1]
    out = []
    for base in dict.fromkeys((repo, name)):
        if len(base) <= width:
            out.append(base)
            continue
        for head in range(keep, 0, -1):
            tail = keep - head
            out.append(base[:head] + "…" + (base[-tail:] if tail else ""))
    return out


def shorten_names(names: Sequence[str], width: int) -> list[str]:
    """Each name in ``width`` characters, readably (see :func:`_forms`), and distinct where the names are."""
    short = [_forms(name, width)[0] for name in names]
    for _ in range(3):
        owners: dict[str, set[str]] = {}
        for name, text in zip(names, short):
            owners.setdefault(text, set()).add(name)
        clashes = {text for text, who in owners.items() if len(who) > 1}
        if not clashes:
            return short
        taken = set(short) - clashes
        for index, (name, text) in enumerate(zip(names, short)):
            if text not in clashes:
                continue
            free = [c for c in _forms(name, width)[1:] + _splits(name, width) if c not in taken and c not in clashes]
            if free:
                short[index] = free[0]
                taken.add(free[0])
    # a last resort: a number at the end of each still-clashing name
    seen: dict[str, int] = {}
    for index, text in enumerate(short):
        seen[text] = seen.get(text, 0) + 1
        if seen[text] > 1:
            mark = f"#{seen[text]}"
            short[index] = text[: max(0, width - len(mark))] + mark
    return short


def _compact(cell: Text, unit: str | None) -> Text:
    if unit and cell.plain.endswith(unit):
        return Text(cell.plain[: -len(unit)], style=cell.style)
    return cell


def _layout(
    width: int, cols: Sequence[Col], rows: Sequence[Sequence[Text]], compact: bool, dropped: Sequence[int]
) -> tuple[list[int], list[str], list[list[Text]], list[int]] | None:
    """The kept column indexes, their headers, their cells and widths; ``None`` when the names cannot keep
    MIN_NAME characters (or their whole length) at ``width``."""
    kept = [i for i in range(len(cols)) if i not in dropped]
    headers = [(cols[i].short or cols[i].header) if compact else cols[i].header for i in kept]
    cells = [[_compact(row[i], cols[i].unit) if compact else row[i] for i in kept] for row in rows]
    widths = [max([row[j].cell_len for row in cells] + [len(headers[j])]) for j in range(len(kept))]
    names = [j for j, i in enumerate(kept) if cols[i].name]
    spare = width - GAP * (len(kept) - 1) - sum(w for j, w in enumerate(widths) if j not in names)
    if names:
        # the narrowest names first: what one of them does not need goes to the wider ones
        for left, j in enumerate(sorted(names, key=lambda j: widths[j])):
            share = spare // (len(names) - left)
            if share < min(widths[j], max(MIN_NAME, len(headers[j]))):
                return None
            widths[j] = min(widths[j], share)
            spare -= widths[j]
        for j in names:
            shortened = shorten_names([row[j].plain for row in cells], widths[j])
            for row, text in zip(cells, shortened):
                if text != row[j].plain:
                    row[j] = Text(text, style=row[j].style)
    elif spare < 0:
        return None
    return kept, headers, cells, widths


def fitted_table(width: int, cols: Sequence[Col], rows: Sequence[Sequence[Text]]) -> tuple[Table, int, list[str]]:
    """The table, the width it renders at (``width`` unless nothing fits, then its own), and the headers of the
    columns left out."""
    order = sorted((c.drop, i) for i, c in enumerate(cols) if c.drop is not None)
    attempts: list[tuple[bool, list[int]]] = [(False, [])] + [
        (True, [i for _, i in order[:n]]) for n in range(len(order) + 1)
    ]
    layout = None
    for compact, dropped in attempts:
        layout = _layout(width, cols, rows, compact, dropped)
        if layout is not None:
            break
    if layout is None:  # even the narrowest form is wider: print it whole, past the terminal's width
        dropped = [i for _, i in order]
        layout = _layout(10**6, cols, rows, True, dropped)
        assert layout is not None
    kept, headers, cells, widths = layout
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=False)
    for i, header, col_width in zip(kept, headers, widths):
        table.add_column(
            header,
            justify=cols[i].justify,
            no_wrap=True,
            width=col_width,
            min_width=col_width,
        )
    for row in cells:
        table.add_row(*row)
    total = sum(widths) + GAP * (len(kept) - 1)
    return table, max(width, total), [cols[i].header for i in dropped]


def print_fitted(console: Console, cols: Sequence[Col], rows: Sequence[Sequence[Text]]) -> None:
    """Print the fitted table line by line with no trailing spaces, then which columns were left out."""
    table, width, left_out = fitted_table(console.width, cols, rows)
    for line in console.render_lines(table, console.options.update(width=width), pad=False):
        text = Text()
        for segment in line:
            text.append(segment.text, segment.style)
        text.rstrip()
        console.print(text, no_wrap=True, crop=False, soft_wrap=True, highlight=False)
    if left_out:
        note = f"columns left out at {console.width} columns: {', '.join(left_out)}; widen the terminal or use --json"
        print_wrapped(console, Text(note))


def print_wrapped(console: Console, text: Text) -> None:
    """``text`` wrapped at the terminal's width at its spaces, with its styles, and no line ending in spaces; a
    one-style text keeps its indent on the further lines (two more after a bullet: ``  • ``)."""
    width = max(20, console.width)
    if not text.spans:
        plain = text.plain
        indent = " " * (len(plain) - len(plain.lstrip(" ")))
        if plain.lstrip(" ").startswith("• "):
            indent += "  "
        for part in textwrap.wrap(
            plain, width=width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        ) or [""]:
            console.print(Text(part, style=text.style), no_wrap=True, crop=False, soft_wrap=True, highlight=False)
        return
    for line in text.wrap(console, width):
        line.rstrip()
        console.print(line, no_wrap=True, crop=False, soft_wrap=True, highlight=False)
