"""cluster/handover.py: a drained (held) move source never stays (the pod side, no HTTP).

The 60-minute soak found a source drained for a move whose unload never came:
listed ``active``, routed by no pod, for minutes. Its pod now unloads it itself
once no leader did, and never advertises it again meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import cast

import pytest

from sardeenz.cluster.handover import PodSide, held_unload_after, route_timeout
from sardeenz.cluster.local_pod import LocalPod
from sardeenz.cluster.membership.service import Membership
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, ModelInstance
from sardeenz.errors import Conflict, NotFound
from sardeenz.runtime.drain import NoTraffic
from tests.unit.test_cluster_peers import instance


class Supervisor:
    """The supervisor as the pod side sees it: get, unload, settings, traffic."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.traffic = NoTraffic()
        self.instances: dict[str, ModelInstance] = {
            "src": instance("src", "m", InstanceStatus.ACTIVE)
        }
        self.unloads: list[str] = []

    def get(self, iid: str) -> ModelInstance:
        if iid not in self.instances:
            raise NotFound(f"no instance {iid}", code="instance_not_found")
        return self.instances[iid]

    async def unload(self, iid: str) -> None:
        self.unloads.append(iid)
        self.instances.pop(iid)


class Beats:
    def now(self) -> float:
        return time.monotonic()

    def beat_soon(self) -> None:
        return None


def pod_side(tmp_path: Path, after: float) -> tuple[PodSide, Supervisor]:
    sup = Supervisor(Settings(data_dir=tmp_path))
    local = LocalPod(cast("object", None), sup, None, None)  # type: ignore[arg-type]
    side = PodSide(local, cast(Membership, Beats()))
    side.held_unload_after = after
    return side, sup


def test_the_bound_outlasts_a_resumed_move() -> None:
    s = Settings(stop_grace_seconds=20, cluster_unavailable_after_seconds=15)
    # a leader's election, its wait for the pod (route timeout + grace), its withdrawal
    assert route_timeout(s) == 45
    assert held_unload_after(s) == 3 * 45 + 20


async def test_a_held_source_nobody_unloads_is_unloaded_by_its_pod(tmp_path: Path) -> None:
    side, sup = pod_side(tmp_path, 0.05)
    await side.drain_here("src", 1.0, 3)
    assert side.local.held("src")
    for _ in range(100):
        if sup.unloads:
            break
        await asyncio.sleep(0.02)
    assert sup.unloads == ["src"]
    await side.stop()


async def test_a_held_source_a_leader_unloaded_is_left_alone(tmp_path: Path) -> None:
    side, sup = pod_side(tmp_path, 0.1)
    await side.drain_here("src", 1.0, 3)
    sup.instances["src"] = sup.instances["src"].model_copy(
        update={"status": InstanceStatus.STOPPING}
    )  # the leader's unload is under way
    await asyncio.sleep(0.3)
    assert sup.unloads == []
    await side.stop()


async def test_a_held_source_is_never_advertised_again(tmp_path: Path) -> None:
    side, _ = pod_side(tmp_path, 60)
    await side.drain_here("src", 1.0, 3)
    side.withdraw_here("src", 5, 4)  # a resumed move withdraws it again: no shorter hold
    assert side.local.held("src")
    with pytest.raises(Conflict) as refused:
        side.restore_here("src")
    assert refused.value.code == "instance_held"
    assert side.local.held("src")
    await side.stop()  # the pending unload ends with the pod
    assert side._retiring == {}
