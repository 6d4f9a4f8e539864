"""How results are printed: a rich table on a terminal, plain lines in a pipe, or JSON.

* ``--json``: the server's JSON, one document (pretty on a terminal, compact in a pipe);
* stdout is a terminal: a rich table sized to it, whose id columns never wrap or cut;
* stdout is not a terminal (``| grep``, ``| awk '{print $1}'``, ``> file``): a header
  line then one line per row, cells separated by a tab, no colour, nothing cut.

Ids are what an operator copies into the next command: a table that shortens
them ("3fa8c…") breaks the composition, so id columns keep their full width.
No cell is ever broken inside a word ("NAM/E", "phi/-pr/ofi/le"): on a terminal a
column wraps only between words, a column with nothing to say ("-" in every
row) is left out, and when the words still do not fit side by side at the
terminal's width the rows are printed as records instead, one "HEADER  value"
line per column. Pipes always get every column, tab-separated.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from sardeenz.safetext import escape_unsafe

__all__ = [
    "Cell",
    "Col",
    "JsonOpt",
    "console",
    "emit",
    "emit_json",
    "fits",
    "is_terminal",
    "records",
    "table",
    "when",
    "without_empty_columns",
]

console = Console(highlight=False, emoji=False)
"""No emoji codes: a name such as ``a:b:c`` is printed as it is, not as ``a🅱c``."""

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the server's JSON instead.")]

Cell = str | tuple[str, str]
"""A cell's text, or (text, rich style) for a coloured cell on a terminal."""


@dataclass(frozen=True, slots=True)
class Col:
    header: str
    is_id: bool = False
    right: bool = False


def is_terminal() -> bool:
    return console.is_terminal


def emit_json(data: Any) -> None:
    if is_terminal():
        console.print_json(json.dumps(data))
    else:
        print(json.dumps(data), flush=True)


def table(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Cell]]) -> Table:
    """A rich table whose id columns keep every character and whose words are never cut.

    Each column is at least as wide as its longest word (headers included), so rich
    wraps between words only; :func:`fits` says whether that fits a width at all.
    When the cells do not fit the terminal side by side, the widths are set here
    (:func:`_allot`): rich's own shrinking takes columns below their least width
    and then grows them back past the terminal's edge, which cropped words away.
    """
    # No outer frame and one space between columns: an 80-column terminal keeps
    # room for a 36-character id next to the columns that matter.
    tab = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    widths = _allot(
        _narrowest(cols, rows),
        [
            max(len(_text(c)) for c in (col.header, *(r[i] for r in rows)))
            for i, col in enumerate(cols)
        ],
        console.width - (2 * len(cols) - 1),
    )
    for i, col in enumerate(cols):
        if col.is_id:
            tab.add_column(col.header, no_wrap=True, width=widths[i], overflow="ignore")
        else:
            tab.add_column(
                col.header,
                width=widths[i],
                overflow="fold",
                justify="right" if col.right else "left",
            )
    for row in rows:
        tab.add_row(*(_rich(c) for c in row))
    return tab


