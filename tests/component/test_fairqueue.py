"""Fair sharing on one real node: a saturated model's queue, its order and its bounds.

Two servers for the module, alike but for ``SARDEENZ_FAIR_SHARING``: one slot per
instance, so the simulated engine serves one request at a time and the order in
which requests finish is the order the proxy let them in. That order is the claim
(a quiet tenant is not stuck behind a noisy tenant's backlog), asserted by rank,
not by milliseconds, so CPU contention cannot flip it. The bounds: a request that
waits past ``SARDEENZ_FAIR_QUEUE_WAIT_SECONDS`` gets 503 ``queue_timeout``, one more
than ``SARDEENZ_FAIR_QUEUE_MAX`` gets 503 ``queue_full``, both with ``Retry-After``.
Requests that come while a model wakes up wait in its queue, and keep their order.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from typing import Any

import httpx
import orjson
import pytest

from testkit.servers import ServerPool, ServerProcess, load_active, wait_for_status
from testkit.waiting import within
from tests.component.test_auth import AUDIENCE, ISSUER, SECRET, token

MODEL = "fair-m"
SLEEPY = "fair-sleepy"
"""A model that sleeps, whose wake takes long enough for requests to queue meanwhile."""
KEYS = ("quiet", "noisy", "nightly")
TENANTS = {
    "quiet": {"api_keys": ["quiet"]},
    "noisy": {"api_keys": ["noisy"]},
    "nightly": {"api_keys": ["nightly"], "priority": "batch"},
}
QUEUE_MAX = 6
WAIT_SECONDS = 6.0
HOLD_TOKENS = 200
"""The request that holds the one slot while others queue: about 2 s of tokens, so the
others are queued before it ends even on a loaded machine (a wait, not a race: the
test checks the queue's length before it goes on)."""


def _secret(key_id: str) -> str:
    return f"sk-fair-{key_id}-0123456789"


def _start(pool: ServerPool, tmp: Any, fair: bool) -> ServerProcess:
    keys = tmp / "keys.txt"
    keys.write_text(
        "".join(f"{hashlib.sha256(_secret(k).encode()).hexdigest()} {k}\n" for k in KEYS)
    )
    server: ServerProcess = pool(
        extra_env={
            "SARDEENZ_JWT_SECRET": SECRET,
            "SARDEENZ_JWT_ISSUER": ISSUER,
            "SARDEENZ_JWT_AUDIENCE": AUDIENCE,
            "SARDEENZ_API_KEYS_FILE": str(keys),
            "SARDEENZ_TENANTS": json.dumps(TENANTS),
            "SARDEENZ_FAIR_SLOTS_PER_INSTANCE": "1",
            "SARDEENZ_FAIR_QUEUE_MAX": str(QUEUE_MAX),
            "SARDEENZ_FAIR_QUEUE_WAIT_SECONDS": str(WAIT_SECONDS),
            "SARDEENZ_FAIR_SHARING": "true" if fair else "false",
            "SARDEENZ_FAIR_HEADROOM_PERCENT": "0",  # the queue's order alone (unit-tested)
        }
    ).start()
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {token(['admin'])}"}, timeout=30
    ) as api:
        load_active(api, MODEL, "--ttft-ms", "100", "--itl-ms", "10")
    return server


@pytest.fixture(scope="module")
def fair(
    module_server_factory: ServerPool, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    return _start(module_server_factory, tmp_path_factory.mktemp("fair"), True)


@pytest.fixture(scope="module")
def fifo(
    module_server_factory: ServerPool, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    return _start(module_server_factory, tmp_path_factory.mktemp("fifo"), False)


def _body(max_tokens: int, stream: bool = False, model: str = MODEL) -> bytes:
    return orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": max_tokens,
            "stream": stream,
        }
    )


