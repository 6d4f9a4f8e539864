"""The idle policy and eviction order (pure), and the idle loop over a fake supervisor."""

from __future__ import annotations

from dataclasses import replace

from sardeenz.catalog.eviction import Candidate, free_later, order_victims
from sardeenz.catalog.idle import IdleAction, IdleFacts, IdleRules, decide
from sardeenz.catalog.reaper import IdleReaper
from sardeenz.config import Settings
from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from sardeenz.store.records import CatalogEntry

RULES = IdleRules(
    sleep_level=1,
    idle_sleep_seconds=10,
    idle_unload_seconds=60,
    pinned=False,
    min_residency_seconds=5,
)
IDLE = IdleFacts(status="active", in_flight=0, idle_for=0, resident_for=100, sleep_capable=True)


def test_sleep_after_the_sleep_ttl_then_unload_after_the_unload_ttl() -> None:
    assert decide(replace(IDLE, idle_for=9.9), RULES) is IdleAction.KEEP
    assert decide(replace(IDLE, idle_for=10), RULES) is IdleAction.SLEEP
    assert decide(replace(IDLE, status="sleeping", idle_for=30), RULES) is IdleAction.KEEP
    assert decide(replace(IDLE, status="sleeping", idle_for=60), RULES) is IdleAction.UNLOAD
    assert decide(replace(IDLE, idle_for=61), RULES) is IdleAction.UNLOAD


def test_never_while_a_request_is_in_flight() -> None:
    assert decide(replace(IDLE, idle_for=1000, in_flight=1), RULES) is IdleAction.KEEP


def test_never_a_pinned_model() -> None:
    assert decide(replace(IDLE, idle_for=1000), replace(RULES, pinned=True)) is IdleAction.KEEP


def test_minimum_residency_after_a_load() -> None:
    assert decide(replace(IDLE, idle_for=1000, resident_for=4), RULES) is IdleAction.KEEP
    assert decide(replace(IDLE, idle_for=1000, resident_for=5), RULES) is IdleAction.UNLOAD


def test_no_sleep_without_sleep_mode_or_level_but_unload_still_applies() -> None:
    assert decide(replace(IDLE, idle_for=20, sleep_capable=False), RULES) is IdleAction.KEEP
    assert decide(replace(IDLE, idle_for=20), replace(RULES, sleep_level=0)) is IdleAction.KEEP
    no_sleep = replace(IDLE, idle_for=60, sleep_capable=False)
    assert decide(no_sleep, RULES) is IdleAction.UNLOAD


def test_starting_stopping_and_failed_instances_are_left_alone() -> None:
    for status in ("starting", "stopping", "failed"):
        assert decide(replace(IDLE, status=status, idle_for=1000), RULES) is IdleAction.KEEP


def test_no_ttl_keeps_the_model() -> None:
    rules = replace(RULES, idle_sleep_seconds=None, idle_unload_seconds=None)
    assert decide(replace(IDLE, idle_for=10**6), rules) is IdleAction.KEEP


# --- eviction order ------------------------------------------------------------
def _cand(iid: str, last: float, **kw: object) -> Candidate:
    base: dict[str, object] = {
        "instance_id": iid,
        "name": iid,
        "status": "active",
        "pinned": False,
        "in_flight": 0,
        "last_activity": last,
        "resident_for": 100.0,
    }
    base.update(kw)
    return Candidate(**base)  # type: ignore[arg-type]


def test_victims_least_recently_used_first_asleep_first_on_a_tie() -> None:
    order = order_victims(
        [
            _cand("new", 30),
            _cand("old", 10),
            _cand("tie-awake", 20),
            _cand("tie-asleep", 20, status="sleeping"),
        ],
        min_residency=5,
    )
    assert [c.instance_id for c in order] == ["old", "tie-asleep", "tie-awake", "new"]


def test_never_a_pinned_busy_fresh_or_starting_victim() -> None:
    cands = [
        _cand("pinned", 1, pinned=True),
        _cand("busy", 1, in_flight=1),
        _cand("fresh", 1, resident_for=2),
        _cand("starting", 1, status="starting"),
        _cand("ok", 50),
    ]
    assert [c.instance_id for c in order_victims(cands, min_residency=5)] == ["ok"]


