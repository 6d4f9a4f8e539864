"""Surplus on-demand copies (cluster/ondemand_surplus.py): which copies go, and when."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

from sardeenz.cluster.handover import Pods
from sardeenz.cluster.ondemand_surplus import (
    Copy,
    Settling,
    SurplusReducer,
    orphans,
    surplus,
)
from sardeenz.config import Settings
from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from tests.unit.test_cluster_moves import FakePods, inst

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _copy(
    pod: str,
    iid: str,
    status: InstanceStatus = InstanceStatus.ACTIVE,
    *,
    age: int = 0,
    name: str = "chat",
    on_demand: bool = True,
) -> Copy:
    inst = ModelInstance(
        id=iid,
        model_path="m",
        served_model_name=name,
        display_name=name,
        engine=EngineKind.SIM,
        status=status,
        port=1,
        created_at=T0 - timedelta(seconds=age),
        on_demand=on_demand,
    )
    return Copy(pod, inst)


def _ids(copies: tuple[Copy, ...]) -> list[str]:
    return [c.instance.id for c in copies]


def _all(_: str) -> bool:
    return True


def test_three_active_copies_keep_the_oldest() -> None:
    copies = [_copy("a", "new", age=1), _copy("b", "old", age=30), _copy("c", "mid", age=10)]
    [r] = surplus(copies, _all)
    assert (r.name, r.keep.instance.id) == ("chat", "old")
    assert sorted(_ids(r.drop)) == ["mid", "new"]


def test_an_active_copy_is_kept_over_an_older_sleeping_one() -> None:
    copies = [_copy("a", "asleep", InstanceStatus.SLEEPING, age=100), _copy("b", "awake")]
    [r] = surplus(copies, _all)
    assert r.keep.instance.id == "awake"
    assert _ids(r.drop) == ["asleep"]


def test_one_copy_is_no_surplus() -> None:
    assert surplus([_copy("a", "only")], _all) == []


def test_an_operators_load_is_never_reduced() -> None:
    """An admin load of the catalog model's name is not a start on demand."""
    copies = [_copy("a", "od"), _copy("b", "admin", on_demand=False, age=50)]
    assert surplus(copies, _all) == []
    copies.append(_copy("c", "od2", age=5))
    [r] = surplus(copies, _all)
    assert (r.keep.instance.id, _ids(r.drop)) == ("od2", ["od"])


def test_names_that_are_not_reducible_are_left_alone() -> None:
    """Preset-declared names, external servers, adapters, moving models: the caller's
    predicate says no, and nothing of them goes."""
    copies = [_copy("a", "p1", name="preset"), _copy("b", "p2", name="preset")]
    copies += [_copy("a", "c1"), _copy("b", "c2", age=1)]
    [r] = surplus(copies, lambda n: n != "preset")
    assert (r.name, r.keep.instance.id, _ids(r.drop)) == ("chat", "c2", ["c1"])


def test_a_copy_still_starting_postpones_the_name() -> None:
    copies = [_copy("a", "up", age=9), _copy("b", "coming", InstanceStatus.STARTING)]
    assert surplus(copies, _all) == []


def test_gone_copies_do_not_count() -> None:
    copies = [
        _copy("a", "up"),
        _copy("b", "dead", InstanceStatus.FAILED, age=9),
        _copy("c", "going", InstanceStatus.STOPPING, age=9),
    ]
    assert surplus(copies, _all) == []


def test_ties_are_broken_the_same_way_every_round() -> None:
    copies = [_copy("b", "x"), _copy("a", "y")]
    first = surplus(copies, _all)
    assert first == surplus(list(reversed(copies)), _all)
    assert first[0].keep.pod_id == "a"


