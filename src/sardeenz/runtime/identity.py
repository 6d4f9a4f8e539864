"""Who serves a port: the engine's own process tree, or someone else?

A 200 from ``/health`` on an engine's port proves only that *some* server
answers there. vLLM 0.10-0.22 bind with SO_REUSEPORT, so a second server on the
same port can start without error and take part of the traffic; and a port
chosen while another engine was still loading (bound, not yet listening) may
end up served by that other engine. So before an instance becomes ``active``
the runner asks the kernel: every listening socket on the port (its table of TCP
sockets, ``tcp_table``) must be an open file of the engine's process tree (the
socket inodes in ``/proc/<pid>/fd``). A listener of any other process is a
conflict, whatever address it is bound to.

The kernel and ``/proc`` readers block: ``identify`` runs them in a worker thread
(``asyncio.to_thread``); call the others from a thread too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import httpx
import psutil

from sardeenz import proctree
from sardeenz.runtime.tcp_table import LISTEN, TcpSocket, tcp_sockets

__all__ = [
    "LISTEN",
    "PortOwnership",
    "TcpSocket",
    "Verdict",
    "engine_port_ownership",
    "identify",
    "listeners_by_port",
    "port_ownership",
    "served_names",
    "socket_holders",
    "socket_inodes",
    "sockets_on_port",
]


def sockets_on_port(port: int, states: Collection[int] | None = None) -> list[TcpSocket]:
    """TCP sockets (IPv4 and IPv6) whose local port is ``port``, optionally by state.

    A socket that is bound but neither listening nor connected is in no table the
    kernel lists here: it cannot be seen, only bound against.
    """
    return tcp_sockets(port, states)


def listeners_by_port() -> dict[int, list[TcpSocket]]:
    """Every listening TCP socket by its local port, from one read of the kernel's tables.

    For a caller that checks many ports at once: one question to the kernel for all
    the ports rather than one per port.
    """
    found: dict[int, list[TcpSocket]] = {}
    for sock in tcp_sockets(None, {LISTEN}):
        found.setdefault(sock.port, []).append(sock)
    return found


def _fd_socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    fd_dir = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:  # gone, or not ours to read
        return inodes
    for name in names:
        with contextlib.suppress(OSError):
            target = os.readlink(f"{fd_dir}/{name}")
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def socket_inodes(pids: Iterable[int]) -> set[int]:
    """Inodes of every socket the processes ``pids`` hold open."""
    inodes: set[int] = set()
    for pid in pids:
        inodes |= _fd_socket_inodes(pid)
    return inodes


def socket_holders(inodes: Collection[int]) -> dict[int, set[int]]:
    """Which processes hold each socket: a walk over every visible ``/proc/<pid>/fd``.

    Best effort: processes of other users are not readable, so a socket may have no
    known holder. Only used to name a conflict, never to decide one.
    """
    wanted = set(inodes)
    holders: dict[int, set[int]] = {i: set() for i in wanted}
    if not wanted:
        return holders
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            for inode in _fd_socket_inodes(int(entry)) & wanted:
                holders[inode].add(int(entry))
    return holders


@dataclass(frozen=True, slots=True)
class PortOwnership:
    """The listeners on one port, split into the engine's own and everybody else's."""

    port: int
    own: tuple[TcpSocket, ...]
    foreign: tuple[TcpSocket, ...]
    foreign_pids: tuple[int, ...] = ()
    foreign_names: tuple[str, ...] = ()

    @property
    def served_by_own_tree(self) -> bool:
        return bool(self.own) and not self.foreign

    def describe_foreign(self) -> str:
        """e.g. ``port 12346 is also listened on by another process (pid 41 'python3',
        on 127.0.0.1)``."""
        where = ", ".join(sorted({s.address for s in self.foreign}))
        if self.foreign_pids:
            who = ", ".join(
                f"pid {pid} {name!r}" if name else f"pid {pid}"
                for pid, name in zip(self.foreign_pids, self.foreign_names, strict=True)
            )
        else:
            who = "a process this controller cannot see"
        return f"port {self.port} is also listened on by another process ({who}, on {where})"


def port_ownership(
    port: int, pids: Collection[int], listeners: Sequence[TcpSocket] | None = None
) -> PortOwnership:
    """Classify the listeners on ``port``: held by one of ``pids``, or foreign.

    ``listeners``: the port's listening sockets when the caller has read them already
    (``listeners_by_port``); otherwise they are read here.
    """
    if listeners is None:
        listeners = sockets_on_port(port, {LISTEN})
    if not listeners:
        return PortOwnership(port, (), ())
    owned = socket_inodes(pids)
    own = tuple(s for s in listeners if s.inode in owned)
    foreign = tuple(s for s in listeners if s.inode not in owned)
    if not foreign:
        return PortOwnership(port, own, ())
    holders = socket_holders({s.inode for s in foreign})
    foreign_pids = sorted(set().union(*holders.values()) - set(pids))
    names = []
    for pid in foreign_pids:
        name = ""
        with contextlib.suppress(psutil.Error):
            name = psutil.Process(pid).name()
        names.append(name)
    return PortOwnership(port, own, foreign, tuple(foreign_pids), tuple(names))


def engine_port_ownership(
    port: int, root_pid: int | None, listeners: Sequence[TcpSocket] | None = None
) -> PortOwnership:
    """``port_ownership`` for the process tree of the engine whose main PID is ``root_pid``."""
    pids = [p.pid for p in proctree.tree(root_pid)] if root_pid is not None else []
    return port_ownership(port, pids, listeners)


async def served_names(
    http: httpx.AsyncClient, host: str, port: int, served_name: str
) -> set[str] | None:
    """The model ids ``GET /v1/models`` lists on ``port``; None while it cannot tell.

    An engine started with ``--api-key`` answers 401: then the sockets are the proof
    and ``served_name`` is taken as listed.
    """
    try:
        resp = await http.get(f"http://{host}:{port}/v1/models")
        if resp.status_code in (401, 403):
            return {served_name}
        if resp.status_code != 200:
            return None
        return {str(m["id"]) for m in resp.json()["data"]}
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """One look at an engine's port: who listens, and what ``/v1/models`` says."""

    ownership: PortOwnership
    served_name: str
    names: frozenset[str] | None = None
    """What ``/v1/models`` listed; None when not asked (no listener of the engine's own,
    or a foreign one) or when it did not answer."""

    @property
    def conflict(self) -> str | None:
        """Why another process is on the port, if one is."""
        return self.ownership.describe_foreign() if self.ownership.foreign else None

    @property
    def wrong_engine(self) -> str | None:
        """Why the engine's own listener is not serving this model, if it is not."""
        if self.names is None or self.served_name in self.names:
            return None
        return (
            f"the server on port {self.ownership.port} lists {sorted(self.names)}, "
            f"not {self.served_name!r}"
        )

    @property
    def confirmed(self) -> bool:
        return (
            self.ownership.served_by_own_tree
            and self.names is not None
            and self.served_name in self.names
        )


async def identify(
    http: httpx.AsyncClient, host: str, port: int, root_pid: int | None, served_name: str
) -> Verdict:
    """Is ``port`` served by the engine of ``root_pid`` alone, as ``served_name``?

    The listeners are checked again after ``/v1/models`` answered, so a process that
    joined the port meanwhile is not missed.
    """
    owner = await asyncio.to_thread(engine_port_ownership, port, root_pid)
    if owner.foreign or not owner.own:
        return Verdict(owner, served_name)
    names = await served_names(http, host, port, served_name)
    if names is not None and served_name in names:
        owner = await asyncio.to_thread(engine_port_ownership, port, root_pid)
    return Verdict(owner, served_name, None if names is None else frozenset(names))
