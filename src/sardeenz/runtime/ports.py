"""Engine port allocation, claimed host-wide.

A bind probe alone is not enough to own a port. vLLM 0.10-0.22 bind with
SO_REUSEPORT, so a second engine on a taken port may start WITHOUT error and
silently share its traffic; and an engine that is still loading has its port
bound but not listening, which a SO_REUSEADDR probe (the kind that tolerates
TIME_WAIT leftovers) does not see. Two Sardeenz servers on one host with the
same ``VLLM_BASE_PORT`` then handed out the same port.

So each port an instance holds is *claimed*: an advisory ``flock`` on
``<lock dir>/<port>.lock``, held through an open file for as long as the
instance holds the port. Every Sardeenz of the host uses the same lock dir (see
``Settings.effective_runtime_dir``), so none hands out a port another one
claimed, even while its engine loads with the port closed. The kernel drops the
lock when the controller dies, so a stale file never blocks anybody; files are
never deleted (unlinking a lock file races with a process that just opened it).

A claimed port is still probed (a process that is not a Sardeenz may hold it),
and ``runtime/identity.py`` checks who really listens before an instance
becomes active.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import socket
import stat
import threading
from collections.abc import Collection
from pathlib import Path

from sardeenz.config import ConfigError
from sardeenz.errors import Conflict, Unavailable
from sardeenz.runtime import identity


class PortRangeExhausted(Conflict):
    code = "port_range_exhausted"


class PortClaimFailed(Unavailable):
    """The lock file of a port cannot be opened (full disk, read-only dir, ...)."""

    code = "port_claim_failed"


class PortLockDirError(ConfigError):
    """The lock dir cannot be used (not creatable, not ours, not a directory)."""


def _binds(host: str, port: int, *, reuse_addr: bool) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        if reuse_addr:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_is_free(host: str, port: int) -> bool:
    """Whether an engine could bind ``port`` and be the only one there.

    A SO_REUSEADDR bind (as uvicorn and so vLLM do) must succeed: that rules out
    listeners. A plain bind also fails on sockets that are only *bound*, which is an
    engine still loading, but also on TIME_WAIT leftovers of a previous engine,
    which must not count as taken. The kernel lists the leftovers in
    its table of TCP sockets (``tcp_table``) and not the bound-only sockets, which
    tells them apart.
    Blocking (may read /proc): the supervisor calls it in a worker thread.
    """
    if not _binds(host, port, reuse_addr=True):
        return False
    if _binds(host, port, reuse_addr=False):
        return True
    return bool(identity.sockets_on_port(port))


def prepare_lock_dir(path: Path, *, must_own: bool) -> Path:
    """Create the lock dir (0700) and refuse one that is a symlink or, when
    ``must_own`` (the default dir in the shared /tmp), owned by another user."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError as exc:
        raise PortLockDirError(
            f"SARDEENZ_RUNTIME_DIR: cannot create the port lock dir {path}: {exc.strerror}; "
            "point it at a directory this user can write"
        ) from exc
    if not stat.S_ISDIR(info.st_mode):
        raise PortLockDirError(f"port lock dir {path} is not a directory (or is a symlink)")
    if must_own and info.st_uid != os.getuid():
        raise PortLockDirError(
            f"port lock dir {path} belongs to uid {info.st_uid}, not to this user; "
            "set SARDEENZ_RUNTIME_DIR to a directory of your own"
        )
    return path