def test_each_model_is_reduced_on_its_own() -> None:
    copies = [_copy("a", "c1"), _copy("b", "c2", age=2)]
    copies += [_copy("a", "e1", name="embed", age=3), _copy("c", "e2", name="embed")]
    got = {r.name: (r.keep.instance.id, _ids(r.drop)) for r in surplus(copies, _all)}
    assert got == {"chat": ("c2", ["c1"]), "embed": ("e1", ["e2"])}


def _key(c: Copy) -> tuple[str, str]:
    return c.pod_id, c.instance.id


def stale_withdrawals(
    copies: list[Copy],
    withdrawn: dict[tuple[str, str], int],
    term: int,
    reducible: Callable[[str], bool],
) -> list[Copy]:
    """``orphans`` with nothing held: the copies advertised again (and nothing unloaded)."""
    found = orphans(copies, withdrawn, {}, term, reducible)
    assert found.unload == ()
    return list(found.advertise)


def test_the_only_copy_a_previous_term_withdrew_is_advertised_again() -> None:
    only = _copy("c", "only")
    assert stale_withdrawals([only], {_key(only): 2}, 3, _all) == [only]


def test_a_withdrawal_of_the_leaders_own_term_is_left_alone() -> None:
    """The live leader's own retirement (it withdrew the copy this term): not undone."""
    only = _copy("c", "only")
    assert stale_withdrawals([only], {_key(only): 3}, 3, _all) == []


def test_a_model_another_copy_routes_needs_nothing() -> None:
    """The surplus copy a dead leader withdrew, while the kept copy is routed: the next
    leader's own reduction decides about it (its withdrawal expires meanwhile)."""
    kept, going = _copy("a", "kept", age=9), _copy("c", "going")
    assert stale_withdrawals([kept, going], {_key(going): 2}, 3, _all) == []
    operators = _copy("a", "admin", on_demand=False)
    assert stale_withdrawals([operators, going], {_key(going): 2}, 3, _all) == []


def test_of_several_stale_copies_the_oldest_is_advertised_again() -> None:
    new, old = _copy("a", "new", age=1), _copy("c", "old", age=9)
    mine = _copy("b", "mine", age=30)  # withdrawn by this leader, mid-retirement
    withdrawn = {_key(new): 1, _key(old): 2, _key(mine): 3}
    assert stale_withdrawals([new, old, mine], withdrawn, 3, _all) == [old]


def test_what_the_reducer_does_not_own_is_not_advertised_again() -> None:
    """Not reducible (a preset's name, a model being moved: their owners restore their
    own withdrawals), an operator's load (only a move withdraws one), a copy that is not
    active (withdrawals only hide active copies from routing)."""
    preset = _copy("a", "p", name="preset")
    admin = _copy("b", "admin", name="admin", on_demand=False)
    asleep = _copy("c", "asleep", InstanceStatus.SLEEPING)
    withdrawn = {_key(preset): 1, _key(admin): 1, _key(asleep): 1}
    assert stale_withdrawals([preset, admin, asleep], withdrawn, 3, lambda n: n != "preset") == []


def test_the_only_copy_a_previous_term_drained_is_unloaded() -> None:
    """Held for its unload, it never serves again: unloaded, the next request starts the
    model anew. Held by this leader (its own retirement, mid-unload): left alone."""
    only = _copy("c", "only")
    assert orphans([only], {}, {_key(only): 2}, 3, _all).unload == (only,)
    assert orphans([only], {}, {_key(only): 3}, 3, _all) == orphans([], {}, {}, 3, _all)


def test_a_copy_to_advertise_again_is_preferred_to_unloading_a_held_one() -> None:
    held, withdrawn = _copy("a", "held", age=9), _copy("c", "withdrawn")
    found = orphans([held, withdrawn], {_key(withdrawn): 2}, {_key(held): 2}, 3, _all)
    assert (found.advertise, found.unload) == ((withdrawn,), ())


def test_a_held_copy_beside_a_routed_one_is_left_to_the_reduction() -> None:
    """Two live copies: the next leader's own reduction retires the held one."""
    kept, held = _copy("a", "kept", age=9), _copy("c", "held")
    assert orphans([kept, held], {}, {_key(held): 2}, 3, _all).unload == ()


