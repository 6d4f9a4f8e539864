"""Who listens on a port: the kernel's listening sockets matched to ``/proc/<pid>/fd``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from sardeenz.runtime import identity
from testkit.ports import free_port

LISTEN_REUSEPORT = """
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
time.sleep(120)
"""


def _reuseport_listener(port: int, host: str = "127.0.0.1") -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen()
    return sock


@pytest.fixture
def engine() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A stand-in engine: another process listening with SO_REUSEPORT, like vLLM."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", LISTEN_REUSEPORT, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "listening"
    yield proc, port
    proc.kill()
    proc.wait(5)


def test_the_own_listener_counts_as_owned() -> None:
    port = free_port()
    with _reuseport_listener(port):
        owner = identity.port_ownership(port, [os.getpid()])
    assert owner.served_by_own_tree
    assert [s.address for s in owner.own] == ["127.0.0.1"]
    assert owner.foreign == ()


def test_a_reuseport_listener_of_another_process_is_foreign(
    engine: tuple[subprocess.Popen[str], int],
) -> None:
    proc, port = engine
    assert identity.port_ownership(port, [proc.pid]).served_by_own_tree
    # The test process joins the engine's port, as a second vLLM would (no error).
    with _reuseport_listener(port):
        owner = identity.port_ownership(port, [proc.pid])
        assert len(owner.own) == 1
        assert len(owner.foreign) == 1
        assert not owner.served_by_own_tree
        assert owner.foreign_pids == (os.getpid(),)
        text = owner.describe_foreign()
        assert f"port {port}" in text
        assert f"pid {os.getpid()}" in text
        assert "127.0.0.1" in text
        # Seen from the test process's side, the engine is the foreign one.
        mine = identity.port_ownership(port, [os.getpid()])
        assert mine.foreign_pids == (proc.pid,)
    assert identity.port_ownership(port, [proc.pid]).served_by_own_tree


def test_a_listener_on_another_address_of_the_port_is_foreign_too() -> None:
    port = free_port()
    try:
        other = _reuseport_listener(port, "::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with other, _reuseport_listener(port):
        owner = identity.port_ownership(port, [])
    assert sorted(s.address for s in owner.foreign) == ["127.0.0.1", "::1"]
    assert owner.own == ()


def test_one_read_of_the_tables_answers_for_every_port(
    engine: tuple[subprocess.Popen[str], int],
) -> None:
    """``listeners_by_port`` is what ``sockets_on_port`` reads, for all ports at once, and
    ``port_ownership`` given its part decides as when it reads the port itself."""
    proc, port = engine
    with _reuseport_listener(port):
        table = identity.listeners_by_port()
        assert set(table[port]) == set(identity.sockets_on_port(port, {identity.LISTEN}))
        assert len(table[port]) == 2
        assert all(s.state == identity.LISTEN for socks in table.values() for s in socks)
        given = identity.port_ownership(port, [proc.pid], table[port])
        assert given == identity.port_ownership(port, [proc.pid])
        assert given.foreign_pids == (os.getpid(),)
    assert identity.port_ownership(port, [proc.pid], []).own == ()  # none listed: none owned


def test_no_listener_means_not_served_yet() -> None:
    port = free_port()
    with socket.socket() as bound_only:  # an engine still loading: bound, not listening
        bound_only.bind(("127.0.0.1", port))
        owner = identity.port_ownership(port, [os.getpid()])
    assert owner.own == ()
    assert owner.foreign == ()
    assert not owner.served_by_own_tree


def test_engine_port_ownership_covers_the_whole_tree(
    engine: tuple[subprocess.Popen[str], int],
) -> None:
    _, port = engine
    # The engine is our child: from our PID, its listener is within the tree.
    assert identity.engine_port_ownership(port, os.getpid()).served_by_own_tree
    assert not identity.engine_port_ownership(port, None).served_by_own_tree


def _models_client(status: int, ids: list[str], asked: list[str]) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(status, json={"object": "list", "data": [{"id": i} for i in ids]})

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_identify_confirms_only_the_own_listener_serving_the_name() -> None:
    port = free_port()
    asked: list[str] = []
    with _reuseport_listener(port):
        async with _models_client(200, ["mine"], asked) as http:
            ok = await identity.identify(http, "127.0.0.1", port, os.getpid(), "mine")
            other = await identity.identify(http, "127.0.0.1", port, os.getpid(), "theirs")
    assert ok.confirmed
    assert ok.conflict is None
    assert ok.wrong_engine is None
    assert not other.confirmed
    assert other.wrong_engine == f"the server on port {port} lists ['mine'], not 'theirs'"
    assert asked == ["/v1/models", "/v1/models"]


async def test_identify_never_asks_a_foreign_listener(
    engine: tuple[subprocess.Popen[str], int],
) -> None:
    proc, port = engine
    asked: list[str] = []
    async with _models_client(200, ["mine"], asked) as http:
        verdict = await identity.identify(http, "127.0.0.1", port, None, "mine")
        loading = await identity.identify(http, "127.0.0.1", free_port(), os.getpid(), "mine")
    assert not verdict.confirmed
    assert verdict.conflict is not None
    assert f"pid {proc.pid}" in verdict.conflict
    assert not loading.confirmed  # nobody listens yet: not confirmed, no conflict either
    assert loading.conflict is None
    assert asked == []


async def test_an_engine_guarding_v1_with_an_api_key_is_identified_by_its_sockets() -> None:
    port = free_port()
    with _reuseport_listener(port):
        async with _models_client(401, [], []) as http:
            verdict = await identity.identify(http, "127.0.0.1", port, os.getpid(), "mine")
    assert verdict.confirmed
