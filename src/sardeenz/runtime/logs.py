"""Engine log files: the durable record, a ring buffer, and a tailer.

Engines write stdout+stderr straight to a file (not a pipe), so an engine
outlives a controller crash without blocking on a full pipe, and a restarted
controller picks up where it left off. The tailer reads new bytes from that
file, splits complete lines and hands each one to a callback.

Reads are plain ``os.read`` calls on a local regular file, bounded to
``CHUNK`` bytes: they return from the page cache in microseconds and never
wait on a peer, so they run on the event loop instead of paying a thread hop
per poll for every engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path

from sardeenz.healthpolls import is_health_poll
from sardeenz.tasks import await_within

CHUNK = 256 * 1024
MAX_LINE = 16 * 1024  # longer lines are cut: a runaway line must not eat memory


POLL_LINES = 200
"""Health-poll access lines kept (at most): enough to see the polls go on."""


class LogBuffer:
    """The seed's ProcessLogBuffer: the last N lines, for replay and errors.

    The access lines of the controller's ``/health`` polls have a ring of their own
    (``POLL_LINES``): in one ring, one poll every 2 s pushed every line the engine
    wrote out of a 2,000-line buffer within the hour, and ``sardeenz models logs
    -n 10`` (polls hidden) printed nothing. Lines come back merged, in arrival order.
    """

    def __init__(self, max_lines: int) -> None:
        self._lines: deque[tuple[int, str]] = deque(maxlen=max_lines)
        self._polls: deque[tuple[int, str]] = deque(maxlen=min(max_lines, POLL_LINES))
        self._seq = 0

    def append(self, line: str) -> None:
        self._seq += 1
        ring = self._polls if is_health_poll(line) else self._lines
        ring.append((self._seq, line))

    def lines(self, last: int | None = None) -> list[str]:
        merged = [line for _, line in heapq.merge(self._lines, self._polls)]
        if last is None or last >= len(merged):
            return merged
        return merged[-last:]

    def __len__(self) -> int:
        return len(self._lines) + len(self._polls)


def read_tail_lines(path: Path, max_bytes: int = 512 * 1024) -> list[str]:
    """Last lines of a file (blocking; call via ``asyncio.to_thread``)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first one is probably cut
    return lines


class LogTailer:
    """Follows one log file from an offset and calls ``on_line`` per complete line."""

    def __init__(self, path: Path, on_line: Callable[[str], None], offset: int = 0) -> None:
        self.path = path
        self._on_line = on_line
        self.offset = offset
        self._partial = b""
        self._fd: int | None = None
        self.fast = True  # poll quickly while an engine starts; slower once it serves
        self._wake = asyncio.Event()

    def poll(self) -> int:
        """Read what is new now; return the number of bytes consumed."""
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return 0
        total = 0
        while True:
            chunk = os.pread(self._fd, CHUNK, self.offset)
            if not chunk:
                break
            self.offset += len(chunk)
            total += len(chunk)
            self._split(chunk)
            if len(chunk) < CHUNK:
                break
        return total

    def _split(self, chunk: bytes) -> None:
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        if len(self._partial) > MAX_LINE:
            complete.append(self._partial[:MAX_LINE])
            self._partial = b""
        for raw in complete:
            line = raw[:MAX_LINE].decode("utf-8", errors="replace").rstrip("\r")
            self._on_line(line)

    def flush_partial(self) -> None:
        """Emit an unterminated last line (the engine died mid-line)."""
        if self._partial:
            line = self._partial.decode("utf-8", errors="replace").rstrip("\r")
            self._partial = b""
            self._on_line(line)

    def nudge(self) -> None:
        """Poll now instead of at the next tick (e.g. right after the process exits)."""
        self._wake.set()

    async def run(self, fast_interval: float = 0.02, slow_interval: float = 0.25) -> None:
        try:
            while True:
                got = self.poll()
                if got:
                    continue
                interval = fast_interval if self.fast else slow_interval
                with contextlib.suppress(TimeoutError):
                    await await_within(self._wake.wait(), interval)
                self._wake.clear()
        finally:
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
