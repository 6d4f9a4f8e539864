"""Fixtures of the cluster tier: one cluster per module (testkit/cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.cluster import Cluster


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One 3-pod cluster for the whole module (each start costs seconds of CPU)."""
    cluster = Cluster(tmp_path_factory.mktemp("cluster3"), 3)
    try:
        yield cluster.start()
    finally:
        cluster.close()
