"""Fixtures of the cluster tier: a 3-pod cluster of the module's own.

A cluster start costs 4 s of CPU and 8-35 s of wall time on a loaded 2-core machine
(three `sardeenz serve` imports, the election, the first heartbeats), so modules that
can share one live in ``tests/cluster/shared/`` (its conftest says how). The modules
here kill or restart pods in ways that cannot be undone (failover, partitions, lost
writes) or need other settings (API keys, other GPUs, a catalog): each builds its own
``Cluster`` in a module-scoped fixture, as test_moves.py and test_scheduling.py do;
``cluster3`` is a plain 3-pod one of that kind.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.cluster import Cluster


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-pod cluster of the module's own (each start costs seconds of CPU)."""
    cluster = Cluster(tmp_path_factory.mktemp("cluster3"), 3)
    try:
        yield cluster.start()
    finally:
        cluster.close()
