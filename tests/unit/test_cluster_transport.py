"""Pure parts of the pod transport: route templates, the leader loop, backoff."""

from __future__ import annotations

import asyncio

import pytest

from sardeenz.cluster.transport import LeaderLoop, routes
from sardeenz.cluster.transport.backoff import Backoff
from sardeenz.cluster.transport.routes import InternalRoute
from testkit.waiting import within


def test_a_route_template_fills_and_matches_its_params() -> None:
    path = routes.UNLOAD.path(instance_id="ab/c d")
    assert path == "/internal/models/ab%2Fc%20d/unload"
    assert routes.UNLOAD.match("POST", path) == {"instance_id": "ab/c d"}
    assert routes.UNLOAD.match("GET", path) is None
    assert routes.UNLOAD.match("POST", "/internal/models/x/sleep") is None
    assert routes.UNLOAD.match("POST", "/internal/models//unload") is None
    assert routes.PING.match("GET", "/internal/ping/") == {}


def test_every_declared_route_is_distinct_and_under_internal() -> None:
    declared = [v for v in vars(routes).values() if isinstance(v, InternalRoute)]
    assert len(declared) >= 17
    assert len({(r.method, r.template) for r in declared}) == len(declared)
    assert all(r.template.startswith(routes.PREFIX) for r in declared)
    # only the ping may be signed for whoever answers at an address
    assert [r for r in declared if r.any_target] == [routes.PING]
    orders = {r for r in declared if r.fenced}
    assert set(routes.INSTANCE_ACTIONS.values()) <= orders
    assert routes.LOAD in orders
    assert {routes.CONTROL_WRITE, routes.CONTROL_READ} <= orders


async def test_the_leader_loop_acts_only_while_leading_and_survives_a_bad_round() -> None:
    leading = False
    steps: list[str] = []
    follows = 0
    enough = asyncio.Event()

    async def step() -> None:
        steps.append("step")
        if len(steps) == 1:
            raise RuntimeError("one bad round")
        enough.set()

    def follow() -> None:
        nonlocal follows, leading
        follows += 1
        leading = True  # leads from the next round on

    loop = LeaderLoop("test-loop", lambda: leading, step, 0.001, on_follow=follow)
    loop.start()
    try:
        await within(enough.wait(), 5, "a round after the failed one (the loop went on)")
    finally:
        await loop.stop()
    assert follows == 1
    assert steps[:2] == ["step", "step"]
    assert not loop.running


@pytest.mark.parametrize(("fails", "wait"), [(1, 2.0), (2, 4.0), (3, 8.0), (5, 10.0)])
def test_backoff_doubles_up_to_its_cap(fails: int, wait: float) -> None:
    b = Backoff(2.0, 10.0)
    for _ in range(fails):
        b.failed("a", 100.0)
    assert not b.due("a", 100.0 + wait - 0.01)
    assert b.due("a", 100.0 + wait)
    assert b.due("other", 0.0)
    b.ok("a")
    assert b.due("a", 100.0)
