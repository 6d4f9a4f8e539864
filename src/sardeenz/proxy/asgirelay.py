"""The core of the ASGI handler: forward one routed request and relay the answer.

Why a module of its own: everything after "this request goes to that model" is
one job, the same for ``/v1`` and ``/api/direct`` (forwarder.py decides the
rest): wait for the model if it is not routable yet (proxy/waiting.py, or the
catalog's ``Demand``), register the request in flight under its instance, send
it upstream on a pooled connection (another pod's proxy or an external server:
proxy/remote.py), retry once on another instance if nothing reached the
engine, and hand each upstream chunk to the client as it arrives. What the
client sees when something fails is decided in relay.py, shared with the
express path (express.py).

The client going away is watched by a task started 50 ms into the request (so
that short requests do not pay for it): it sees ``http.disconnect`` and cancels
the handler, which closes the upstream connection so the engine aborts the
generation instead of computing tokens for nobody.

``AsgiRelay`` is the base of ``InferenceProxy`` rather than an object it holds:
the relay loop then reads its state as plain attributes, with no extra call or
lookup per request or per chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Final

from sardeenz.asgi import Receive, Scope, Send
from sardeenz.config import Settings
from sardeenz.proxy.demand import Demand
from sardeenz.proxy.fairgate import FairGate, Waiter
from sardeenz.proxy.inflight import Inflight
from sardeenz.proxy.metrics import ModelMetrics
from sardeenz.proxy.relay import (
    CUT_STATUS,
    cut_note,
    engine_failed,
    engine_unreachable,
    failure_note,
    finished,
    first_byte,
    head_sent,
    is_error,
    label,
    openai_error_response,
    read_whole,
    started,
    stream_end_on_failure,
)
from sardeenz.proxy.remote import (
    RemoteHeaders,
    entered_here,
    forwarded_by_us,
    forwarding_loop,
    no_local_instance,
    outgoing,
)
from sardeenz.proxy.reqlog import TAIL_BYTES, RequestLog
from sardeenz.proxy.routing import Endpoint, RoutingTable
from sardeenz.proxy.upstream import ConnectFailed, Response, UpstreamClient, UpstreamClosed
from sardeenz.proxy.waiting import wait_for
from sardeenz.proxy.wire import (
    API_KEY_SCOPE,
    GATE_SCOPE,
    TICKET_SCOPE,
    ErrorReply,
    response_headers,
)
from sardeenz.security.auth import ApiKey
from sardeenz.tenancy.admission import Admission, Ticket

log = logging.getLogger("sardeenz.proxy.forwarder")
"""The proxy's logger keeps its name: operators filter on it."""

_perf = time.perf_counter

_METHODS: Final = {
    m: m.encode() for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
}
_LOG_EVERY: Final = 5.0
_WATCH_AFTER: Final = 0.05
"""Seconds before a request gets a disconnect watcher (see ``_guarded``)."""


class _State:
    """Per-request flags shared between the handler, its disconnect watcher and a drain.

    It is also the request's entry in the in-flight registry (``Inflight``): ``cut``
    ends it early when a sleep or an unload ran out of patience.
    """

    __slots__ = (
        "client_gone",
        "cut_before_head",
        "ep",
        "finished",
        "last",
        "prev",
        "resp",
        "stream",
        "task",
        "ttfb",
        "watcher",
    )

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.finished = False
        self.ep: Endpoint | None = None  # the instance it went to, for the request log
        self.ttfb = 0.0
        self.stream = False
        self.last = b""  # the last body bytes relayed, and the ones before (request log)
        self.prev = b""
        self.client_gone = False
        self.cut_before_head = False
        self.watcher: asyncio.Task[None] | None = None
        self.task = task
        self.resp: Response | None = None

    def cut(self) -> None:
        resp = self.resp
        if resp is not None:  # the relay loop gets UpstreamClosed and ends the stream
            resp.cut("ended by the controller")
        elif not self.finished:  # still waiting for the engine's head: nothing sent yet
            self.cut_before_head = True
            self.task.cancel()


