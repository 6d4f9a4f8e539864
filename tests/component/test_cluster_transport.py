"""The pod transport end to end: ``PodClient`` -> real HTTP -> ``InternalRouter``.

One uvicorn server on loopback serves a router with a few declared routes; a
client signs and sends to it through a directory that names it. Each case is
one rule of the transport: a declared route answers, a fenced one carries the
leader's term and is refused when stale (one refusal shape), a follower cannot
send an order, a refusal comes back as the same error, bad input is 400,
unsigned is 401, an unknown or unavailable pod is refused before anything is
sent, a dead address backs off, and a silent one times out.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from pydantic import BaseModel

from sardeenz.cluster.identity import PeerAddress
from sardeenz.cluster.transport import InternalRequest, InternalRoute, InternalRouter, PodClient
from sardeenz.errors import Conflict, NotFound, SardeenzError, Unavailable
from sardeenz.security.cluster_hmac import Signer, Verifier
from testkit.waiting import within

SECRET = b"s" * 32
ECHO = InternalRoute("POST", "/internal/test/echo/{name}")
ORDER = InternalRoute("POST", "/internal/test/order", fenced=True)
REFUSE = InternalRoute("GET", "/internal/test/refuse")
WHO = InternalRoute("GET", "/internal/test/who", any_target=True)
SPEAKS_FOR = InternalRoute("POST", "/internal/test/speaks-for/{pod}")


class _Body(BaseModel):
    n: int


@dataclass
class Directory:
    """The client's view of membership, and the server's fencing, in one place."""

    addresses: dict[str, PeerAddress] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    leading: bool = True
    term: int = 3
    seen: int = 3

    def address_of(self, pod_id: str) -> PeerAddress | None:
        return self.addresses.get(pod_id)

    def reachable(self, pod_id: str) -> bool:
        return pod_id not in self.down

    async def first_heard(
        self,
        pod_id: str,
        timeout: float,  # noqa: ASYNC109
        *,
        silent_too: bool = False,
    ) -> bool:
        return self.reachable(pod_id)

    def leader(self) -> str | None:
        return "me" if self.leading else "other"

    def is_leader(self) -> bool:
        return self.leading

    def current_term(self) -> int:
        return self.term

    # the serving pod's fencing
    def accepts_order(self, term: int) -> bool:
        self.seen = max(self.seen, term)
        return term >= self.seen


@dataclass
class Rig:
    client: PodClient
    directory: Directory
    url: str
    orders: list[int | None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    directory = Directory()
    orders: list[int | None] = []
    router = InternalRouter(Verifier([SECRET], me="pod-b"), _Fencing(directory))

    def echo(r: InternalRequest) -> dict[str, Any]:
        return {"name": r.params["name"], "n": r.parse(_Body).n}

    def order(r: InternalRequest) -> dict[str, Any]:
        orders.append(r.term)
        return {"ok": True}

    def refuse(_: InternalRequest) -> None:
        raise Conflict("no room", code="model_does_not_fit", needBytes=7)

    router.include([(ECHO, echo), (ORDER, order), (WHO, lambda _: {"podId": "pod-b"})])
    router.add(REFUSE, refuse)

    def speaks_for(r: InternalRequest) -> dict[str, Any]:
        r.check_sender(r.params["pod"])  # as a heartbeat or a vote checks its pod id
        return {"source": r.source}

    router.add(SPEAKS_FOR, speaks_for)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(router, host="127.0.0.1", port=port, log_level="error"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the test server did not start"
        await asyncio.sleep(0.01)
    directory.addresses["pod-b"] = PeerAddress("127.0.0.1", port)
    client = PodClient(
        Signer(SECRET, source="pod-a"),
        directory,
        timeout=5,
        order_timeout=5,
        backoff_base=30,
        backoff_cap=60,
    )
    await client.start()
    try:
        yield Rig(client, directory, f"http://127.0.0.1:{port}", orders)
    finally:
        await client.close()
        server.should_exit = True
        await task


@dataclass
class _Fencing:
    d: Directory

    def accepts_order(self, term: int) -> bool:
        return self.d.accepts_order(term)

    def current_term(self) -> int:
        return self.d.seen


async def test_a_declared_route_answers_with_its_params_and_body(rig: Rig) -> None:
    data = await rig.client.call("pod-b", ECHO, {"n": 4}, name="a b/c")
    assert data == {"name": "a b/c", "n": 4}


async def test_a_fenced_order_carries_the_term_and_a_stale_one_is_refused(rig: Rig) -> None:
    assert await rig.client.call("pod-b", ORDER) == {"ok": True}
    assert rig.orders == [3]
    rig.directory.seen = 5  # the pod has heard of a newer leader
    with pytest.raises(SardeenzError) as caught:
        await rig.client.call("pod-b", ORDER)
    assert caught.value.status == 409
    assert caught.value.code == "stale_term"
    assert caught.value.extra["term"] == 5
    assert "order of term 3 refused: this pod has seen term 5" in caught.value.message
    assert rig.orders == [3]  # the handler never ran


async def test_a_follower_sends_no_order(rig: Rig) -> None:
    rig.directory.leading = False
    with pytest.raises(Conflict) as caught:
        await rig.client.call("pod-b", ORDER)
    assert caught.value.code == "not_leader"
    assert "'other'" in caught.value.message
    assert rig.orders == []


async def test_a_refusal_comes_back_as_the_same_error(rig: Rig) -> None:
    with pytest.raises(SardeenzError) as caught:
        await rig.client.call("pod-b", REFUSE)
    assert (caught.value.status, caught.value.code) == (409, "model_does_not_fit")
    assert caught.value.extra == {"needBytes": 7}
    assert await rig.client.ask("pod-b", REFUSE) is None


async def test_a_refused_signature_is_the_pod_unavailable_not_a_401(rig: Rig) -> None:
    """The soak's clock jump: a pod whose wall clock runs 2 min ahead signs requests every
    other pod refuses (stale_timestamp). Its caller, an operator's unload through the
    leader, got that 401 as if their own credentials were wrong."""
    ahead = PodClient(
        Signer(SECRET, clock=lambda: time.time() + 120, source="pod-a"),
        rig.directory,
        timeout=5,
        order_timeout=5,
        backoff_base=30,
        backoff_cap=60,
    )
    await ahead.start()
    try:
        with pytest.raises(Unavailable) as caught:
            await ahead.call("pod-b", ECHO, {"n": 1}, name="x")
    finally:
        await ahead.close()
    assert (caught.value.status, caught.value.code) == (503, "pod_unavailable")
    assert caught.value.extra == {"peerCode": "stale_timestamp"}
    assert "refused this pod's signature" in caught.value.message


async def test_bad_input_is_400_and_an_unknown_route_404(rig: Rig) -> None:
    with pytest.raises(SardeenzError) as caught:
        await rig.client.call("pod-b", ECHO, {"n": "many"}, name="x")
    assert (caught.value.status, caught.value.code) == (400, "invalid_request")
    with pytest.raises(SardeenzError) as caught:
        await rig.client.call("pod-b", InternalRoute("GET", "/internal/test/nope"))
    assert (caught.value.status, caught.value.code) == (404, "not_found")


async def test_unsigned_is_401_before_the_path_is_looked_at(rig: Rig) -> None:
    async with httpx.AsyncClient() as http:
        resp = await http.post(f"{rig.url}/internal/test/echo/x", json={"n": 1})
        assert resp.status_code == 401
        assert resp.json()["code"] == "unsigned"
        resp = await http.get(f"{rig.url}/internal/nope")
        assert resp.status_code == 401


async def test_unknown_and_unavailable_pods_are_refused_without_a_request(rig: Rig) -> None:
    with pytest.raises(NotFound) as missing:
        await rig.client.call("pod-z", ECHO, {"n": 1}, name="x")
    assert missing.value.code == "pod_not_found"
    rig.directory.down.add("pod-b")
    with pytest.raises(Unavailable) as down:
        await rig.client.call("pod-b", ECHO, {"n": 1}, name="x")
    assert down.value.code == "pod_unavailable"
    assert await rig.client.ask("pod-b", ECHO, {"n": 1}, name="x") is None


async def test_a_dead_address_answers_none_and_backs_off(rig: Rig) -> None:
    dead = PeerAddress("127.0.0.1", _free_port())
    assert rig.client.due(WHO, dead)
    assert await rig.client.call_at(dead, WHO) is None
    assert not rig.client.due(WHO, dead)  # next try in backoff_base seconds
    assert rig.client.due(ECHO, dead)  # per route
    rig.directory.addresses["pod-c"] = dead
    with pytest.raises(Unavailable) as caught:
        await rig.client.call("pod-c", ECHO, {"n": 1}, name="x")
    assert "did not answer" in caught.value.message


async def test_a_silent_pod_times_out_and_the_pool_still_serves_the_others(rig: Rig) -> None:
    """A pod that accepts the connection and never answers (a hung process) costs the
    caller its timeout, not a hang; the other pods' calls go on over the same pool."""
    accepted: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # read nothing, answer nothing

    silent = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        port = silent.sockets[0].getsockname()[1]
        rig.directory.addresses["pod-s"] = PeerAddress("127.0.0.1", port)
        with pytest.raises(Unavailable) as caught:
            await within(  # the call's own 0.3 s timeout must end it long before this
                rig.client.call("pod-s", ECHO, {"n": 1}, timeout=0.3, name="x"),
                10,
                "the call to the silent pod ended by its own timeout",
            )
        assert "did not answer" in caught.value.message
        assert accepted, "the silent pod never saw the connection"
        assert await rig.client.call("pod-b", ECHO, {"n": 2}, name="y") == {"name": "y", "n": 2}
    finally:
        for writer in accepted:
            writer.close()
        silent.close()
        await silent.wait_closed()