def _headers(key: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {_secret(key)}", "content-type": "application/json", **extra}


def _queued(srv: ServerProcess, model: str = MODEL) -> dict[str, float]:
    """The fair queue's length per tenant, from ``/metrics``."""
    text = httpx.get(f"{srv.url}/metrics", timeout=10).text
    found = re.findall(
        rf'sardeenz_fair_queue_length\{{model="{model}",tenant="([^"]+)"\}} ([0-9.]+)', text
    )
    return {tenant: float(n) for tenant, n in found}


async def _until_queued(srv: ServerProcess, expected: dict[str, float], model: str = MODEL) -> None:
    deadline = time.monotonic() + 30
    while True:
        now = {t: n for t, n in (await asyncio.to_thread(_queued, srv, model)).items() if n}
        if now == expected:
            return
        assert time.monotonic() < deadline, f"the fair queue never held {expected}: {now}"
        await asyncio.sleep(0.05)


async def _hold(client: httpx.AsyncClient, tokens: int = HOLD_TOKENS) -> httpx.Response:
    """A streamed request that holds the one slot: returned once its stream started."""
    request = client.build_request(
        "POST",
        "/v1/chat/completions",
        content=_body(tokens, stream=True),
        headers=_headers("noisy"),
    )
    resp = await client.send(request, stream=True)
    assert resp.status_code == 200
    chunks = resp.aiter_raw()
    await anext(chunks)  # the engine answers: the slot is taken
    resp.extensions["sardeenz.chunks"] = chunks  # referenced: collecting it closes the stream
    return resp


async def _finish_order(srv: ServerProcess) -> list[str]:
    """Noisy fills the queue behind a request holding the slot; then quiet and a batch
    request come. The order the queued requests finish in (one slot: one at a time)."""
    order: list[str] = []
    async with httpx.AsyncClient(base_url=srv.url, timeout=60) as client:

        async def chat(key: str, **headers: str) -> None:
            resp = await client.post(
                "/v1/chat/completions", content=_body(2), headers=_headers(key, **headers)
            )
            assert resp.status_code == 200, resp.text
            order.append(key)

        holder = await _hold(client)
        noisy = [asyncio.create_task(chat("noisy")) for _ in range(3)]
        await _until_queued(srv, {"noisy": 3})
        batch = asyncio.create_task(chat("nightly"))  # the tenant's class: batch
        await _until_queued(srv, {"noisy": 3, "nightly": 1})
        lowered = asyncio.create_task(chat("quiet", **{"X-Sardeenz-Priority": "batch"}))
        await _until_queued(srv, {"noisy": 3, "nightly": 1, "quiet": 1})
        quiet = asyncio.create_task(chat("quiet"))
        await _until_queued(srv, {"noisy": 3, "nightly": 1, "quiet": 2})
        await holder.aclose()  # the client leaves: the slot frees, the queue moves
        await within(
            asyncio.gather(*noisy, batch, lowered, quiet), 60, "every queued request answered"
        )
    return order


async def test_a_quiet_tenant_passes_a_noisy_backlog_only_with_fair_sharing(
    fair: ServerProcess, fifo: ServerProcess
) -> None:
    with_fairness = await _finish_order(fair)
    without = await _finish_order(fifo)
    # Fair: quiet's interactive request waits for the noisy head only (it came first);
    # the batch ones go after every interactive one, whatever their tenant's share.
    assert with_fairness == ["noisy", "quiet", "noisy", "noisy", "nightly", "quiet"]
    # First come, first served (priority classes still apply): quiet waits for all noisy.
    assert without == ["noisy", "noisy", "noisy", "quiet", "nightly", "quiet"]


async def test_past_the_bounded_wait_a_503_with_retry_after(fair: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=fair.url, timeout=60) as client:
        holder = await _hold(client, tokens=3000)  # 30 s: longer than the bound
        t0 = time.monotonic()
        resp = await client.post(
            "/v1/chat/completions", content=_body(2), headers=_headers("quiet")
        )
        waited = time.monotonic() - t0
        await holder.aclose()
    assert resp.status_code == 503, resp.text
    error = resp.json()["error"]
    assert error["code"] == "queue_timeout"
    assert error["type"] == "service_unavailable_error"
    assert "SARDEENZ_FAIR_QUEUE_WAIT_SECONDS" in error["message"]
    assert resp.headers["retry-after"] == "2"  # a quarter of the 6 s bound, rounded up
    assert waited >= WAIT_SECONDS  # never earlier than the bound (later only by load)
    await _until_queued(fair, {})


async def test_one_more_than_the_queue_bound_gets_503_at_once(fair: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=fair.url, timeout=60) as client:
        holder = await _hold(client)

        async def chat() -> int:
            resp = await client.post(
                "/v1/chat/completions", content=_body(2), headers=_headers("noisy")
            )
            return resp.status_code

        queued = [asyncio.create_task(chat()) for _ in range(QUEUE_MAX)]
        await _until_queued(fair, {"noisy": QUEUE_MAX})
        resp = await client.post(
            "/v1/chat/completions", content=_body(2), headers=_headers("quiet")
        )
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"]["code"] == "queue_full"
        assert resp.headers["retry-after"] == "2"
        await holder.aclose()
        statuses = await within(asyncio.gather(*queued), 60, "the queued requests answered")
        assert statuses == [200] * QUEUE_MAX
    text = (await asyncio.to_thread(httpx.get, f"{fair.url}/metrics", timeout=10)).text
    assert re.search(
        rf'sardeenz_fair_queue_rejected_requests_total\{{model="{MODEL}",reason="queue_full",'
        r'tenant="quiet"\} [1-9]',
        text,
    ), text


@pytest.mark.parametrize("value", ["urgent", "", "interactive!"])
def test_an_unknown_priority_is_a_clear_400(fair: ServerProcess, value: str) -> None:
    resp = httpx.post(
        f"{fair.url}/v1/chat/completions",
        content=_body(2),
        headers=_headers("quiet", **{"X-Sardeenz-Priority": value}),
        timeout=30,
    )
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "invalid_priority"
    assert "interactive, batch" in error["message"]


def _asleep(srv: ServerProcess) -> None:
    """Load ``SLEEPY`` (a wake of 6 s: time for the test to queue its requests meanwhile)
    and put it to sleep."""
    with httpx.Client(
        base_url=srv.url, headers={"Authorization": f"Bearer {token(['admin'])}"}, timeout=60
    ) as api:
        inst = load_active(api, SLEEPY, "--wake-ms", "6000", enable_sleep_mode=True)
        api.post(f"/api/v1/models/{inst['id']}/sleep?level=1").raise_for_status()
        wait_for_status(api, inst["id"], "sleeping", 60)


async def test_requests_waiting_for_a_wake_keep_their_place(fair: ServerProcess) -> None:
    """Requests that came while the model woke up are let in in fair order, not in the
    order their tasks happen to wake: they were in the queue all along."""
    await asyncio.to_thread(_asleep, fair)
    order: list[str] = []
    async with httpx.AsyncClient(base_url=fair.url, timeout=60) as client:

        async def chat(key: str) -> None:
            resp = await client.post(
                "/v1/chat/completions",
                content=_body(2, model=SLEEPY),
                headers=_headers(key),
            )
            assert resp.status_code == 200, resp.text
            order.append(key)

        noisy = [asyncio.create_task(chat("noisy")) for _ in range(3)]
        await _until_queued(fair, {"noisy": 3}, SLEEPY)  # no slot while it sleeps
        quiet = asyncio.create_task(chat("quiet"))
        await _until_queued(fair, {"noisy": 3, "quiet": 1}, SLEEPY)
        await within(
            asyncio.gather(*noisy, quiet), 60, "the requests queued during the wake answered"
        )
    assert order == ["noisy", "quiet", "noisy", "noisy"]
