"""vLLM-format log lines: what the controller's log parser and the operator read.

vLLM 0.14 without colours writes ``(TAG pid=N) LEVEL MM-DD HH:MM:SS [file.py:LINE]
message``; the supervisor tails this process's log file and parses readiness, memory
and error causes from exactly those lines, so they are written by one class and
flushed at once. The access log keeps uvicorn's format but is buffered here (see
:meth:`VllmLog.access`): it is the only per-request write.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from http import HTTPStatus
from typing import Final, TextIO

from sardeenz.asgi import Scope

__all__ = ["VLLM_SRC", "Frame", "VllmLog"]

VLLM_SRC: Final = "/opt/sardeenz/sim/vllm"
"""Where tracebacks say vLLM's sources are: clearly not a real install."""

Frame = tuple[str, int, str, str]
"""One traceback frame: path, line number, function, source line ('' for none)."""

_ACCESS_FLUSH_SECONDS: Final = 0.1


@functools.cache
def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class VllmLog:
    """Writes lines exactly as vLLM 0.14 does without colours.

    ``(TAG pid=N) LEVEL MM-DD HH:MM:SS [file.py:LINE] message``; a multi-line message is
    re-prefixed on every line and joined with ``\\r\\n`` (vLLM's NewLineFormatter), and
    every write is flushed because the supervisor tails the log file while we run.
    Writes are small and rare (never per token), so they stay on the event loop thread.
    """

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out = out
        self.err = err
        self.api_tag = f"APIServer pid={os.getpid()}"
        self.core_tag = "EngineCore_DP0 pid=0"
        self._access: list[str] = []
        self._access_flush: asyncio.TimerHandle | None = None

    def set_core_pid(self, pid: int) -> None:
        self.core_tag = f"EngineCore_DP0 pid={pid}"

    def _write(self, stream: TextIO, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            stream.write(text)
            stream.flush()

    def line(self, tag: str, level: str, src: str, message: str) -> None:
        prefix = f"({tag}) {level} {time.strftime('%m-%d %H:%M:%S')} [{src}] "
        text = prefix + ("\r\n" + prefix).join(message.split("\n")) + "\n"
        if self._access:  # keep access lines in order with everything else on stdout
            text = "".join(self._access) + text
            self._access.clear()
        self._write(self.out, text)

    def access(self, scope: Scope, status: int) -> None:
        """uvicorn's access line, at a fraction of its cost: buffered, flushed within 0.1 s.

        uvicorn's own access logger (the logging module plus a flush per request) costs
        about as much as the whole request here; benchmarks hit this server hard.
        """
        client = scope.get("client")
        query = scope.get("query_string", b"")
        path = scope["path"] + ("?" + query.decode("latin-1") if query else "")
        self._access.append(
            f"INFO:     {client[0] if client else ''}:{client[1] if client else ''} - "
            f'"{scope["method"]} {path} HTTP/{scope["http_version"]}" {status} '
            f"{_phrase(status)}\n"
        )
        if self._access_flush is None:
            loop = asyncio.get_running_loop()
            self._access_flush = loop.call_later(_ACCESS_FLUSH_SECONDS, self.flush_access)

    def flush_access(self) -> None:
        if self._access_flush is not None:
            self._access_flush.cancel()
            self._access_flush = None
        if self._access:
            text = "".join(self._access)
            self._access.clear()
            self._write(self.out, text)

    def api(self, src: str, message: str, level: str = "INFO") -> None:
        self.line(self.api_tag, level, src, message)

    def core(self, src: str, message: str, level: str = "INFO") -> None:
        self.line(self.core_tag, level, src, message)

    def raw(self, tag: str, text: str) -> None:
        """Unformatted stderr text (a traceback Python prints itself), tagged per line."""
        self._write(self.err, "".join(f"({tag}) {ln}\n" for ln in text.rstrip("\n").split("\n")))

    def api_traceback(self, frames: list[Frame], error: str) -> None:
        """A Python traceback of the API server, as vLLM prints one when it dies."""
        lines = ["Traceback (most recent call last):"]
        for path, lineno, func, code in frames:
            lines.append(f'  File "{path}", line {lineno}, in {func}')
            if code:
                lines.append(f"    {code}")
        lines.append(error)
        self.raw(self.api_tag, "\n".join(lines))
