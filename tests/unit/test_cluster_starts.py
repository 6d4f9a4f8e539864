"""The leader's on-demand placement: one at a time per model, never an unbounded wait."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from sardeenz.cluster.ondemand import ClusterStarts
from sardeenz.domain import EngineKind, InstanceStatus, LoadRequest, ModelInstance
from testkit.waiting import within


class _View:
    def instances(self) -> list[ModelInstance]:
        return []

    def instance_on(self, pod: str, instance_id: str) -> ModelInstance | None:
        return None


class _Placement:
    """Places at once, except models in ``held``: those until their event is set."""

    def __init__(self) -> None:
        self.held: dict[str, asyncio.Event] = {}
        self.placed: list[str] = []

    async def place(self, req: LoadRequest, *, on_demand: bool = False) -> ModelInstance:
        assert on_demand, "the leader marks a placement on demand as such"
        name = req.served_model_name or ""
        if name in self.held:
            await self.held[name].wait()
        self.placed.append(name)
        return ModelInstance(
            id=f"i-{name}-{len(self.placed)}",
            model_path=req.model_path,
            served_model_name=name,
            display_name=name,
            engine=EngineKind.SIM,
            status=InstanceStatus.STARTING,
            port=4000 + len(self.placed),
            pod_id="pod-b",
            on_demand=on_demand,
        )


def _starts(lock_wait: float) -> tuple[ClusterStarts, _Placement]:
    membership = SimpleNamespace(
        identity=SimpleNamespace(pod_id="pod-a"),
        settings=SimpleNamespace(cluster_request_timeout_seconds=lock_wait),
        timing=SimpleNamespace(unavailable_after=15.0),
    )
    placement = _Placement()
    return ClusterStarts(membership, _View(), placement), placement  # type: ignore[arg-type]


def _req(name: str) -> LoadRequest:
    return LoadRequest(model_path=f"org/{name}", served_model_name=name, engine=EngineKind.SIM)


async def test_a_slow_placement_holds_up_neither_other_models_nor_an_ask_past_its_wait() -> None:
    starts, placement = _starts(lock_wait=0.3)
    placement.held["slow"] = asyncio.Event()
    first = asyncio.create_task(starts.place(_req("slow")))
    await asyncio.sleep(0)

    other = await within(starts.place(_req("fast")), 2, "fast placed beside the slow placement")
    assert other["placed"] is True
    assert other["podId"] == "pod-b"

    again = await within(
        starts.place(_req("slow")), 2, "a second ask for slow given up after its wait"
    )
    assert again == {
        "placed": False,
        "reason": "a placement of 'slow' has been under way for more than 0.3 s",
        "code": "placement_busy",
    }
    assert not first.done()

    placement.held["slow"].set()
    done = await within(first, 2, "the slow placement, once released")
    assert done["placed"] is True
    assert placement.placed == ["fast", "slow"]


async def test_asks_for_one_model_that_arrive_together_get_the_one_instance() -> None:
    starts, placement = _starts(lock_wait=5)
    placement.held["m"] = asyncio.Event()
    asks = [asyncio.create_task(starts.place(_req("m"))) for _ in range(3)]
    await asyncio.sleep(0)
    placement.held["m"].set()
    answers = await within(asyncio.gather(*asks), 2, "the three asks for m answered")
    assert {a["instance"]["id"] for a in answers} == {"i-m-1"}
    assert placement.placed == ["m"]
