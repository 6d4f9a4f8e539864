"""``GET /internal/instances/{id}[/logs|/metrics|/events]``: this pod's instances, read by
another pod's locator (cluster/locator.py, cluster/instance_relay.py).

Reads, not leader orders: any pod may ask (also while no leader is known), so these are
not fenced by term; the signature was checked before the request reached here
(cluster/internal.py). Each answer is the one this pod's own API gives for the instance:
the same objects, the same refusals (404 ``instance_not_found``).

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
from urllib.parse import parse_qs, unquote

import orjson
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sardeenz.asgi import Receive, Send
from sardeenz.cluster.instance_relay import KEEPALIVE_SECONDS
from sardeenz.errors import InvalidRequest
from sardeenz.proxy.metrics import REGISTRY
from sardeenz.proxy.wire import api_error
from sardeenz.runtime.event_stream import SseItem

if TYPE_CHECKING:
    from sardeenz.cluster.locator import InstanceLocator

log = logging.getLogger(__name__)

PREFIX = "/internal/instances/"


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


def _lines(query: dict[str, list[str]]) -> int:
    raw = (query.get("lines") or ["200"])[0]
    try:
        n = int(raw)
    except ValueError:
        raise InvalidRequest(f"lines: not a number: {raw[:20]!r}", code="invalid_request") from None
    if not 1 <= n <= 100_000:
        raise InvalidRequest("lines: between 1 and 100000", code="invalid_request")
    return n


class InstanceRoutes:
    """The owning pod's side; ``handle`` answers one signed, already-read request."""

    def __init__(self, locator: InstanceLocator) -> None:
        self._locator = locator

    @staticmethod
    def owns(path: str) -> bool:
        return path.startswith(PREFIX)

    async def reply(self, method: str, path: str, query_string: bytes) -> tuple[int, Any]:
        """The JSON routes: (status, body). Raises SardeenzError for the caller to shape."""
        iid, rest = self._split(path)
        query = parse_qs(query_string.decode("latin-1"))
        if method != "GET":
            return 405, api_error(f"{method} not allowed here", "method_not_allowed")
        loc = self._locator
        if rest == "":
            return 200, loc.local_instance(iid).model_dump(mode="json")
        if rest == "logs":
            return 200, {"instanceId": iid, "lines": loc.local_logs(iid, _lines(query))}
        if rest == "metrics":
            loc.local_instance(iid)  # 404 first
            return 200, (await loc.local_metrics(iid)).model_dump(mode="json")
        return 404, api_error(f"no internal route GET {path[:100]}", "not_found")

    def opens_stream(self, method: str, path: str) -> bool:
        return method == "GET" and self._split(path)[1] == "events"

    def stream_of(self, path: str, query_string: bytes) -> AsyncIterator[SseItem]:
        """The local stream to send (404 raised before the response starts)."""
        iid, _ = self._split(path)
        replay = parse_qs(query_string.decode("latin-1")).get("replay", ["0"])[0] in ("1", "true")
        return self._locator.local_events(iid, replay)

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        tail = path[len(PREFIX) :].rstrip("/")
        iid, _, rest = tail.partition("/")
        return unquote(iid), rest

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
