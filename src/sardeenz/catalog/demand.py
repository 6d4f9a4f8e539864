"""Load on first request: a request for a catalog model with nothing running starts it.

The proxy calls ``wait`` for a request whose catalog model is not routable. It
starts one instance (single flight per model: concurrent first requests share
one start task, shielded so a client that leaves does not cancel it for the
others), then waits on the routing table, which also wakes a sleeping
instance. Waiting is bounded per model: at most ``ondemand_queue_max`` requests
and ``ondemand_max_wait_seconds`` each; beyond either, an OpenAI-shaped 503
with ``Retry-After``. A start that fails (refused by the ledger, or the engine
dying while it starts) answers every waiter with the cause taken from the
engine's log; for ``ondemand_failure_hold_seconds`` afterwards new requests get
that cause at once instead of starting the failing engine again.

A request for a LoRA adapter entry (``adapterOf``) goes to ``catalog.adapters``,
which waits for its base through ``wait`` and loads the adapter into it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass
from typing import Protocol

from sardeenz.catalog.adapters import AdapterLoader
from sardeenz.catalog.eviction import MEMORY_REFUSALS
from sardeenz.catalog.external import ExternalServers
from sardeenz.catalog.metrics import STATS
from sardeenz.catalog.models import AdapterPlacement, AdapterView
from sardeenz.catalog.registry import Catalog
from sardeenz.catalog.replies import not_ready
from sardeenz.catalog.room import Evictor, RoomMaker
from sardeenz.catalog.validation import is_external, load_request
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, LoadRequest, ModelInstance
from sardeenz.errors import NotFound, SardeenzError
from sardeenz.proxy.routing import Endpoint, RoutingTable, WakeFailed
from sardeenz.proxy.wire import ErrorReply
from sardeenz.store.records import CatalogEntry

log = logging.getLogger(__name__)

QUEUE_FULL_RETRY_SECONDS = 2
_REASONS = {"model_not_ready": "timeout", "model_start_failed": "start_failed"}


class Starter(Protocol):
    """What load on demand needs of the supervisor."""

    async def load(self, req: LoadRequest) -> ModelInstance: ...

    async def unload(self, instance_id: str) -> ModelInstance: ...

    async def sleep(self, instance_id: str, level: int) -> ModelInstance: ...

    async def wake(self, instance_id: str) -> ModelInstance: ...

    def get(self, instance_id: str) -> ModelInstance: ...

    def list_instances(self) -> list[ModelInstance]: ...


class ClusterStarter(Protocol):
    """A cluster's on-demand placement (cluster/ondemand.py): the leader chooses the pod."""

    @property
    def pod_id(self) -> str: ...

    async def start(self, name: str, req: LoadRequest) -> tuple[str, ModelInstance] | None: ...

    def status(self, pod_id: str, instance_id: str) -> tuple[InstanceStatus | None, str | None]: ...


REMOTE_POLL_SECONDS = 0.1
"""How often waiters for a model started on another pod look for its route (it comes
with that pod's heartbeat)."""


class AdapterRefused(SardeenzError):
    """An operator's adapter load refused: the status and code its first request gets."""

    def __init__(self, status: int, message: str, *, code: str) -> None:
        super().__init__(message, code=code)
        self.status = status


class StartFailed(Exception):
    """The on-demand start failed; the message is the root cause."""


@dataclass(frozen=True, slots=True)
class _Failure:
    at: float
    message: str


