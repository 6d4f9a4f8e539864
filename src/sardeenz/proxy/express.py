"""The express path: the ordinary inference request, relayed from callbacks alone.

Why: measured in benchmarks/proxy_overhead.py, running the ASGI handler
(forwarder.py) costs about 100 us of CPU per request beyond the reads and
writes themselves: a task, futures, ASGI messages, a disconnect timer. A
relay written as protocol callbacks costs a fraction of that. Nearly every
request a node sees is the same case: a POST to ``/v1/...`` whose JSON body
names a model with an active instance. This module answers exactly that case,
from the fast lane's callbacks (proxy/fastlane.py) and the engine
connection's (``upstream.Connection.start``), without a task.

Anything else goes to the ASGI handler, which is the complete
implementation: a bad body, an unknown, starting or sleeping model, a failed
API key, a refused connection, a stale pooled connection. It runs as if the
express path had never looked, because nothing has been written to the client
at that point. The express path only answers the outcomes that need no
waiting: success; the engine failing (502 before the response started, an
SSE ``error`` event or a cut connection after); and the client leaving (the
engine connection is closed at once, so the engine aborts the generation).
What the client sees in each case, and when a failure is a stale pooled
connection to retry, is decided by relay.py, which the handler uses too.

A key of a tenant is admitted here (tenancy/admission.py) before anything is
sent, and its ticket settled when the request ends; a refusal (429) is left to
the handler, which asks again and answers it.

Metrics are the handler's: the same per-model counters and histograms,
observed through the same relay.py functions. At its end a request is noted in
the request log (proxy/reqlog.py: one tuple of values held here, processed later).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

import orjson

from sardeenz.proxy import metrics
from sardeenz.proxy.fairgate import PRIORITY_HEADER, ModelGate
from sardeenz.proxy.fastlane import Active, FastLaneProtocol
from sardeenz.proxy.forwarder import InferenceProxy
from sardeenz.proxy.metrics import LANE, ModelMetrics
from sardeenz.proxy.relay import (
    CUT_STATUS,
    cut_note,
    engine_failed,
    failure_note,
    finished,
    first_byte,
    head_sent,
    is_error,
    may_retry_stale,
    openai_error_response,
    read_whole,
    started,
    stream_end_on_failure,
    withdrawn,
)
from sardeenz.proxy.remote import entered_here, forwarded_by_us, outgoing
from sardeenz.proxy.reqlog import TAIL_BYTES
from sardeenz.proxy.routing import Endpoint
from sardeenz.proxy.upstream import ConnectFailed, Connection, UpstreamClient, UpstreamClosed
from sardeenz.proxy.wire import JSON_CT, header, request_header_block, response_headers
from sardeenz.security.auth import ApiKeys
from sardeenz.tenancy.admission import Ticket
from sardeenz.tenancy.fairqueue import priority_index

log = logging.getLogger(__name__)

_perf = time.perf_counter
_LAST_CHUNK: Final = b"0\r\n\r\n"


class ExpressRelay:
    """Decides per request whether the express path takes it; one per process."""

    def __init__(self, proxy: InferenceProxy, api_keys: ApiKeys | None = None) -> None:
        self._proxy = proxy
        self._table = proxy.table
        self._keys = api_keys
        self._admission = proxy.admission
        self._gate = proxy.gate
        self.inflight = proxy.inflight
        self.finished = proxy.requests.finished
        self.hop = proxy.hop_header

    def begin(
        self,
        lane: FastLaneProtocol,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        keep_alive: bool,
    ) -> Active | None:
        client = self._proxy.client
        if client is None or not url.startswith(b"/v1/") or url.startswith(b"/v1/models"):
            return None
        keys = self._keys
        key = None
        if keys is not None and keys.enabled:
            key = keys.identify(header(headers, b"authorization"))
            if key is None:
                return None
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(payload, dict):
            return None
        model = payload.get("model")
        if not isinstance(model, str) or not model:
            return None
        if key is not None and not key.allows(model):
            return None  # the handler answers the 403 (and logs it)
        ep = self._table.pick(model)
        if ep is None:
            return None
        if ep.external is not None and forwarded_by_us(headers):
            return None  # a loop: the handler answers it
        sent = outgoing(
            ep,
            self._proxy.remote_headers,
            headers,
            b"POST",
            url,
            request_header_block(headers, True),
            body,
        )
        if sent is None:
            return None  # already forwarded once: the handler serves it locally
        fair = self._gate
        gate = None
        if fair.on:
            gate = fair.room(model)
            if gate is None:
                return None  # saturated, or others wait: the handler queues it
            asked = header(headers, PRIORITY_HEADER)
            if asked is not None and priority_index(asked.decode("latin-1")) is None:
                return None  # the handler answers the 400
        ticket = None
        # (to another pod: that pod admits it, remote.py ``to_another_pod``)
        if key is not None and (ep.local or ep.external is not None):
            admission = self._admission
            if admission.active:
                verdict = admission.admit(key.member, model, payload, len(body))
                if verdict is not None:
                    if not isinstance(verdict, Ticket):
                        return None  # over a limit: the handler answers the 429
                    ticket = verdict  # (billed here: the pod that serves it)
        if gate is not None:
            fair.take(gate)
        data = client.encode(ep.host, ep.port, b"POST", *sent)
        exchange = _Exchange(
            lane,
            self,
            metrics.for_model(model),
            model,
            ep,
            keep_alive,
            key.id if key is not None else None,
            entered_here(self.hop, headers),
            ticket,
            gate,
        )
        exchange.request = (url, headers, body)
        conn = client.idle_connection(ep.host, ep.port)
        if conn is None:
            # A connection is a TCP handshake: a task is cheap next to it.
            exchange.connecting = asyncio.get_running_loop().create_task(
                exchange.connect_and_send(client, data)
            )
        else:
            exchange.send(conn, data)
        return exchange

    def warn(self, ep: Endpoint, message: str) -> None:
        self._proxy.warn(ep, message)

    def release(self, gate: ModelGate) -> None:
        self._gate.release(gate)


class _Exchange:
    """One express request: the lane's ``Active`` and the engine connection's ``Sink``."""

    __slots__ = (
        "_body",
        "_chunked",
        "_conn",
        "_done",
        "_ep",
        "_error_headers",
        "_event_stream",
        "_first",
        "_gate",
        "_head",
        "_key",
        "_lane",
        "_last",
        "_logged",
        "_mm",
        "_model",
        "_pending",
        "_prev",
        "_relay",
        "_reused",
        "_sent",
        "_status",
        "_t0",
        "_t1",
        "_ticket",
        "_ttfb",
        "_whole",
        "connecting",
        "keep_alive",
        "request",
    )

    def __init__(
        self,
        lane: FastLaneProtocol,
        relay: ExpressRelay,
        mm: ModelMetrics,
        model: str,
        ep: Endpoint,
        keep_alive: bool,
        key: str | None,
        logged: bool,
        ticket: Ticket | None,
        gate: ModelGate | None,
    ) -> None:
        self._t0 = _perf()
        self._ticket = ticket
        self._gate = gate
        self._t1 = 0.0
        self._lane = lane
        self._relay = relay
        self._mm = mm
        self._model = model
        self._ep = ep
        self.keep_alive = keep_alive
        self.request: tuple[bytes, list[tuple[bytes, bytes]], bytes] = (b"", [], b"")
        self.connecting: asyncio.Task[None] | None = None
        self._conn: Connection | None = None
        self._reused = True
        self._status = 0
        self._head = b""
        self._chunked = False
        self._event_stream = False
        self._whole = False  # the body is sent in one write with the head, at the end
        self._error_headers: list[tuple[bytes, bytes]] | None = None  # an error response's
        self._pending: list[bytes] = []
        self._sent = False  # any byte of the response written to the client
        self._first = True
        self._last = b"\n\n"
        self._prev = b""
        self._ttfb = 0.0
        self._key = key
        self._logged = logged  # False: another pod forwarded it, and logs it there
        self._done = False
        started(mm)
        relay.inflight.add(ep.instance_id, self)

    # ------------------------------------------------------------ engine side
    def send(self, conn: Connection, data: bytes) -> None:
        self._conn = conn
        self._t1 = _perf()
        try:
            conn.start(data, self)
        except UpstreamClosed:  # closed between the pool check and now
            self._fall_back()

    async def connect_and_send(self, client: UpstreamClient, data: bytes) -> None:
        ep = self._ep
        try:
            conn = await client.connect(ep.host, ep.port)
        except ConnectFailed:
            # Nothing reached an engine: the handler tries another instance or says 503.
            self._fall_back()
            return
        finally:
            self.connecting = None
        self._reused = False
        if self._done:  # the client left meanwhile
            conn.abort_exchange()
            return
        self.send(conn, data)

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        t2 = _perf()
        out, length, self._event_stream = response_headers(headers)
        self._status = status
        if is_error(status, length, self._event_stream):
            # Read whole, and its head is made at the end around the body in
            # OpenAI's shape (relay.openai_error_response).
            self._error_headers = out
            self._whole = True
            head_sent(self._mm, self._t0, self._t1, t2)
            return
        self._head, self._chunked, self.keep_alive = self._lane.response_head(
            status, out, self.keep_alive
        )
        if read_whole(length, self._event_stream):
            self._whole = True  # head and body in one write, once the body is complete
        else:
            self._write(self._head)
            self._head = b""
        head_sent(self._mm, self._t0, self._t1, t2)

    def on_body(self, data: bytes) -> None:
        # Collected until the end of this read (on_flush): one read from the
        # engine often holds several SSE events, and one write is cheaper than
        # one per event.
        self._pending.append(data)

    def on_flush(self) -> None:
        if self._pending and not self._whole:
            self._write(self._take_pending())
            if self._first:
                self._first = False
                self._ttfb = first_byte(self._mm, self._t0)

    def on_end(self) -> None:
        if self._error_headers is not None:
            out, body = openai_error_response(
                self._status, self._error_headers, b"".join(self._pending)
            )
            self._head, _, self.keep_alive = self._lane.response_head(
                self._status, out, self.keep_alive
            )
            self._pending = [body]
        if self._whole:
            body = b"".join(self._pending)
            self._write(self._head + body)
            self._last = body[-TAIL_BYTES:]  # where the engine's usage is
            self._ttfb = first_byte(self._mm, self._t0)
        else:
            tail = self._take_pending() if self._pending else b""
            if self._chunked:
                tail += _LAST_CHUNK
            if tail:
                self._write(tail)
            if self._first:
                self._ttfb = first_byte(self._mm, self._t0)
        self._end(self._status, reusable=self.keep_alive)

    def _take_pending(self) -> bytes:
        """The body bytes collected since the last write, framed for the client."""
        pending = self._pending
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        self._prev = self._last
        self._last = data
        return b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data

    def on_error(self, error: UpstreamClosed) -> None:
        if self._done:
            return
        ep = self._ep
        if not self._sent:
            if may_retry_stale(self._reused, error.received, _perf() - self._t1):
                # Most likely the engine closed the pooled connection as we
                # used it; the handler retries on a fresh one (as it would).
                self._fall_back()
                return
            self._relay.warn(ep, failure_note(error, error.received))
            code = self._relay.inflight.end_code(ep.instance_id)
            reply = engine_failed(repr(self._model), error.received, code)
            body = reply.render(True)
            head, _, keep = self._lane.response_head(
                reply.status,
                [JSON_CT, (b"content-length", b"%d" % len(body)), *reply.headers],
                self.keep_alive,
            )
            self._write(head + body)
            self._end(reply.status, reusable=keep)
            return
        self._relay.warn(ep, cut_note(error))
        before = self._take_pending() if self._pending else b""  # what came before the failure
        code = self._relay.inflight.end_code(ep.instance_id)
        end = stream_end_on_failure(repr(self._model), self._event_stream, self._last, code)
        if end is None:
            self._end(CUT_STATUS, reusable=False)  # a cut body must not look complete
            return
        if self._chunked:
            end = b"%x\r\n%s\r\n%s" % (len(end), end, _LAST_CHUNK)
        self._write(before + end)
        self._end(CUT_STATUS, reusable=self._chunked and self.keep_alive)

    def cut(self) -> None:
        """A drain ran out (``Inflight.cut``): end the request with the instance's end code.

        The engine connection is closed (the engine aborts the generation) and the
        client gets what an engine failure would give it, under the drain's code.
        """
        if self._done:
            return
        self._abort_upstream()
        self.on_error(UpstreamClosed("ended by the controller", received=True))

    # ------------------------------------------------------------ client side
    def disconnect(self) -> None:
        """The client left: close the engine connection so the engine aborts."""
        if self._done:
            return
        self._abort_upstream()
        self._end(499, reusable=False)

    def _abort_upstream(self) -> None:
        """Close the engine connection (or the attempt to open one): the engine aborts."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.abort_exchange()
        if self.connecting is not None:
            self.connecting.cancel()

    def writing_paused(self, paused: bool) -> None:
        conn = self._conn
        if conn is not None:
            if paused:
                conn.pause()
            else:
                conn.resume()

    # ---------------------------------------------------------------- helpers
    def _write(self, data: bytes) -> None:
        self._sent = True
        self._lane.write(data)

    def _end(self, status: int, *, reusable: bool) -> None:
        LANE.express += 1
        self._done = True
        self._conn = None
        ep = self._ep
        self._relay.inflight.discard(ep.instance_id, self)
        latency = finished(self._mm, self._t0, status)
        ticket = self._ticket
        if ticket is not None:
            ticket.settle(status, self._last, self._prev)
        if self._gate is not None:
            self._relay.release(self._gate)
        if self._logged:
            self._relay.finished(
                self._model,
                None,
                ep,
                status,
                latency,
                self._ttfb,
                self._event_stream,
                self._key,
                self._last,
                self._prev,
            )
        self._lane.finish(self, reusable)

    def _fall_back(self) -> None:
        """Hand the request to the ASGI handler, as if we had never taken it."""
        self._done = True
        self._conn = None
        self._relay.inflight.discard(self._ep.instance_id, self)
        withdrawn(self._mm)
        if self._ticket is not None:
            self._ticket.cancel()  # the handler admits it again
        if self._gate is not None:
            self._relay.release(self._gate)  # the handler queues it again
        url, headers, body = self.request
        self._lane.run_app(b"POST", url, headers, body, self.keep_alive)
