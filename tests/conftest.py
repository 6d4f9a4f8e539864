"""Shared fixtures: real `sardeenz serve` processes, torn down with all their engines.

``server``/``server_factory`` give a test servers of its own: for tests that
restart, crash or count what a server runs. ``module_server_factory`` starts
servers a whole module shares: for tests that only read state or check
refusals, so each module pays for one server start instead of one per test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from xdist.remote import Producer

from testkit.servers import ServerPool, ServerProcess
from tests import scheduling


def pytest_configure(config: pytest.Config) -> None:
    scheduling.register(config)


def pytest_xdist_make_scheduler(
    config: pytest.Config, log: Producer
) -> scheduling.LongestFileFirst | None:
    """``--dist loadfile`` hands out the longest files first (tests/scheduling.py)."""
    return scheduling.make_scheduler(config, log)


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[ServerPool]:
    """Start servers on demand; everything they started is killed at teardown."""
    pool = ServerPool(tmp_path)
    yield pool
    pool.close()


@pytest.fixture
def server(server_factory: ServerPool) -> ServerProcess:
    return server_factory().start()


@pytest.fixture(scope="module")
def module_server_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    """Like ``server_factory``, but the servers live until the module's last test."""
    pool = ServerPool(tmp_path_factory.mktemp("module-servers"))
    yield pool
    pool.close()
