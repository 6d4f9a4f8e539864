"""Which LoRA adapters each instance of a base holds: slots, in-flight counts, LRU.

Pure bookkeeping (no I/O, no clock: callers pass ``now``), so its two promises are
checked by property tests (tests/unit/test_adapterslots.py):

* an instance never holds more adapters than its slots (``loraSlots``, the engine's
  ``--max-loras``), counting adapters being loaded and being unloaded;
* an adapter with requests in flight (or waiters it was loaded for) is never chosen
  for eviction; the victim is the least recently used idle adapter.

Every change a waiting request may be waiting for calls ``on_change`` (the loader's
``Room.notify``): an adapter loaded or adopted, a slot freed (evicted, forgotten, its
instance dropped), an adapter's last request ended (it may be evicted now). Marking a
slot for a load or an eviction takes room and does not call it.

The orchestration around it (engine calls, single flight, waiting) is
``catalog.adapters``. Everything runs on the event loop: ``reserve`` decides and
records in one synchronous step, so two loads can never take the same free slot.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = ["Reservation", "SlotBook", "SlotState"]


class SlotState(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"
    EVICTING = "evicting"


@dataclass(slots=True)
class _Slot:
    state: SlotState
    last_used: float
    inflight: int = 0


@dataclass(slots=True)
class _Instance:
    slots: int
    held: dict[str, _Slot] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Room for ``adapter`` on ``instance_id``; unload ``victim`` first when set."""

    instance_id: str
    adapter: str
    victim: str | None = None


