"""cluster/moves.py: the move's state machine against a fake cluster (no process, no HTTP).

What the cluster tier cannot provoke on demand: a pod that never confirms a
route change, a refused load, and the order of the calls (the source is never
touched before the target is routed everywhere).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest

from sardeenz.cluster.control_state import ControlRegister
from sardeenz.cluster.handover import Pods
from sardeenz.cluster.move_types import Move, MoveRequest, MoveState
from sardeenz.cluster.moves import MoveService
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, LoadRequest, ModelInstance
from sardeenz.errors import Conflict, NotFound, SardeenzError, Unavailable
from tests.unit.test_cluster_peers import instance


def inst(iid: str, status: InstanceStatus = InstanceStatus.ACTIVE) -> ModelInstance:
    return instance(iid, "m", status).model_copy(update={"gpu_ids": [0]})


class RecordedControl:
    """The register as the move service sees it: every write kept (the register's own
    replication is tested in test_control_state.py and the cluster tier)."""

    def __init__(self) -> None:
        self.replicated = True
        self.writes: list[Any] = []
        self.ready_actions: list[Callable[[], Awaitable[None]]] = []

    def when_ready(self, action: Callable[[], Awaitable[None]]) -> None:
        self.ready_actions.append(action)

    def body(self, key: str, default: Any = None) -> Any:
        return self.writes[-1] if self.writes else default

    async def update(self, key: str, change: Callable[[Any], Awaitable[Any]]) -> None:
        assert key == "moves"
        self.writes.append(await change(self.body(key)))


class FakePods:
    """Three pods; records every call; routes follow withdraw/unload unless told to stick."""

    def __init__(self) -> None:
        self.me = "pod-a"
        self.instances: dict[tuple[str, str], ModelInstance] = {("pod-a", "src"): inst("src")}
        self.routes_of: dict[str, set[str]] = {
            p: {"pod-a/src"} for p in ("pod-a", "pod-b", "pod-c")
        }
        self.calls: list[str] = []
        self.target_status = InstanceStatus.ACTIVE
        self.refuse_load: SardeenzError | None = None
        self.leader = True
        self.stuck: set[str] = set()
        """Pods whose table never changes (a pod that stopped applying heartbeats)."""
        self.record: list[str] = []
        self.control = RecordedControl()
        self.adapters: dict[tuple[str, str], list[str]] = {}
        """(pod, instance) -> the LoRA adapters it holds."""
        self.carry_refusals: dict[str, str] = {}
        self.term = 3
        """The leader's term: the one its withdrawals carry."""
        self.withdrawn_terms: dict[tuple[str, str], int] = {}
        """(pod, instance) -> the term of the order that withdrew it."""
        self.held_terms: dict[tuple[str, str], int] = {}
        """(pod, instance) -> the term of the drain order that held it."""
        self.down: set[str] = set()
        """Pods the failure detector calls unavailable (their calls: pod_unavailable)."""
        self.refuse_source: dict[str, SardeenzError] = {}
        """Call kind (drain, unload) -> the source pod's refusal of it."""

    def recorded_state(self) -> str:
        body = self.control.body("moves", [])
        return ",".join(m["state"] for m in body) if body else "nothing"

    def leading(self) -> bool:
        return self.leader

    async def stop(self) -> None:
        self.calls.append("stop")

    def on(self, pod: str) -> list[ModelInstance]:
        return [i for (p, _), i in self.instances.items() if p == pod]

    def known(self, pod: str) -> bool:
        return pod in self.routes_of

    def available(self, pod: str) -> bool:
        return pod not in self.down

    def _reach(self, pod: str, kind: str) -> None:
        if pod in self.down:
            self.calls.append(f"{kind} {pod}: unavailable")
            raise Unavailable(f"pod {pod!r} is unavailable", code="pod_unavailable")
        if kind in self.refuse_source:
            raise self.refuse_source[kind]

    def live(self) -> list[str]:
        return sorted(self.routes_of)

    async def gpu_indices(self, pod: str) -> list[int]:
        return [0, 1]

    def locate(self, iid: str) -> tuple[str, ModelInstance] | None:
        return next(((p, i) for (p, k), i in self.instances.items() if k == iid), None)

    def instance(self, pod: str, iid: str) -> ModelInstance | None:
        return self.instances.get((pod, iid))

    async def routes(self, pod: str) -> set[str] | None:
        return set(self.routes_of[pod])

    def _route(self, key: str, present: bool) -> None:
        for pod, table in self.routes_of.items():
            if pod in self.stuck:
                continue
            if present:
                table.add(key)
            else:
                table.discard(key)

    async def load(self, pod: str, req: LoadRequest, *, on_demand: bool = False) -> ModelInstance:
        self.calls.append(f"load {pod} {req.gpu_ids}")
        if self.refuse_load is not None:
            raise self.refuse_load
        self.instances[(pod, "tgt")] = inst("tgt", self.target_status)
        if self.target_status is InstanceStatus.ACTIVE:
            self._route(f"{pod}/tgt", True)
        return inst("tgt", InstanceStatus.STARTING)

    async def unload(self, pod: str, iid: str) -> None:
        self._reach(pod, "unload")
        self.calls.append(f"unload {pod}/{iid}")
        self.withdrawn_terms.pop((pod, iid), None)
        self.held_terms.pop((pod, iid), None)
        self.record.append(f"(unload: record says {self.recorded_state()})")
        self.instances.pop((pod, iid), None)
        self._route(f"{pod}/{iid}", False)

    async def withdraw(self, pod: str, iid: str, ttl: float) -> None:
        self._reach(pod, "withdraw")
        self.calls.append(f"withdraw {pod}/{iid}")
        self.withdrawn_terms[(pod, iid)] = self.term
        for other, table in self.routes_of.items():
            if other != pod and other not in self.stuck:
                table.discard(f"{pod}/{iid}")

    def withdrawals(self, pod: str) -> dict[str, int]:
        return {i: t for (p, i), t in self.withdrawn_terms.items() if p == pod}

    def holds(self, pod: str) -> dict[str, int]:
        return {i: t for (p, i), t in self.held_terms.items() if p == pod}

    async def restore(self, pod: str, iid: str) -> None:
        self._reach(pod, "restore")
        self.calls.append(f"restore {pod}/{iid}")
        self.withdrawn_terms.pop((pod, iid), None)
        self._route(f"{pod}/{iid}", True)

    def adapters_on(self, pod: str, iid: str) -> list[str]:
        return list(self.adapters.get((pod, iid), []))

    async def carry(self, pod: str, iid: str, names: list[str]) -> dict[str, Any]:
        self.calls.append(f"carry {pod}/{iid} {','.join(names)}")
        done = {n: self.carry_refusals.get(n) for n in names}
        self.adapters[(pod, iid)] = [n for n, why in done.items() if why is None]
        return done

    async def drain(self, pod: str, iid: str, seconds: float) -> tuple[int, int]:
        self._reach(pod, "drain")
        self.calls.append(f"drain {pod}/{iid}")
        self.withdrawn_terms.pop((pod, iid), None)
        self.held_terms[(pod, iid)] = self.term
        self.record.append(f"(drain: record says {self.recorded_state()})")
        self.routes_of[pod].discard(f"{pod}/{iid}")
        return 3, 0