class OnDemand:
    """Implements the proxy's ``Demand`` hook (proxy/demand.py) over the catalog."""

    def __init__(
        self,
        settings: Settings,
        catalog: Catalog,
        table: RoutingTable,
        starter: Starter,
        room: RoomMaker | None = None,
        *,
        cluster: ClusterStarter | None = None,
        external: ExternalServers | None = None,
    ) -> None:
        self._catalog = catalog
        self._table = table
        self._starter = starter
        self._queue_max = settings.ondemand_queue_max
        self._max_wait = settings.ondemand_max_wait_seconds
        self._hold = settings.ondemand_failure_hold_seconds
        self._tick = settings.ondemand_tick_seconds
        self._auto_wake = settings.proxy_auto_wake
        self._waiting = STATS.waiting
        self._starts: dict[str, asyncio.Task[str]] = {}
        self._wakes: dict[str, asyncio.Task[ModelInstance]] = {}
        self._started_ids: dict[str, str] = {}
        self._failures: dict[str, _Failure] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self.room = room or RoomMaker(settings, starter)
        """Runs starts and wakes, evicting idle models while memory is short (room.py)."""
        self.external = external
        """The catalog's ``engine: external`` servers (never started here)."""
        self.cluster = cluster
        """In a cluster: starts are placed by the leader's scheduler."""
        self._remote: dict[str, tuple[str, str, float]] = {}
        """Model -> (pod, instance id, when) of a start the leader placed on another pod."""
        self.adapters = AdapterLoader(settings, table, starter, self.wait)
        """LoRA adapter entries: loaded into an instance of their base on first request."""

    @property
    def evictor(self) -> Evictor | None:
        """What lets a start or wake that does not fit evict idle models (the room's)."""
        return self.room.evictor

    # ----------------------------------------------------------- the hook
    @property
    def version(self) -> int:
        external = self.external.version if self.external is not None else 0
        return self._catalog.version + external + self.adapters.version

    def state(self, name: str) -> str | None:
        entry = self._catalog.entry(name)
        if entry is not None and entry.adapter_of is not None:
            return self.adapters.state(name, entry.adapter_of)
        return self.external.state(name) if self.external is not None else None

    def parent(self, name: str) -> str | None:
        entry = self._catalog.entry(name)
        return entry.adapter_of if entry is not None else None

    def resolve(self, name: str) -> str | None:
        return self._catalog.resolve(name)

    def names(self) -> list[str]:
        return self._catalog.names()

    def waiting(self, name: str) -> int:
        """Requests waiting for ``name`` now (queue depth)."""
        return self._waiting.get(name, 0)

    async def wait(self, name: str, *, local_only: bool = False) -> Endpoint | ErrorReply:
        entry = self._catalog.entry(name)
        if entry is not None and entry.adapter_of is not None:
            return await self.adapters.wait(name, entry, local_only=local_only)
        external = self.external
        if external is not None and external.manages(name):
            return await external.wait(name)  # nothing to start: up or not
        queued = self._waiting.get(name, 0)
        if queued >= self._queue_max:
            STATS.reject(name, "queue_full")
            return ErrorReply(
                503,
                f"Model {name!r} is starting and already has {queued} requests waiting "
                f"(limit {self._queue_max}, SARDEENZ_ONDEMAND_QUEUE_MAX); retry later",
                "service_unavailable_error",
                "queue_full",
                headers=[(b"retry-after", str(QUEUE_FULL_RETRY_SECONDS).encode())],
            )
        self._waiting[name] = queued + 1
        t0 = time.perf_counter()
        try:
            answer = await self._wait(name)
            if isinstance(answer, ErrorReply):
                STATS.reject(name, _REASONS.get(answer.code, answer.code))
            return answer
        finally:
            STATS.waited(name, time.perf_counter() - t0)
            self._waiting[name] -= 1  # kept at 0: the gauge shows the model

    async def _wait(self, name: str) -> Endpoint | ErrorReply:
        table = self._table
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_wait
        while True:
            ep = table.pick(name)
            if ep is not None:
                self._remote.pop(name, None)
                return ep
            self._note_ended(name)  # did the instance we started fail meanwhile?
            failed = self._recent_failure(name, loop.time())
            if failed is not None:
                return failed
            remaining = deadline - loop.time()
            if remaining <= 0:
                return self._timed_out(name)
            if self._started_elsewhere(name, loop.time()):
                await asyncio.sleep(min(REMOTE_POLL_SECONDS, remaining))
                continue
            pending = table.pending(name)
            if (
                not pending
                and not self._auto_wake
                and any(v.status is InstanceStatus.SLEEPING for v in table.instances(name))
            ):
                return ErrorReply(  # as for any model: asleep, and waking is off
                    503,
                    f"Model {name!r} is asleep and auto-wake is off (SARDEENZ_PROXY_AUTO_WAKE)",
                    "service_unavailable_error",
                    "model_sleeping",
                    headers=[(b"retry-after", b"10")],
                )
            if not pending:
                try:
                    ep = await self._table.unless_routable(name, self._start_once(name), remaining)
                except TimeoutError:
                    return self._timed_out(name)
                except StartFailed as exc:
                    return self._failed_reply(name, str(exc))
                if ep is not None:
                    return ep
                continue
            if self.evictor is not None and all(
                v.status is InstanceStatus.SLEEPING for v in pending
            ):
                # Wake it here rather than through the table's waker: a wake refused
                # for memory can then make room like a start does.
                try:
                    ep = await self._table.unless_routable(
                        name, self._wake_once(name, pending[0].instance_id), remaining
                    )
                except TimeoutError:
                    return self._timed_out(name)
                except SardeenzError as exc:
                    return self._wake_failed(name, exc.message)
                if ep is not None:
                    return ep
                # Awake: the table learns it from the event bus; wait for that below
                # (the table's waker finds it awake and returns at once).
            try:
                ep = await table.wait_until_routable(name, remaining)
            except WakeFailed as exc:
                return self._wake_failed(name, str(exc))
            if ep is not None:
                return ep

    async def start(self, name: str) -> None:
        """Start ``name`` unless something of it is running or coming (preload)."""
        entry = self._catalog.entry(name)
        if entry is not None and (is_external(entry) or entry.adapter_of is not None):
            return  # a server we do not run, or an adapter (loaded on its first request)
        if self._table.pick(name) is not None or self._table.pending(name):
            return
        await self._start_once(name)

    async def preload(self) -> None:
        """Start every ``preload`` entry in the background (errors are logged, not raised)."""
        for name, entry in self._catalog.entries().items():
            if entry.preload and not is_external(entry) and entry.adapter_of is None:
                task = asyncio.get_running_loop().create_task(self._preload(name))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _preload(self, name: str) -> None:
        try:
            await self.start(name)
        except StartFailed as exc:
            log.error("preload of %s failed: %s", name, exc)

    def release(self, name: str, ep: Endpoint) -> None:
        """A request ``wait`` answered with ``ep`` ended (adapters count theirs in flight)."""
        self.adapters.release(name, ep)

    def adapter_views(self) -> list[AdapterView]:
        """Every valid adapter entry, its state and the instances holding it (``GET
        /api/v1/adapters``; an invalid one is in the catalog's list with its error)."""
        out = []
        for name, entry in sorted(self._catalog.entries().items()):
            if entry.adapter_of is None:
                continue
            out.append(
                AdapterView(
                    name=name,
                    base=entry.adapter_of,
                    adapter_path=entry.adapter_path or "",
                    aliases=list(entry.aliases),
                    state=self.adapters.state(name, entry.adapter_of),
                    loaded_on=[
                        AdapterPlacement(
                            pod_id=p.pod_id,
                            instance_id=p.instance_id,
                            in_flight=p.inflight,
                            sleeping=p.asleep,
                        )
                        for p in self.adapters.placements(name)
                    ],
                )
            )
        return out

    def _adapter_entry(self, name: str) -> CatalogEntry:
        entry = self._catalog.entry(name)
        if entry is None or entry.adapter_of is None:
            raise NotFound(f"no LoRA adapter entry named {name!r}", code="adapter_not_found")
        return entry

    async def load_adapter(self, name: str, *, local_only: bool = False) -> str | None:
        """Load adapter ``name`` as its first request would (an operator's load): None
        when it is loaded (here or on another pod), else the pod that is to load it (the
        caller asks that pod, cluster/adapter_orders.py). The load's refusal is raised."""
        entry = self._adapter_entry(name)
        got = await self.adapters.wait(name, entry, local_only=local_only)
        if isinstance(got, ErrorReply):
            raise AdapterRefused(got.status, got.message, code=got.code)
        self.adapters.release(name, got)
        if got.local or any(p.pod_id == got.pod_id for p in self.adapters.placements(name)):
            return None
        return got.pod_id

    async def unload_adapter(self, name: str) -> list[str]:
        """Unload adapter ``name`` from this pod's active instances (``adapter_in_use`` while
        it serves requests here): the instances it left."""
        self._adapter_entry(name)
        return await self.adapters.upkeep.unload_here(name)

    def adapter_view(self, name: str) -> AdapterView:
        self._adapter_entry(name)
        return next(v for v in self.adapter_views() if v.name == name)

    async def carry_adapters(self, instance_id: str, names: list[str]) -> dict[str, str | None]:
        """Load the adapters ``names`` into this pod's instance ``instance_id`` (a move's
        target takes what its source held): each name -> None (loaded) or why not."""
        out: dict[str, str | None] = {}
        for name in names:
            entry = self._catalog.entry(name)
            if entry is None or entry.adapter_of is None:
                out[name] = "not an adapter entry of the catalog"
                continue
            out[name] = await self.adapters.upkeep.load_into(instance_id, name, entry)
        return out

    async def close(self) -> None:
        await self.adapters.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # ---------------------------------------------------------- internals
    def _start_once(self, name: str) -> asyncio.Task[str]:
        task = self._starts.get(name)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(
                self._start(name), name=f"sardeenz-ondemand-{name}"
            )
            self._starts[name] = task
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            # A start nobody awaits any more (every waiter left) must not log
            # "exception never retrieved".
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    async def _start(self, name: str) -> str:
        entry = self._catalog.entry(name)
        if entry is None:
            raise StartFailed(f"model {name!r} is no longer in the catalog")
        if is_external(entry):
            raise StartFailed(f"model {name!r} is an external server: nothing to start")
        # Failed instances of this model are what is left of an earlier start:
        # clear them so the model's state is that of the new one.
        for inst in self._starter.list_instances():
            if inst.served_model_name == name and inst.status is InstanceStatus.FAILED:
                with contextlib.suppress(SardeenzError):
                    await self._starter.unload(inst.id)
        STATS.started(name)
        log.info("starting %s on demand (first request)", name)
        req = load_request(name, entry)
        placed = await self.cluster.start(name, req) if self.cluster is not None else None
        if placed is not None and self.cluster is not None:
            pod, inst = placed
            if pod != self.cluster.pod_id:
                self._remote[name] = (pod, inst.id, asyncio.get_running_loop().time())
                return inst.id
        try:
            inst = placed[1] if placed is not None else await self._load_making_room(name, req)
        except SardeenzError as exc:
            message = f"cannot start: {exc.message}"
            if exc.code in MEMORY_REFUSALS:
                message += " (no idle, unpinned catalog model left to evict)"
            STATS.start_failed(name)
            self._failures[name] = _Failure(asyncio.get_running_loop().time(), message)
            raise StartFailed(message) from None
        self._started_ids[name] = inst.id
        if inst.status is InstanceStatus.FAILED:  # the engine could not even be spawned
            self._note_ended(name)
            raise StartFailed(inst.error_message or "the engine could not be started")
        # The routing updater learns of the instance from the event bus a moment
        # later; waiters look at the table now, so tell it first (apply is idempotent).
        if not any(v.instance_id == inst.id for v in self._table.instances(name)):
            self._table.apply(inst)
        return inst.id

    def _started_elsewhere(self, name: str, now: float) -> bool:
        """Is a start the leader placed on another pod still on its way? A failure
        there is recorded like a local one (its waiters get the cause)."""
        record = self._remote.get(name)
        if record is None or self.cluster is None:
            return False
        pod, iid, at = record
        status, error = self.cluster.status(pod, iid)
        if status is InstanceStatus.FAILED:
            del self._remote[name]
            cause = f"on {pod}: {error or 'the engine failed while starting'}"
            self._failures[name] = _Failure(now, cause)
            STATS.start_failed(name)
            log.warning("on-demand start of %s failed %s", name, cause)
            return False  # the caller's next look finds the failure
        if now - at > self._max_wait or (status is None and now - at > self._max_wait / 2):
            del self._remote[name]  # gone or never seen: a new start may be tried
            return False
        return True

    async def _load_making_room(self, name: str, req: LoadRequest) -> ModelInstance:
        return await self.room.run(name, lambda: self._starter.load(req))

    def _wake_once(self, name: str, instance_id: str) -> asyncio.Task[ModelInstance]:
        """One wake (making room if needed) per model at a time, shared by its waiters."""
        task = self._wakes.get(name)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(
                self._woken(name, instance_id),
                name=f"sardeenz-ondemand-wake-{name}",
            )
            self._wakes[name] = task
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    async def _woken(self, name: str, instance_id: str) -> ModelInstance:
        inst = await self.room.run(name, lambda: self._starter.wake(instance_id))
        STATS.action(name, "wake", "request")
        return inst

    @staticmethod
    def _wake_failed(name: str, cause: str) -> ErrorReply:
        return ErrorReply(
            503,
            f"Model {name!r} is asleep and could not be woken: {cause}",
            "service_unavailable_error",
            "wake_failed",
            headers=[(b"retry-after", b"10")],
        )

    def _note_ended(self, name: str) -> None:
        iid = self._started_ids.get(name)
        if iid is None:
            return
        try:
            inst = self._starter.get(iid)
        except SardeenzError:
            return
        if inst.status is InstanceStatus.FAILED:
            cause = inst.error_message or "the engine failed while starting"
            self._failures[name] = _Failure(asyncio.get_running_loop().time(), cause)
            self._started_ids.pop(name, None)
            STATS.start_failed(name)
            log.warning("on-demand start of %s failed: %s", name, cause)

    def _recent_failure(self, name: str, now: float) -> ErrorReply | None:
        failure = self._failures.get(name)
        if failure is None:
            return None
        if now - failure.at >= self._hold:
            del self._failures[name]
            return None
        return self._failed_reply(name, failure.message)

    def _failed_reply(self, name: str, cause: str) -> ErrorReply:
        retry = str(max(1, math.ceil(self._hold))).encode()
        return ErrorReply(
            503,
            f"Model {name!r} failed to start: {cause}",
            "service_unavailable_error",
            "model_start_failed",
            headers=[(b"retry-after", retry)],
        )

    def _timed_out(self, name: str) -> ErrorReply:
        return not_ready(f"Model {name!r}", "not ready yet", self._max_wait)
