"""Reading a JSON or YAML document an operator gives a command (a file, or ``-``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from sardeenz.cli.client import die


def read_document(source: str) -> Any:
    """The document in ``source`` (a path, or ``-`` for stdin); JSON is YAML too."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as exc:
        die(f"cannot read {source}: {exc.strerror or exc}")
    import yaml  # only a command that reads a document pays for it

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        die(f"{source} is neither JSON nor YAML: {exc}")