def service(pods: FakePods, tmp_path: Path) -> MoveService:
    svc = MoveService(
        cast(Pods, pods),
        Settings(data_dir=tmp_path, stop_grace_seconds=1),
        cast(ControlRegister, pods.control),
    )
    svc.route_timeout = 0.5
    svc.transit_grace = 0.0
    return svc


async def run(svc: MoveService, **body: object) -> Move:
    move = await svc.start(MoveRequest.model_validate(body))
    for _ in range(200):
        if move.state in ("done", "failed"):
            return move
        await asyncio.sleep(0.02)
    raise AssertionError(move)


async def test_a_move_touches_the_source_only_once_the_target_is_routed_everywhere(
    tmp_path: Path,
) -> None:
    pods = FakePods()
    move = await run(service(pods, tmp_path), instanceId="src", targetPodId="pod-b")
    assert move.state == "done"
    assert pods.calls == [
        "load pod-b None",
        "withdraw pod-b/tgt",  # not routed by other pods before it settled
        "restore pod-b/tgt",
        "withdraw pod-a/src",
        "drain pod-a/src",
        "unload pod-a/src",
    ]
    assert [s.name for s in move.steps] == [
        "target-loading",
        "target-active",
        "target-routed",
        "source-withdrawn",
        "source-unrouted",
        "drain-end",
        "source-gone",
    ]
    # The time the drain took (the fake returns at once), not its 1 s limit.
    drain = move.steps[5].detail or ""
    assert re.fullmatch(
        r"3 request\(s\) in flight at the start, 0 cut; drained in \d+\.\ds \(limit 1s\)", drain
    ), drain
    assert all(t == {"pod-b/tgt"} for t in pods.routes_of.values())
    assert move.duration_seconds is not None
    assert move.finished_at is not None