def test_a_route_is_bound_once() -> None:
    router = InternalRouter(Verifier([SECRET], me="pod-b"), _Fencing(Directory()))
    router.add(ECHO, lambda _: None)
    with pytest.raises(ValueError, match="bound twice"):
        router.add(ECHO, lambda _: None)


async def test_only_a_route_declared_any_target_takes_a_request_signed_for_any_pod(
    rig: Rig,
) -> None:
    address = rig.directory.addresses["pod-b"]
    assert await rig.client.call_at(address, WHO) == {"podId": "pod-b"}  # signed for "*"
    with pytest.raises(ValueError, match="must name the pod"):  # a bug: never sent
        await rig.client.call_at(address, ECHO, {"n": 1})
    signer = Signer(SECRET, source="pod-a")
    async with httpx.AsyncClient() as http:
        path = ECHO.path(name="x")
        body = b'{"n": 1}'
        for target, code in (("*", "wrong_target"), ("pod-a", "wrong_target")):
            headers = signer.headers("POST", path, body, target=target)
            resp = await http.post(f"{rig.url}{path}", content=body, headers=headers)
            assert resp.status_code == 401, resp.text
            assert resp.json()["code"] == code
        headers = signer.headers("POST", path, body, target="pod-b")
        resp = await http.post(f"{rig.url}{path}", content=body, headers=headers)
        assert resp.json() == {"name": "x", "n": 1}


async def test_the_handler_knows_the_signing_pod_and_a_body_speaking_for_another_is_401(
    rig: Rig,
) -> None:
    """The receiver answers 401 ``wrong_source``; its caller raises that refusal of its
    signature as the pod being unavailable, the code as ``peerCode``."""
    assert await rig.client.call("pod-b", SPEAKS_FOR, {}, pod="pod-a") == {"source": "pod-a"}
    with pytest.raises(SardeenzError) as refused:
        await rig.client.call("pod-b", SPEAKS_FOR, {}, pod="pod-c")
    assert (refused.value.status, refused.value.code) == (503, "pod_unavailable")
    assert refused.value.extra == {"peerCode": "wrong_source"}
