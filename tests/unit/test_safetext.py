"""The one-line rule for user text: what is unsafe, how it is escaped, how the log holds it."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import textwrap

import pytest

from sardeenz.safetext import OneLineFormatter, escape_unsafe, first_unsafe

FORGED = "2026-01-01 00:00:00,000 CRITICAL sardeenz: forged"
UNSAFE = ["\n", "\r", "\t", "\x00", "\x0b", "\x0c", "\x1b", "\x1c", "\x7f", "\x85", "\x9b"]
UNSAFE += ["\u2028", "\u2029"]


@pytest.mark.parametrize("char", UNSAFE, ids=lambda c: f"U+{ord(c):04X}")
def test_every_line_break_and_terminal_control_is_unsafe(char: str) -> None:
    text = f"model{char}{FORGED}"
    assert first_unsafe(text) is not None
    escaped = escape_unsafe(text)
    assert escaped.splitlines() == [escaped]
    assert first_unsafe(escaped) is None
    assert escaped.endswith(FORGED)


@pytest.mark.parametrize(
    "text", ["org/Qwen2.5-1.5B-Instruct", "/models/a b", "Modèle « test » 1.5B", "模型", r"C:\m"]
)
def test_printable_text_is_left_alone(text: str) -> None:
    assert first_unsafe(text) is None
    assert escape_unsafe(text) == text


def test_escapes_name_the_character() -> None:
    assert escape_unsafe("a\nb\x1b[31m\u2028") == "a\\x0ab\\x1b[31m\\u2028"
    assert first_unsafe("ok\x85") == "\\x85"


def _formatted(record_args: tuple[object, ...], exc: BaseException | None = None) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("test_safetext")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        if exc is None:
            logger.warning("loading %s as %s", *record_args)
        else:
            try:
                raise exc
            except BaseException:
                logger.exception("failed %s", *record_args)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_a_message_is_one_line_whatever_its_arguments() -> None:
    out = _formatted((f"a\n{FORGED}", "\x1b[2K\u2028x"))
    assert out.count("\n") == 1
    assert out.startswith("WARNING test_safetext: loading a\\x0a2026-01-01")
    assert first_unsafe(out.rstrip("\n")) is None


def test_a_traceback_cannot_pass_for_a_record() -> None:
    out = _formatted((f"x\n{FORGED}",), ValueError(f"bad\n{FORGED}\u2028{FORGED}"))
    lines = out.rstrip("\n").split("\n")
    assert lines[0].startswith("ERROR test_safetext: failed x\\x0a")
    assert all(line.startswith("    ") for line in lines[1:])  # indented: never a record
    assert any(line.strip().startswith(FORGED) for line in lines[1:])  # kept, indented
    assert all(first_unsafe(line) is None for line in lines)


def test_sardeenz_serve_logs_through_the_formatter() -> None:
    """The logging ``sardeenz serve`` configures (in a fresh interpreter: pytest owns ours)."""
    code = textwrap.dedent(
        """
        import logging
        from sardeenz.cli import _configure_logging
        from sardeenz.config import Settings
        _configure_logging(Settings())
        logging.getLogger("sardeenz.x").warning("loading %s", "a\\nCRITICAL forged\\u2028b")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stderr.count("\n") == 1, out.stderr
    assert "WARNING sardeenz.x: loading a\\x0aCRITICAL forged\\u2028b" in out.stderr