async def test_a_move_loads_the_sources_adapters_on_the_target_before_the_switch(
    tmp_path: Path,
) -> None:
    pods = FakePods()
    pods.adapters[("pod-a", "src")] = ["poem", "sql", "tiny"]
    pods.carry_refusals["tiny"] = "no free or idle slot"
    move = await run(service(pods, tmp_path), instanceId="src", targetPodId="pod-b")
    assert move.state == "done"
    carry = pods.calls.index("carry pod-b/tgt poem,sql,tiny")
    assert pods.calls.index("restore pod-b/tgt") < carry < pods.calls.index("withdraw pod-a/src")
    assert pods.adapters[("pod-b", "tgt")] == ["poem", "sql"]
    (step,) = [s for s in move.steps if s.name == "adapters-carried"]
    assert step.detail == "loaded on the target: poem, sql; not: tiny (no free or idle slot)"


async def test_a_move_without_adapters_asks_the_target_for_none(tmp_path: Path) -> None:
    pods = FakePods()
    move = await run(service(pods, tmp_path), instanceId="src", targetPodId="pod-b")
    assert move.state == "done"
    assert not [c for c in pods.calls if c.startswith("carry")]
    assert "adapters-carried" not in [s.name for s in move.steps]


async def test_a_target_that_fails_is_removed_and_the_source_untouched(tmp_path: Path) -> None:
    pods = FakePods()
    pods.target_status = InstanceStatus.FAILED
    move = await run(service(pods, tmp_path), instanceId="src", targetPodId="pod-b")
    assert (move.state, move.code) == ("failed", "target_failed")
    assert pods.calls == ["load pod-b None", "withdraw pod-b/tgt", "unload pod-b/tgt"]
    assert all(t == {"pod-a/src"} for t in pods.routes_of.values())


async def test_a_refused_load_fails_the_move_with_the_pods_code(tmp_path: Path) -> None:
    pods = FakePods()
    pods.refuse_load = Conflict("does not fit", code="model_does_not_fit")
    move = await run(service(pods, tmp_path), instanceId="src", targetPodId="pod-b", gpuIds=[1])
    assert (move.state, move.code, move.reason) == ("failed", "model_does_not_fit", "does not fit")
    assert pods.calls == ["load pod-b [1]"]


async def test_a_pod_that_never_routes_to_the_target_rolls_the_move_back(tmp_path: Path) -> None:
    pods = FakePods()
    pods.stuck = {"pod-c"}
    move = await run(service(pods, tmp_path), instanceId="src", targetPodId="pod-b")
    assert (move.state, move.code) == ("failed", "route_timeout")
    assert "pod-c" in (move.reason or "")
    # The target is retired like a source; the source was never withdrawn.
    assert pods.calls == [
        "load pod-b None",
        "withdraw pod-b/tgt",
        "restore pod-b/tgt",
        "withdraw pod-b/tgt",
        "drain pod-b/tgt",
        "unload pod-b/tgt",
    ]
    assert pods.instances.keys() == {("pod-a", "src")}


async def test_a_pod_that_keeps_routing_to_the_source_restores_it(tmp_path: Path) -> None:
    pods = FakePods()
    svc = service(pods, tmp_path)
    start = pods.load

    async def load_then_stick(
        pod: str, req: LoadRequest, *, on_demand: bool = False
    ) -> ModelInstance:
        out = await start(pod, req, on_demand=on_demand)
        pods.stuck = {"pod-c"}  # pod-c got the target's route, then stopped listening
        return out

    pods.load = load_then_stick  # type: ignore[method-assign]
    move = await run(svc, instanceId="src", targetPodId="pod-b")
    assert (move.state, move.code) == ("failed", "route_timeout")
    assert pods.calls[:5] == [
        "load pod-b None",
        "withdraw pod-b/tgt",
        "restore pod-b/tgt",
        "withdraw pod-a/src",
        "restore pod-a/src",
    ]
    assert ("pod-a", "src") in pods.instances  # still serving
    assert "drain pod-a/src" not in pods.calls


