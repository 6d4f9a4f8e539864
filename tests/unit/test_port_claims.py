"""Host-wide port claims: two controllers sharing a lock dir never hand out the same port.

Two ``PortAllocator`` objects on the same lock dir stand for two ``sardeenz serve``
processes: flock locks taken through separate open files conflict even inside one
process, exactly as between processes.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sardeenz.config import ConfigError
from sardeenz.runtime import ports as ports_mod
from sardeenz.runtime.ports import (
    PortAllocator,
    PortClaimFailed,
    PortLockDirError,
    PortRangeExhausted,
    port_is_free,
    prepare_lock_dir,
)
from testkit.ports import free_port_range

HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(120)
"""


def _range(size: int) -> range:
    base = free_port_range(size)
    return range(base, base + size)


def test_two_controllers_on_one_lock_dir_never_share_a_port(tmp_path: Path) -> None:
    ports = _range(6)
    a = PortAllocator(ports, lock_dir=tmp_path)
    b = PortAllocator(ports, lock_dir=tmp_path)
    got_a = [a.allocate() for _ in range(3)]
    got_b = [b.allocate() for _ in range(3)]
    assert len(set(got_a) | set(got_b)) == 6
    assert set(got_a) | set(got_b) == set(ports)
    with pytest.raises(PortRangeExhausted) as exc:
        b.allocate()
    assert "3 claimed by other Sardeenz servers" in exc.value.message
    assert exc.value.code == "port_range_exhausted"


def test_a_released_port_can_be_claimed_by_the_other_controller(tmp_path: Path) -> None:
    ports = _range(1)
    a = PortAllocator(ports, lock_dir=tmp_path)
    b = PortAllocator(ports, lock_dir=tmp_path)
    port = a.allocate()
    assert a.holds_claim(port)
    with pytest.raises(PortRangeExhausted):
        b.allocate()
    a.release(port)
    assert port not in a.taken
    assert b.allocate() == port
    assert b.holds_claim(port)


def test_reserve_reports_a_port_claimed_by_another_controller(tmp_path: Path) -> None:
    ports = _range(2)
    a = PortAllocator(ports, lock_dir=tmp_path)
    b = PortAllocator(ports, lock_dir=tmp_path)
    port = a.allocate()
    assert b.reserve(port) is False  # held, but without the host-wide claim
    assert port in b.taken
    assert not b.holds_claim(port)
    assert b.reserve(ports[1] if port == ports[0] else ports[0]) is True


def test_the_lock_of_a_dead_process_does_not_block(tmp_path: Path) -> None:
    ports = _range(1)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path / f"{ports[0]}.lock")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        alloc = PortAllocator(ports, lock_dir=tmp_path)
        with pytest.raises(PortRangeExhausted):
            alloc.allocate()  # a live controller's claim is respected
        holder.send_signal(signal.SIGKILL)
        holder.wait(5)
        # The file is still there, its lock died with the process.
        assert (tmp_path / f"{ports[0]}.lock").exists()
        assert alloc.allocate() == ports[0]
    finally:
        holder.kill()
        holder.wait(5)


def test_a_port_bound_by_a_loading_engine_is_not_handed_out(tmp_path: Path) -> None:
    """The root bug: an engine binds at once and listens only when loaded; a SO_REUSEADDR
    probe alone saw such a port as free."""
    ports = _range(2)
    loading = socket.socket()
    loading.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    loading.bind(("127.0.0.1", ports[0]))  # bound, not listening
    try:
        assert not port_is_free("127.0.0.1", ports[0])
        assert PortAllocator(ports, lock_dir=tmp_path).allocate() == ports[1]
    finally:
        loading.close()
    assert port_is_free("127.0.0.1", ports[0])


def test_time_wait_leftovers_of_a_previous_engine_do_not_block(tmp_path: Path) -> None:
    (port,) = _range(1)
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: TIME_WAIT on the engine's port
    time.sleep(0.05)
    client.close()
    server.close()
    plain = socket.socket()
    try:
        with pytest.raises(OSError, match="in use"):
            plain.bind(("127.0.0.1", port))  # the leftover blocks a plain bind...
    finally:
        plain.close()
    assert port_is_free("127.0.0.1", port)  # ...but not an engine (SO_REUSEADDR)
    assert PortAllocator(range(port, port + 1), lock_dir=tmp_path).allocate() == port


def test_a_listening_port_is_skipped(tmp_path: Path) -> None:
    ports = _range(2)
    with socket.socket() as other:
        other.bind(("127.0.0.1", ports[0]))
        other.listen()
        alloc = PortAllocator(ports, lock_dir=tmp_path)
        assert alloc.allocate() == ports[1]
        with pytest.raises(PortRangeExhausted) as exc:
            alloc.allocate()
        assert "1 in use by other processes" in exc.value.message
        # The claim taken for the probe was dropped: another controller may have it.
        assert PortAllocator(ports, lock_dir=tmp_path).reserve(ports[0]) is True


def test_exclude_skips_ports_already_tried(tmp_path: Path) -> None:
    ports = _range(3)
    alloc = PortAllocator(ports, lock_dir=tmp_path)
    assert alloc.allocate(exclude={ports[0], ports[1]}) == ports[2]


async def test_a_cancelled_allocation_gives_its_claim_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = _range(1)
    real = ports_mod.port_is_free

    def slow_probe(host: str, port: int) -> bool:
        time.sleep(0.3)
        return real(host, port)

    monkeypatch.setattr(ports_mod, "port_is_free", slow_probe)
    alloc = PortAllocator(ports, lock_dir=tmp_path)
    task = asyncio.create_task(alloc.allocate_async())
    await asyncio.sleep(0.05)  # the worker thread is probing now
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.6)  # the worker thread has finished by now
    assert alloc.taken == frozenset()
    assert PortAllocator(ports, lock_dir=tmp_path).reserve(ports[0]) is True


def test_lock_dir_is_private_and_checked(tmp_path: Path) -> None:
    made = prepare_lock_dir(tmp_path / "rt" / "ports", must_own=True)
    assert made.is_dir()
    assert made.stat().st_mode & 0o777 == 0o700
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(PortLockDirError):
        prepare_lock_dir(tmp_path / "link", must_own=True)


def test_an_unusable_lock_dir_is_a_clear_error_not_a_crash(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    ports = _range(1)
    alloc = PortAllocator(ports, lock_dir=not_a_dir)
    with pytest.raises(PortClaimFailed) as exc:
        alloc.allocate()
    assert exc.value.code == "port_claim_failed"
    assert exc.value.status == 503
    assert str(not_a_dir) in exc.value.message
    assert alloc.taken == frozenset()
    # An adopted engine keeps its port all the same, without a claim.
    assert alloc.reserve(ports[0]) is False
    assert alloc.taken == {ports[0]}


def test_a_lock_dir_that_cannot_be_created_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot create the port lock dir"):
        prepare_lock_dir(blocker / "ports", must_own=False)
