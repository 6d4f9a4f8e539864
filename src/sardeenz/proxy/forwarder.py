"""The inference proxy: a plain ASGI handler that relays requests to engines.

Why plain ASGI and not a FastAPI route: this runs on every inference request,
and a route would add request parsing, dependency resolution and response
classes we do not need. Here a request costs: one header pass, one body read,
one ``orjson.loads`` (to find ``model``), one routing-table lookup, one
upstream request on a pooled keep-alive connection, and a relay loop that
hands each upstream chunk to the client as it arrives (no SSE parsing, no
re-encoding, no buffering of streams).

Failure handling, in order of when it can happen:

* client mistakes (bad JSON, no ``model``, body too large, unknown model) are
  answered here with an OpenAI-shaped error, never forwarded;
* a model that is still ``starting`` holds the request until it is active or
  ``proxy_ready_wait_seconds`` pass (then 503 with ``Retry-After``);
* connect failure: the next endpoint of the same model is tried once, then 503;
* the engine dies before answering: 502;
* the engine dies after the response started: a stream gets a final SSE
  ``event: error`` and is closed; any other body is cut (connection closed)
  because a truncated JSON document must not look complete;
* the client goes away: a watcher task (started 50 ms into the request, so
  that short requests do not pay for it) sees ``http.disconnect`` and cancels
  the handler, which closes the upstream connection so the engine aborts the
  generation instead of computing tokens for nobody.
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
from sardeenz.proxy import metrics
from sardeenz.proxy.metrics import DIRECT_MODEL, UNKNOWN_MODEL, ModelMetrics
from sardeenz.proxy.routing import Endpoint, RoutingTable, WakeFailed
from sardeenz.proxy.upstream import ConnectFailed, Response, UpstreamClient, UpstreamClosed

log = logging.getLogger(__name__)


_perf = time.perf_counter

# Request headers never forwarded upstream: hop-by-hop (RFC 9110 7.6.1), plus
# the ones the upstream client computes itself (host, content-length) and
# ``expect`` (the 100-continue dance ends at the proxy).
_DROP_REQUEST: Final = frozenset(
    {
        b"host",
        b"content-length",
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"expect",
    }
)
# Response headers never relayed: hop-by-hop, and ``date``/``server`` which the
# ASGI server adds itself (relaying them would duplicate them).
_DROP_RESPONSE: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"te",
        b"trailer",
        b"upgrade",
        b"date",
        b"server",
    }
)
_JSON_CT: Final = (b"content-type", b"application/json")
_METHODS: Final = {
    m: m.encode() for m in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
}
READ_WHOLE_LIMIT: Final = 1 << 20
"""Non-stream bodies up to this size (with a Content-Length) are read whole
and sent in one message: fewer sends, and an engine death while reading them
still becomes a clean 502 instead of a cut connection."""

_LOG_EVERY: Final = 5.0
_WATCH_AFTER: Final = 0.05
"""Seconds before a request gets a disconnect watcher (see ``_guarded``)."""


def openai_error(message: str, type_: str, code: str, param: str | None = None) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    )


def api_error(message: str, code: str) -> bytes:
    return orjson.dumps({"detail": message, "code": code})


class _Disconnected(Exception):
    """The client went away while we were reading its body."""


class _TooLarge(Exception):
    """The body is over ``proxy_max_body_bytes``."""


class _Reply(Exception):
    """Answer the client with this error instead of (or after failing at) forwarding.

    Rendered in the OpenAI shape on ``/v1/*`` and as ``{"detail", "code"}`` on
    ``/api/direct``.
    """

    def __init__(
        self,
        status: int,
        message: str,
        type_: str,
        code: str,
        param: str | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.headers = headers or []

    def render(self, openai: bool) -> bytes:
        if openai:
            return openai_error(self.message, self.type, self.code, self.param)
        return api_error(self.message, self.code)

    async def send(self, send: Send, openai: bool) -> int:
        await send_json(send, self.status, self.render(openai), self.headers)
        return self.status


class _State:
    """Per-request flags shared between the handler and its disconnect watcher."""

    __slots__ = ("client_gone", "finished", "watcher")

    def __init__(self) -> None:
        self.finished = False
        self.client_gone = False
        self.watcher: asyncio.Task[None] | None = None


class InferenceProxy:
    """Relays ``/v1/*`` and ``/api/direct/{port}/*`` to engines; see module doc.

    One instance per process. ``start()`` creates the pooled upstream client
    (``upstream.UpstreamClient``, chosen by measurement: benchmarks/README.md);
    ``close()`` closes
    it. The table's ``add_listener`` is used to keep the instance-status gauge
    current, so metrics work however the table is fed.
    """

    def __init__(self, settings: Settings, table: RoutingTable) -> None:
        self._settings = settings
        self._table = table
        self._max_body = settings.proxy_max_body_bytes
        self._ready_wait = settings.proxy_ready_wait_seconds
        self._client: UpstreamClient | None = None
        self._models_cache: tuple[int, bytes] = (-1, b"")
        self._last_warning: dict[str, float] = {}
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

    @property
    def client(self) -> UpstreamClient | None:
        """The pooled upstream client, once ``start()`` ran (the express path shares it)."""
        return self._client

    @property
    def table(self) -> RoutingTable:
        return self._table

    async def close(self) -> None:
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
            await self._models(path, send, method == "HEAD")
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
        try:
            headers = self._request_headers(scope, json_default=True)
            body = await self._read_body(receive, scope)
            payload = _parse_json(body)
            model = payload.get("model")
            if not isinstance(model, str) or not model:
                raise _Reply(
                    400,
                    "you must provide a model parameter"
                    if model is None
                    else "'model' must be a non-empty string",
                    "invalid_request_error",
                    "missing_model" if model is None else "invalid_model",
                    "model",
                )
            ep = table.pick(model)
            if ep is None and not table.is_known(model):
                raise self._unknown_model(model)
        except _Reply as r:
            metrics.for_model(UNKNOWN_MODEL).count(await r.send(send, True))
            return
        except _Disconnected:
            metrics.for_model(UNKNOWN_MODEL).count(499)
            return
        mm = metrics.for_model(model)
        url_path: bytes = scope.get("raw_path") or scope["path"].encode()
        await self._guarded(
            scope, receive, send, t0, mm, ep, model, url_path, body, headers, openai=True
        )

    def _unknown_model(self, model: str) -> _Reply:
        names = self._table.names()
        shown = ", ".join(names[:50]) + (" ..." if len(names) > 50 else "")
        return _Reply(
            404,
            f"The model {model[:200]!r} does not exist. Available models: {shown or '(none)'}",
            "invalid_request_error",
            "model_not_found",
            "model",
        )

    async def _models(self, path: str, send: Send, head: bool) -> None:
        """``GET /v1/models`` (and ``/v1/models/{id}``) from the routing table."""
        table = self._table
        if path == "/v1/models" or path == "/v1/models/":
            version, body = self._models_cache
            if version != table.version:
                body = orjson.dumps(
                    {"object": "list", "data": [self._model_card(n) for n in table.names()]}
                )
                self._models_cache = (table.version, body)
            await send_json(send, 200, b"" if head else body, content_length=len(body))
            return
        name = path[len("/v1/models/") :]
        if table.lookup(name) is None:
            await self._unknown_model(name).send(send, True)
            return
        body = orjson.dumps(self._model_card(name))
        await send_json(send, 200, b"" if head else body, content_length=len(body))

    def _model_card(self, name: str) -> dict[str, Any]:
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
        except _Reply as r:
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
        state = _State()
        # The watcher task costs ~20 us; most requests are over before it would
        # matter, so start it only if this one is still running after a moment.
        # A disconnect in between is not missed: receive() reports it at once.
        timer = asyncio.get_running_loop().call_later(
            _WATCH_AFTER, _start_watch, receive, state, task
        )
        mm.in_flight += 1
        status = 499
        try:
            status = await self._forward(
                scope, send, t0, mm, ep, model, url_path, body, headers, state, openai
            )
        except asyncio.CancelledError:
            if not (state.client_gone and task.uncancel() == 0):
                raise
            # The client left: the upstream request was cancelled with us,
            # which closed its connection; the engine aborts the generation.
        except Exception:
            # A bug of ours: still answer in the documented shape, never a bare 500.
            log.exception("proxy failed on %s %s", scope["method"], scope["path"])
            status = 500
            with contextlib.suppress(Exception):  # fails if the response had started
                await _Reply(500, "internal proxy error", "server_error", "internal_error").send(
                    send, openai
                )
        finally:
            state.finished = True
            timer.cancel()
            if state.watcher is not None:
                state.watcher.cancel()
            mm.in_flight -= 1
            mm.count(status)
            mm.duration.observe(_perf() - t0)

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
    ) -> int:
        """Send the request upstream and relay the answer; returns the status sent."""
        client = self._client
        if client is None:
            raise RuntimeError("InferenceProxy.start() was not awaited")
        table = self._table
        if ep is None:
            assert model is not None
            waited = await self._wait_for(model)
            if isinstance(waited, _Reply):
                return await waited.send(send, openai)
            ep = waited
        method: bytes = _METHODS.get(scope["method"]) or scope["method"].encode("latin-1")
        query: bytes = scope.get("query_string", b"")
        target = url_path + b"?" + query if query else url_path
        tried = False
        while True:
            t1 = _perf()
            try:
                resp = await client.request(ep.host, ep.port, method, target, headers, body)
                break
            except ConnectFailed as exc:
                # Nothing reached the engine: safe to try another instance once.
                self.warn(ep, str(exc))
                alt = table.pick(model) if model is not None and not tried else None
                if alt is not None and alt.instance_id != ep.instance_id:
                    tried, ep = True, alt
                    continue
                return await _Reply(
                    503,
                    f"The engine serving {_label(model, ep)} is not reachable; retry shortly",
                    "service_unavailable_error",
                    "engine_unavailable",
                    headers=[(b"retry-after", b"1")],
                ).send(send, openai)
            except UpstreamClosed as exc:
                self.warn(ep, f"engine failed before answering: {exc}")
                return await _Reply(
                    502,
                    f"The engine serving {_label(model, ep)} failed before answering",
                    "upstream_error",
                    "engine_failed",
                ).send(send, openai)
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
        status = resp.status

        if length is not None and length <= READ_WHOLE_LIMIT and not event_stream:
            try:
                data = await resp.read_all()
            except UpstreamClosed as exc:
                self.warn(ep, f"engine failed while answering: {exc!r}")
                return await _Reply(
                    502,
                    f"The engine serving {_label(model, ep)} failed while answering",
                    "upstream_error",
                    "engine_failed",
                ).send(send, openai)
            await send({"type": "http.response.start", "status": status, "headers": out})
            t3 = _perf()
            mm.overhead.observe((t1 - t0) + (t3 - t2))
            state.finished = True
            await send({"type": "http.response.body", "body": data, "more_body": False})
            mm.ttfb.observe(_perf() - t0)
            return status

        await send({"type": "http.response.start", "status": status, "headers": out})
        t3 = _perf()
        mm.overhead.observe((t1 - t0) + (t3 - t2))
        read = resp.read
        first = True
        last = b"\n\n"
        try:
            while True:
                chunk = await read()
                if not chunk:
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                last = chunk
                if first:
                    first = False
                    mm.ttfb.observe(_perf() - t0)
        except UpstreamClosed as exc:
            self.warn(ep, f"engine failed mid-response: {exc}")
            if not event_stream:
                # A cut JSON body must not look complete: close the connection
                # (the ASGI server does when we return without finishing).
                state.finished = True
                return 502
            err = openai_error(
                f"The engine serving {_label(model, ep)} failed mid-stream",
                "upstream_error",
                "engine_failed",
            )
            sep = b"" if last.endswith(b"\n\n") else b"\n\n"
            state.finished = True
            await send(
                {
                    "type": "http.response.body",
                    "body": sep + b"event: error\ndata: " + err + b"\n\n",
                    "more_body": False,
                }
            )
            return 502
        state.finished = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        if first:
            mm.ttfb.observe(_perf() - t0)
        return status

    # --------------------------------------------------------------- helpers
    async def _wait_for(self, model: str) -> Endpoint | _Reply:
        """Hold a request for a known-but-not-active model; see module doc."""
        table = self._table
        if table.pending(model):
            try:
                ep = await table.wait_until_routable(model, self._ready_wait)
            except WakeFailed as exc:
                return _Reply(
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
                return _Reply(
                    503,
                    f"Model {model!r} is not ready yet (still starting after "
                    f"{self._ready_wait:g} s); retry later",
                    "service_unavailable_error",
                    "model_not_ready",
                    headers=[(b"retry-after", retry)],
                )
        statuses = sorted({i.status.value for i in table.instances(model)})
        if "sleeping" in statuses:  # auto-wake is off: say so, and when to retry
            return _Reply(
                503,
                f"Model {model!r} is asleep and auto-wake is off (SARDEENZ_PROXY_AUTO_WAKE); "
                "wake it with POST /api/v1/models/{id}/wake",
                "service_unavailable_error",
                "model_sleeping",
                headers=[(b"retry-after", b"10")],
            )
        return _Reply(
            503,
            f"Model {model!r} has no healthy instance (status: {', '.join(statuses) or 'none'})",
            "service_unavailable_error",
            "no_healthy_endpoint",
        )

    def _request_headers(self, scope: Scope, *, json_default: bool) -> bytes:
        """The header block to forward, after checking Content-Length against the limit."""
        return request_header_block(scope["headers"], json_default, self._check_length)

    def _check_length(self, value: bytes) -> None:
        try:
            n = int(value)
        except ValueError:
            n = -1
        if n < 0:
            raise _Reply(
                400,
                "invalid Content-Length header",
                "invalid_request_error",
                "invalid_content_length",
            )
        if n > self._max_body:
            raise self._too_large()

    def _too_large(self) -> _Reply:
        return _Reply(
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


def request_header_block(
    headers: list[tuple[bytes, bytes]],
    json_default: bool,
    check_length: Callable[[bytes], None] | None = None,
) -> bytes:
    """The ``name: value\r\n`` block to forward upstream from a client's headers.

    Names and values are relayed as received (the HTTP server has already
    rejected anything that is not valid HTTP), minus hop-by-hop headers and
    those named in ``Connection``. ``check_length`` sees the Content-Length.
    """
    out: list[bytes] = []
    has_ct = False
    connection: bytes | None = None
    for k, v in headers:
        if k in _DROP_REQUEST or k.startswith(b"proxy-"):
            if k == b"content-length":
                if check_length is not None:
                    check_length(v)
            elif k == b"connection":
                connection = v if connection is None else connection + b"," + v
            continue
        if k == b"content-type":
            has_ct = True
        out.append(k + b": " + v + b"\r\n")
    if connection is not None:
        # RFC 9110 7.6.1: headers named in Connection are hop-by-hop too.
        drop = {t.strip().lower() + b":" for t in connection.split(b",")}
        out = [h for h in out if h[: h.index(b":") + 1].lower() not in drop]
    if json_default and not has_ct:
        out.append(b"content-type: application/json\r\n")
    return b"".join(out)


def response_headers(
    headers: list[tuple[bytes, bytes]],
) -> tuple[list[tuple[bytes, bytes]], int | None, bool]:
    """An engine's response headers to relay, its Content-Length, and whether it is SSE."""
    out: list[tuple[bytes, bytes]] = []
    length: int | None = None
    event_stream = False
    for k, v in headers:
        if k in _DROP_RESPONSE or k.startswith(b"proxy-"):
            continue
        if k == b"content-length":
            try:
                length = int(v)
            except ValueError:
                continue
        elif k == b"content-type":
            event_stream = v.startswith(b"text/event-stream")
        out.append((k, v))
    return out, length, event_stream


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
            raise _Reply(
                400,
                "We could not parse the JSON body of your request.",
                "invalid_request_error",
                "invalid_json",
            ) from None
    if not isinstance(payload, dict):
        raise _Reply(
            400, "The request body must be a JSON object.", "invalid_request_error", "invalid_body"
        )
    return payload


def _label(model: str | None, ep: Endpoint) -> str:
    return repr(model) if model is not None else f"port {ep.port}"


async def send_json(
    send: Send,
    status: int,
    body: bytes,
    extra: list[tuple[bytes, bytes]] | None = None,
    *,
    content_length: int | None = None,
) -> None:
    n = len(body) if content_length is None else content_length
    headers = [_JSON_CT, (b"content-length", str(n).encode())]
    if extra:
        headers.extend(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