# --- the idle loop, with a fake supervisor and a hand-driven clock ----------------
class _FakeLifecycle:
    def __init__(self, instances: list[ModelInstance]) -> None:
        self.instances = instances
        self.calls: list[tuple[str, str]] = []

    def list_instances(self) -> list[ModelInstance]:
        return list(self.instances)

    async def sleep(self, instance_id: str, level: int) -> ModelInstance:
        self.calls.append(("sleep", instance_id))
        inst = next(i for i in self.instances if i.id == instance_id)
        inst.status = InstanceStatus.SLEEPING
        return inst

    async def unload(self, instance_id: str) -> ModelInstance:
        self.calls.append(("unload", instance_id))
        inst = next(i for i in self.instances if i.id == instance_id)
        self.instances.remove(inst)
        return inst


class _FakeCatalog:
    def __init__(
        self, entries: dict[str, CatalogEntry], adapters: dict[str, list[str]] | None = None
    ) -> None:
        self._entries = entries
        self._adapters = adapters or {}

    def entry(self, name: str) -> CatalogEntry | None:
        return self._entries.get(name)

    def adapters_of(self, base: str) -> list[str]:
        return self._adapters.get(base, [])


def _instance(iid: str, name: str) -> ModelInstance:
    return ModelInstance(
        id=iid,
        model_path=name,
        served_model_name=name,
        display_name=name,
        engine=EngineKind.SIM,
        status=InstanceStatus.ACTIVE,
        port=1,
        sleep_mode_enabled=True,
    )


async def test_the_idle_loop_sleeps_then_unloads_and_a_new_loop_starts_clocks_afresh() -> None:
    now = [1000.0]
    busy = {"m": (0, 0)}
    entry = CatalogEntry(
        model_path="m", sleep_level=1, idle_sleep_seconds=10, idle_unload_seconds=30
    )
    settings = Settings(ondemand_min_residency_seconds=0)
    life = _FakeLifecycle([_instance("i1", "m")])
    reaper = IdleReaper(
        settings,
        _FakeCatalog({"m": entry}),  # type: ignore[arg-type]
        life,
        activity=lambda name: busy[name],
        clock=lambda: now[0],
    )
    await reaper.tick()
    now[0] += 9
    await reaper.tick()
    assert life.calls == []
    busy["m"] = (1, 0)  # a request in flight for long: nothing happens
    now[0] += 100
    await reaper.tick()
    assert life.calls == []
    busy["m"] = (0, 1)  # it finished: the clock restarts now
    await reaper.tick()
    now[0] += 10
    await reaper.tick()
    assert life.calls == [("sleep", "i1")]
    # a restarted controller (a new loop) sees the sleeping instance: its clock starts afresh
    restarted = IdleReaper(
        settings,
        _FakeCatalog({"m": entry}),  # type: ignore[arg-type]
        life,
        activity=lambda name: busy[name],
        clock=lambda: now[0],
    )
    now[0] += 25
    await restarted.tick()
    now[0] += 29
    await restarted.tick()
    assert life.calls == [("sleep", "i1")]
    now[0] += 1
    await restarted.tick()
    assert life.calls == [("sleep", "i1"), ("unload", "i1")]


async def test_requests_for_its_adapters_keep_a_base_awake() -> None:
    """An adapter's requests run in its base's instance: they count as the base's."""
    now = [1000.0]
    busy = {"base": (0, 0), "lora": (0, 0)}
    entry = CatalogEntry(model_path="m", sleep_level=1, idle_sleep_seconds=10, lora_slots=2)
    life = _FakeLifecycle([_instance("i1", "base")])
    reaper = IdleReaper(
        Settings(ondemand_min_residency_seconds=0),
        _FakeCatalog({"base": entry}, {"base": ["lora"]}),  # type: ignore[arg-type]
        life,
        activity=lambda name: busy[name],
        clock=lambda: now[0],
    )
    await reaper.tick()
    busy["lora"] = (1, 0)  # a long request for the adapter
    now[0] += 100
    await reaper.tick()
    assert life.calls == []
    assert reaper.busy("base")
    busy["lora"] = (0, 1)  # it finished: the base's idle clock restarts now
    await reaper.tick()
    now[0] += 9
    await reaper.tick()
    assert life.calls == []
    now[0] += 1
    await reaper.tick()
    assert life.calls == [("sleep", "i1")]


