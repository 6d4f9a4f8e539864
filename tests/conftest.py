"""Shared fixtures: real `sardeenz serve` processes, torn down with all their engines.

``server``/``server_factory`` give a test servers of its own: for tests that
restart, crash or count what a server runs. ``module_server_factory`` starts
servers a whole module shares: for tests that only read state or check
refusals, so each module pays for one server start instead of one per test.
``module_server`` is that server with the default test settings, and
``reused_server`` the same server for a test that loads models: it unloads
everything after the test and waits for the engines to end, so the next test
finds the server as empty as a new one (a server start is about a second of CPU).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from xdist.remote import Producer

from testkit import tls
from testkit.servers import ServerPool, ServerProcess, unload_all
from tests import scheduling

tls.share_default_context()  # every httpx client of the tests: one CA-bundle load, not one each


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


@pytest.fixture(scope="module")
def module_server(module_server_factory: ServerPool) -> ServerProcess:
    """A server with the default test settings, shared by the module's tests."""
    return module_server_factory().start()


@pytest.fixture
def reused_server(module_server: ServerProcess) -> Iterator[ServerProcess]:
    """``module_server`` for a test that loads models; emptied again after the test."""
    yield module_server
    unload_all(module_server)