def test_settling_needs_the_same_term_and_live_pods_for_the_whole_bound() -> None:
    s = Settling(30.0)
    assert not s.stable(3, ["a", "b", "c"], 0.0)
    assert not s.stable(3, ["c", "b", "a"], 29.0)
    assert s.stable(3, ["a", "b", "c"], 30.0)
    assert not s.stable(3, ["a", "b", "c", "d", "e"], 31.0)  # the partition healed
    assert not s.stable(4, ["a", "b", "c", "d", "e"], 60.0)  # then an election
    assert s.stable(4, ["a", "b", "c", "d", "e"], 90.0)
    s.reset()  # no longer leading
    assert not s.stable(4, ["a", "b", "c", "d", "e"], 91.0)


def test_old_records_without_the_marker_read_as_operator_loads() -> None:
    """A record persisted before the marker existed (or an older pod's heartbeat)."""
    record = _copy("a", "i").instance.model_dump(mode="json", by_alias=True)
    del record["onDemand"]
    assert ModelInstance.model_validate(record).on_demand is False


# ------------------------------------------------ the leader's loop, on fake pods


def _reducer(pods: FakePods, tmp_path: Path, clock: list[float]) -> SurplusReducer:
    r = SurplusReducer(
        cast(Pods, pods),
        Settings(data_dir=tmp_path, stop_grace_seconds=1),
        term=lambda: 3,
        now=lambda: clock[0],
        reducible=lambda name: name == "m",
        moving=frozenset,
    )
    r.route_timeout = 0.5
    r.transit_grace = 0.0
    return r


def _two_copies(extra: InstanceStatus = InstanceStatus.ACTIVE) -> FakePods:
    """pod-a runs the older on-demand copy, pod-c a younger one (both routed everywhere)."""
    pods = FakePods()
    pods.instances = {
        ("pod-a", "keep"): _od(inst("keep"), age=60),
        ("pod-c", "extra"): _od(inst("extra", extra), age=0),
    }
    pods.routes_of = {p: {"pod-a/keep", "pod-c/extra"} for p in ("pod-a", "pod-b", "pod-c")}
    return pods


def _od(i: ModelInstance, age: int) -> ModelInstance:
    return i.model_copy(update={"on_demand": True, "created_at": T0 - timedelta(seconds=age)})


async def test_the_surplus_copy_is_withdrawn_unrouted_drained_then_unloaded(
    tmp_path: Path,
) -> None:
    pods, clock = _two_copies(), [0.0]
    reducer = _reducer(pods, tmp_path, clock)
    await reducer.step()
    assert pods.calls == [], "acted before membership had settled"
    clock[0] = reducer.settling.settle
    await reducer.step()
    assert pods.calls == [
        "restore pod-a/keep",
        "withdraw pod-c/extra",
        "drain pod-c/extra",
        "unload pod-c/extra",
    ]
    assert set(pods.instances) == {("pod-a", "keep")}
    await reducer.step()  # level-triggered: one copy left, nothing more to do
    assert len(pods.calls) == 4


async def test_a_pod_that_keeps_routing_the_copy_stops_the_retirement(tmp_path: Path) -> None:
    """Never drain a copy another pod still sends requests to: it is advertised again."""
    pods, clock = _two_copies(), [0.0]
    pods.stuck = {"pod-b"}
    reducer = _reducer(pods, tmp_path, clock)
    reducer.settling.stable(3, pods.live(), 0.0)
    clock[0] = reducer.settling.settle
    await reducer.step()
    assert pods.calls == ["restore pod-a/keep", "withdraw pod-c/extra", "restore pod-c/extra"]
    assert ("pod-c", "extra") in pods.instances


