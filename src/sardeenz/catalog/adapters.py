"""LoRA adapters on first request: load into an instance of the base, then route there.

A ``/v1`` request whose ``model`` is an adapter entry (``adapterOf``) misses the
routing table (only bases are routed), so the proxy asks load on demand, which
hands it here:

1. **Hit**: an instance of the base on any pod holds the adapter loaded (this pod's
   slot book; other pods' from their heartbeats, which carry the adapters each
   instance holds and their requests in flight): the request goes to the least
   busy holder (``adapterroute.pick_holder``; a local one on a tie). Another pod's
   holder is reached through that pod's proxy, which serves it from its own book.
2. **Saturated or missing**: when no instance holds it, or every holder has
   ``adapter_saturation_inflight`` requests in flight, the adapter is loaded into one
   more instance. The pod that loads it is the first in rendezvous order of the pods
   running an active instance of the base without it (``adapterroute.load_pod``):
   this pod loads it itself, or sends the request to that pod, whose proxy loads it.
   A saturated adapter with nowhere to go keeps its least busy holder.
3. **Base**: no active instance of the base anywhere: the base's own first-request
   path (``OnDemand.wait``) starts or wakes it, with its queue and limits.
4. **Load** (on this pod): one load per adapter at a time (single flight, shielded so
   a waiter that leaves does not cancel it for the others). The slot book
   (``adapterslots``) picks an instance with a free slot, or the least recently used
   idle adapter to unload first; never one with requests in flight. The engine is
   asked with vLLM's ``/v1/load_lora_adapter``; every waiter is counted in flight the
   moment the load succeeds, so the new adapter cannot be evicted before they are
   forwarded.
5. **Failure**: the engine's refusal (vLLM's message and status) answers every
   waiter, and new requests for ``ondemand_failure_hold_seconds``.

A request that another pod forwarded here (``local_only``) is served by this pod's
instances only: it made its one hop.

The request keeps the adapter's name in its body (the engine answers with it).
Adapters follow their base: a sleeping instance keeps them; an instance that is
unloaded, fails or moves loses them (the routing table's listener drops them from
the book), and the next request loads them again; a move loads the source's adapters
into the target first (``load_into``, ordered by the leader). An adapter idle for
``adapter_idle_ttl_seconds`` is unloaded (``catalog.adapteridle``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from sardeenz.catalog.adapterengine import EngineCalls, EngineRefused, InstanceGone, InstanceSource
from sardeenz.catalog.adapteridle import IdleAdapters
from sardeenz.catalog.adapterroute import Holder, PeerAdapters, Placement, load_pod, pick_holder
from sardeenz.catalog.adapterslots import Reservation, SlotBook, SlotState
from sardeenz.catalog.adapterupkeep import AdapterUpkeep
from sardeenz.catalog.adapterwaits import Failures, Room, no_room, timed_out
from sardeenz.catalog.metrics import STATS
from sardeenz.catalog.models import AdapterState
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus
from sardeenz.engines.vllm import flag_value
from sardeenz.proxy.routing import Endpoint, InstanceView, RoutingTable
from sardeenz.proxy.wire import ErrorReply
from sardeenz.store.records import CatalogEntry
from sardeenz.tasks import await_within

log = logging.getLogger(__name__)

__all__ = ["AdapterLoader"]

_KEEPS_ADAPTERS = (InstanceStatus.ACTIVE, InstanceStatus.SLEEPING)


class _LoadFailed(EngineRefused):
    """The engine refused the load; ``reply`` is what every waiter answers."""

    reply: ErrorReply | None = None


class _NoRoom(Exception):
    """Every slot of every instance of the base is busy (loading or serving)."""


@dataclass(slots=True)
class _Flight:
    """One load of one adapter and the requests waiting for it."""

    task: asyncio.Task[Endpoint] | None = None
    waiters: int = 0
    granted: Endpoint | None = None
    """Set when the load succeeded: each waiter then holds one in-flight count there."""


class AdapterLoader:
    """See the module docstring. All state lives on the event loop."""

    def __init__(
        self,
        settings: Settings,
        table: RoutingTable,
        instances: InstanceSource,
        base_wait: Callable[[str], Awaitable[Endpoint | ErrorReply]],
    ) -> None:
        self.room = Room()
        self.book = SlotBook(on_change=self.room.notify)
        self.table = table
        self._instances = instances
        self._base_wait = base_wait
        self._max_wait = settings.ondemand_max_wait_seconds
        self._saturation = settings.adapter_saturation_inflight
        self.engine = EngineCalls(instances, settings.ondemand_max_wait_seconds)
        self._flights: dict[str, _Flight] = {}
        self._failures = Failures(settings.ondemand_failure_hold_seconds)
        self._sent: dict[tuple[str, str], int] = {}
        """(``pod/instance``, adapter) -> requests this pod sent there, still running."""
        self._version = 0
        self.peers: PeerAdapters | None = None
        """In a cluster: what the other pods' instances hold (set by the app's wiring)."""
        self.pod_id = ""
        """This pod's id in a cluster (its place in the rendezvous order)."""
        self.on_change: Callable[[], None] | None = None
        """Called when an adapter is loaded or unloaded here (in a cluster: send the next
        heartbeat now, so the other pods route to it sooner)."""
        self.upkeep = AdapterUpkeep(self)
        """Loads and unloads that no request asks for (a move, an operator, the TTL)."""
        self.idle = IdleAdapters(settings.adapter_idle_ttl_seconds, self.upkeep)
        """Unloads adapters idle for the TTL (started with the first load)."""
        table.add_listener(self._on_instance)

    @property
    def version(self) -> int:
        """Changes when an adapter is loaded or lost anywhere (``GET /v1/models`` caches
        on it)."""
        return self._version + (self.peers.version if self.peers is not None else 0)

    async def close(self) -> None:
        await self.idle.stop()
        for flight in list(self._flights.values()):
            if flight.task is not None:
                flight.task.cancel()
        tasks = [f.task for f in self._flights.values() if f.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self.engine.close()

    # ------------------------------------------------------------- the hook
    async def wait(
        self, name: str, entry: CatalogEntry, *, local_only: bool = False
    ) -> Endpoint | ErrorReply:
        """An endpoint of the base holding adapter ``name`` (or of the pod that loads it),
        counted in flight until ``release``, or the error to answer. ``local_only``: the
        request made its hop already; only this pod's instances serve it."""
        base = entry.adapter_of
        assert base is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_wait
        missed = False
        while True:
            seen = self.room.generation  # before looking: a change from now on wakes us
            endpoints = {e.instance_id: e for e in self.table.endpoints(base)}
            if local_only:
                endpoints = {i: e for i, e in endpoints.items() if e.local}
            best, saturated = pick_holder(self._holders(name, endpoints), self._saturation)
            if best is not None and not saturated:
                ep = self._grant(name, endpoints[best.endpoint_id])
                if ep is not None:
                    self._count(name, "miss" if missed else "hit", local_only)
                    return ep
                if not await self._settle(deadline, seen):  # its slot is changing hands
                    return timed_out(name, self._max_wait)
                continue
            failed = self._failures.recent(name, loop.time())
            if failed is not None:
                return failed
            remaining = deadline - loop.time()
            if remaining <= 0:
                return timed_out(name, self._max_wait)
            target = self._loader_pod(name, endpoints)
            if target is None and best is not None:  # saturated, nowhere else to load it
                ep = self._grant(name, endpoints[best.endpoint_id])
                if ep is not None:
                    self._count(name, "miss" if missed else "hit", local_only)
                    return ep
                if not await self._settle(deadline, seen):
                    return timed_out(name, self._max_wait)
                continue
            missed = True
            if target is None:
                got = await self._base_wait(base)  # starts or wakes it, or says why not
                if isinstance(got, ErrorReply):
                    return got
                if not got.local and (local_only or not self._in_cluster()):
                    return self._grant_remote(name, got)  # its pod's proxy loads it
                # The base was running already, so nothing was started: no instance can
                # take the adapter because its slot is changing hands (being unloaded for
                # another adapter). Wait for that, never look again without a wait: the
                # base's answer comes without a pause and the loop would hold the server.
                if endpoints and not await self._settle(deadline, seen):
                    return timed_out(name, self._max_wait)
                continue
            if target != self.pod_id:
                ep = next(e for e in endpoints.values() if e.pod_id == target and not e.local)
                self._count(name, "miss", local_only)
                return self._grant_remote(name, ep)  # that pod loads it (single flight there)
            answer = await self._join(name, entry, base, remaining)
            if isinstance(answer, Endpoint):
                self._count(name, "miss", local_only)
                return answer
            if isinstance(answer, ErrorReply):
                return answer
            if answer == "busy":
                fallback = best and self._grant(name, endpoints[best.endpoint_id])
                if fallback:
                    return fallback
                if not await self.room.wait(deadline - loop.time(), seen):
                    return no_room(name)

    async def _settle(self, deadline: float, seen: int) -> bool:
        """Wait until a slot changed since generation ``seen`` (at once if one has: the
        slot book notifies every change, so no poll is needed); False past ``deadline``."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return False
        await self.room.wait(remaining, seen)
        return True

    @staticmethod
    def _count(name: str, event: str, forwarded: bool) -> None:
        """A hit or a miss, counted by the pod the request entered only (a forwarded one
        was counted there), so the pods' counts add up to the cluster's."""
        if not forwarded:
            STATS.adapter(name, event)

    def state(self, name: str, base: str) -> AdapterState:
        """``active`` while an active instance of ``base`` on any pod holds the adapter,
        ``sleeping`` while only a sleeping one keeps it, else ``unloaded``."""
        endpoints = {e.instance_id: e for e in self.table.endpoints(base)}
        if self._holders(name, endpoints):
            return "active"
        holders = set(self.book.holders(name))
        views = self.table.instances(base)
        if any(v.instance_id in holders and v.status is InstanceStatus.SLEEPING for v in views):
            return "sleeping"
        if self.peers is not None and self.peers.sleeping_with(name):
            return "sleeping"
        return "unloaded"

    def release(self, name: str, ep: Endpoint) -> None:
        """A request ``wait`` answered with ``ep`` ended."""
        if not ep.local:
            key = (ep.instance_id, name)
            left = self._sent.get(key, 0) - 1
            if left > 0:
                self._sent[key] = left
            else:
                self._sent.pop(key, None)
            return
        self.book.release(ep.instance_id, name, time.monotonic())  # notifies when idle

    def snapshot(self) -> dict[str, dict[str, int]]:
        """This pod's instances -> {adapter loaded: requests in flight} (its heartbeat's)."""
        return {iid: held for iid, held in self.book.snapshot().items() if held}

    def placements(self, name: str) -> list[Placement]:
        """Every instance (this pod's, then the peers') holding adapter ``name`` loaded."""
        status = {v.instance_id: v.status for v in self.table.instances()}
        out = [
            Placement(
                self.pod_id or None,
                iid,
                self.book.inflight(iid, name),
                status.get(iid) is InstanceStatus.SLEEPING,
            )
            for iid in self.book.holders(name)
        ]
        if self.peers is not None:
            for eid, inflight, asleep in self.peers.placements(name):
                pod, _, iid = eid.partition("/")
                out.append(Placement(pod, iid, inflight, asleep))
        return out

    def held(self, instance_id: str) -> list[str]:
        """The adapters loaded in this pod's instance ``instance_id``."""
        return sorted(a for a, s in self.book.held(instance_id).items() if s is SlotState.LOADED)

    # ------------------------------------------------------------- routing
    def local_endpoint(self, instance_id: str) -> Endpoint | None:
        return next((e for e in self.table.local_endpoints() if e.instance_id == instance_id), None)

    def _in_cluster(self) -> bool:
        return self.peers is not None

    def _holders(self, name: str, endpoints: Mapping[str, Endpoint]) -> list[Holder]:
        """Every instance among ``endpoints`` (active, routed) holding ``name`` loaded."""
        out = [
            Holder(iid, self.book.inflight(iid, name), True)
            for iid in self.book.holders(name)
            if iid in endpoints and endpoints[iid].local
        ]
        peers = self.peers
        if peers is None:
            return out
        for eid, ep in endpoints.items():
            if ep.local:
                continue
            held = peers.adapters_of(eid)
            if held is not None and name in held:
                # The heartbeat's count includes ours (as of its sending): the larger
                # of the two is the best guess between heartbeats.
                sent = self._sent.get((eid, name), 0)
                out.append(Holder(eid, max(held[name], sent), False))
        return out

    def _loader_pod(self, name: str, endpoints: Mapping[str, Endpoint]) -> str | None:
        """The pod that loads ``name`` into one more instance, or None (no candidate)."""
        if name in self._flights:
            return self.pod_id  # a load under way here: join it
        candidates: set[str] = set()
        peers = self.peers
        for eid, ep in endpoints.items():
            if ep.local:
                if self.book.has_instance(eid) and name in self.book.held(eid):
                    continue  # held (or loading, or leaving) there already
                candidates.add(self.pod_id)
            elif ep.pod_id is not None:
                held = peers.adapters_of(eid) if peers is not None else None
                if held is None or name not in held:
                    candidates.add(ep.pod_id)
        return load_pod(name, candidates)

    def _grant(self, name: str, ep: Endpoint) -> Endpoint | None:
        if not ep.local:
            return self._grant_remote(name, ep)
        return ep if self.book.acquire(ep.instance_id, name, time.monotonic()) else None

    def _grant_remote(self, name: str, ep: Endpoint) -> Endpoint:
        if not ep.local:
            key = (ep.instance_id, name)
            self._sent[key] = self._sent.get(key, 0) + 1
        return ep

    # ------------------------------------------------------------- loading
    async def _join(
        self, name: str, entry: CatalogEntry, base: str, remaining: float
    ) -> Endpoint | ErrorReply | str:
        """Wait for the adapter's load (starting it if none runs): the endpoint (this
        request now counts in flight there), an error, ``busy`` or ``retry``."""
        flight = self._flights.get(name)
        if flight is None:
            flight = self._flights[name] = _Flight()
            flight.task = asyncio.get_running_loop().create_task(
                self._load(name, entry, base, flight), name=f"sardeenz-adapter-load-{name}"
            )
            flight.task.add_done_callback(lambda t: t.cancelled() or t.exception())
        assert flight.task is not None
        flight.waiters += 1
        try:
            return await await_within(asyncio.shield(flight.task), remaining)
        except TimeoutError:
            self._give_back(name, flight)
            return timed_out(name, self._max_wait)
        except _LoadFailed as exc:
            flight.waiters -= 1
            return exc.reply or self._failures.record(name, exc.status, exc.message)
        except _NoRoom:
            flight.waiters -= 1
            return "busy"
        except InstanceGone:
            flight.waiters -= 1
            return "retry"
        except BaseException:
            self._give_back(name, flight)
            raise

    def _give_back(self, name: str, flight: _Flight) -> None:
        """A waiter leaves without its answer: drop its in-flight count or its place."""
        if flight.granted is not None:
            self.release(name, flight.granted)
        else:
            flight.waiters -= 1

    async def _load(self, name: str, entry: CatalogEntry, base: str, flight: _Flight) -> Endpoint:
        t0 = time.perf_counter()
        try:
            local = {e.instance_id: e for e in self.table.endpoints(base) if e.local}
            for ep in local.values():
                await self.track(ep, entry)
            local = {e.instance_id: e for e in self.table.endpoints(base) if e.local}
            tracked = [iid for iid in local if self.book.has_instance(iid)]
            reservation = self.book.reserve(name, tracked, time.monotonic())
            if reservation is None:
                raise _NoRoom
            ep = local[reservation.instance_id]
            try:
                return await self._load_into(name, entry, ep, reservation, flight, t0)
            except BaseException:
                self.undo(ep, reservation)
                raise
        finally:
            if self._flights.get(name) is flight:
                del self._flights[name]

    def undo(self, ep: Endpoint, reservation: Reservation) -> None:
        """A load failed (whatever the failure): free its slot, and the victim's if its
        unload was under way (unknown: treated as gone)."""
        self.book.forget(ep.instance_id, reservation.adapter)
        victim = reservation.victim
        if victim is not None and self.book.held(ep.instance_id).get(victim) is (
            SlotState.EVICTING
        ):
            self.book.forget(ep.instance_id, victim)

    async def load_reserved(
        self, name: str, entry: CatalogEntry, ep: Endpoint, reservation: Reservation
    ) -> None:
        """Load ``name`` into the slot ``reservation`` holds, no request waiting for it
        (``AdapterUpkeep``); raises ``EngineRefused`` or ``InstanceGone`` like a request's load."""
        await self._load_into(name, entry, ep, reservation, _Flight(), time.perf_counter())

    async def _load_into(
        self,
        name: str,
        entry: CatalogEntry,
        ep: Endpoint,
        reservation: Reservation,
        flight: _Flight,
        t0: float,
    ) -> Endpoint:
        """Unload the victim if any, load the adapter, count its waiters in flight."""
        if reservation.victim is not None:
            victim = reservation.victim
            await self.engine.unload(ep, victim)  # gone already is as good as unloaded
            self.book.evicted(reservation, time.monotonic())
            self.changed()
            STATS.adapter_unloaded(victim, "lru")
            log.info("adapter %s unloaded from %s for %s (lru)", victim, ep.instance_id, name)
        try:
            path = entry.adapter_path or ""
            body = {"lora_name": name, "lora_path": path}
            await self.engine.post(ep, "/v1/load_lora_adapter", body)
        except EngineRefused as exc:
            failed = _LoadFailed(exc.status, exc.message)
            failed.reply = self._failures.record(name, exc.status, exc.message)
            raise failed from None
        if not self.book.loaded(ep.instance_id, name, time.monotonic(), flight.waiters):
            raise InstanceGone  # the instance left meanwhile (its adapters with it)
        flight.granted = ep
        self.changed()
        seconds = time.perf_counter() - t0
        STATS.adapter_loaded(name, seconds)
        log.info("adapter %s loaded into %s in %.3f s", name, ep.instance_id, seconds)
        self.idle.start()
        return ep

    async def track(self, ep: Endpoint, entry: CatalogEntry) -> None:
        """Start keeping the books of an instance of a LoRA base: its slots from its
        flags, and the adapters its engine holds already (loaded before a restart of
        ours), adopted while slots last and unloaded beyond them."""
        if self.book.has_instance(ep.instance_id):
            return
        inst = self.engine.instance(ep.instance_id)
        if inst is None:
            return
        slots = flag_value(list(inst.extra_args), "--max-loras")
        if slots is None or not slots.isdigit() or int(slots) < 1:
            return  # not started with LoRA (the entry changed after it started)
        listed = await self.engine.listed(ep, inst)
        if self.book.has_instance(ep.instance_id):
            return  # another load tracked it meanwhile
        self.book.add_instance(ep.instance_id, int(slots))
        now = time.monotonic()
        for adapter in listed:
            if not self.book.adopt(ep.instance_id, adapter, now):
                await self.engine.unload(ep, adapter)
        if listed:
            self.idle.start()

    def _on_instance(self, old: InstanceView | None, new: InstanceView | None) -> None:
        """The routing table's listener: an instance that stops serving loses its adapters;
        one that wakes starts their idle time again."""
        if new is not None and new.status in _KEEPS_ADAPTERS:
            if new.status is InstanceStatus.ACTIVE and (old is None or old.status != new.status):
                if old is not None and old.status is InstanceStatus.SLEEPING:
                    self.book.touch(new.instance_id, time.monotonic())
                self.room.notify()  # its slots can take an adapter now
            return
        view = new or old
        if view is None:
            return
        lost = self.book.drop_instance(view.instance_id)
        for adapter in lost:
            STATS.adapter_unloaded(adapter, "base_gone")
        if lost:
            self.changed()
            log.info("instance %s left: adapters %s dropped", view.instance_id, ", ".join(lost))

    def changed(self) -> None:
        self._version += 1
        if self.on_change is not None:
            self.on_change()
