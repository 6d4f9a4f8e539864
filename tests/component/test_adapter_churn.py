"""More clients than slots, every request for another adapter: the server keeps answering.

With 4 clients over 50 adapters and 4 slots, an adapter's slot is often changing hands
(unloaded for another) when a request for it arrives. Such a request used to look again
at once, without a wait: its base answered without a pause, and the loop held the event
loop, so the server stopped answering anything (found by benchmarks/adapters.py).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import httpx

from testkit.adapters import make_adapter
from testkit.servers import ServerPool
from testkit.waiting import within

ADAPTERS = [f"c{k:02d}" for k in range(50)]
CLIENTS = 4
REQUESTS = 120


def test_four_clients_over_fifty_adapters_and_four_slots_all_answered(
    server_factory: ServerPool, tmp_path: Path
) -> None:
    lines = [
        "catalog:",
        "  churn:",
        "    modelPath: org/churn",
        "    engine: sim",
        "    loraSlots: 4",
        '    extraArgs: [--load-seconds, "0.2", --lora-load-ms, "50", --ttft-ms, "20"]',
    ]
    for name in ADAPTERS:
        make_adapter(tmp_path / name, rank=8)
        lines += [f"  {name}:", "    adapterOf: churn", f"    adapterPath: {tmp_path / name}"]
    config = tmp_path / "sardeenz.yaml"
    config.write_text("\n".join(lines) + "\n")
    srv = server_factory(args=["--config", str(config)]).start()
    # Popular adapters more often (Zipf, s=1), as real traffic over fine-tunes is.
    weights = [1 / (k + 1) for k in range(len(ADAPTERS))]
    order = random.Random(4).choices(ADAPTERS, weights=weights, k=REQUESTS)

    with httpx.Client(base_url=srv.url, timeout=60) as api:  # the base runs first
        first = api.post("/v1/completions", json={"model": "churn", "prompt": "x", "max_tokens": 1})
        assert first.status_code == 200, first.text

    async def run() -> tuple[list[int], list[int]]:
        statuses: list[int] = []
        health: list[int] = []
        queue = iter(order)
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as c:

            async def client() -> None:
                for model in queue:
                    body = {"model": model, "prompt": "x", "max_tokens": 4, "stream": True}
                    async with c.stream("POST", "/v1/completions", json=body) as resp:
                        chunks = [chunk async for chunk in resp.aiter_bytes()]
                    assert b"[DONE]" in b"".join(chunks), (model, resp.status_code)
                    statuses.append(resp.status_code)

            async def watch() -> None:  # the server answers its own API meanwhile
                while len(statuses) < REQUESTS:
                    health.append((await c.get("/api/health", timeout=5)).status_code)
                    await asyncio.sleep(0.2)

            await within(
                asyncio.gather(*(client() for _ in range(CLIENTS)), watch()),
                120,
                f"the {REQUESTS} churning requests of {CLIENTS} clients answered",
            )
        return statuses, health

    statuses, health = asyncio.run(run())
    assert statuses == [200] * REQUESTS
    assert health, "the watcher never got an answer"
    assert set(health) == {200}
