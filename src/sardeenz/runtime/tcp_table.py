"""The kernel's table of TCP sockets: who is bound where, in which state, by which inode.

Asked through the kernel's ``sock_diag`` netlink interface (what ``ss`` uses), with the
states wanted as a filter the kernel applies itself: a question about listeners is
answered from the kernel's listening sockets alone. ``/proc/net/tcp`` answers the same
question by formatting every socket of the host as text, ``TIME_WAIT`` leftovers of
finished connections included: thousands on a busy node, read again for every look at
an engine's port (benchmarks/port_checks.py measures both). ``/proc/net/tcp{,6}`` is
still read where netlink is refused (a sandbox that filters it): same answers, slower.

Both block: call them from a worker thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import struct
from collections.abc import Collection, Iterator
from dataclasses import dataclass

LISTEN = 0x0A
"""``TCP_LISTEN``: the state of a listening socket, in both interfaces."""
TIME_WAIT = 0x06
"""``TCP_TIME_WAIT``: a closed connection's leftover, held for a minute by its closer."""
ALL_STATES = 0x1FFE
"""Every TCP state as the bit mask both readers take (bit ``1 << state``):
``TCP_ESTABLISHED`` (1) to ``TCP_NEW_SYN_RECV`` (12). Not bit 13, with which netlink
would also list sockets that are only bound (``TCP_BOUND_INACTIVE``), which
``/proc/net/tcp`` never lists and ``ports.port_is_free`` relies on not seeing."""
PROC_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLMSG_HEADER = struct.Struct("=IHHII")
"""``struct nlmsghdr``: length, type, flags, sequence number, port id."""
DIAG_REQUEST = struct.Struct("=BBBBI48x")
"""``struct inet_diag_req_v2``: family, protocol, extensions, pad, states, and an
all-zero ``inet_diag_sockid`` (a dump matches any socket in the states)."""
DIAG_MESSAGE = struct.Struct("=BBBB2s2s16s16s4x8xIIIII")
"""``struct inet_diag_msg``: family, state, timer, retransmits, then the socket id
(source and destination port and address, big-endian; interface; cookie), expiry,
receive and send queues, uid and inode."""
RECEIVE_BYTES = 65536
TIMEOUT_SECONDS = 2.0
"""A dump is answered at once; the bound only keeps a wedged kernel from hanging a thread."""
_sequence = itertools.count(1)


@dataclass(frozen=True, slots=True)
class TcpSocket:
    """One TCP socket: its local address and port, state and inode (0 for a socket no
    process holds any more, such as a ``TIME_WAIT`` leftover)."""

    address: str
    port: int
    state: int
    inode: int


def tcp_sockets(port: int | None, states: Collection[int] | None) -> list[TcpSocket]:
    """TCP sockets (IPv4 and IPv6) on local ``port`` (None: every port) in ``states``
    (None: every state)."""
    mask = state_mask(states)
    try:
        found = from_netlink(mask)
    except OSError:
        found = from_proc(mask)
    return [s for s in found if port is None or s.port == port]


def state_mask(states: Collection[int] | None) -> int:
    """The states as the bit mask both readers take (None: every state)."""
    return ALL_STATES if states is None else sum(1 << s for s in set(states))


def from_netlink(mask: int) -> list[TcpSocket]:
    """The sockets in the states of ``mask``, from ``sock_diag`` (``OSError`` if refused)."""
    return list(_netlink_dumps(mask))


def _netlink_dumps(mask: int) -> Iterator[TcpSocket]:
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(TIMEOUT_SECONDS)
        for family in (socket.AF_INET, socket.AF_INET6):
            yield from _dump(nl, family, mask)


def _dump(nl: socket.socket, family: int, mask: int) -> Iterator[TcpSocket]:
    seq = next(_sequence)
    body = DIAG_REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, mask)
    header = NLMSG_HEADER.pack(
        NLMSG_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0
    )
    nl.sendall(header + body)
    while True:
        data, _, msg_flags, _ = nl.recvmsg(RECEIVE_BYTES)
        if not data or msg_flags & socket.MSG_TRUNC:
            raise OSError("sock_diag: the dump was cut short")
        offset = 0
        while offset + NLMSG_HEADER.size <= len(data):
            length, kind, _, msg_seq, _ = NLMSG_HEADER.unpack_from(data, offset)
            if length < NLMSG_HEADER.size:
                raise OSError("sock_diag: malformed message")
            start, offset = offset + NLMSG_HEADER.size, offset + ((length + 3) & ~3)
            if msg_seq != seq:
                continue
            if kind == NLMSG_DONE:
                return
            if kind == NLMSG_ERROR:
                (errno,) = struct.unpack_from("=i", data, start)
                raise OSError(-errno, f"sock_diag: {os.strerror(-errno)}")
            if kind == SOCK_DIAG_BY_FAMILY and length - NLMSG_HEADER.size >= DIAG_MESSAGE.size:
                yield _from_message(data, start)


def _from_message(data: bytes, start: int) -> TcpSocket:
    fam, state, _, _, sport, _, src, _, _, _, _, _, inode = DIAG_MESSAGE.unpack_from(data, start)
    raw = src[:4] if fam == socket.AF_INET else src
    address = socket.inet_ntop(fam, raw)
    return TcpSocket(address, int.from_bytes(sport, "big"), state, inode)


def from_proc(mask: int) -> list[TcpSocket]:
    """The sockets in the states of ``mask``, from ``/proc/net/tcp{,6}``."""
    found: list[TcpSocket] = []
    for table in PROC_TABLES:
        rows: list[str] = []
        with contextlib.suppress(OSError), open(table) as f:  # OSError: no IPv6, no /proc
            rows = f.read().splitlines()[1:]
        for row in rows:
            fields = row.split()
            if len(fields) < 10:
                continue
            state = int(fields[3], 16)
            if not mask & (1 << state):
                continue
            local, _, port_hex = fields[1].rpartition(":")
            found.append(TcpSocket(_proc_address(local), int(port_hex, 16), state, int(fields[9])))
    return found


def _proc_address(hex_addr: str) -> str:
    """``/proc/net/tcp``'s address column: 32-bit words, each in host (little-endian) order."""
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET6, words)
