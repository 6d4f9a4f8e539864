"""The adapter slot book: never more adapters than slots, never evicts one in use, and
every change a waiting request may be waiting for notifies (no waiter needs to poll)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sardeenz.catalog.adapterslots import Reservation, SlotBook, SlotState

INSTANCES = ("i1", "i2", "i3")
ADAPTERS = tuple(f"a{n}" for n in range(8))


class SlotMachine(RuleBasedStateMachine):
    """Random loads, evictions, requests and instance losses, as the orchestrator drives
    them; a model of in-flight requests checks the book's two promises after each step."""

    def __init__(self) -> None:
        super().__init__()
        self.notified = 0
        self.book = SlotBook(on_change=self._on_change)
        self.seen = (self._view(), 0)
        self.now = 0.0
        self.requests: dict[tuple[str, str], int] = {}
        self.pending: list[Reservation] = []
        self.loading: list[tuple[str, str]] = []

    def _on_change(self) -> None:
        self.notified += 1

    def _view(self) -> dict[tuple[str, str], tuple[SlotState, int]]:
        book = self.book
        return {
            (iid, a): (state, book.inflight(iid, a))
            for iid in book.instance_ids()
            for a, state in book.held(iid).items()
        }

    def tick(self) -> float:
        self.now += 1.0
        return self.now

    @rule(iid=st.sampled_from(INSTANCES), slots=st.integers(1, 3))
    def add(self, iid: str, slots: int) -> None:
        self.book.add_instance(iid, slots)

    @rule(adapter=st.sampled_from(ADAPTERS), among=st.sets(st.sampled_from(INSTANCES)))
    def reserve(self, adapter: str, among: set[str]) -> None:
        busy = {a for a, _ in self.loading} | {r.adapter for r in self.pending}
        if adapter in busy:
            return  # single flight: one load per adapter at a time
        before = {iid: self.book.held(iid) for iid in self.book.instance_ids()}
        r = self.book.reserve(adapter, sorted(among), self.tick())
        if r is None:
            return
        assert r.instance_id in among
        if r.victim is None:
            assert before[r.instance_id].get(adapter) is None
            assert len(before[r.instance_id]) < self.book.slots(r.instance_id)
            self.loading.append((r.instance_id, adapter))
        else:
            # The victim was idle and loaded, and the least recently used such adapter.
            assert before[r.instance_id][r.victim] is SlotState.LOADED
            assert self.requests.get((r.instance_id, r.victim), 0) == 0
            assert all(
                len(before[i]) >= self.book.slots(i)
                for i in among
                if i in before and adapter not in before[i]
            )
            self.pending.append(r)

    @precondition(lambda self: bool(self.pending))
    @rule(data=st.data())
    def unloaded_victim(self, data: st.DataObject) -> None:
        r = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        self.book.evicted(r, self.tick())
        if self.book.has_instance(r.instance_id):
            self.loading.append((r.instance_id, r.adapter))

    @precondition(lambda self: bool(self.loading))
    @rule(data=st.data(), ok=st.booleans(), holds=st.integers(0, 3))
    def finish_load(self, data: st.DataObject, ok: bool, holds: int) -> None:
        iid, adapter = self.loading.pop(data.draw(st.integers(0, len(self.loading) - 1)))
        if ok:
            if self.book.loaded(iid, adapter, self.tick(), holds) and holds:
                self.requests[(iid, adapter)] = holds
        else:
            self.book.forget(iid, adapter)

    @rule(adapter=st.sampled_from(ADAPTERS))
    def request(self, adapter: str) -> None:
        holder = self.book.least_busy_holder(adapter, self.book.holders(adapter))
        if holder is not None:
            assert self.book.acquire(holder, adapter, self.tick())
            key = (holder, adapter)
            self.requests[key] = self.requests.get(key, 0) + 1

    @precondition(lambda self: any(self.requests.values()))
    @rule(data=st.data())
    def request_ends(self, data: st.DataObject) -> None:
        live = sorted(k for k, n in self.requests.items() if n)
        iid, adapter = data.draw(st.sampled_from(live))
        self.requests[(iid, adapter)] -= 1
        self.book.release(iid, adapter, self.tick())

    @rule(ttl=st.floats(0, 6), among=st.sets(st.sampled_from(INSTANCES)))
    def idle_ttl(self, ttl: float, among: set[str]) -> None:
        """The idle TTL's pass: what it takes was loaded, idle and unused for ``ttl``."""
        before = {iid: self.book.held(iid) for iid in self.book.instance_ids()}
        now = self.tick()
        for iid, adapter in self.book.expire(now, ttl, sorted(among)):
            assert iid in among
            assert before[iid][adapter] is SlotState.LOADED
            assert self.requests.get((iid, adapter), 0) == 0
            assert self.book.held(iid)[adapter] is SlotState.EVICTING
            assert not self.book.acquire(iid, adapter, now)  # no request can take it now
            self.book.forget(iid, adapter)  # the engine unloaded it

    @rule(iid=st.sampled_from(INSTANCES))
    def instance_gone(self, iid: str) -> None:
        self.book.drop_instance(iid)
        for key in [k for k in self.requests if k[0] == iid]:
            del self.requests[key]  # their requests failed with the engine
        self.loading = [x for x in self.loading if x[0] != iid]
        self.pending = [r for r in self.pending if r.instance_id != iid]

    @invariant()
    def never_more_than_slots(self) -> None:
        for iid in self.book.instance_ids():
            assert len(self.book.held(iid)) <= self.book.slots(iid)

    @invariant()
    def in_flight_adapters_stay_loaded(self) -> None:
        for (iid, adapter), n in self.requests.items():
            if n:
                assert self.book.held(iid).get(adapter) is SlotState.LOADED
                assert self.book.inflight(iid, adapter) == n

    @invariant()
    def changes_a_waiter_needs_notify(self) -> None:
        """A slot freed, an adapter loaded, or its last request ended: ``on_change`` was
        called (a request waiting for room or for a slot changing hands wakes on it)."""
        before, count = self.seen
        after = self._view()
        freed = before.keys() - after.keys()
        loaded = [
            k
            for k, (state, n) in after.items()
            if state is SlotState.LOADED
            and (k not in before or before[k][0] is not SlotState.LOADED or (n == 0 < before[k][1]))
        ]
        if freed or loaded:
            assert self.notified > count, f"no notify for freed {freed} or loaded {loaded}"
        self.seen = (after, self.notified)