def _allot(least: list[int], most: list[int], room: int) -> list[int]:
    """Column widths: each its ``most`` when they all fit ``room``; else each its
    ``least`` plus a share of what is left, in proportion to what it still wants."""
    if sum(most) <= room:
        return most
    spare = room - sum(least)
    wants = [m - lo for lo, m in zip(least, most, strict=True)]
    if spare <= 0 or not any(wants):
        return least
    shares = [spare * w // sum(wants) for w in wants]
    # what integer division left over, one column at a time, to those that want more
    left = spare - sum(shares)
    for i in sorted(range(len(wants)), key=lambda i: wants[i] - shares[i], reverse=True)[:left]:
        shares[i] += 1
    return [lo + sh for lo, sh in zip(least, shares, strict=True)]


def _narrowest(cols: Sequence[Col], rows: Sequence[Sequence[Cell]]) -> list[int]:
    """Each column at its narrowest: an id whole, any other its longest word."""
    return [
        max([len(_text(r[i])) for r in rows] + [len(c.header)])
        if c.is_id
        else _longest_word(c, i, rows)
        for i, c in enumerate(cols)
    ]


def _longest_word(col: Col, index: int, rows: Sequence[Sequence[Cell]]) -> int:
    texts = [col.header, *(_text(r[index]) for r in rows)]
    return max(len(word) for text in texts for word in (text.split() or [""]))


def fits(cols: Sequence[Col], rows: Sequence[Sequence[Cell]], width: int) -> bool:
    """Whether :func:`table` fits ``width`` with every word whole.

    Each column at its narrowest (an id whole, any other its longest word) plus, as
    :func:`table` lays it out, one space of padding after every column and one
    separator between two.
    """
    narrowest = _narrowest(cols, rows)
    return sum(narrowest) + 2 * len(narrowest) - 1 <= width


def without_empty_columns(
    cols: Sequence[Col], rows: Sequence[Sequence[Cell]]
) -> tuple[list[Col], list[list[Cell]]]:
    """The columns with something in at least one row (ids are always kept)."""
    keep = [
        i
        for i, c in enumerate(cols)
        if c.is_id or not rows or any(_text(r[i]).strip() not in ("", "-") for r in rows)
    ]
    return [cols[i] for i in keep], [[r[i] for i in keep] for r in rows]


def records(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Cell]]) -> None:
    """Each row as a block of "HEADER  value" lines: any width, every word whole.

    A value too long for the line wraps between words, indented under itself; one
    with a word too long to sit beside the headers (a long run name) goes on its own
    line under its header, where the whole width keeps it whole.
    """
    if title:
        console.print(Text(title, style="italic"))
    header_width = max(len(c.header) for c in cols)
    beside = console.width - header_width - 2
    for n, row in enumerate(rows):
        if n:
            console.print()
        grid = _record_grid(header_width)
        for col, cell in zip(cols, row, strict=True):
            if _longest_word_of(_text(cell)) <= beside:
                grid.add_row(col.header, _rich(cell))
                continue
            if grid.row_count:
                console.print(grid)
                grid = _record_grid(header_width)
            console.print(Text(col.header, style="bold"))
            console.print(Padding(_rich(cell), (0, 0, 0, 2)), overflow="fold")
        if grid.row_count:
            console.print(grid)


def _record_grid(header_width: int) -> Table:
    grid = Table.grid(padding=(0, 2, 0, 0))
    grid.add_column(style="bold", no_wrap=True, min_width=header_width)
    grid.add_column(overflow="fold")
    return grid


def _longest_word_of(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


def emit(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Cell]]) -> None:
    """Print rows as a table on a terminal, as tab-separated lines in a pipe."""
    if is_terminal():
        shown_cols, shown_rows = without_empty_columns(cols, rows)
        if fits(shown_cols, shown_rows, console.width):
            console.print(table(title, shown_cols, shown_rows))
        else:
            records(title, shown_cols, shown_rows)
        return
    print("\t".join(c.header for c in cols))
    for row in rows:
        print("\t".join(_plain(c) for c in row))


def when(iso: str | None) -> str:
    """``2026-12-03 17:58``: an API timestamp (UTC) as every table prints it.

    The same year-first form as the dashboard (``formatDate``), so a date read in
    one is found in the other; the year stays, as runs and profiles outlive one.
    """
    if not iso:
        return "-"
    return iso[:16].replace("T", " ")


def _text(cell: Cell) -> str:
    """The cell as printed: stored text (a profile's name, a model path) may hold an ESC
    or a BEL; escaped, it cannot drive the terminal of whoever lists it."""
    return escape_unsafe(cell if isinstance(cell, str) else cell[0])


def _rich(cell: Cell) -> Text:
    if isinstance(cell, str):
        return Text(_text(cell))
    return Text(_text(cell), style=cell[1])


def _plain(cell: Cell) -> str:
    # A tab or newline inside a cell would shift every later column of the line.
    raw = cell if isinstance(cell, str) else cell[0]
    return escape_unsafe(" ".join(raw.split())) or "-"