async def test_a_sleeping_surplus_copy_is_unloaded_without_a_drain(tmp_path: Path) -> None:
    pods, clock = _two_copies(InstanceStatus.SLEEPING), [0.0]
    reducer = _reducer(pods, tmp_path, clock)
    reducer.settling.stable(3, pods.live(), 0.0)
    clock[0] = reducer.settling.settle
    await reducer.step()
    assert pods.calls == ["restore pod-a/keep", "unload pod-c/extra"]


async def test_a_kept_copy_a_dead_leader_withdrew_is_advertised_again(tmp_path: Path) -> None:
    """The Kubernetes soak (seed 4242): a leader withdrew pod-a's copy to retire it and
    was killed; the next leader kept that copy and unloaded the other (asleep, so no
    route check): for the withdrawal's TTL, no other pod routed the model."""
    pods, clock = _two_copies(InstanceStatus.SLEEPING), [0.0]
    for table in pods.routes_of.values():
        table.discard("pod-a/keep")  # the dead leader's withdrawal
    pods.routes_of["pod-a"].add("pod-a/keep")  # its own pod still routes it
    reducer = _reducer(pods, tmp_path, clock)
    reducer.settling.stable(3, pods.live(), 0.0)
    clock[0] = reducer.settling.settle
    await reducer.step()
    assert set(pods.instances) == {("pod-a", "keep")}
    assert all("pod-a/keep" in table for table in pods.routes_of.values()), pods.routes_of


async def test_a_follower_does_nothing(tmp_path: Path) -> None:
    pods, clock = _two_copies(), [0.0]
    pods.leader = False
    reducer = _reducer(pods, tmp_path, clock)
    reducer.settling.stable(3, pods.live(), 0.0)
    clock[0] = reducer.settling.settle
    await reducer.step()  # a round that began while leading: no order leaves this pod
    assert pods.calls == []


async def test_the_only_copy_a_dead_leader_withdrew_is_advertised_at_once(
    tmp_path: Path,
) -> None:
    """A leader of term 2 withdrew pod-c's copy to retire it (the copy kept ran on its
    own pod, which died with it): the leader of term 3 advertises it again on its first
    round, without waiting for membership to settle, and retires nothing."""
    pods, clock = FakePods(), [0.0]
    pods.instances = {("pod-c", "only"): _od(inst("only"), age=60)}
    pods.routes_of = {p: set() for p in ("pod-b", "pod-c")}
    pods.routes_of["pod-c"].add("pod-c/only")  # its own pod still routes it
    pods.withdrawn_terms = {("pod-c", "only"): 2}
    reducer = _reducer(pods, tmp_path, clock)
    await reducer.step()
    assert pods.calls == ["restore pod-c/only"]
    assert all("pod-c/only" in table for table in pods.routes_of.values()), pods.routes_of
    await reducer.step()  # level-triggered: routed now, nothing more to do
    assert pods.calls == ["restore pod-c/only"]


async def test_the_leaders_own_withdrawal_of_the_only_copy_stands(tmp_path: Path) -> None:
    pods, clock = FakePods(), [0.0]
    pods.instances = {("pod-c", "only"): _od(inst("only"), age=60)}
    pods.withdrawn_terms = {("pod-c", "only"): 3}  # this leader's term (_reducer's)
    reducer = _reducer(pods, tmp_path, clock)
    await reducer.step()
    assert pods.calls == []


async def test_the_only_copy_a_dead_leader_drained_is_unloaded(tmp_path: Path) -> None:
    pods, clock = FakePods(), [0.0]
    pods.instances = {("pod-c", "only"): _od(inst("only"), age=60)}
    pods.routes_of = {p: set() for p in ("pod-b", "pod-c")}
    pods.held_terms = {("pod-c", "only"): 2}
    reducer = _reducer(pods, tmp_path, clock)
    await reducer.step()
    assert pods.calls == ["unload pod-c/only"]
    await reducer.step()
    assert pods.calls == ["unload pod-c/only"]
