"""LoRA adapters on first request: load into an instance of the base, then route there.

A ``/v1`` request whose ``model`` is an adapter entry (``adapterOf``) misses the
routing table (only bases are routed), so the proxy asks load on demand, which
hands it here:

1. **Hit**: an active local instance of the base holds the adapter: the request
   goes there (the least busy such instance), counted in flight for the adapter.
2. **Base**: no active local instance of the base: the base's own first-request
   path (``OnDemand.wait``) starts or wakes it, with its queue and limits.
3. **Load**: one load per adapter at a time (single flight, shielded so a waiter
   that leaves does not cancel it for the others). The slot book
   (``adapterslots``) picks an instance with a free slot, or the least recently
   used idle adapter to unload first; never one with requests in flight. The
   engine is asked with vLLM's ``/v1/load_lora_adapter``; every waiter is counted
   in flight the moment the load succeeds, so the new adapter cannot be evicted
   before they are forwarded.
4. **Failure**: the engine's refusal (vLLM's message and status) answers every
   waiter, and new requests for ``ondemand_failure_hold_seconds``.

The request keeps the adapter's name in its body (the engine answers with it).
Adapters follow their base: a sleeping instance keeps them; an instance that is
unloaded, fails or moves loses them (the routing table's listener drops them from
the book), and the next request loads them again.

Only this pod's instances are considered. When the base runs only on another pod,
the request is forwarded there and that pod's proxy loads the adapter; routing by
adapter across pods (heartbeats carrying adapters) is not built yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

from sardeenz.catalog.adapterslots import Reservation, SlotBook, SlotState
from sardeenz.catalog.metrics import STATS
from sardeenz.catalog.replies import not_ready
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, ModelInstance
from sardeenz.engines.vllm import flag_value
from sardeenz.errors import SardeenzError
from sardeenz.proxy.routing import Endpoint, InstanceView, RoutingTable
from sardeenz.proxy.wire import ErrorReply
from sardeenz.store.records import CatalogEntry

log = logging.getLogger(__name__)

__all__ = ["AdapterLoader"]

_KEEPS_ADAPTERS = (InstanceStatus.ACTIVE, InstanceStatus.SLEEPING)


class InstanceSource(Protocol):
    """What the loader needs of the supervisor: an instance's flags (slots, API key)."""

    def get(self, instance_id: str) -> ModelInstance: ...