def test_a_busy_or_fresh_candidate_is_worth_waiting_for_a_pinned_one_never() -> None:
    assert free_later([_cand("busy", 1, in_flight=2)], min_residency=5)
    assert free_later([_cand("fresh", 1, resident_for=1)], min_residency=5)
    assert not free_later([_cand("pinned", 1, pinned=True, in_flight=1)], min_residency=5)
    assert not free_later([_cand("starting", 1, status="starting")], min_residency=5)


async def test_idle_seconds_is_the_clock_the_ttls_count() -> None:
    now = [500.0]
    busy = {"m": (0, 0)}
    reaper = IdleReaper(
        Settings(ondemand_min_residency_seconds=0),
        _FakeCatalog({"m": CatalogEntry(model_path="m")}),  # type: ignore[arg-type]
        _FakeLifecycle([_instance("i1", "m")]),
        activity=lambda name: busy[name],
        clock=lambda: now[0],
    )
    assert reaper.idle_seconds(["i1"]) is None  # not seen by the loop yet
    await reaper.tick()
    now[0] += 12
    assert reaper.idle_seconds(["i1"]) == 12
    busy["m"] = (0, 1)  # a request finished: the next tick restarts the clock
    await reaper.tick()
    now[0] += 3
    assert reaper.idle_seconds(["i1", "gone"]) == 3


async def test_minimum_residency_counts_from_each_wake_not_the_first_load() -> None:
    now = [0.0]
    inst = _instance("i1", "m")
    life = _FakeLifecycle([inst])
    entry = CatalogEntry(model_path="m", sleep_level=1, idle_sleep_seconds=10)
    reaper = IdleReaper(
        Settings(ondemand_min_residency_seconds=60),
        _FakeCatalog({"m": entry}),  # type: ignore[arg-type]
        life,
        activity=lambda name: (0, 0),
        clock=lambda: now[0],
    )
    await reaper.tick()
    now[0] += 100  # idle and resident long enough: it sleeps
    await reaper.tick()
    assert life.calls == [("sleep", "i1")]
    now[0] += 5
    await reaper.tick()  # seen asleep
    inst.status = InstanceStatus.ACTIVE  # a request woke it (and ended)
    now[0] += 1
    await reaper.tick()
    # idle for 100+ s by its clock, loaded 106 s ago, but woken 0 s ago: it stays
    now[0] += 59
    await reaper.tick()
    assert life.calls == [("sleep", "i1")]
    now[0] += 1
    await reaper.tick()
    assert life.calls == [("sleep", "i1"), ("sleep", "i1")]


async def test_a_level_one_idle_sleep_needs_host_ram_for_the_weights() -> None:
    now = [0.0]
    inst = _instance("i1", "m").model_copy(update={"reserved_bytes_per_gpu": 4 * 2**30})
    life = _FakeLifecycle([inst])
    room = [3 * 2**30]

    async def host_room() -> int:
        return room[0]

    reaper = IdleReaper(
        Settings(ondemand_min_residency_seconds=0),
        _FakeCatalog({"m": CatalogEntry(model_path="m", sleep_level=1, idle_sleep_seconds=10)}),  # type: ignore[arg-type]
        life,
        activity=lambda name: (0, 0),
        clock=lambda: now[0],
        host_room=host_room,
    )
    await reaper.tick()
    now[0] += 20
    await reaper.tick()
    assert life.calls == []  # 4 GiB of weights, 3 GiB of host RAM: it stays awake
    room[0] = 5 * 2**30
    now[0] += 1
    await reaper.tick()
    assert life.calls == []  # looked at again only after the retry delay
    now[0] += 30
    await reaper.tick()
    assert life.calls == [("sleep", "i1")]
