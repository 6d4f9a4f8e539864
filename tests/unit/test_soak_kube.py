"""The Kubernetes soak's reading of the Lease (testkit/soak_kube.py): its holder leads
term ``leaseTransitions + 1``, and a pod claiming that term too is a violation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from testkit.kube import KubeApiServer
from testkit.soak_kube import KubeSoak


def _soak(tmp_path: Path, lease: tuple[str, int] | None) -> KubeSoak:
    soak = KubeSoak(cast(KubeApiServer, object()), tmp_path, 1, 1.0, verbose=False)
    soak.down = set(soak.names)  # no pod to ask: only the Lease is sampled
    soak.lease = lambda: lease  # type: ignore[method-assign]
    return soak


def _sample(soak: KubeSoak) -> None:
    async def once() -> None:
        async with httpx.AsyncClient() as http:
            await soak.sample(http)

    asyncio.run(once())


def test_a_pod_claiming_the_lease_holders_term_is_a_violation(tmp_path: Path) -> None:
    soak = _soak(tmp_path, ("pod-b", 3))
    soak._claims[3] = {"pod-a"}  # what pod-a's status said earlier
    _sample(soak)
    assert [v.name for v in soak.report.violations] == ["one-leader-per-term"]
    assert "pod-a" in str(soak.report.violations[0])
    assert "the Lease names pod-b" in str(soak.report.violations[0])


@pytest.mark.parametrize("earlier", [{}, {3: {"pod-b"}}, {2: {"pod-a"}}])
def test_the_lease_holder_of_its_own_term_is_no_violation(
    tmp_path: Path, earlier: dict[int, set[str]]
) -> None:
    soak = _soak(tmp_path, ("pod-b", 3))
    soak._claims.update(earlier)
    _sample(soak)
    assert soak.report.violations == []
    assert soak._claims[3] == {"pod-b"}


def test_a_lease_without_holder_claims_nothing(tmp_path: Path) -> None:
    soak = _soak(tmp_path, None)
    _sample(soak)
    claims: dict[int, Any] = soak._claims
    assert claims == {}