async def test_refusals(tmp_path: Path) -> None:
    pods = FakePods()
    svc = service(pods, tmp_path)

    async def code(**body: object) -> str:
        with pytest.raises(SardeenzError) as err:
            await svc.start(MoveRequest.model_validate(body))
        return err.value.code

    assert await code(instanceId="nope", targetPodId="pod-b") == "instance_not_found"
    assert await code(instanceId="src", targetPodId="pod-z") == "pod_not_found"
    assert await code(instanceId="src", targetPodId="pod-a") == "move_to_itself"
    assert await code(instanceId="src", targetPodId="pod-a", gpuIds=[0]) == "move_to_itself"
    assert await code(instanceId="src", targetPodId="pod-b", gpuIds=[5]) == "unknown_gpu"
    pods.instances[("pod-a", "src")] = inst("src", InstanceStatus.SLEEPING)
    assert await code(instanceId="src", targetPodId="pod-b") == "instance_not_active"
    assert svc.list() == []
    assert pods.calls == []
    pods.instances[("pod-a", "src")] = inst("src")
    first = await svc.start(MoveRequest(instance_id="src", target_pod_id="pod-a", gpu_ids=[1]))
    assert await code(instanceId="src", targetPodId="pod-b") == "instance_moving"
    await svc.stop()
    assert [m.id for m in svc.list()] == [first.id]


async def test_a_pod_that_stops_leading_takes_no_further_step(tmp_path: Path) -> None:
    pods = FakePods()
    start = pods.load

    async def load_then_lose(
        pod: str, req: LoadRequest, *, on_demand: bool = False
    ) -> ModelInstance:
        out = await start(pod, req, on_demand=on_demand)
        pods.leader = False  # a partition: another pod leads now
        return out

    pods.load = load_then_lose  # type: ignore[method-assign]
    move = await run(service(pods, tmp_path), instanceId="src", targetPodId="pod-b")
    assert (move.state, move.code) == ("failed", "not_leader")
    assert pods.calls == ["load pod-b None"]
    assert [s.name for s in move.steps][-2:] == ["target-left-running", "failed"]


async def test_a_source_that_went_meanwhile_keeps_the_target(tmp_path: Path) -> None:
    pods = FakePods()
    start = pods.load

    async def load_and_lose_the_source(
        pod: str, req: LoadRequest, *, on_demand: bool = False
    ) -> ModelInstance:
        out = await start(pod, req, on_demand=on_demand)
        del pods.instances[("pod-a", "src")]  # unloaded by hand, or crashed

        withdraw = pods.withdraw

        async def refuse(pod: str, iid: str, ttl: float) -> None:
            if pod == "pod-b":
                return await withdraw(pod, iid, ttl)
            raise SardeenzError("no such instance", code="instance_not_found")

        pods.withdraw = refuse  # type: ignore[method-assign]
        return out

    pods.load = load_and_lose_the_source  # type: ignore[method-assign]
    move = await run(service(pods, tmp_path), instanceId="src", targetPodId="pod-b")
    assert (move.state, move.code) == ("failed", "instance_not_found")
    assert [s.name for s in move.steps][-2:] == ["target-kept", "failed"]
    assert pods.calls == ["load pod-b None", "withdraw pod-b/tgt", "restore pod-b/tgt"]
    assert ("pod-b", "tgt") in pods.instances


async def test_each_phase_is_recorded_before_the_step_it_announces(tmp_path: Path) -> None:
    pods = FakePods()
    move = await run(service(pods, tmp_path), instanceId="src", targetPodId="pod-b")
    assert move.state == "done"
    states = [w[0]["state"] for w in pods.control.writes]
    assert states[0] == "pending"  # acknowledged to the client once recorded
    assert states[-1] == "done"
    assert pods.record == [
        "(drain: record says draining)",  # a new leader must not restore a held source
        "(unload: record says unloading-source)",
    ]
    assert pods.control.writes[-1][0]["targetInstanceId"] == "tgt"


def recorded(state: str, target: str | None = "tgt") -> dict[str, Any]:
    return Move(
        id="m1",
        instance_id="src",
        model="m",
        source_pod_id="pod-a",
        source_gpu_ids=[0],
        target_pod_id="pod-b",
        target_gpu_ids=[0],
        target_instance_id=target,
        state=MoveState(state),
    ).model_dump(mode="json", by_alias=True)


async def take_over(
    pods: FakePods, tmp_path: Path, state: str, *, source_wait: float | None = None
) -> Move:
    svc = service(pods, tmp_path)
    if source_wait is not None:
        svc.source_wait = source_wait
    pods.control.writes.append([recorded(state)])
    [ready] = pods.control.ready_actions
    await ready()
    move = svc.get("m1")
    for _ in range(200):
        if move.state in ("done", "failed"):
            return move
        await asyncio.sleep(0.02)
    raise AssertionError(move)


