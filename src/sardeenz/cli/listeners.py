"""The server's listening sockets, bound before the application starts.

uvicorn binds after the application's start-up, which here re-adopts engines: a
server whose port was taken re-adopted its engines, failed to bind, and stopped them
on its way out (exit 3, the storage code). Binding first makes a taken port a refusal
that has touched nothing. The sockets listen at once, so the port is really held
(with ``SO_REUSEADDR`` two sockets may both *bind* a port nobody listens on yet);
connections made while the application starts wait in the backlog.

The sockets are not inheritable: an engine, which outlives a crashed controller,
must never keep the controller's port open.
"""

from __future__ import annotations

import contextlib
import socket

import psutil

from sardeenz.runtime.identity import LISTEN, socket_holders, sockets_on_port

__all__ = ["AddressUnavailable", "bind_listeners"]

BACKLOG = 2048
"""uvicorn's default backlog."""


class AddressUnavailable(Exception):
    """The address cannot be listened on; ``str()`` is the line to print."""


def bind_listeners(host: str, port: int) -> list[socket.socket]:
    """One listening socket per address ``host`` resolves to (``localhost``: IPv4 and
    IPv6, as asyncio's ``create_server`` does), or ``AddressUnavailable``."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise AddressUnavailable(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    bound: list[socket.socket] = []
    seen: set[tuple[int, object]] = set()
    try:
        for family, type_, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, type_, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
    except OSError as exc:
        for sock in bound:
            sock.close()
        raise AddressUnavailable(
            f"cannot listen on {_shown(host)}:{port}: {exc.strerror or exc}{_holder(port)}; "
            "stop that process or choose another --port"
        ) from None
    return bound


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _holder(port: int) -> str:
    """Who listens on ``port`` (best effort: other users' processes are not readable)."""
    with contextlib.suppress(OSError, psutil.Error):
        listeners = sockets_on_port(port, {LISTEN})
        holders = socket_holders([s.inode for s in listeners])
        pids = sorted({pid for pids in holders.values() for pid in pids})
        if pids:
            names = ", ".join(f"pid {p} ({psutil.Process(p).name()})" for p in pids[:3])
            return f" (listened on by {names})"
    return ""
