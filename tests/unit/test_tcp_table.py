"""The kernel's TCP table: netlink and /proc give the same answers, and /proc stands in
when netlink is refused."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from sardeenz.runtime import tcp_table
from sardeenz.runtime.tcp_table import (
    ALL_STATES,
    LISTEN,
    TIME_WAIT,
    TcpSocket,
    state_mask,
    tcp_sockets,
)


def _key(s: TcpSocket) -> tuple[int, str, int, int]:
    return (s.port, s.address, s.state, s.inode)


@pytest.fixture
def port_in_use() -> Iterator[int]:
    """A port with listeners on 127.0.0.1 and (where there is IPv6) ::1, one connection
    established to it, and one closed from the client side (``TIME_WAIT``)."""
    v4 = socket.socket()
    v4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    v4.bind(("127.0.0.1", 0))
    v4.listen()
    port = v4.getsockname()[1]
    held = [v4]
    v6 = socket.socket(socket.AF_INET6)
    try:
        v6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        v6.bind(("::1", port))
        v6.listen()
        held.append(v6)
    except OSError:
        v6.close()  # no IPv6 loopback here
    closed = socket.create_connection(("127.0.0.1", port))
    closed_peer, _ = v4.accept()
    closed.close()
    closed_peer.close()
    client = socket.create_connection(("127.0.0.1", port))
    peer, _ = v4.accept()
    held += [client, peer]
    try:
        yield port
    finally:
        for sock in held:
            sock.close()


def test_netlink_and_proc_list_the_same_sockets(port_in_use: int) -> None:
    # Only this test's port: the rest of the host's sockets may change between two reads.
    for states in ({LISTEN}, None):
        mask = state_mask(states)
        by_netlink = [s for s in tcp_table.from_netlink(mask) if s.port == port_in_use]
        by_proc = [s for s in tcp_table.from_proc(mask) if s.port == port_in_use]
        assert sorted(by_netlink, key=_key) == sorted(by_proc, key=_key)
    listeners = tcp_sockets(port_in_use, {LISTEN})
    assert {s.address for s in listeners} <= {"127.0.0.1", "::1"}
    assert "127.0.0.1" in {s.address for s in listeners}
    assert all(s.state == LISTEN and s.inode > 0 for s in listeners)
    on_port = tcp_sockets(port_in_use, None)
    assert {s.state for s in on_port} == {LISTEN, 1}  # the accepted side: ESTABLISHED
    assert tcp_sockets(None, {TIME_WAIT}), "the connection closed client-first left none"


def test_proc_answers_when_netlink_is_refused(
    port_in_use: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = sorted(tcp_sockets(port_in_use, {LISTEN}), key=_key)

    def refused(mask: int) -> list[TcpSocket]:
        raise PermissionError(1, "netlink filtered here")

    monkeypatch.setattr(tcp_table, "from_netlink", refused)
    assert sorted(tcp_sockets(port_in_use, {LISTEN}), key=_key) == real


def test_a_socket_only_bound_is_listed_by_neither() -> None:
    """``ports.port_is_free`` tells an engine still loading (bound, not listening: not
    listed) from ``TIME_WAIT`` leftovers (listed); netlink could list bound sockets too
    (``TCP_BOUND_INACTIVE``), and is not asked to."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        assert [s for s in tcp_table.from_netlink(ALL_STATES) if s.port == port] == []
        assert [s for s in tcp_table.from_proc(ALL_STATES) if s.port == port] == []
