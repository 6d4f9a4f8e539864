"""The simulated engine's deterministic text: what a reply says and how prompts are counted.

Kept apart from the server (and free of heavy imports) because tests and benchmarks
import :func:`completion_text` to assert exact content without starting anything.
Token ``i`` of a reply is the word ``tok{i}``; prompt tokens are whitespace-separated
words, at least one (the BOS token); a chat prompt is first rendered as
``"role: content\\n"`` per message plus ``"assistant:"``.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

__all__ = [
    "completion_text",
    "count_prompt_tokens",
    "render_chat_prompt",
    "token_bytes",
    "token_ids",
]
_TOKENS: list[bytes] = []


def token_bytes(n: int) -> list[bytes]:
    """Token texts ``tok0``, `` tok1``, ... as bytes, grown once and shared by all requests."""
    while len(_TOKENS) < n:
        i = len(_TOKENS)
        _TOKENS.append(f"tok{i}".encode() if i == 0 else f" tok{i}".encode())
    return _TOKENS


def completion_text(n: int) -> str:
    """The exact text of an ``n``-token reply: ``"tok0 tok1 ... tok{n-1}"``."""
    return b"".join(token_bytes(n)[:n]).decode()


def count_prompt_tokens(text: str) -> int:
    """Prompt tokens of a text: whitespace-separated words, at least one (the BOS token)."""
    return max(1, len(text.split()))


def _message_text(content: object) -> str | None:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if not isinstance(part, dict):
                return None
            text = part.get("text")
            if part.get("type") == "text" and isinstance(text, str):
                texts.append(text)
        return " ".join(texts)
    return None


def render_chat_prompt(messages: Sequence[object]) -> str | None:
    """The simulated chat template: ``"role: content\\n"`` per message, then ``"assistant:"``.

    Returns None when ``messages`` is not a list of ``{"role", "content"}`` objects.
    """
    lines: list[str] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return None
        text = _message_text(message.get("content"))
        if text is None:
            return None
        lines.append(f"{message['role']}: {text}\n")
    lines.append("assistant:")
    return "".join(lines)


def token_ids(text: str) -> list[int]:
    """Stable fake token ids (CRC32 of each word), consistent with the token count."""
    words = text.split()
    if not words:
        return [1]
    return [256 + zlib.crc32(w.encode()) % 50_000 for w in words]
