"""The routing table: served model name -> endpoints, kept current from events.

Every inference request asks this table "where does model X go?", so the
lookup is a dict access plus an index bump: no lock, no I/O, no copying. All
mutation happens on the event loop thread (``apply`` / ``remove`` are plain
synchronous methods), so readers never see a half-built route: each change
builds a new immutable ``_Route`` and swaps it in with one assignment.

Only ``active`` instances are routable. The table also remembers every other
instance it has heard of (starting, sleeping, stopping, failed) so that the
proxy can tell "unknown model" (404) from "known but not ready" (hold the
request, then 503), and so that ``/api/direct/{port}`` can be limited to
ports this node manages.

Load balancing is smooth weighted round robin (nginx's algorithm), computed
once per change into a schedule that ``pick`` walks with a counter. Equal
weights degenerate to plain round robin. Local endpoints weigh 2 and remote
ones (the cluster issue) 1, so local engines take two requests for every one
sent across the network.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

from sardeenz.domain import InstanceStatus, ModelInstance
from sardeenz.events import EventBus, RemovedEvent, StatusEvent, Subscription
from sardeenz.tasks import await_within, stop_task

log = logging.getLogger(__name__)

LOCAL_WEIGHT = 2
REMOTE_WEIGHT = 1
_MAX_SCHEDULE = 4096
"""Upper bound of a precomputed schedule; beyond it ``pick`` falls back to
computing smooth weighted round robin step by step (same result, O(n))."""

Waker = Callable[[str, Sequence["InstanceView"]], Awaitable[None]]
"""Called when a request waits for a name whose only candidates are sleeping.

It receives the served name and the sleeping instances and should *start*
waking one of them (the table then waits for its ``active`` event). It must
be idempotent: every waiting request calls it, so concurrent requests for one
sleeping model all call it while the first wake is still under way.
"""

Listener = Callable[["InstanceView | None", "InstanceView | None"], None]
"""``listener(old, new)``: called after every change; ``new`` is None on removal."""


@dataclass(frozen=True, slots=True)
class ExternalTarget:
    """How a request to a server Sardeenz does not run (catalog ``engine: external``)
    differs from one to an engine: a path before ``/v1``, the server's own API key in
    place of the client's ``Authorization``, and the server's name for the model."""

    path_prefix: bytes = b""
    auth: bytes = field(default=b"", repr=False)
    """``authorization: Bearer <key>\\r\\n`` or b"": a secret, never in a repr or a log."""
    model: str | None = None
    """The server's model name when it is not the served name (the body is rewritten)."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One place a served name can be sent to.

    The forwarder connects to ``host``:``port`` (plain HTTP/1.1); ``base_url``
    (``http://host:port``, no trailing slash) is the same address for logs,
    the admin API and the cluster issue's remote endpoints, which have
    ``local=False``, weight 1 and the remote instance's id.
    """

    instance_id: str
    served_name: str
    host: str
    port: int
    base_url: str
    weight: int = LOCAL_WEIGHT
    local: bool = True
    max_model_len: int | None = None
    created: int = 0
    """Unix seconds the instance was created; reported by ``GET /v1/models``."""
    external: ExternalTarget | None = None
    """Set for a catalog ``engine: external`` server (see ``ExternalTarget``)."""
    pod_id: str | None = None
    """Another pod's endpoint (cluster mode): that pod's id, which forwarded requests
    are signed for."""


@dataclass(frozen=True, slots=True)
class InstanceView:
    """What the table keeps of a ModelInstance (a copy: events may share objects)."""

    instance_id: str
    served_name: str
    status: InstanceStatus
    port: int
    max_model_len: int | None
    created: int
    model_path: str = ""
    process_id: int | None = None
    """The engine's main PID (``/api/direct`` checks the port is its tree's)."""

    @classmethod
    def of(cls, instance: ModelInstance) -> InstanceView:
        mm = instance.memory_metrics
        return cls(
            instance_id=instance.id,
            served_name=instance.served_model_name,
            status=instance.status,
            port=instance.port,
            max_model_len=mm.max_model_len if mm is not None else None,
            created=int(instance.created_at.timestamp()),
            model_path=instance.model_path,
            process_id=instance.process_id,
        )


@dataclass(slots=True)
class _Route:
    """The endpoints of one served name plus the precomputed SWRR schedule."""

    endpoints: tuple[Endpoint, ...]
    schedule: tuple[Endpoint, ...]
    counter: int = 0
    # Fallback state for very large weight sums (schedule left empty).
    current: list[int] = field(default_factory=list)


def _swrr_schedule(endpoints: Sequence[Endpoint]) -> tuple[Endpoint, ...]:
    """One full cycle of smooth weighted round robin, or () if too long.

    Weights are reduced by their gcd, so equal weights give a cycle of
    ``len(endpoints)``: plain round robin.
    """
    weights = [max(1, e.weight) for e in endpoints]
    g = reduce(math.gcd, weights)
    weights = [w // g for w in weights]
    total = sum(weights)
    if total > _MAX_SCHEDULE:
        return ()
    current = [0] * len(weights)
    out: list[Endpoint] = []
    for _ in range(total):
        best = 0
        for i, w in enumerate(weights):
            current[i] += w
            if current[i] > current[best]:
                best = i
        current[best] -= total
        out.append(endpoints[best])
    return tuple(out)


def _connect_host(host: str) -> str:
    """A bind-all address is not something to connect to; use loopback."""
    if host in ("", "0.0.0.0", "::", "[::]"):
        return "127.0.0.1"
    return host


class WakeFailed(Exception):
    """The waker could wake none of a model's sleeping instances; the message says why."""


