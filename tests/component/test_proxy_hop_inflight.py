"""A forwarded request (hop header) served by the local fallback is in flight under the
local instance: a drain of that instance (an unload, a cluster move) waits for it.

The entry pod's table may hold a remote endpoint first; a request that already
made its one hop cannot go there and falls back to a local instance. It used to
stay registered under the remote endpoint's id, so a drain of the local
instance saw nothing in flight and stopped the engine under the stream.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from sardeenz.config import Settings
from sardeenz.proxy.routing import Endpoint
from sardeenz.standalone import make_instance
from testkit.proxy import ThreadedProxyServer
from testkit.sim import Sim

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def engine() -> Iterator[Sim]:
    sim = Sim("hop-m", itl_ms=50)
    try:
        sim.wait_ready()
        yield sim
    finally:
        sim.kill()


@pytest.mark.parametrize("fast_lane", [True, False], ids=["fast-lane", "uvicorn"])
def test_the_local_fallback_of_a_forwarded_request_is_in_flight_locally(
    engine: Sim, fast_lane: bool
) -> None:
    server = ThreadedProxyServer(Settings(proxy_fast_lane=fast_lane)).start()
    try:
        table, proxy = server.table, server.proxy
        assert table is not None
        assert proxy is not None
        server.apply(make_instance("loc", "hop-m", engine.port))
        # A remote endpoint that always wins the pick, and a hook that says "already
        # forwarded once" (what the cluster's hook answers for a hop-marked request).
        remote = Endpoint(
            instance_id="pod-x/far",
            served_name="hop-m",
            host="127.0.0.1",
            port=9,
            base_url="http://127.0.0.1:9",
            weight=1000,
            local=False,
        )
        server.call(lambda: table.set_remote("pod-x", [remote]))
        proxy.remote_headers = lambda headers, method, target, body, pod: None
        counts: list[tuple[int, int]] = []
        # 40 tokens at 50 ms: the stream stays open ~2 s after its first chunk, the
        # moment the counts are read (not a fixed sleep that a slow start outruns).
        body = {
            "model": "hop-m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 40,
            "stream": True,
        }
        first_chunk = threading.Event()
        statuses: list[int] = []

        def stream() -> None:
            with httpx.stream(
                "POST", f"{server.url}/v1/chat/completions", json=body, timeout=30
            ) as resp:
                statuses.append(resp.status_code)
                for line in resp.iter_lines():
                    if line.startswith("data: {"):
                        first_chunk.set()

        client = threading.Thread(target=stream)
        client.start()
        assert first_chunk.wait(20), "no first streamed chunk through the proxy in 20 s"
        counts.append(
            server.call(lambda: (proxy.inflight.count("loc"), proxy.inflight.count("pod-x/far")))
        )
        client.join(30)
        assert not client.is_alive(), "the streaming client did not finish in 30 s"
        assert statuses == [200]
        assert counts == [(1, 0)]
        assert server.call(lambda: proxy.inflight.count("loc")) == 0
    finally:
        server.stop()