class SlotBook:
    """Adapters per instance; see the module docstring."""

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self._instances: dict[str, _Instance] = {}
        self._on_change = on_change

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()

    # -- instances ---------------------------------------------------------------------
    def add_instance(self, instance_id: str, slots: int) -> None:
        """Track an instance with ``slots`` adapter slots (idempotent)."""
        if slots < 1:
            raise ValueError("an instance of a LoRA base has at least one slot")
        self._instances.setdefault(instance_id, _Instance(slots))

    def has_instance(self, instance_id: str) -> bool:
        return instance_id in self._instances

    def drop_instance(self, instance_id: str) -> list[str]:
        """The instance is gone (unloaded, failed, moved): what it held, now lost."""
        inst = self._instances.pop(instance_id, None)
        if inst is None:
            return []
        if inst.held:
            self._changed()
        return sorted(inst.held)

    def instance_ids(self) -> list[str]:
        return sorted(self._instances)

    # -- reads -------------------------------------------------------------------------
    def holders(self, adapter: str) -> list[str]:
        """Instances where ``adapter`` is loaded and usable now, sorted."""
        return sorted(
            iid
            for iid, inst in self._instances.items()
            if (s := inst.held.get(adapter)) is not None and s.state is SlotState.LOADED
        )

    def held(self, instance_id: str) -> dict[str, SlotState]:
        inst = self._instances.get(instance_id)
        return {a: s.state for a, s in inst.held.items()} if inst is not None else {}

    def inflight(self, instance_id: str, adapter: str) -> int:
        inst = self._instances.get(instance_id)
        slot = inst.held.get(adapter) if inst is not None else None
        return slot.inflight if slot is not None else 0

    def slots(self, instance_id: str) -> int:
        return self._instances[instance_id].slots

    def snapshot(self) -> dict[str, dict[str, int]]:
        """Instance id -> {adapter loaded there: its requests in flight} (what a heartbeat
        tells the other pods; adapters being loaded or unloaded are left out)."""
        return {
            iid: {a: s.inflight for a, s in inst.held.items() if s.state is SlotState.LOADED}
            for iid, inst in self._instances.items()
        }

    def least_busy_holder(self, adapter: str, among: Iterable[str]) -> str | None:
        """Of the ``among`` instances holding ``adapter`` loaded, the one with the fewest
        of its requests in flight (ties: the first id)."""
        best: tuple[int, str] | None = None
        for iid in among:
            inst = self._instances.get(iid)
            slot = inst.held.get(adapter) if inst is not None else None
            if slot is not None and slot.state is SlotState.LOADED:
                key = (slot.inflight, iid)
                if best is None or key < best:
                    best = key
        return best[1] if best is not None else None

    # -- decisions ---------------------------------------------------------------------
    def reserve(self, adapter: str, candidates: Iterable[str], now: float) -> Reservation | None:
        """Room for ``adapter`` on one of ``candidates`` (tracked instances), recorded at once.

        A free slot first (on the instance with the most free slots); otherwise the least
        recently used idle adapter of any candidate is marked for eviction, and the caller
        unloads it then calls ``evicted``. None when every slot is busy (loading,
        unloading, or serving requests). A candidate that holds ``adapter`` in any state
        is passed over (it is loading there, or leaving).
        """
        free: tuple[int, str] | None = None
        victim: tuple[float, str, str] | None = None
        for iid in candidates:
            inst = self._instances.get(iid)
            if inst is None:
                continue
            if adapter in inst.held:
                continue
            room = inst.slots - len(inst.held)
            if room > 0 and (free is None or (-room, iid) < free):
                free = (-room, iid)
            for name, slot in inst.held.items():
                if slot.state is SlotState.LOADED and slot.inflight == 0:
                    key = (slot.last_used, iid, name)
                    if victim is None or key < victim:
                        victim = key
        if free is not None:
            iid = free[1]
            self._instances[iid].held[adapter] = _Slot(SlotState.LOADING, now)
            return Reservation(iid, adapter)
        if victim is not None:
            _, iid, name = victim
            self._instances[iid].held[name].state = SlotState.EVICTING
            return Reservation(iid, adapter, name)
        return None

    def evicted(self, reservation: Reservation, now: float) -> None:
        """The victim was unloaded: its slot is the new adapter's, now loading."""
        inst = self._instances.get(reservation.instance_id)
        if inst is None or reservation.victim is None:
            return
        inst.held.pop(reservation.victim, None)
        if len(inst.held) < inst.slots:
            inst.held[reservation.adapter] = _Slot(SlotState.LOADING, now)
        self._changed()

    def loaded(self, instance_id: str, adapter: str, now: float, holds: int = 0) -> bool:
        """The load finished; ``holds`` requests waited for it and are in flight now.

        False when the instance or its slot went away meanwhile (nothing is recorded).
        """
        inst = self._instances.get(instance_id)
        slot = inst.held.get(adapter) if inst is not None else None
        if slot is None or slot.state is not SlotState.LOADING:
            return False
        slot.state = SlotState.LOADED
        slot.last_used = now
        slot.inflight = holds
        self._changed()
        return True

    def adopt(self, instance_id: str, adapter: str, now: float) -> bool:
        """The engine already holds ``adapter`` (loaded before a restart of ours): record it
        loaded if a slot is free. False when there is no room (the caller unloads it)."""
        inst = self._instances.get(instance_id)
        if inst is None:
            return False
        if adapter in inst.held:
            return True
        if len(inst.held) >= inst.slots:
            return False
        inst.held[adapter] = _Slot(SlotState.LOADED, now)
        self._changed()
        return True

    def forget(self, instance_id: str, adapter: str) -> None:
        """A load failed, or an adapter was unloaded outside an eviction: free its slot."""
        inst = self._instances.get(instance_id)
        if inst is not None and inst.held.pop(adapter, None) is not None:
            self._changed()

    def expire(self, now: float, ttl: float, among: Iterable[str]) -> list[tuple[str, str]]:
        """Adapters of the ``among`` instances idle for ``ttl`` seconds or more (loaded,
        nothing in flight, last used at ``now - ttl`` or before), marked for eviction at
        once (no request can take them any more); the caller unloads each, then
        ``forget``s it. Never one with requests in flight."""
        out: list[tuple[str, str]] = []
        for iid in among:
            inst = self._instances.get(iid)
            if inst is None:
                continue
            for name, slot in sorted(inst.held.items()):
                if (
                    slot.state is SlotState.LOADED
                    and slot.inflight == 0
                    and now - slot.last_used >= ttl
                ):
                    slot.state = SlotState.EVICTING
                    out.append((iid, name))
        return out

    def take_idle(self, adapter: str, among: Iterable[str]) -> tuple[list[str], list[str]]:
        """An operator's unload of ``adapter`` from the ``among`` instances: (the ones where
        it was loaded and idle, now marked for eviction; the ones where it serves
        requests, left alone). The caller unloads each taken one, then ``forget``s it."""
        taken: list[str] = []
        busy: list[str] = []
        for iid in sorted(among):
            inst = self._instances.get(iid)
            slot = inst.held.get(adapter) if inst is not None else None
            if slot is None or slot.state is not SlotState.LOADED:
                continue
            if slot.inflight:
                busy.append(iid)
            else:
                slot.state = SlotState.EVICTING
                taken.append(iid)
        return taken, busy

    def touch(self, instance_id: str, now: float) -> None:
        """Count every adapter of the instance as used at ``now`` (it woke up: the idle
        TTL counts time awake, so a long sleep does not unload them all at the wake)."""
        inst = self._instances.get(instance_id)
        for slot in inst.held.values() if inst is not None else ():
            slot.last_used = max(slot.last_used, now)

    # -- requests ----------------------------------------------------------------------
    def acquire(self, instance_id: str, adapter: str, now: float) -> bool:
        """A request for ``adapter`` goes to ``instance_id``; False if it is not loaded there."""
        inst = self._instances.get(instance_id)
        slot = inst.held.get(adapter) if inst is not None else None
        if slot is None or slot.state is not SlotState.LOADED:
            return False
        slot.inflight += 1
        slot.last_used = now
        return True

    def release(self, instance_id: str, adapter: str, now: float) -> None:
        """A request for ``adapter`` on ``instance_id`` ended (the slot may be gone)."""
        inst = self._instances.get(instance_id)
        slot = inst.held.get(adapter) if inst is not None else None
        if slot is not None and slot.inflight > 0:
            slot.inflight -= 1
            slot.last_used = now
            if slot.inflight == 0:
                self._changed()