class PortAllocator:
    """Hands out engine ports from a range; each one claimed host-wide while held.

    Thread-safe: ``allocate`` probes ports and opens files, so the supervisor runs
    it in a worker thread while the event loop may ``release`` another port.
    """

    def __init__(self, ports: range, host: str = "127.0.0.1", lock_dir: Path | None = None) -> None:
        self._ports = ports
        self._host = host
        self._lock_dir = lock_dir
        # port -> the open lock file holding its claim (None: held without a claim).
        self._held: dict[int, int | None] = {}
        self._probing: set[int] = set()  # being claimed and probed by a thread now
        self._mutex = threading.Lock()

    @property
    def lock_dir(self) -> Path | None:
        return self._lock_dir

    def _claim(self, port: int) -> int | None:
        """Take the host-wide lock of ``port``; None if another controller holds it."""
        if self._lock_dir is None:
            return -1  # no host-wide claims (a private allocator): nothing to hold
        path = self._lock_dir / f"{port}.lock"
        flags = os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            try:
                fd = os.open(path, flags | os.O_RDWR | os.O_CREAT, 0o644)
            except PermissionError:  # another user's file in a shared dir: flock works read-only
                fd = os.open(path, flags | os.O_RDONLY)
        except OSError as exc:
            raise PortClaimFailed(
                f"cannot claim engine port {port}: {exc.strerror} ({path}); "
                "check SARDEENZ_RUNTIME_DIR",
                port=port,
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise
        # Who holds it, for an operator looking at the dir; the lock is what counts.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    @staticmethod
    def _unclaim(fd: int | None) -> None:
        if fd is not None and fd >= 0:
            os.close(fd)  # closing the last descriptor drops the flock

    def reserve(self, port: int) -> bool:
        """Hold ``port`` for an adopted engine; False if another controller claims it.

        The port counts as held by us either way (the engine is there); the caller's
        identity check decides whether the engine may keep serving on it.
        """
        with self._mutex:
            if port in self._held:
                return self._held[port] is not None
            try:
                fd = self._claim(port)
            except PortClaimFailed:
                fd = None  # the engine is there all the same; the caller warns
            self._held[port] = fd
            return fd is not None

    def release(self, port: int) -> None:
        with self._mutex:
            self._unclaim(self._held.pop(port, None))

    def allocate(self, exclude: Collection[int] = ()) -> int:
        """The first port of the range that nobody holds, claimed for the caller.

        ``exclude``: ports not to use even if they look free (an instance restarting
        elsewhere skips the ports it already found taken). Blocking: run it in a thread.
        The mutex is held only around the bookkeeping, never across a probe, so a
        ``release`` on the event loop never waits for one.
        """
        claimed_elsewhere = 0
        busy = 0
        for port in self._ports:
            with self._mutex:
                if port in self._held or port in self._probing or port in exclude:
                    continue
                self._probing.add(port)
            fd: int | None = None
            try:
                fd = self._claim(port)
                if fd is None:
                    claimed_elsewhere += 1
                elif not port_is_free(self._host, port):
                    self._unclaim(fd)
                    fd = None
                    busy += 1
            except BaseException:
                self._unclaim(fd)
                raise
            finally:
                with self._mutex:
                    self._probing.discard(port)
                    if fd is not None:
                        self._held[port] = fd
            if fd is not None:
                return port
        raise PortRangeExhausted(
            f"no free engine port in {self._ports.start}-{self._ports.stop - 1}: "
            f"{len(self.taken)} held by instances of this server, {claimed_elsewhere} "
            f"claimed by other Sardeenz servers on this host, {busy} in use by other "
            "processes; unload one or widen SARDEENZ_PORT_RANGE_SIZE / VLLM_BASE_PORT",
            range_start=self._ports.start,
            range_end=self._ports.stop - 1,
        )

    async def allocate_async(self, exclude: Collection[int] = ()) -> int:
        """``allocate`` in a worker thread, without leaking a claim if the caller is
        cancelled meanwhile (the thread still finishes: its port is given back)."""
        job = asyncio.ensure_future(asyncio.to_thread(self.allocate, exclude))
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            job.add_done_callback(self._release_result)
            raise

    def _release_result(self, job: asyncio.Future[int]) -> None:
        if not job.cancelled() and job.exception() is None:
            self.release(job.result())

    def holds_claim(self, port: int) -> bool:
        """Whether this allocator holds the host-wide lock of ``port``."""
        with self._mutex:
            fd = self._held.get(port)
            return fd is not None

    @property
    def taken(self) -> frozenset[int]:
        with self._mutex:
            return frozenset(self._held)