class RoutingTable:
    """served name -> endpoints, versioned; see the module docstring.

    Not thread-safe by design: everything runs on the event loop thread.
    """

    def __init__(self, engine_host: str = "127.0.0.1", local_weight: int = LOCAL_WEIGHT) -> None:
        self._host = _connect_host(engine_host)
        self._host_url = f"[{self._host}]" if ":" in self._host else self._host
        self._local_weight = local_weight
        self._routes: dict[str, _Route] = {}
        self._instances: dict[str, InstanceView] = {}
        self._ids_by_name: dict[str, set[str]] = {}
        self._ports: dict[int, set[str]] = {}
        self._remote: dict[str, list[Endpoint]] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._held: dict[str, InstanceStatus] = {}
        self._listeners: list[Listener] = []
        self._version = 0
        self.waker: Waker | None = None
        """Hook for sleeping models (auto-wake); None = sleeping is not ready. See
        ``set_waker``."""

    def set_waker(self, waker: Waker) -> None:
        """Install the auto-wake hook: a request for a sleeping model wakes one instance.

        Late by necessity: the waker wakes through the supervisor, and the supervisor's
        traffic view (proxy/inflight.py ``ProxyTraffic``) reads this table, so the
        table is built first. app.py calls this once, when auto-wake is on.
        """
        self.waker = waker

    # ---------------------------------------------------------------- reads
    @property
    def version(self) -> int:
        """Bumped on every change that can alter routing or the model list."""
        return self._version

    def pick(self, name: str) -> Endpoint | None:
        """The next endpoint for ``name`` (advances round robin); None if not routable."""
        route = self._routes.get(name)
        if route is None:
            return None
        schedule = route.schedule
        if schedule:
            i = route.counter
            route.counter = i + 1 if i + 1 < len(schedule) else 0
            return schedule[i]
        return self._pick_slow(route)

    def pick_local(self, name: str) -> Endpoint | None:
        """A local endpoint of ``name`` (for a request another pod forwarded); None if none."""
        route = self._routes.get(name)
        if route is None:
            return None
        for _ in range(len(route.schedule) or len(route.endpoints)):
            ep = self.pick(name)
            if ep is not None and ep.local:
                return ep
        return next((e for e in route.endpoints if e.local), None)

    def lookup(self, name: str) -> Endpoint | None:
        """Is ``name`` routable? Returns an endpoint without advancing round robin.

        Side-effect free, for status checks; the proxy itself uses ``pick``.
        """
        route = self._routes.get(name)
        if route is None:
            return None
        if route.schedule:
            return route.schedule[route.counter]
        return route.endpoints[0]

    def endpoints(self, name: str) -> tuple[Endpoint, ...]:
        """All routable endpoints of ``name`` (empty tuple if none)."""
        route = self._routes.get(name)
        return route.endpoints if route is not None else ()

    def local_endpoints(self) -> list[Endpoint]:
        """Every routable endpoint of this node's own engines, whatever its name."""
        return [e for route in self._routes.values() for e in route.endpoints if e.local]

    def names(self) -> list[str]:
        """Routable served names, sorted."""
        return sorted(self._routes)

    def known_names(self) -> list[str]:
        """Every served name the table has heard of, in any status, sorted."""
        return sorted(set(self._ids_by_name) | set(self._routes))

    def instances(self, name: str | None = None) -> list[InstanceView]:
        """Known local instances (any status), optionally of one served name."""
        if name is None:
            return list(self._instances.values())
        return [self._instances[i] for i in self._ids_by_name.get(name, ())]

    def is_known(self, name: str) -> bool:
        """True if ``name`` is routable or any local instance (any status) serves it."""
        return name in self._routes or name in self._ids_by_name

    @property
    def engine_host(self) -> str:
        """The address local engines are reached at (the direct proxy uses it)."""
        return self._host

    def known_port(self, port: int) -> bool:
        """True if a local instance this node manages (any status) uses ``port``."""
        return port in self._ports

    def on_port(self, port: int) -> list[InstanceView]:
        """The local instances (any status) that use ``port``."""
        return [self._instances[i] for i in sorted(self._ports.get(port, ()))]

    def pending(self, name: str) -> list[InstanceView]:
        """Instances of ``name`` that may become active without operator action.

        ``starting`` always; ``sleeping`` only when a waker is installed (without
        one, nothing will wake them and waiting would only delay the 503).
        """
        out = []
        for iid in self._ids_by_name.get(name, ()):
            inst = self._instances[iid]
            held = self._held.get(iid)
            if held is not None and held is not inst.status:
                inst = dataclasses.replace(inst, status=held)
            if inst.status is InstanceStatus.STARTING or (
                inst.status is InstanceStatus.SLEEPING and self.waker is not None
            ):
                out.append(inst)
        return out

    async def wait_until_routable(
        self,
        name: str,
        timeout: float,  # noqa: ASYNC109 - the deadline is part of the interface
    ) -> Endpoint | None:
        """Wait up to ``timeout`` s for ``name`` to become routable, then ``pick``.

        Returns at once with an endpoint if one is active, and with None if
        nothing known under ``name`` can become active (unknown name, or all
        instances failed/stopping): a request should not wait 60 s for a
        model that has already failed. Calls the waker for sleeping models;
        raises ``WakeFailed`` when the waker could wake none of them (no point
        in waiting out the timeout for a wake-up that was refused).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        woke = False
        while True:
            ep = self.pick(name)
            if ep is not None:
                return ep
            pending = self.pending(name)
            if not pending:
                return None
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            event = self._changed.get(name)
            if event is None:
                event = self._changed[name] = asyncio.Event()
            waker = self.waker
            if not woke and waker is not None:
                sleeping = [i for i in pending if i.status is InstanceStatus.SLEEPING]
                if sleeping and not any(i.status is InstanceStatus.STARTING for i in pending):
                    woke = True
                    wake = asyncio.ensure_future(waker(name, sleeping))
                    wake.add_done_callback(_log_wake_failure(name))
                    try:
                        ep = await self.unless_routable(name, wake, remaining)
                    except TimeoutError:
                        return self.pick(name)
                    except WakeFailed:
                        ep = self.pick(name)  # another instance may have come up meanwhile
                        if ep is not None:
                            return ep
                        raise
                    except Exception:
                        ep = None  # logged by the callback; wait for a change below
                    if ep is not None:
                        return ep
                    continue
            try:
                await await_within(event.wait(), remaining)
            except TimeoutError:
                return self.pick(name)
            # Something changed: a model that is (again) asleep needs another wake-up,
            # e.g. one that was falling asleep when the first call found it awake.
            woke = False

    async def unless_routable(
        self, name: str, work: asyncio.Future[Any], within: float
    ) -> Endpoint | None:
        """Wait for ``work`` (a model's shared start or wake) unless ``name`` gets an
        endpoint first: then that endpoint.

        A start or a wake can take long for reasons that do not concern a waiter whose
        model has become routable meanwhile: the leader's placement order to a pod that
        went silent, making room while the only victim still has requests in flight, a
        peer's route coming back after a partition, another instance of the model
        turning active. The waiter takes the route; ``work`` goes on for its other
        waiters (never cancelled here). None when ``work`` ended (its error is raised);
        ``TimeoutError`` when neither came ``within`` seconds.
        """
        route = asyncio.ensure_future(self.next_route(name))
        try:
            done, _ = await asyncio.wait(
                (work, route), timeout=within, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            route.cancel()
        if route in done:
            return route.result()
        if work in done:
            work.result()  # its failure, if any, for the caller
            return None
        raise TimeoutError

    async def next_route(self, name: str) -> Endpoint:
        """Wait until ``name`` is routable (a local instance turned active, or a peer's
        route arrived), then ``pick``. Unbounded: the caller bounds it and cancels it."""
        while True:
            ep = self.pick(name)
            if ep is not None:
                return ep
            event = self._changed.get(name)
            if event is None:
                event = self._changed[name] = asyncio.Event()
            await event.wait()

    # -------------------------------------------------------------- changes
    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(old, new)`` after each instance change (metrics use it)."""
        self._listeners.append(listener)

    def apply(self, instance: ModelInstance) -> None:
        """Record the instance's current state; routable iff ``active``.

        Idempotent: applying the same snapshot twice changes nothing (and does
        not bump the version), so seeding and the event stream may overlap.
        """
        new = InstanceView.of(instance)
        old = self._instances.get(new.instance_id)
        if old == new:
            return
        self._forget(old)
        self._instances[new.instance_id] = new
        self._ids_by_name.setdefault(new.served_name, set()).add(new.instance_id)
        self._ports.setdefault(new.port, set()).add(new.instance_id)
        names = {new.served_name} | ({old.served_name} if old is not None else set())
        self._changed_names(names)
        self._notify(old, new)

    def hold(self, instance_id: str, status: InstanceStatus) -> None:
        """Route ``instance_id`` as if it were ``status`` until ``release``, whatever events say.

        The supervisor calls this *before* it asks an engine to sleep or to stop: a
        request must never reach an engine that is falling asleep or shutting down,
        and the status events reach the table later (through the bus and the
        updater task). A hold as ``sleeping`` makes requests wait and wake the model
        (``pending``); as ``stopping``, they go elsewhere or get the usual 503.
        Synchronous, so the express path and the handler see it on their next pick.
        """
        if self._held.get(instance_id) is status:
            return
        self._held[instance_id] = status
        inst = self._instances.get(instance_id)
        if inst is not None:
            self._changed_names({inst.served_name})

    def release(self, instance: ModelInstance) -> None:
        """End a hold, applying the instance's state as the supervisor knows it now."""
        held = self._held.pop(instance.id, None)
        self.apply(instance)
        if held is not None:
            self._changed_names({instance.served_model_name})

    def remove(self, instance_id: str) -> None:
        """Forget an instance (unloaded). Unknown ids are ignored."""
        self._held.pop(instance_id, None)
        old = self._instances.pop(instance_id, None)
        if old is None:
            return
        self._forget(old)
        self._changed_names({old.served_name})
        self._notify(old, None)

    def replace_all(self, instances: Iterable[ModelInstance]) -> None:
        """Resynchronise with a full snapshot (after lost events): apply + drop absent."""
        seen = set()
        for inst in instances:
            seen.add(inst.id)
            self.apply(inst)
        for iid in [i for i in self._instances if i not in seen]:
            self.remove(iid)

    def remote(self, source: str) -> list[Endpoint]:
        """The remote endpoints ``source`` (a peer id) contributes now."""
        return list(self._remote.get(source, ()))

    def set_remote(self, source: str, endpoints: Iterable[Endpoint]) -> None:
        """Replace the remote endpoints contributed by ``source`` (a peer id).

        For the cluster issue; unused on a single node. Remote endpoints are
        routable as given (their owner only advertises active instances).
        """
        eps = list(endpoints)
        old_names = {e.served_name for e in self._remote.get(source, ())}
        if eps:
            self._remote[source] = eps
        else:
            self._remote.pop(source, None)
        self._changed_names(old_names | {e.served_name for e in eps})

    # ------------------------------------------------------------ internals
    def _forget(self, old: InstanceView | None) -> None:
        if old is None:
            return
        ids = self._ids_by_name.get(old.served_name)
        if ids is not None:
            ids.discard(old.instance_id)
            if not ids:
                del self._ids_by_name[old.served_name]
        port_ids = self._ports.get(old.port)
        if port_ids is not None:
            port_ids.discard(old.instance_id)
            if not port_ids:
                del self._ports[old.port]

    def _changed_names(self, names: Iterable[str]) -> None:
        for name in names:
            self._rebuild(name)
            event = self._changed.pop(name, None)
            if event is not None:
                event.set()
        self._version += 1

    def _rebuild(self, name: str) -> None:
        eps: list[Endpoint] = []
        for iid in sorted(self._ids_by_name.get(name, ())):
            inst = self._instances[iid]
            if inst.status is InstanceStatus.ACTIVE and iid not in self._held:
                eps.append(self._endpoint(inst))
        for remote in self._remote.values():
            eps.extend(e for e in remote if e.served_name == name)
        if not eps:
            self._routes.pop(name, None)
            return
        old = self._routes.get(name)
        if old is not None and old.endpoints == tuple(eps):
            return
        schedule = _swrr_schedule(eps)
        # Start the new cycle at a position derived from the old counter so a
        # burst of changes does not always favour the first endpoint.
        start = old.counter % len(schedule) if old is not None and schedule else 0
        self._routes[name] = _Route(
            endpoints=tuple(eps), schedule=schedule, counter=start, current=[0] * len(eps)
        )

    def _endpoint(self, inst: InstanceView) -> Endpoint:
        return Endpoint(
            instance_id=inst.instance_id,
            served_name=inst.served_name,
            host=self._host,
            port=inst.port,
            base_url=f"http://{self._host_url}:{inst.port}",
            weight=self._local_weight,
            local=True,
            max_model_len=inst.max_model_len,
            created=inst.created,
        )

    @staticmethod
    def _pick_slow(route: _Route) -> Endpoint:
        eps = route.endpoints
        current = route.current
        total = 0
        best = 0
        for i, e in enumerate(eps):
            w = max(1, e.weight)
            total += w
            current[i] += w
            if current[i] > current[best]:
                best = i
        current[best] -= total
        return eps[best]

    def _notify(self, old: InstanceView | None, new: InstanceView | None) -> None:
        for listener in self._listeners:
            try:
                listener(old, new)
            except Exception:
                log.exception("routing table listener failed")


class RoutingUpdater:
    """Feeds the table from the event bus. Owns one background task.

    Call ``start()`` *before* seeding the table with existing instances: the
    subscription exists from then on, and since ``apply`` is idempotent an
    event that overlaps the seed is harmless. The bus drops the oldest events
    of a subscriber that falls behind; if that ever happens and ``resync`` is
    given, the table is rebuilt from ``resync()`` (the registry's snapshot).
    """

    def __init__(
        self,
        bus: EventBus,
        table: RoutingTable,
        *,
        resync: Callable[[], Iterable[ModelInstance]] | None = None,
    ) -> None:
        self._bus = bus
        self._table = table
        self._resync = resync
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is not None:
            return
        sub = self._bus.subscribe()
        self._task = asyncio.get_running_loop().create_task(
            self._run(sub), name="sardeenz-routing-updater"
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def _run(self, sub: Subscription) -> None:
        table = self._table
        dropped = 0
        try:
            while True:
                event = await sub.get()
                if sub.dropped != dropped:
                    dropped = sub.dropped
                    log.warning("routing updater lost %d events; resynchronising", dropped)
                    if self._resync is not None:
                        try:
                            table.replace_all(self._resync())
                        except Exception:
                            log.exception("routing table resync failed")
                try:
                    if isinstance(event, StatusEvent):
                        table.apply(event.instance)
                    elif isinstance(event, RemovedEvent):
                        table.remove(event.instance_id)
                except Exception:  # one bad event must not stop routing updates
                    log.exception("routing table update failed for %r", event)
        finally:
            sub.close()


def _log_wake_failure(name: str) -> Callable[[asyncio.Future[None]], None]:
    """A wake the waiter stopped waiting for (a route came first) still ends somewhere:
    its unexpected failure is logged, and its exception retrieved."""

    def done(wake: asyncio.Future[None]) -> None:
        if wake.cancelled():
            return
        exc = wake.exception()
        if exc is not None and not isinstance(exc, WakeFailed):
            log.error("waking %r failed", name, exc_info=exc)

    return done
