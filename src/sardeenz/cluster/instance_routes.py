"""``GET /internal/instances/{id}[/logs/{lines}|/metrics|/events/{replay}]``: this pod's
instances, read by another pod's locator (cluster/locator.py, cluster/instance_relay.py).

Reads, not leader orders: any pod may ask (also while no leader is known), so these are
not fenced by term; the router checked the signature (cluster/transport/server.py).
Each answer is the one this pod's own API gives for the instance: the same objects, the
same refusals (404 ``instance_not_found``).

``/events`` streams NDJSON, one ``{"event", "data"}`` SSE item a line, a blank line
every ``KEEPALIVE_SECONDS`` while idle (so the relaying pod can tell a quiet instance
from a dead pod). The stream stops as soon as the relaying pod disconnects; how many
are open is the ``sardeenz_cluster_relayed_streams`` gauge on ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import orjson
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sardeenz.asgi import Receive, Send
from sardeenz.cluster.instance_relay import KEEPALIVE_SECONDS
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.server import Handler, InternalRequest, Streamed
from sardeenz.errors import InvalidRequest
from sardeenz.proxy.metrics import REGISTRY
from sardeenz.runtime.event_stream import SseItem

if TYPE_CHECKING:
    from sardeenz.cluster.locator import InstanceLocator

log = logging.getLogger(__name__)


class _OpenStreams(Collector):
    """The number of instance event streams this pod sends to other pods right now."""

    def __init__(self) -> None:
        self.count = 0

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "sardeenz_cluster_relayed_streams",
            "Instance event streams this pod is sending to other pods (log follow, SSE)",
            value=self.count,
        )


OPEN_STREAMS = _OpenStreams()
REGISTRY.register(OPEN_STREAMS)


def _lines(raw: str) -> int:
    try:
        n = int(raw)
    except ValueError:
        raise InvalidRequest(f"lines: not a number: {raw[:20]!r}", code="invalid_request") from None
    if not 1 <= n <= 100_000:
        raise InvalidRequest("lines: between 1 and 100000", code="invalid_request")
    return n


class InstanceRoutes:
    """The owning pod's side: handlers of the ``routes.INSTANCE*`` routes."""

    def __init__(self, locator: InstanceLocator) -> None:
        self._locator = locator

    def instance(self, request: InternalRequest) -> dict[str, Any]:
        return self._locator.local_instance(request.params["instance_id"]).model_dump(mode="json")

    def logs(self, request: InternalRequest) -> dict[str, Any]:
        iid = request.params["instance_id"]
        lines = self._locator.local_logs(iid, _lines(request.params["lines"]))
        return {"instanceId": iid, "lines": lines}

    async def metrics(self, request: InternalRequest) -> dict[str, Any]:
        iid = request.params["instance_id"]
        self._locator.local_instance(iid)  # 404 first
        return (await self._locator.local_metrics(iid)).model_dump(mode="json")

    def events(self, request: InternalRequest) -> Streamed:
        """The local stream (404 raised now, before the response starts), sent as NDJSON."""
        replay = request.params["replay"] in ("1", "true")
        items = self._locator.local_events(request.params["instance_id"], replay)
        return Streamed(lambda receive, send: self.send_stream(items, receive, send))

    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        return [
            (routes.INSTANCE, self.instance),
            (routes.INSTANCE_LOGS, self.logs),
            (routes.INSTANCE_METRICS, self.metrics),
            (routes.INSTANCE_EVENTS, self.events),
        ]

    @staticmethod
    async def send_stream(items: AsyncIterator[SseItem], receive: Receive, send: Send) -> None:
        """NDJSON out until the stream ends or the reader leaves, whichever comes first."""
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/x-ndjson"),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        lock = asyncio.Lock()

        async def write(chunk: bytes) -> None:
            async with lock:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})

        async def pump() -> None:
            async for item in items:
                await write(orjson.dumps(item) + b"\n")

        async def keepalive() -> None:
            while True:
                await asyncio.sleep(KEEPALIVE_SECONDS)
                await write(b"\n")

        async def reader_left() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        OPEN_STREAMS.count += 1
        tasks = [asyncio.ensure_future(c) for c in (pump(), keepalive(), reader_left())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            OPEN_STREAMS.count -= 1
        if tasks[0] in done and tasks[0].exception() is None:
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