@pytest.mark.parametrize("state", ["starting-target", "switching"])
async def test_a_new_leader_rolls_back_a_move_the_source_still_serves(
    tmp_path: Path, state: str
) -> None:
    pods = FakePods()
    pods.instances[("pod-b", "tgt")] = inst("tgt")
    pods._route("pod-b/tgt", True)
    move = await take_over(pods, tmp_path, state)
    assert move.state == "failed"
    assert move.code == "leader_changed"
    assert pods.calls == [
        "restore pod-a/src",  # first: the source is advertised before the target goes
        "withdraw pod-b/tgt",
        "drain pod-b/tgt",
        "unload pod-b/tgt",
    ]
    assert all(t == {"pod-a/src"} for t in pods.routes_of.values())
    assert pods.control.writes[-1][0]["state"] == "failed"


@pytest.mark.parametrize("state", ["draining", "unloading-source"])
async def test_a_new_leader_resumes_a_move_past_the_switch(tmp_path: Path, state: str) -> None:
    pods = FakePods()
    pods.instances[("pod-b", "tgt")] = inst("tgt")
    pods.routes_of = {p: {"pod-b/tgt"} for p in pods.routes_of}
    move = await take_over(pods, tmp_path, state)
    assert move.state == "done"
    # Withdrawn again first: a source pod that restarted since advertises it again.
    drain = ["withdraw pod-a/src", "drain pod-a/src"] if state == "draining" else []
    assert pods.calls == [*drain, "unload pod-a/src"]
    assert ("pod-a", "src") not in pods.instances
    assert pods.control.writes[-1][0]["state"] == "done"


async def test_a_new_leader_keeps_the_target_when_the_source_died(tmp_path: Path) -> None:
    pods = FakePods()
    del pods.instances[("pod-a", "src")]
    pods.instances[("pod-b", "tgt")] = inst("tgt")
    move = await take_over(pods, tmp_path, "switching")
    assert move.state == "done"
    assert pods.calls == ["restore pod-b/tgt"]
    assert "target-kept" in [s.name for s in move.steps]


async def test_a_target_started_but_not_recorded_is_found_and_removed(tmp_path: Path) -> None:
    pods = FakePods()
    svc = service(pods, tmp_path)
    pods.control.writes.append([recorded("starting-target", target=None)])
    pods.instances[("pod-b", "tgt")] = inst("tgt")  # created after the move began
    pods.instances[("pod-b", "old")] = inst("old").model_copy(
        update={"created_at": inst("x").created_at.replace(year=2000)}
    )  # a replica of the same model from before the move: not the target
    await pods.control.ready_actions[0]()
    move = svc.get("m1")
    for _ in range(200):
        if move.state == "failed":
            break
        await asyncio.sleep(0.02)
    assert move.code == "leader_changed"
    assert "unload pod-b/tgt" in pods.calls


async def test_a_new_leader_unloads_a_target_still_starting_without_draining_it(
    tmp_path: Path,
) -> None:
    pods = FakePods()
    pods.instances[("pod-b", "tgt")] = inst("tgt", InstanceStatus.STARTING)
    move = await take_over(pods, tmp_path, "starting-target")
    assert move.code == "leader_changed"
    assert pods.calls == ["restore pod-a/src", "unload pod-b/tgt"]
    assert ("pod-b", "tgt") not in pods.instances


@pytest.mark.parametrize("state", ["draining", "unloading-source"])
async def test_a_resumed_move_waits_for_its_source_pod_to_be_back(
    tmp_path: Path, state: str
) -> None:
    """The soak's zombie: the source held by the old leader, its pod paused a few
    seconds when the new leader resumed the move. The move waits for it, then ends."""
    pods = FakePods()
    pods.instances[("pod-b", "tgt")] = inst("tgt")
    pods.routes_of = {p: {"pod-b/tgt"} for p in pods.routes_of}
    pods.down = {"pod-a"}
    tries: list[str] = []

    async def back_later() -> None:
        while len([c for c in pods.calls if "unavailable" in c]) + len(tries) < 3:
            tries.append("x")
            await asyncio.sleep(0.05)
        pods.down.clear()

    back = asyncio.get_running_loop().create_task(back_later())
    move = await take_over(pods, tmp_path, state, source_wait=30)
    await back
    assert move.state == "done", move.reason
    assert ("pod-a", "src") not in pods.instances
    names = [s.name for s in move.steps]
    assert names.count("source-waiting") == 1
    assert names[-1] == "source-gone"
    assert pods.calls[-1] == "unload pod-a/src"
    assert pods.control.writes[-1][0]["state"] == "done"


