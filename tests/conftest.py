"""Shared fixtures: real `sardeenz serve` processes, torn down with all their engines."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ServerProcess, kill_engines


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Any]:
    """Start servers on demand; everything they started is killed at teardown."""
    servers: list[ServerProcess] = []

    def make(**kw: Any) -> ServerProcess:
        srv = ServerProcess(kw.pop("data_dir", tmp_path / f"node{len(servers)}"), **kw)
        servers.append(srv)
        return srv

    yield make
    for srv in servers:
        srv.stop(signal.SIGKILL)
        kill_engines(srv.data_dir)


@pytest.fixture
def server(server_factory: Any) -> ServerProcess:
    srv: ServerProcess = server_factory().start()
    return srv
