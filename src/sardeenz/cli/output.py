"""How results are printed: a rich table on a terminal, plain lines in a pipe, or JSON.

* ``--json``: the server's JSON, one document (pretty on a terminal, compact in a pipe);
* stdout is a terminal: a rich table sized to it, whose id columns never wrap or cut;
* stdout is not a terminal (``| grep``, ``| awk '{print $1}'``, ``> file``): a header
  line then one line per row, cells separated by a tab, no colour, nothing cut.

Ids are what an operator copies into the next command: a table that shortens
them ("3fa8c…") breaks the composition, so id columns keep their full width and
the other columns fold instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sardeenz.safetext import escape_unsafe

__all__ = ["Cell", "Col", "JsonOpt", "console", "emit", "emit_json", "is_terminal", "table"]

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
    """A rich table whose id columns keep every character, at any terminal width."""
    # No outer frame and one space between columns: an 80-column terminal keeps
    # room for a 36-character id next to the columns that matter.
    tab = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    for i, col in enumerate(cols):
        if col.is_id:
            widest = max([len(_text(r[i])) for r in rows] + [len(col.header)])
            tab.add_column(col.header, no_wrap=True, min_width=widest, overflow="ignore")
        else:
            tab.add_column(col.header, overflow="fold", justify="right" if col.right else "left")
    for row in rows:
        tab.add_row(*(_rich(c) for c in row))
    return tab


def emit(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Cell]]) -> None:
    """Print rows as a table on a terminal, as tab-separated lines in a pipe."""
    if is_terminal():
        console.print(table(title, cols, rows))
        return
    print("\t".join(c.header for c in cols))
    for row in rows:
        print("\t".join(_plain(c) for c in row))


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