async def test_a_resumed_move_whose_source_pod_stays_away_ends_with_a_clear_code(
    tmp_path: Path,
) -> None:
    pods = FakePods()
    pods.instances[("pod-b", "tgt")] = inst("tgt")
    pods.routes_of = {p: {"pod-b/tgt"} for p in pods.routes_of}
    pods.down = {"pod-a"}
    move = await take_over(pods, tmp_path, "draining", source_wait=0.5)
    assert move.state == "failed"
    assert move.code == "source_pod_unavailable"
    assert "unloads the held source itself" in (move.reason or "")
    assert ("pod-a", "src") in pods.instances  # left to its own pod (handover.py)


async def test_a_resumed_move_whose_source_pod_left_ends_at_once(tmp_path: Path) -> None:
    pods = FakePods()
    pods.instances[("pod-b", "tgt")] = inst("tgt")
    pods.routes_of = {p: {"pod-b/tgt"} for p in ("pod-b", "pod-c")}
    pods.instances[("pod-a", "src")] = inst("src")  # its last heartbeat still lists it
    pods.down = {"pod-a"}
    move = await take_over(pods, tmp_path, "unloading-source", source_wait=30)
    assert move.state == "failed"
    assert move.code == "source_pod_gone"


@pytest.mark.parametrize(
    "refusal",
    [
        NotFound("no instance src", code="instance_not_found"),
        Conflict("instance src is already stopping", code="instance_stopping"),
    ],
)
async def test_a_resumed_move_accepts_a_source_its_pod_already_unloads(
    tmp_path: Path, refusal: SardeenzError
) -> None:
    """The source's pod unloaded its held source itself (the safety net) meanwhile."""
    pods = FakePods()
    pods.instances[("pod-b", "tgt")] = inst("tgt")
    pods.routes_of = {p: {"pod-b/tgt"} for p in pods.routes_of}
    pods.refuse_source = {"withdraw": refusal, "unload": refusal}
    move = await take_over(pods, tmp_path, "draining")
    assert move.state == "done", move.reason
    assert [s.name for s in move.steps][-2:] == ["drain-skipped", "source-gone"]


async def test_a_failed_restore_is_not_reported_as_a_restore(tmp_path: Path) -> None:
    pods = FakePods()
    pods.instances[("pod-b", "tgt")] = inst("tgt")
    pods._route("pod-b/tgt", True)
    pods.down = {"pod-a"}
    move = await take_over(pods, tmp_path, "switching")
    names = [s.name for s in move.steps]
    assert "source-restored" not in names
    [failed] = [s for s in move.steps if s.name == "source-restore-failed"]
    assert "its withdrawal expires within" in (failed.detail or "")


async def test_a_source_whose_drain_is_refused_is_advertised_again(tmp_path: Path) -> None:
    """The 60-minute soak: a source put to sleep between its withdrawal and its drain
    (drain refused: not active) stayed withdrawn for its TTL; woken, no other pod
    routed the model to it. The move fails, the target stays, the source is restored."""
    pods = FakePods()
    pods.refuse_source = {
        "drain": Conflict("instance src is sleeping, not active", code="instance_not_active")
    }
    move = await run(service(pods, tmp_path), instanceId="src", targetPodId="pod-b")
    assert (move.state, move.code) == ("failed", "instance_not_active")
    names = [s.name for s in move.steps]
    assert names[-3:] == ["target-kept", "source-restored", "failed"]
    assert pods.calls[-2:] == ["withdraw pod-a/src", "restore pod-a/src"]
    assert pods.withdrawals("pod-a") == {}
    assert all("pod-a/src" in table for table in pods.routes_of.values())
    assert ("pod-b", "tgt") in pods.instances


async def test_a_source_gone_before_its_drain_is_not_restored(tmp_path: Path) -> None:
    pods = FakePods()

    async def lose_then_refuse(pod: str, iid: str, seconds: float) -> tuple[int, int]:
        del pods.instances[(pod, iid)]
        raise SardeenzError("no such instance", code="instance_not_found")

    pods.drain = lose_then_refuse  # type: ignore[method-assign]
    move = await run(service(pods, tmp_path), instanceId="src", targetPodId="pod-b")
    assert (move.state, move.code) == ("failed", "instance_not_found")
    assert [s.name for s in move.steps][-2:] == ["target-kept", "failed"]
    assert "restore pod-a/src" not in pods.calls