TestSlotMachine = SlotMachine.TestCase
TestSlotMachine.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)


@given(slots=st.integers(1, 4))
def test_lru_idle_adapter_is_the_victim(slots: int) -> None:
    book = SlotBook()
    book.add_instance("i", slots)
    for n in range(slots):
        r = book.reserve(f"a{n}", ["i"], float(n))
        assert r is not None
        assert r.victim is None
        assert book.loaded("i", f"a{n}", float(n))
    # The oldest is busy: the next oldest idle one goes.
    assert book.acquire("i", "a0", 100.0)
    r = book.reserve("new", ["i"], 101.0)
    if slots == 1:
        assert r is None  # its only adapter serves a request: nothing may be evicted
    else:
        assert r is not None
        assert r.victim == "a1"
        assert book.held("i")["a1"] is SlotState.EVICTING
        assert book.reserve("other", ["i"], 102.0) is None or slots > 2


def test_free_slot_goes_to_the_emptier_instance_and_drop_loses_adapters() -> None:
    book = SlotBook()
    book.add_instance("a", 2)
    book.add_instance("b", 3)
    first = book.reserve("x", ["a", "b"], 1.0)
    assert first == Reservation("b", "x")
    assert book.loaded("b", "x", 2.0)
    assert book.holders("x") == ["b"]
    assert book.drop_instance("b") == ["x"]
    assert book.holders("x") == []
    assert not book.acquire("b", "x", 3.0)


def test_idle_ttl_takes_only_adapters_unused_for_the_ttl() -> None:
    book = SlotBook()
    book.add_instance("i1", 3)
    for name, at in (("old", 0.0), ("busy", 0.0), ("new", 8.0)):
        r = book.reserve(name, ["i1"], at)
        assert r is not None
        assert book.loaded("i1", name, at)
    assert book.acquire("i1", "busy", 1.0)  # in flight since t=1: never taken
    assert book.expire(10.0, 5.0, ["i1", "nowhere"]) == [("i1", "old")]
    assert book.snapshot() == {"i1": {"busy": 1, "new": 0}}  # evicting: not advertised
    assert book.expire(100.0, 5.0, []) == []  # only the instances asked about
    book.touch("i1", 20.0)  # woke at t=20: its sleep was not idle time
    assert book.expire(22.0, 5.0, ["i1"]) == []
    assert book.expire(25.0, 5.0, ["i1"]) == [("i1", "new")]
