"""One data dir, one controller: an exclusive lock held for the controller's life.

Why: a second ``sardeenz serve`` on a data dir that a live one uses read the same
registry, "re-adopted" the live server's engines, and then (its port taken) stopped
them on its way out, or (on another port) took them over. Every engine of the first
server ended ``failed`` while it was still serving.

The lock is an ``flock`` on ``<data_dir>/controller.lock``, taken before anything else
reads or writes the data dir, and never released by hand: the kernel drops it when the
process ends, however it ends (SIGKILL and the OOM killer included), so a crashed
controller blocks nobody and its successor re-adopts its engines. The descriptor is
close-on-exec, so an engine (which outlives the controller on purpose) never inherits
it. The file holds the PID of its last holder, which a refusal names.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from sardeenz.store.preflight import StorageError, not_writable

__all__ = ["LOCK_NAME", "DataDirInUse", "DataDirLock"]

LOCK_NAME = "controller.lock"


class DataDirInUse(Exception):
    """Another live process holds the data dir's lock; ``str()`` is the line to print."""

    def __init__(self, data_dir: Path, holder: int | None) -> None:
        who = f"pid {holder}" if holder is not None else "a process whose pid it did not record"
        super().__init__(
            f"the data dir {data_dir} is in use by another sardeenz serve ({who}); nothing "
            "was touched. Stop that server first, or give this one another --data-dir"
        )
        self.holder = holder


class DataDirLock:
    """The held lock. Keep the object for as long as the process serves."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd = fd
        self.path = path

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Take the lock or raise ``DataDirInUse`` (held) / ``StorageError`` (no file).

        A read-only data dir still gets its lock taken through a read-only open when the
        file exists (``flock`` needs no write access), so a server refused by the disk
        check afterwards still says so rather than that another server runs there.
        """
        path = data_dir / LOCK_NAME
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            fd = _open(path)
        except OSError as exc:
            raise not_writable(data_dir, exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _recorded_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DataDirInUse(data_dir, holder) from None
            raise StorageError(
                f"cannot lock {path}: {exc.strerror or exc}; the data dir must be on a "
                "file system with flock(2) support"
            ) from exc
        with contextlib.suppress(OSError):  # read-only: the disk check reports it next
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        """Drop the lock (tests; a serving process keeps it until it exits)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _open(path: Path) -> int:
    flags = os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or not path.is_file():
            raise
        return os.open(path, os.O_RDONLY | flags)


def _recorded_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else None