class AsgiRelay:
    """Forwards routed requests and relays the answers; see module doc.

    Holds what the relay shares with the rest of the proxy: the pooled upstream
    client (created by ``InferenceProxy.start``), the in-flight registry and the
    request log (the express path uses them too), and the hooks other parts set.
    """

    def __init__(
        self,
        settings: Settings,
        table: RoutingTable,
        remote_headers: RemoteHeaders | None = None,
        *,
        hop_header: bytes | None = None,
        demand: Demand | None = None,
        inflight: Inflight | None = None,
        pod: str | None = None,
        admission: Admission | None = None,
    ) -> None:
        self._settings = settings
        self._table = table
        self._ready_wait = settings.proxy_ready_wait_seconds
        self._client: UpstreamClient | None = None
        self.demand = demand
        """Load on first request (catalog/demand.py): asked only on a routing miss."""
        self.inflight = inflight if inflight is not None else Inflight()
        """Requests in flight per instance (both relay paths register theirs here)."""
        self.requests = RequestLog(settings.request_log_size, pod)
        """The request log and usage counters (both relay paths note theirs here), each
        record stamped with ``pod``, this pod's id."""
        self.admission = admission if admission is not None else Admission()
        """Tenants' limits (tenancy/): both relay paths ask it for requests with a key."""
        self.gate = FairGate(
            table,
            settings.fair_slots_per_instance,
            fair=settings.fair_sharing,
            headroom_percent=settings.fair_headroom_percent,
            max_queue=settings.fair_queue_max,
            max_wait=settings.fair_queue_wait_seconds,
        )
        """Slots per instance and the fair queue of a saturated model (both relay paths)."""
        self._last_warning: dict[str, float] = {}
        self.remote_headers = remote_headers
        """Cluster mode (cluster/forwarding.py): the header lines that send a request to
        another pod's proxy (hop marker + HMAC), or None when it must not go there.
        Called with the client's headers, method, target and body (the express path too)."""
        self.hop_header = hop_header
        """Cluster mode: the header a forwarded request carries. Such a request is not
        recorded in this pod's request log: the pod it entered records it."""

    @property
    def client(self) -> UpstreamClient | None:
        """The pooled upstream client, once ``start()`` ran (the express path shares it)."""
        return self._client

    @property
    def table(self) -> RoutingTable:
        return self._table

    async def _guarded(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        t0: float,
        mm: ModelMetrics,
        ep: Endpoint | None,
        model: str | None,
        url_path: bytes,
        body: bytes,
        headers: bytes,
        *,
        openai: bool,
    ) -> None:
        """Forward under a disconnect watcher, with in-flight and outcome metrics."""
        task = asyncio.current_task()
        assert task is not None
        state = _State(task)
        # The watcher task costs ~20 us; most requests are over before it would
        # matter, so start it only if this one is still running after a moment.
        # A disconnect in between is not missed: receive() reports it at once.
        timer = asyncio.get_running_loop().call_later(
            _WATCH_AFTER, _start_watch, receive, state, task
        )
        started(mm)
        status = 499
        flight: list[str] = []  # the instance this request is registered under, if any
        try:
            if ep is not None:
                status = await self._forward(
                    scope, send, t0, mm, ep, model, url_path, body, headers, state, openai, flight
                )
            else:
                status = await self._wait_and_forward(
                    scope, send, t0, mm, model, url_path, body, headers, state, openai, flight
                )
        except asyncio.CancelledError:
            if state.cut_before_head and not state.client_gone and task.uncancel() == 0:
                # A drain ended the request before the engine answered: say why.
                code = self.inflight.end_code(flight[0]) if flight else None
                what = label(model, ep.port if ep is not None else 0)
                status = await engine_failed(what, False, code).send(send, openai)
            elif not (state.client_gone and task.uncancel() == 0):
                raise
            # The client left: the upstream request was cancelled with us,
            # which closed its connection; the engine aborts the generation.
        except Exception:
            # A bug of ours: still answer in the documented shape, never a bare 500.
            log.exception("proxy failed on %s %s", scope["method"], scope["path"])
            status = 500
            with contextlib.suppress(Exception):  # fails if the response had started
                await ErrorReply(
                    500, "internal proxy error", "server_error", "internal_error"
                ).send(send, openai)
        finally:
            state.finished = True
            if flight:
                self.inflight.discard(flight[0], state)
            timer.cancel()
            if state.watcher is not None:
                state.watcher.cancel()
            waiter: Waiter | None = scope.get(GATE_SCOPE)
            if waiter is not None:
                self.gate.leave(waiter)  # its slot to the next, or its place in the queue
            latency = finished(mm, t0, status)
            ticket: Ticket | None = scope.get(TICKET_SCOPE)
            if ticket is not None:
                ticket.settle(status, state.last, state.prev)
            if openai and entered_here(self.hop_header, scope["headers"]):
                key: ApiKey | None = scope.get(API_KEY_SCOPE)
                self.requests.finished(
                    mm.model,
                    None,
                    state.ep,
                    status,
                    latency,
                    state.ttfb,
                    state.stream,
                    key.id if key is not None else None,
                    state.last,
                    state.prev,
                )

    async def _wait_and_forward(
        self,
        scope: Scope,
        send: Send,
        t0: float,
        mm: ModelMetrics,
        model: str | None,
        url_path: bytes,
        body: bytes,
        headers: bytes,
        state: _State,
        openai: bool,
        flight: list[str],
    ) -> int:
        """A routing miss: wait for the model (load on demand, or a start under way),
        then ``_forward``. What load on demand answered is released when the request ends
        (a LoRA adapter counts its requests in flight)."""
        assert model is not None
        demand = self.demand
        if demand is None or demand.resolve(model) is None:
            waited = await wait_for(self._table, model, self._ready_wait)
            if isinstance(waited, ErrorReply):
                return await waited.send(send, openai)
            return await self._forward(
                scope, send, t0, mm, waited, model, url_path, body, headers, state, openai, flight
            )
        answer = await demand.wait(
            model, local_only=not entered_here(self.hop_header, scope["headers"])
        )
        if isinstance(answer, ErrorReply):
            return await answer.send(send, openai)
        try:
            return await self._forward(
                scope, send, t0, mm, answer, model, url_path, body, headers, state, openai, flight
            )
        finally:
            demand.release(model, answer)

    async def _forward(
        self,
        scope: Scope,
        send: Send,
        t0: float,
        mm: ModelMetrics,
        ep: Endpoint,
        model: str | None,
        url_path: bytes,
        body: bytes,
        headers: bytes,
        state: _State,
        openai: bool,
        flight: list[str],
    ) -> int:
        """Send the request upstream and relay the answer; returns the status sent.

        The request is registered in flight under its instance as soon as it has one
        (``flight`` tells ``_guarded`` which, to unregister it).
        """
        client = self._client
        if client is None:
            raise RuntimeError("InferenceProxy.start() was not awaited")
        table = self._table
        waiter: Waiter | None = scope.get(GATE_SCOPE)
        if waiter is not None and waiter.future is not None:
            # The model is saturated (or was not routable when the request came): wait
            # for a slot, in the place the request took when it came.
            refusal = await self.gate.wait(waiter)
            if refusal is not None:
                return await refusal.send(send, openai)
            if model is not None:
                ep = table.pick(model) or ep  # the routes may have changed meanwhile
        inflight = self.inflight
        inflight.add(ep.instance_id, state)
        flight.append(ep.instance_id)
        method: bytes = _METHODS.get(scope["method"]) or scope["method"].encode("latin-1")
        query: bytes = scope.get("query_string", b"")
        target = url_path + b"?" + query if query else url_path
        tried = False
        while True:
            state.ep = ep
            if ep.external is not None and forwarded_by_us(scope["headers"]):
                return await forwarding_loop(model).send(send, openai)
            sent = outgoing(
                ep, self.remote_headers, scope["headers"], method, target, headers, body
            )
            if sent is not None and not ep.local and ep.external is None:
                # to another pod, which admits it (remote.py ``to_another_pod``): a request
                # admitted here while it waited for a start that landed there is undone
                ticket = scope.pop(TICKET_SCOPE, None)
                if ticket is not None:
                    ticket.cancel()
            if sent is None:  # another pod's, and this request made its hop already
                local = table.pick_local(model) if model is not None else None
                if local is None:
                    return await no_local_instance(model).send(send, openai)
                # In flight under the instance that serves it: a drain of that
                # instance (an unload, a move) must wait for this request too.
                inflight.discard(ep.instance_id, state)
                inflight.add(local.instance_id, state)
                flight[0] = local.instance_id
                ep = state.ep = local
                sent = outgoing(ep, None, scope["headers"], method, target, headers, body)
                assert sent is not None  # a local endpoint always has a way
            t1 = _perf()
            try:
                resp = await client.request(ep.host, ep.port, method, *sent)
                break
            except ConnectFailed as exc:
                # Nothing reached the engine: safe to try another instance once.
                self.warn(ep, str(exc))
                alt = table.pick(model) if model is not None and not tried else None
                if alt is not None and alt.instance_id != ep.instance_id:
                    inflight.discard(ep.instance_id, state)
                    inflight.add(alt.instance_id, state)
                    flight[0] = alt.instance_id
                    tried, ep = True, alt
                    continue
                return await engine_unreachable(label(model, ep.port)).send(send, openai)
            except UpstreamClosed as exc:
                self.warn(ep, failure_note(exc, exc.received))
                code = inflight.end_code(ep.instance_id)
                reply = engine_failed(label(model, ep.port), exc.received, code)
                return await reply.send(send, openai)
        state.resp = resp
        try:
            return await self._relay(send, t0, t1, mm, ep, model, resp, state, openai)
        finally:
            # No-op when the body was fully received; otherwise closes the
            # upstream connection, which is how the engine learns to abort.
            resp.close()

    async def _relay(
        self,
        send: Send,
        t0: float,
        t1: float,
        mm: ModelMetrics,
        ep: Endpoint,
        model: str | None,
        resp: Response,
        state: _State,
        openai: bool,
    ) -> int:
        t2 = _perf()
        out, length, event_stream = response_headers(resp.headers)
        state.stream = event_stream
        status = resp.status
        error = openai and is_error(status, length, event_stream)

        if error or read_whole(length, event_stream):
            try:
                data = await resp.read_all()
            except UpstreamClosed as exc:  # the head had come: part of a reply was received
                self.warn(ep, failure_note(exc, True))
                code = self.inflight.end_code(ep.instance_id)
                return await engine_failed(label(model, ep.port), True, code).send(send, openai)
            if error:
                out, data = openai_error_response(status, out, data)
            await send({"type": "http.response.start", "status": status, "headers": out})
            head_sent(mm, t0, t1, t2)
            state.finished = True
            await send({"type": "http.response.body", "body": data, "more_body": False})
            state.ttfb = first_byte(mm, t0)
            state.last = data[-TAIL_BYTES:]  # where the engine's usage is
            return status

        await send({"type": "http.response.start", "status": status, "headers": out})
        head_sent(mm, t0, t1, t2)
        read = resp.read
        first = True
        last = b"\n\n"
        prev = b""
        try:
            while True:
                chunk = await read()
                if not chunk:
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                prev, last = last, chunk
                if first:
                    first = False
                    state.ttfb = first_byte(mm, t0)
        except UpstreamClosed as exc:
            self.warn(ep, cut_note(exc))
            state.finished = True
            code = self.inflight.end_code(ep.instance_id)
            end = stream_end_on_failure(label(model, ep.port), event_stream, last, code)
            if end is not None:
                await send({"type": "http.response.body", "body": end, "more_body": False})
            # else: returning without finishing makes the server close the
            # connection, so the cut body cannot look complete.
            return CUT_STATUS
        state.finished = True
        state.last, state.prev = last, prev
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        if first:
            state.ttfb = first_byte(mm, t0)
        return status

    def warn(self, ep: Endpoint, message: str) -> None:
        """Warn about an engine failure, at most every few seconds per instance."""
        now = time.monotonic()
        if now - self._last_warning.get(ep.instance_id, -_LOG_EVERY) >= _LOG_EVERY:
            self._last_warning[ep.instance_id] = now
            log.warning("instance %s (%s): %s", ep.instance_id, ep.served_name, message)
        else:
            log.debug("instance %s (%s): %s", ep.instance_id, ep.served_name, message)


def _start_watch(receive: Receive, state: _State, task: asyncio.Task[Any]) -> None:
    if not state.finished:
        state.watcher = task.get_loop().create_task(_watch(receive, state, task))


async def _watch(receive: Receive, state: _State, task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` when the client disconnects before the response is done."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not state.finished:
                state.client_gone = True
                task.cancel()
            return
