"""Requests in flight across a sleep, a wake-up, an unload and an engine crash (issue 18).

A sleep with streams in flight used to freeze them until the clients gave up,
a request sent right after a sleep could reach the sleeping engine and hang,
and an unload ended streams as ``engine_failed`` after the sim's own 5 s, not
the stop grace. Now: a sleep drains (or refuses with 409, or with ``force``
cuts with ``model_sleeping``), an unload drains up to the grace and cuts with
``model_unloaded``, and a request that arrives meanwhile is held (and wakes the
model) or refused, never sent to an engine that is falling asleep or stopping.

Every test runs a real ``sardeenz serve`` with sim engines; streams are read
with aiohttp's client, each with a hard client timeout far beyond what any
of these phases may take, so a hang fails the test instead of stalling it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx
import pytest

from testkit.servers import ServerPool, ServerProcess, load_active, unload_all, wait_for_status
from testkit.waiting import within

GRACE = 3.0
CLIENT_TIMEOUT = 40.0
"""Far beyond any phase here: a stream still open after it has hung."""


@dataclass
class Outcome:
    """How one stream ended: ``done`` ([DONE] seen), an error ``code``, or ``hung``."""

    done: bool = False
    code: str | None = None
    error: dict[str, Any] | None = None
    status: int = 0
    chunks: int = 0
    finish_reason: str | None = None
    ended_at: float = 0.0
    problem: str | None = field(default=None)

    @property
    def kind(self) -> str:
        if self.problem is not None:
            return self.problem
        if self.done:
            return "completed"
        return f"error:{self.code}"


async def whole_one(session: aiohttp.ClientSession, model: str, max_tokens: int) -> Outcome:
    """A non-streamed completion: done, or an OpenAI error body."""
    out = Outcome()
    body = {"model": model, "prompt": "hello", "max_tokens": max_tokens}
    try:
        async with session.post("/v1/completions", json=body) as resp:
            out.status = resp.status
            data = await resp.json(content_type=None)
        if out.status == 200:
            out.done = True
            out.finish_reason = data["choices"][0]["finish_reason"]
        else:
            out.error = data.get("error")
            out.code = out.error["code"] if out.error else "no-error-object"
    except TimeoutError:
        out.problem = "hung"
    except aiohttp.ClientError as exc:
        out.problem = f"transport:{type(exc).__name__}"
    finally:
        out.ended_at = time.monotonic()
    return out


async def stream_one(
    session: aiohttp.ClientSession,
    model: str,
    max_tokens: int,
    started: asyncio.Event | None = None,
) -> Outcome:
    """One stream; ``started`` is set at its first token (or its end, whichever first)."""
    out = Outcome()
    body = {"model": model, "prompt": "hello", "max_tokens": max_tokens, "stream": True}
    event = b""
    try:
        async with session.post("/v1/completions", json=body) as resp:
            out.status = resp.status
            if resp.status != 200:
                data = json.loads(await resp.read())
                out.error = data.get("error")
                out.code = out.error["code"] if out.error else "no-error-object"
                return out
            async for raw in resp.content:
                line = raw.rstrip(b"\r\n")
                if line.startswith(b"event:"):
                    event = line[6:].strip()
                elif line.startswith(b"data:"):
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        out.done = True
                        out.ended_at = time.monotonic()
                    elif event == b"error":
                        out.error = json.loads(payload)["error"]
                        out.code = out.error["code"]
                        out.ended_at = time.monotonic()
                    else:
                        out.chunks += 1
                        if started is not None:
                            started.set()
                        chunk = json.loads(payload)
                        for choice in chunk.get("choices", []):
                            if choice.get("finish_reason"):
                                out.finish_reason = choice["finish_reason"]
            if not out.done and out.code is None:
                out.problem = "cut-without-error"
    except TimeoutError:
        out.problem = "hung"
    except aiohttp.ClientError as exc:
        out.problem = f"transport:{type(exc).__name__}"
    finally:
        # When the end was read, not when the client has put the connection back.
        out.ended_at = out.ended_at or time.monotonic()
        if started is not None:
            started.set()
    return out


def session(url: str, n: int) -> aiohttp.ClientSession:
    """A client for ``n`` concurrent requests to ``url``, each with a hard timeout.

    aiohttp, not httpx: reading 200 streams at once cost this process twice the CPU
    with httpx's async client, and on a loaded machine a client that lags behind the
    streams records their ends late (the timing assertions below measure those ends).
    """
    return aiohttp.ClientSession(
        base_url=url,
        connector=aiohttp.TCPConnector(limit=n + 10),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=CLIENT_TIMEOUT),
    )


async def all_started(events: list[asyncio.Event], seconds: float = 30.0) -> None:
    """Wait until every stream has its first token: then it is in flight at the engine.

    A fixed delay raced the clients: on a loaded machine some requests had not reached
    the proxy when the action came, and met it as new requests instead of in-flight ones.
    """
    await within(
        asyncio.gather(*(e.wait() for e in events)),
        seconds,
        f"a first token on each of the {len(events)} streams",
    )


async def engine_holds(port: int, n: int, within: float = 30.0) -> None:
    """Wait until the engine on ``port`` holds ``n`` requests (running or queued): for
    non-streamed requests, which show nothing to the client before they end."""
    deadline = time.monotonic() + within
    held = 0
    async with httpx.AsyncClient(timeout=5) as client:
        while time.monotonic() < deadline:
            state = (await client.get(f"http://127.0.0.1:{port}/sim/state")).json()
            held = state["num_requests_running"] + state["num_requests_waiting"]
            if held >= n:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"the engine holds {held} of {n} requests after {within} s")


async def run_streams(
    url: str, model: str, n: int, max_tokens: int, action: Any, in_flight: bool
) -> tuple[list[Outcome], float, Any]:
    """``n`` concurrent streams; ``action()`` (blocking, in a thread) once every stream has
    its first token (``in_flight``), or at once (e.g. for a sleeping model)."""
    async with session(url, n) as client:
        events = [asyncio.Event() for _ in range(n)]
        tasks = [asyncio.create_task(stream_one(client, model, max_tokens, e)) for e in events]
        if in_flight:
            await all_started(events)
        t_action = time.monotonic()
        result = await asyncio.to_thread(action)
        outcomes = await asyncio.gather(*tasks)
    return list(outcomes), t_action, result


def check_shape(outcomes: list[Outcome]) -> None:
    for o in outcomes:
        assert o.problem is None, o
        if not o.done:
            assert o.error is not None, o
            assert set(o.error) >= {"message", "type", "code"}, o


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    return dict(Counter(o.kind for o in outcomes))


def sim_args(itl_ms: int = 50) -> list[str]:
    return ["--ttft-ms", "20", "--itl-ms", str(itl_ms), "--wake-ms", "100"]


@pytest.fixture(scope="module")
def drain_module_server(module_server_factory: ServerPool) -> ServerProcess:
    return module_server_factory(
        extra_env={
            "SARDEENZ_STOP_GRACE_SECONDS": str(GRACE),
            "SARDEENZ_SLEEP_DRAIN_SECONDS": str(GRACE),
            "SARDEENZ_PROXY_FAST_LANE": "true",  # the express relay path of the unload test
        }
    ).start()


@pytest.fixture
def drain_server(drain_module_server: ServerProcess) -> Iterator[ServerProcess]:
    """One server with the short drain for the module; emptied after each test."""
    yield drain_module_server
    unload_all(drain_module_server)


def test_sleep_waits_for_streams_in_flight_then_sleeps(drain_server: ServerProcess) -> None:
    """Before the fix the sleep answered at once and these streams froze until timeout."""
    with drain_server.client() as api:
        inst = load_active(api, "drowsy", *sim_args(), enableSleepMode=True)

        def sleep() -> httpx.Response:
            return api.post(f"/api/v1/models/{inst['id']}/sleep")

        outcomes, _, resp = asyncio.run(
            run_streams(drain_server.url, "drowsy", 20, 30, sleep, True)
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "sleeping"
        check_shape(outcomes)
        assert counts(outcomes) == {"completed": 20}
        assert all(o.finish_reason == "length" for o in outcomes)
        # The sleep answered only once the streams were done.
        assert time.monotonic() >= max(o.ended_at for o in outcomes)
        assert wait_for_status(api, inst["id"], "sleeping")["status"] == "sleeping"


def test_sleep_refuses_with_409_then_force_cuts_with_model_sleeping(
    drain_server: ServerProcess,
) -> None:
    with drain_server.client() as api:
        inst = load_active(api, "stubborn", *sim_args(), enableSleepMode=True)
        iid = inst["id"]

        def refuse_then_force() -> tuple[httpx.Response, float, httpx.Response]:
            refused = api.post(f"/api/v1/models/{iid}/sleep")
            t_force = time.monotonic()
            forced = api.post(f"/api/v1/models/{iid}/sleep?force=true")
            return refused, t_force, forced

        # 200 tokens at 50 ms: 10 s, longer than the 3 s drain.
        outcomes, _, (refused, t_force, forced) = asyncio.run(
            run_streams(drain_server.url, "stubborn", 10, 200, refuse_then_force, True)
        )
        assert refused.status_code == 409, refused.text
        assert refused.json()["code"] == "requests_in_flight"
        assert refused.json()["inFlight"] == 10
        assert forced.status_code == 200, forced.text
        assert forced.json()["status"] == "sleeping"
        check_shape(outcomes)
        assert counts(outcomes) == {"error:model_sleeping": 10}
        for o in outcomes:
            assert o.chunks > 0  # they ran through the refusal, then were cut
            assert o.error is not None
            assert "sleep" in o.error["message"]
            assert o.ended_at - t_force < GRACE + 2
        # The next request wakes the model and completes.
        body = {"model": "stubborn", "prompt": "hi", "max_tokens": 3}
        resp = api.post("/v1/completions", json=body, timeout=20)
        assert resp.status_code == 200, resp.text
        assert wait_for_status(api, iid, "active")["status"] == "active"


def test_request_right_after_sleep_is_held_and_wakes_the_model(
    drain_server: ServerProcess,
) -> None:
    """benchmarks/wake.py's race: the first request after a sleep must not hang."""
    with drain_server.client() as api:
        fast = ["--ttft-ms", "0", "--itl-ms", "0", "--wake-ms", "200"]
        inst = load_active(api, "napper", *fast, enableSleepMode=True)
        body = {"model": "napper", "prompt": "hi", "max_tokens": 2}
        with httpx.Client(base_url=drain_server.url, timeout=15) as v1:
            for _ in range(3):
                v1.post("/v1/completions", json=body).raise_for_status()  # warm connections
            for _ in range(8):
                v1.post("/v1/completions", json=body).raise_for_status()
                api.post(f"/api/v1/models/{inst['id']}/sleep").raise_for_status()
                resp = v1.post("/v1/completions", json=body)
                assert resp.status_code == 200, resp.text
                assert resp.json()["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("fast_lane", [True, False], ids=["express", "handler"])
def test_unload_drains_then_cuts_with_model_unloaded(
    request: pytest.FixtureRequest, server_factory: ServerPool, fast_lane: bool
) -> None:
    """Before the fix: cut after the sim's own 5 s with ``engine_failed``.

    Both relay paths: the express path (the fast lane, on by default: the module's
    server, whose stop grace is the same) and the ASGI handler (a server with it off).
    """
    drain_server: ServerProcess
    if fast_lane:
        drain_server = request.getfixturevalue("drain_server")
    else:
        drain_server = server_factory(
            extra_env={
                "SARDEENZ_STOP_GRACE_SECONDS": str(GRACE),
                "SARDEENZ_PROXY_FAST_LANE": "false",
            }
        ).start()
    with drain_server.client() as api:
        inst = load_active(api, "leaving", *sim_args())

        def unload() -> httpx.Response:
            return api.post(f"/api/v1/models/{inst['id']}/unload")

        async def both() -> tuple[
            list[Outcome], list[Outcome], list[Outcome], float, httpx.Response
        ]:
            async with session(drain_server.url, 50) as client:
                # 20 short streams (1.5 s) finish within the grace, 20 long ones (20 s) do not.
                started = [asyncio.Event() for _ in range(40)]
                short = [
                    asyncio.create_task(stream_one(client, "leaving", 30, e)) for e in started[:20]
                ]
                long = [
                    asyncio.create_task(stream_one(client, "leaving", 400, e)) for e in started[20:]
                ]
                # non-streamed: no byte before the end, so these are cut before the head
                whole = [asyncio.create_task(whole_one(client, "leaving", 400)) for _ in range(5)]
                await all_started(started)
                await engine_holds(inst["port"], 25)  # the 20 long streams and the 5 whole
                t0 = time.monotonic()
                resp = await asyncio.to_thread(unload)
                return (
                    list(await asyncio.gather(*short)),
                    list(await asyncio.gather(*long)),
                    list(await asyncio.gather(*whole)),
                    t0,
                    resp,
                )

        short, long, whole, t_unload, resp = asyncio.run(both())
        assert resp.status_code == 200, resp.text
        check_shape(short + long + whole)
        assert counts(short) == {"completed": 20}
        assert counts(long) == {"error:model_unloaded": 20}
        assert counts(whole) == {"error:model_unloaded": 5}
        assert {o.status for o in whole} == {502}
        for o in long + whole:
            assert o.error is not None
            assert "unloaded" in o.error["message"]
            # cut when the grace ran out, not before and not much after
            assert GRACE - 0.5 <= o.ended_at - t_unload <= GRACE + 2.5, o.ended_at - t_unload
        # A request for the unloaded model now: the usual 404, not a hang.
        r = api.post("/v1/completions", json={"model": "leaving", "prompt": "x", "max_tokens": 1})
        assert r.status_code == 404


@pytest.mark.slow
def test_200_streams_through_sleep_wake_unload_and_engine_kill(
    drain_server: ServerProcess,
) -> None:
    """The issue's must-show: every stream completes or ends with a clear error; none hangs."""
    n = 200
    report: dict[str, dict[str, int]] = {}
    url = drain_server.url
    with drain_server.client() as api:
        inst = load_active(api, "busy", *sim_args(itl_ms=40), enableSleepMode=True)
        iid = inst["id"]

        # 1. sleep with 200 streams of ~1.2 s in flight: drained, then asleep.
        outcomes, t, resp = asyncio.run(
            run_streams(url, "busy", n, 30, lambda: api.post(f"/api/v1/models/{iid}/sleep"), True)
        )
        assert resp.status_code == 200, resp.text
        check_shape(outcomes)
        report["sleep"] = counts(outcomes)
        assert report["sleep"] == {"completed": n}

        # 2. 200 streams sent to the sleeping model: held, one wake-up, all complete.
        def wake_check() -> dict[str, Any]:
            return wait_for_status(api, iid, "active", timeout=20)

        outcomes, t, _ = asyncio.run(run_streams(url, "busy", n, 30, wake_check, False))
        check_shape(outcomes)
        report["wake"] = counts(outcomes)
        assert report["wake"] == {"completed": n}

        # 3. unload with 200 streams of 8 s: cut with model_unloaded when the grace ends.
        outcomes, t, resp = asyncio.run(
            run_streams(url, "busy", n, 200, lambda: api.post(f"/api/v1/models/{iid}/unload"), True)
        )
        assert resp.status_code == 200, resp.text
        check_shape(outcomes)
        report["unload"] = counts(outcomes)
        assert report["unload"] == {"error:model_unloaded": n}
        assert max(o.ended_at for o in outcomes) - t <= GRACE + 3

        # 4. reload, then SIGKILL the engine mid-stream: engine_failed, at once.
        inst = load_active(api, "busy", *sim_args(itl_ms=40))
        pid = inst["processId"]

        def kill() -> None:
            os.killpg(os.getpgid(pid), signal.SIGKILL)

        outcomes, t, _ = asyncio.run(run_streams(url, "busy", n, 200, kill, True))
        check_shape(outcomes)
        report["engine-kill"] = counts(outcomes)
        assert report["engine-kill"] == {"error:engine_failed": n}
        assert max(o.ended_at for o in outcomes) - t <= GRACE
    print("\nstreams per phase (200 each):")
    for phase, c in report.items():
        print(f"  {phase:12s} {c}")
