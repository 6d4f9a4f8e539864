"""Text from users that must stay one line: the character rule and the log formatter.

Names and paths given to ``POST /api/v1/models/load`` end up in the controller's log,
in argv entries and on dashboards. A newline in one of them forges a log line, an ANSI
escape rewrites a terminal, and vLLM would take a name starting with ``-`` for a flag.
One rule says which characters are never legitimate in such text (``UNSAFE_CHARS``);
the API refuses them (``first_unsafe``), and the log formatter escapes them
(``OneLineFormatter``) in case some other path still carries one into a log record.

Unsafe: C0 controls (tab and line breaks included), DEL, C1 controls (NEL ``U+0085``
among them) and the Unicode line and paragraph separators ``U+2028``/``U+2029``:
together, every character ``str.splitlines`` breaks on and every byte a terminal
interprets as a control.
"""

from __future__ import annotations

import logging
import re

__all__ = [
    "TEXT_WHITESPACE",
    "UNSAFE_CHARS",
    "OneLineFormatter",
    "escape_unsafe",
    "first_unsafe",
]

UNSAFE_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
TEXT_WHITESPACE = "\t\n\r"
"""What free text (a prompt, comments) may hold of ``UNSAFE_CHARS``: its own line breaks
and tabs, never an escape sequence or a terminal control."""


def first_unsafe(text: str, allowed: str = "") -> str | None:
    """The first unsafe character of ``text`` not in ``allowed`` (as an escape, for
    messages), or None. ``allowed``: e.g. a prompt's line breaks and tabs."""
    for match in UNSAFE_CHARS.finditer(text):
        if match.group() not in allowed:
            return _escape_char(match)
    return None


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_unsafe(text: str) -> str:
    """``text`` with each unsafe character written as ``\\xNN`` / ``\\uNNNN``: one line.

    Backslashes are left alone: the goal is that no text can break a line or drive a
    terminal, not that the escaping can be reversed.
    """
    return UNSAFE_CHARS.sub(_escape_char, text)


class OneLineFormatter(logging.Formatter):
    """Every log record is one line starting at column 0; nothing else is.

    The message (arguments included) is escaped, so user text cannot end a record
    early and start a forged one. A traceback or stack is the one legitimate
    multi-line part: each of its lines is escaped and indented, so a forged line
    inside an exception's message still cannot pass for a record of its own.
    """

    def format(self, record: logging.LogRecord) -> str:
        # ``logging.Formatter`` caches the traceback text on the record: another handler's
        # unindented cache must not be reused here, nor ours leak into its output.
        cached = record.exc_text
        record.exc_text = None
        try:
            return super().format(record)
        finally:
            record.exc_text = cached

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_unsafe(super().formatMessage(record))

    def formatException(self, ei: logging._SysExcInfoType) -> str:
        return _indent(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indent(super().formatStack(stack_info))


def _indent(text: str) -> str:
    return "\n".join("    " + escape_unsafe(line) for line in text.split("\n"))