class _LoadFailed(Exception):
    """The engine refused the load: its status and vLLM's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reply: ErrorReply | None = None
        """What every waiter answers (set once the failure is recorded)."""


class _NoRoom(Exception):
    """Every slot of every instance of the base is busy (loading or serving)."""


class _Retry(Exception):
    """The chosen instance went away during the load: look again."""


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
        self.book = SlotBook()
        self._table = table
        self._instances = instances
        self._base_wait = base_wait
        self._max_wait = settings.ondemand_max_wait_seconds
        self._hold = settings.ondemand_failure_hold_seconds
        self._host = settings.engine_host
        self._flights: dict[str, _Flight] = {}
        self._failures: dict[str, tuple[float, ErrorReply]] = {}
        self._freed: asyncio.Event | None = None
        self._room_waiters = 0
        self._http: httpx.AsyncClient | None = None
        self.version = 0
        """Bumped when an adapter is loaded or lost (``GET /v1/models`` caches on it)."""
        table.add_listener(self._on_instance)

    async def close(self) -> None:
        for flight in list(self._flights.values()):
            if flight.task is not None:
                flight.task.cancel()
        tasks = [f.task for f in self._flights.values() if f.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    # ------------------------------------------------------------- the hook
    async def wait(self, name: str, entry: CatalogEntry) -> Endpoint | ErrorReply:
        """An endpoint of the base holding adapter ``name`` (counted in flight until
        ``release``), or the error to answer."""
        base = entry.adapter_of
        assert base is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_wait
        missed = False
        while True:
            ep = self._hit(name, base, loop.time())
            if ep is not None:
                STATS.adapter(name, "miss" if missed else "hit")
                return ep
            failed = self._recent_failure(name, loop.time())
            if failed is not None:
                return failed
            remaining = deadline - loop.time()
            if remaining <= 0:
                return self._timed_out(name)
            missed = True
            if not any(e.local for e in self._table.endpoints(base)):
                got = await self._base_wait(base)  # starts or wakes it, or says why not
                if isinstance(got, ErrorReply) or not got.local:
                    return got  # on another pod: its proxy loads the adapter there
                continue
            answer = await self._join(name, entry, base, remaining)
            if isinstance(answer, Endpoint):
                STATS.adapter(name, "miss")
                return answer
            if isinstance(answer, ErrorReply):
                return answer
            if answer == "busy" and not await self._wait_for_room(deadline - loop.time()):
                return self._no_room(name)

    def state(self, name: str, base: str) -> str:
        """``active`` (or ``sleeping``) while an instance of ``base`` holds the adapter."""
        holders = set(self.book.holders(name))
        if not holders:
            return "unloaded"
        if any(e.instance_id in holders for e in self._table.endpoints(base)):
            return "active"
        views = self._table.instances(base)
        if any(v.instance_id in holders and v.status is InstanceStatus.SLEEPING for v in views):
            return "sleeping"
        return "unloaded"

    def release(self, name: str, ep: Endpoint) -> None:
        """A request ``wait`` answered with ``ep`` ended."""
        book = self.book
        book.release(ep.instance_id, name, time.monotonic())
        if self._room_waiters and book.inflight(ep.instance_id, name) == 0:
            self._notify_room()

    # ------------------------------------------------------------- internals
    def _hit(self, name: str, base: str, now: float) -> Endpoint | None:
        holders = self.book.holders(name)
        if not holders:
            return None
        local = {e.instance_id: e for e in self._table.endpoints(base) if e.local}
        iid = self.book.least_busy_holder(name, [h for h in holders if h in local])
        if iid is None or not self.book.acquire(iid, name, time.monotonic()):
            return None
        return local[iid]

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
            return await asyncio.wait_for(asyncio.shield(flight.task), remaining)
        except TimeoutError:
            self._give_back(name, flight)
            return self._timed_out(name)
        except _LoadFailed as exc:
            flight.waiters -= 1
            return exc.reply or self._record_failure(name, exc)
        except _NoRoom:
            flight.waiters -= 1
            return "busy"
        except _Retry:
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
            local = {e.instance_id: e for e in self._table.endpoints(base) if e.local}
            for ep in local.values():
                await self._track(ep, entry)
            local = {e.instance_id: e for e in self._table.endpoints(base) if e.local}
            tracked = [iid for iid in local if self.book.has_instance(iid)]
            reservation = self.book.reserve(name, tracked, time.monotonic())
            if reservation is None:
                raise _NoRoom
            ep = local[reservation.instance_id]
            try:
                return await self._load_into(name, entry, ep, reservation, flight, t0)
            except BaseException:
                self.book.forget(ep.instance_id, name)  # its slot, whatever the failure
                victim = reservation.victim
                if victim is not None and self.book.held(ep.instance_id).get(victim) is (
                    SlotState.EVICTING
                ):
                    self.book.forget(ep.instance_id, victim)  # unknown: treat it as gone
                self._notify_room()
                raise
        finally:
            if self._flights.get(name) is flight:
                del self._flights[name]

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
            with contextlib.suppress(_LoadFailed):  # gone already is as good as unloaded
                await self._call(ep, "/v1/unload_lora_adapter", {"lora_name": victim})
            self.book.evicted(reservation, time.monotonic())
            self.version += 1
            STATS.adapter_unloaded(victim, "lru")
            log.info("adapter %s unloaded from %s for %s (lru)", victim, ep.instance_id, name)
        try:
            path = entry.adapter_path or ""
            body = {"lora_name": name, "lora_path": path}
            await self._call(ep, "/v1/load_lora_adapter", body)
        except _LoadFailed as exc:
            self._record_failure(name, exc)
            raise
        if not self.book.loaded(ep.instance_id, name, time.monotonic(), flight.waiters):
            raise _Retry  # the instance left meanwhile (its adapters with it)
        flight.granted = ep
        self.version += 1
        seconds = time.perf_counter() - t0
        STATS.adapter_loaded(name, seconds)
        log.info("adapter %s loaded into %s in %.3f s", name, ep.instance_id, seconds)
        return ep

    async def _track(self, ep: Endpoint, entry: CatalogEntry) -> None:
        """Start keeping the books of an instance of a LoRA base: its slots from its
        flags, and the adapters its engine holds already (loaded before a restart of
        ours), adopted while slots last and unloaded beyond them."""
        if self.book.has_instance(ep.instance_id):
            return
        try:
            inst = self._instances.get(ep.instance_id)
        except SardeenzError:
            return
        slots = flag_value(list(inst.extra_args), "--max-loras")
        if slots is None or not slots.isdigit() or int(slots) < 1:
            return  # not started with LoRA (the entry changed after it started)
        listed: list[str] = []
        try:
            resp = await self._client().get(
                f"{ep.base_url}/v1/models", headers=self._auth(inst), timeout=self._max_wait
            )
            cards = resp.json().get("data", []) if resp.status_code == 200 else []
            listed = [c["id"] for c in cards if isinstance(c, dict) and c.get("parent")]
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("instance %s: cannot list its adapters: %s", ep.instance_id, exc)
        if self.book.has_instance(ep.instance_id):
            return  # another load tracked it meanwhile
        self.book.add_instance(ep.instance_id, int(slots))
        now = time.monotonic()
        for adapter in listed:
            if not self.book.adopt(ep.instance_id, adapter, now):
                with contextlib.suppress(_LoadFailed):
                    await self._call(ep, "/v1/unload_lora_adapter", {"lora_name": adapter})

    async def _call(self, ep: Endpoint, path: str, body: dict[str, str]) -> None:
        """POST to the instance's engine; ``_LoadFailed`` with its reason unless 200."""
        try:
            inst: ModelInstance | None = self._instances.get(ep.instance_id)
        except SardeenzError:
            inst = None
        try:
            resp = await self._client().post(
                f"{ep.base_url}{path}", json=body, headers=self._auth(inst), timeout=self._max_wait
            )
        except httpx.HTTPError as exc:
            raise _LoadFailed(502, f"the engine did not answer {path}: {exc!r}") from None
        if resp.status_code == 200:
            return
        message = resp.text[:1000]
        with contextlib.suppress(ValueError, KeyError, TypeError):
            message = str(resp.json()["error"]["message"])  # vLLM's OpenAI error shape
        raise _LoadFailed(resp.status_code, message)

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(trust_env=False)
        return self._http

    @staticmethod
    def _auth(inst: ModelInstance | None) -> dict[str, str]:
        key = flag_value(list(inst.extra_args), "--api-key") if inst is not None else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _on_instance(self, old: InstanceView | None, new: InstanceView | None) -> None:
        """The routing table's listener: an instance that stops serving loses its adapters."""
        if new is not None and new.status in _KEEPS_ADAPTERS:
            return
        view = new or old
        if view is None:
            return
        lost = self.book.drop_instance(view.instance_id)
        for adapter in lost:
            STATS.adapter_unloaded(adapter, "base_gone")
        if lost:
            self.version += 1
            log.info("instance %s left: adapters %s dropped", view.instance_id, ", ".join(lost))
            self._notify_room()

    async def _wait_for_room(self, remaining: float) -> bool:
        """Wait until a slot may have freed (a request or load ended); False on timeout."""
        if remaining <= 0:
            return False
        if self._freed is None:
            self._freed = asyncio.Event()
        event = self._freed
        self._room_waiters += 1
        try:
            await asyncio.wait_for(event.wait(), remaining)
            return True
        except TimeoutError:
            return False
        finally:
            self._room_waiters -= 1

    def _notify_room(self) -> None:
        event, self._freed = self._freed, None
        if event is not None:
            event.set()

    def _record_failure(self, name: str, exc: _LoadFailed) -> ErrorReply:
        STATS.adapter(name, "load_failed")
        status = exc.status if 400 <= exc.status < 600 else 502
        retry = str(max(1, math.ceil(self._hold))).encode()
        reply = ErrorReply(
            status,
            f"LoRA adapter {name!r} could not be loaded: {exc.message}",
            "invalid_request_error" if status < 500 else "api_error",
            "adapter_load_failed",
            headers=[(b"retry-after", retry)],
        )
        self._failures[name] = (asyncio.get_running_loop().time(), reply)
        exc.reply = reply
        log.warning("adapter %s could not be loaded: %s", name, exc.message)
        return reply

    def _recent_failure(self, name: str, now: float) -> ErrorReply | None:
        failure = self._failures.get(name)
        if failure is None:
            return None
        if now - failure[0] >= self._hold:
            del self._failures[name]
            return None
        return failure[1]

    def _timed_out(self, name: str) -> ErrorReply:
        return not_ready(f"LoRA adapter {name!r}", "not loaded yet", self._max_wait)

    @staticmethod
    def _no_room(name: str) -> ErrorReply:
        return ErrorReply(
            503,
            f"LoRA adapter {name!r} has no free slot: every adapter slot of its base's "
            "instances is serving requests; retry later",
            "service_unavailable_error",
            "adapter_slots_busy",
            headers=[(b"retry-after", b"2")],
        )
