"""The inference proxy: a plain ASGI handler that relays requests to engines.

Why plain ASGI and not a FastAPI route: this runs on every inference request,
and a route would add request parsing, dependency resolution and response
classes we do not need. Here a request costs: one header pass, one body read,
one ``orjson.loads`` (to find ``model``), one routing-table lookup, one
upstream request on a pooled keep-alive connection, and a relay loop that
hands each upstream chunk to the client as it arrives (no SSE parsing, no
re-encoding, no buffering of streams).

Failure handling, in order of when it can happen (what the client sees on an
engine failure is decided in relay.py, shared with the express path):

* client mistakes (bad JSON, no ``model``, body too large, unknown model) are
  answered here with an OpenAI-shaped error, never forwarded;
* a model that is still ``starting`` holds the request until it is active or
  ``proxy_ready_wait_seconds`` pass (then 503 with ``Retry-After``);
* connect failure: the next endpoint of the same model is tried once, then 503;
* the engine dies before answering: 502;
* the engine dies after the response started: a stream gets a final SSE
  ``event: error`` and is closed; any other body is cut (connection closed)
  because a truncated JSON document must not look complete;
* a key scoped to some models (security/auth.py ``ApiKey``) asking for another
  model: 403 ``model_not_allowed``; ``/v1/models`` lists only its models;
* the client goes away: a watcher task (started 50 ms into the request, so
  that short requests do not pay for it) sees ``http.disconnect`` and cancels
  the handler, which closes the upstream connection so the engine aborts the
  generation instead of computing tokens for nobody.

Every ``/v1`` request, answered or refused, is noted in the request log
(proxy/reqlog.py) when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any, Final

import orjson

from sardeenz.asgi import Receive, Scope, Send
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus
from sardeenz.proxy import metrics
from sardeenz.proxy.demand import Demand, model_state
from sardeenz.proxy.inflight import Inflight
from sardeenz.proxy.metrics import DIRECT_MODEL, UNKNOWN_MODEL, ModelMetrics
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
from sardeenz.proxy.reqlog import TAIL_BYTES, RequestLog
from sardeenz.proxy.routing import Endpoint, ExternalTarget, RoutingTable, WakeFailed
from sardeenz.proxy.upstream import ConnectFailed, Response, UpstreamClient, UpstreamClosed
from sardeenz.proxy.wire import (
    API_KEY_SCOPE,
    ErrorReply,
    api_error,
    ascii_int,
    openai_error,
    replace_authorization,
    request_header_block,
    response_headers,
    send_json,
)
from sardeenz.security.auth import ApiKey

log = logging.getLogger(__name__)


_perf = time.perf_counter
_time = time.time

RemoteHeaders = Callable[[list[tuple[bytes, bytes]], bytes, bytes, bytes], bytes | None]

_METHODS: Final = {
    m: m.encode() for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
}
_LISTED_WAITING: Final = frozenset(
    {InstanceStatus.STARTING, InstanceStatus.SLEEPING, InstanceStatus.ACTIVE}
)
"""Statuses that put a name in ``/v1/models`` when it is not routable (active: held for a
moment while it falls asleep)."""
_LOG_EVERY: Final = 5.0
_WATCH_AFTER: Final = 0.05
"""Seconds before a request gets a disconnect watcher (see ``_guarded``)."""


class _Disconnected(Exception):
    """The client went away while we were reading its body."""


class _TooLarge(Exception):
    """The body is over ``proxy_max_body_bytes``."""


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


class InferenceProxy:
    """Relays ``/v1/*`` and ``/api/direct/{port}/*`` to engines; see module doc.

    One instance per process. ``start()`` creates the pooled upstream client
    (``upstream.UpstreamClient``, chosen by measurement: benchmarks/README.md);
    ``close()`` closes it. This is the one place that registers
    ``metrics.observe_instance`` on the table, so the instance-status gauge
    follows the table however it is fed (supervisor events or static routes).
    """

    def __init__(self, settings: Settings, table: RoutingTable) -> None:
        self._settings = settings
        self._table = table
        self._max_body = settings.proxy_max_body_bytes
        self._ready_wait = settings.proxy_ready_wait_seconds
        self._client: UpstreamClient | None = None
        self._models_cache: tuple[tuple[int, int], bytes] = ((-1, -1), b"")
        self.demand: Demand | None = None
        """Load on first request (catalog/demand.py): asked only on a routing miss."""
        self.inflight = Inflight()
        """Requests in flight per instance (both relay paths register theirs here)."""
        self.requests = RequestLog(settings.request_log_size)
        """The request log and usage counters (both relay paths note theirs here)."""
        self._last_warning: dict[str, float] = {}
        self.remote_headers: RemoteHeaders | None = None
        """Cluster mode (cluster/forwarding.py): the header lines that send a request to
        another pod's proxy (hop marker + HMAC), or None when it must not go there.
        Called with the client's headers, method, target and body (the express path too)."""
        table.add_listener(metrics.observe_instance)
        for inst in table.instances():
            metrics.observe_instance(None, inst)

    # -------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Create the pooled upstream client (must run on the serving loop)."""
        if self._client is None:
            # Retire an idle connection before the engine would close it
            # (engines get VLLM_HTTP_TIMEOUT_KEEP_ALIVE = engine_keepalive_seconds).
            keepalive = max(1.0, self._settings.engine_keepalive_seconds - 2.0)
            self._client = UpstreamClient(keepalive_timeout=keepalive)
        self.requests.start()

    @property
    def client(self) -> UpstreamClient | None:
        """The pooled upstream client, once ``start()`` ran (the express path shares it)."""
        return self._client

    @property
    def table(self) -> RoutingTable:
        return self._table

    async def close(self) -> None:
        await self.requests.close()
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    # ------------------------------------------------------------------ /v1/*
    async def handle_v1(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI handler for every ``/v1/...`` path."""
        t0 = _perf()
        method: str = scope["method"]
        path: str = scope["path"]
        is_models = path == "/v1/models" or path.startswith("/v1/models/")
        if method == "POST" and not is_models:
            await self._inference(scope, receive, send, t0)
        elif is_models and method in ("GET", "HEAD"):
            await self._models(path, send, method == "HEAD", scope.get(API_KEY_SCOPE))
        else:
            allow = b"GET" if is_models else b"POST"
            body = openai_error(
                f"Method {method} is not allowed on {path[:200]} (use {allow.decode()})",
                "invalid_request_error",
                "method_not_allowed",
            )
            await send_json(send, 405, body, [(b"allow", allow)])

    async def _inference(self, scope: Scope, receive: Receive, send: Send, t0: float) -> None:
        table = self._table
        key: ApiKey | None = scope.get(API_KEY_SCOPE)
        asked: str | None = None
        try:
            headers = self._request_headers(scope, json_default=True)
            body = await self._read_body(receive, scope)
            payload = _parse_json(body)
            model = payload.get("model")
            if not isinstance(model, str) or not model:
                raise ErrorReply(
                    400,
                    "you must provide a model parameter"
                    if model is None
                    else "'model' must be a non-empty string",
                    "invalid_request_error",
                    "missing_model" if model is None else "invalid_model",
                    "model",
                )
            asked = model
            if key is not None and not self._allowed(key, model):
                raise ErrorReply(
                    403,
                    f"This API key may not use the model {model[:200]!r}",
                    "invalid_request_error",
                    "model_not_allowed",
                    "model",
                )
            ep = table.pick(model)
            if ep is None:
                demand = self.demand
                served = demand.resolve(model) if demand is not None else None
                if served is not None and served != model:  # an alias: the engine knows
                    model, body = served, _with_model(payload, served)  # the served name
                    ep = table.pick(model)
                elif served is None and not table.is_known(model):
                    raise self._unknown_model(model, key)
        except ErrorReply as r:
            status = await r.send(send, True)
            metrics.for_model(UNKNOWN_MODEL).count(status)
            self._note_refused(scope, t0, status, asked, key)
            return
        except _Disconnected:
            metrics.for_model(UNKNOWN_MODEL).count(499)
            self._note_refused(scope, t0, 499, asked, key)
            return
        mm = metrics.for_model(model)
        url_path: bytes = scope.get("raw_path") or scope["path"].encode()
        await self._guarded(
            scope, receive, send, t0, mm, ep, model, url_path, body, headers, openai=True
        )

    def _allowed(self, key: ApiKey, model: str) -> bool:
        """May ``key`` use ``model``: by its name, or as an alias of a served name it may use."""
        if key.allows(model):
            return True
        served = self.demand.resolve(model) if self.demand is not None else None
        return served is not None and key.allows(served)

    def _note_refused(
        self, scope: Scope, t0: float, status: int, asked: str | None, key: ApiKey | None
    ) -> None:
        """A request answered before it had an instance (refused, or its client left)."""
        self.requests.note(
            (
                _time(),
                UNKNOWN_MODEL,
                asked,
                None,
                None,
                status,
                _perf() - t0,
                0.0,
                False,
                key.id if key is not None else None,
                b"",
                b"",
            )
        )

    def _unknown_model(self, model: str, key: ApiKey | None = None) -> ErrorReply:
        names = self._table.names()
        if self.demand is not None:  # catalog models are available too
            names = sorted(set(names) | set(self.demand.names()))
        if key is not None and key.models is not None:  # a scoped key sees its models only
            names = [n for n in names if key.allows(n)]
        shown = ", ".join(names[:50]) + (" ..." if len(names) > 50 else "")
        return ErrorReply(
            404,
            f"The model {model[:200]!r} does not exist. Available models: {shown or '(none)'}",
            "invalid_request_error",
            "model_not_found",
            "model",
        )

    async def _models(self, path: str, send: Send, head: bool, key: ApiKey | None) -> None:
        """``GET /v1/models`` (and ``/v1/models/{id}``) from the routing table and catalog.

        A key scoped to some models sees those only (never from the shared cache).
        """
        table = self._table
        demand = self.demand
        on_demand = set(demand.names()) if demand is not None else set()
        scoped = key is not None and key.models is not None
        if scoped and (path == "/v1/models" or path == "/v1/models/"):
            assert key is not None
            names = [n for n in sorted(self._listed_names(on_demand)) if key.allows(n)]
            body = orjson.dumps(
                {"object": "list", "data": [self._model_card(n, on_demand) for n in names]}
            )
            await send_json(send, 200, b"" if head else body, content_length=len(body))
            return
        if path == "/v1/models" or path == "/v1/models/":
            version, body = self._models_cache
            now = (table.version, demand.version if demand is not None else 0)
            if version != now:
                names = sorted(self._listed_names(on_demand))
                body = orjson.dumps(
                    {"object": "list", "data": [self._model_card(n, on_demand) for n in names]}
                )
                self._models_cache = (now, body)
            await send_json(send, 200, b"" if head else body, content_length=len(body))
            return
        name = path[len("/v1/models/") :]
        if name not in self._listed_names(on_demand, only=name) or (
            key is not None and not key.allows(name)
        ):
            await self._unknown_model(name, key).send(send, True)
            return
        body = orjson.dumps(self._model_card(name, on_demand))
        await send_json(send, 200, b"" if head else body, content_length=len(body))

    def _listed_names(self, on_demand: set[str], only: str | None = None) -> set[str]:
        """The one rule of what ``/v1/models`` lists: the names a request would be served for.

        Routable names; catalog names (a request starts them); and names whose instances
        are ``starting`` or ``sleeping`` (a request waits for the start, or wakes the model:
        clients such as Open WebUI discover models here). Not ``failed`` or ``stopping``.
        ``only``: the answer for that one name (``/v1/models/{id}``), without a full scan.
        """
        table = self._table
        candidates = [only] if only is not None else table.known_names()
        listed = {n for n in candidates if table.lookup(n) is not None or n in on_demand}
        for name in candidates:
            if name not in listed and any(
                v.status in _LISTED_WAITING for v in table.instances(name)
            ):
                listed.add(name)
        if only is None:
            listed |= on_demand
        return listed

    def _model_card(self, name: str, on_demand: set[str]) -> dict[str, Any]:
        """An OpenAI model card plus ``state``: ``active``, ``starting``, ``sleeping`` (a
        request waits for or wakes it), for catalog models also ``unloaded`` and, for
        external servers, what their health check says."""
        eps = self._table.endpoints(name)
        card: dict[str, Any] = {
            "id": name,
            "object": "model",
            "created": min((e.created for e in eps), default=0),
            "owned_by": "sardeenz",
        }
        lens = [e.max_model_len for e in eps if e.max_model_len is not None]
        if lens:
            card["max_model_len"] = min(lens)
        known = self.demand.state(name) if name in on_demand and self.demand is not None else None
        if known is not None:  # an external server: its health check knows
            card["state"] = known
        else:
            statuses = {i.status for i in self._table.instances(name)}
            card["state"] = "active" if eps else model_state(statuses)
        return card

    # ------------------------------------------------------ /api/direct/{port}
    async def handle_direct(
        self, scope: Scope, receive: Receive, send: Send, port: int, path: str
    ) -> None:
        """ASGI handler for ``/api/direct/{port}/{path}``: any method, no routing.

        Only ports of instances this node manages (any status) are reachable:
        this is a debugging aid, not an open relay to arbitrary local ports.
        """
        t0 = _perf()
        mm = metrics.for_model(DIRECT_MODEL)
        if not self._table.known_port(port):
            mm.count(404)
            await send_json(
                send, 404, api_error(f"no instance on this node uses port {port}", "unknown_port")
            )
            return
        try:
            headers = self._request_headers(scope, json_default=False)
            body = await self._read_body(receive, scope)
        except ErrorReply as r:
            mm.count(await r.send(send, False))
            return
        except _Disconnected:
            mm.count(499)
            return
        host = self._table.engine_host
        host_url = f"[{host}]" if ":" in host else host
        ep = Endpoint(
            instance_id=f"port:{port}",
            served_name=DIRECT_MODEL,
            host=host,
            port=port,
            base_url=f"http://{host_url}:{port}",
        )
        url_path = ("/" + path.lstrip("/")).encode()
        await self._guarded(
            scope, receive, send, t0, mm, ep, None, url_path, body, headers, openai=False
        )

    # ------------------------------------------------------------- the relay
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
            status = await self._forward(
                scope, send, t0, mm, ep, model, url_path, body, headers, state, openai, flight
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
            latency = finished(mm, t0, status)
            if openai:
                key: ApiKey | None = scope.get(API_KEY_SCOPE)
                went = state.ep
                self.requests.note(
                    (
                        _time(),
                        mm.model,
                        None,
                        went.instance_id if went is not None else None,
                        went.base_url if went is not None and not went.local else None,
                        status,
                        latency,
                        state.ttfb,
                        state.stream,
                        key.id if key is not None else None,
                        state.last,
                        state.prev,
                    )
                )

    async def _forward(
        self,
        scope: Scope,
        send: Send,
        t0: float,
        mm: ModelMetrics,
        ep: Endpoint | None,
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
        if ep is None:
            assert model is not None
            demand = self.demand
            if demand is not None and demand.resolve(model) is not None:
                waited = await demand.wait(model)
            else:
                waited = await self._wait_for(model)
            if isinstance(waited, ErrorReply):
                return await waited.send(send, openai)
            ep = waited
        inflight = self.inflight
        inflight.add(ep.instance_id, state)
        flight.append(ep.instance_id)
        method: bytes = _METHODS.get(scope["method"]) or scope["method"].encode("latin-1")
        query: bytes = scope.get("query_string", b"")
        target = url_path + b"?" + query if query else url_path
        tried = False
        while True:
            state.ep = ep
            sent_headers = headers
            if not ep.local and ep.external is None:  # another pod's proxy: one hop, signed
                extra = (
                    self.remote_headers(scope["headers"], method, target, body)
                    if self.remote_headers
                    else None
                )
                if extra is None:
                    local = table.pick_local(model) if model is not None else None
                    if local is None:
                        return await _no_local_instance(model).send(send, openai)
                    # In flight under the instance that serves it: a drain of that
                    # instance (an unload, a move) must wait for this request too.
                    inflight.discard(ep.instance_id, state)
                    inflight.add(local.instance_id, state)
                    flight[0] = local.instance_id
                    ep = local
                else:
                    sent_headers = headers + extra
            t1 = _perf()
            try:
                if ep.external is None:
                    resp = await client.request(
                        ep.host, ep.port, method, target, sent_headers, body
                    )
                else:
                    resp = await client.request(
                        ep.host, ep.port, method, *_for_external(ep.external, target, headers, body)
                    )
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

    # --------------------------------------------------------------- helpers
    async def _wait_for(self, model: str) -> Endpoint | ErrorReply:
        """Hold a request for a known-but-not-active model; see module doc."""
        table = self._table
        if table.pending(model):
            try:
                ep = await table.wait_until_routable(model, self._ready_wait)
            except WakeFailed as exc:
                return ErrorReply(
                    503,
                    f"Model {model!r} is asleep and could not be woken: {exc}",
                    "service_unavailable_error",
                    "wake_failed",
                    headers=[(b"retry-after", b"10")],
                )
            if ep is not None:
                return ep
            if table.pending(model):
                retry = str(max(1, min(30, math.ceil(self._ready_wait / 4) or 1))).encode()
                return ErrorReply(
                    503,
                    f"Model {model!r} is not ready yet (still starting after "
                    f"{self._ready_wait:g} s); retry later",
                    "service_unavailable_error",
                    "model_not_ready",
                    headers=[(b"retry-after", retry)],
                )
        statuses = sorted({i.status.value for i in table.instances(model)})
        if "sleeping" in statuses:  # auto-wake is off: say so, and when to retry
            return ErrorReply(
                503,
                f"Model {model!r} is asleep and auto-wake is off (SARDEENZ_PROXY_AUTO_WAKE); "
                "wake it with POST /api/v1/models/{id}/wake",
                "service_unavailable_error",
                "model_sleeping",
                headers=[(b"retry-after", b"10")],
            )
        return ErrorReply(
            503,
            f"Model {model!r} has no healthy instance (status: {', '.join(statuses) or 'none'})",
            "service_unavailable_error",
            "no_healthy_endpoint",
        )

    def _request_headers(self, scope: Scope, *, json_default: bool) -> bytes:
        """The header block to forward, after checking Content-Length against the limit."""
        return request_header_block(scope["headers"], json_default, self._check_length)

    def _check_length(self, value: bytes) -> None:
        n = ascii_int(value)
        if n is None:
            raise ErrorReply(
                400,
                "invalid Content-Length header",
                "invalid_request_error",
                "invalid_content_length",
            )
        if n > self._max_body:
            raise self._too_large()

    def _too_large(self) -> ErrorReply:
        return ErrorReply(
            413,
            f"request body is larger than the limit of {self._max_body} bytes",
            "invalid_request_error",
            "body_too_large",
            # Do not read the rest of a body we refuse.
            headers=[(b"connection", b"close")],
        )

    async def _read_body(self, receive: Receive, scope: Scope) -> bytes:
        """The whole request body, counting bytes as they come (chunked uploads)."""
        limit = self._max_body
        first = b""
        chunks: list[bytes] | None = None
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            data: bytes = message.get("body", b"")
            if data:
                size += len(data)
                if size > limit:
                    raise self._too_large()
                if not first and chunks is None:
                    first = data
                else:
                    if chunks is None:
                        chunks = [first]
                    chunks.append(data)
            if not message.get("more_body", False):
                break
        return first if chunks is None else b"".join(chunks)

    def warn(self, ep: Endpoint, message: str) -> None:
        """Warn about an engine failure, at most every few seconds per instance."""
        now = time.monotonic()
        if now - self._last_warning.get(ep.instance_id, -_LOG_EVERY) >= _LOG_EVERY:
            self._last_warning[ep.instance_id] = now
            log.warning("instance %s (%s): %s", ep.instance_id, ep.served_name, message)
        else:
            log.debug("instance %s (%s): %s", ep.instance_id, ep.served_name, message)


def _no_local_instance(model: str | None) -> ErrorReply:
    return ErrorReply(
        503,
        f"Model {model!r} has no instance on this pod and the request was already "
        "forwarded once by another pod",
        "service_unavailable_error",
        "no_healthy_endpoint",
    )


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


def _for_external(
    ext: ExternalTarget, target: bytes, headers: bytes, body: bytes
) -> tuple[bytes, bytes, bytes]:
    """(target, headers, body) for a catalog server we do not run: its path prefix,
    its API key in place of the client's, and its name for the model."""
    if ext.model is not None:
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            payload = json.loads(body)  # parsed once already: the stdlib accepted it
        body = _with_model(payload, ext.model)
    return ext.path_prefix + target, replace_authorization(headers, ext.auth), body


def _with_model(payload: dict[str, Any], model: str) -> bytes:
    """The request body again with ``model`` replaced (alias -> served name)."""
    payload["model"] = model
    try:
        return orjson.dumps(payload)
    except TypeError:  # an integer beyond 64 bits, parsed by the stdlib
        return json.dumps(payload).encode()


def _parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 reply."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        # orjson refuses some valid JSON (integers beyond 64 bits); ask the
        # stdlib before calling the client wrong. Only on this error path.
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            raise ErrorReply(
                400,
                "We could not parse the JSON body of your request.",
                "invalid_request_error",
                "invalid_json",
            ) from None
    if not isinstance(payload, dict):
        raise ErrorReply(
            400, "The request body must be a JSON object.", "invalid_request_error", "invalid_body"
        )
    return payload
