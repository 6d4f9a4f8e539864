"""An operator's adapter unload decides "in use" from what the pods say now, not from
their heartbeats (cluster/adapter_orders.py).

A peer's heartbeat sent while the adapter's own load held it counts that load as a
request in flight until the next heartbeat; an unload right after the load was refused
409 ``adapter_in_use`` for it. The unload asks each peer holding the adapter instead.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from sardeenz.catalog.models import AdapterPlacement, AdapterView
from sardeenz.cluster.adapter_orders import AdapterOrders
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.transport import routes
from sardeenz.errors import Conflict

NAME = "lc-sql"


@dataclass
class _Identity:
    pod_id: str = "pod-a"


@dataclass
class _Peers:
    """The peers' internal routes: what each says is busy now, and what it was asked."""

    busy: dict[str, list[str]]
    calls: list[tuple[str, str]] = field(default_factory=list)

    async def call(self, pod: str, route: routes.InternalRoute, **params: Any) -> dict[str, Any]:
        name = params["name"]
        self.calls.append((pod, route.template))
        if route is routes.ADAPTER_BUSY:
            return {"name": name, "busy": self.busy.get(pod, [])}
        assert route is routes.ADAPTER_UNLOAD
        return {"name": name, "unloadedFrom": ["b1"]}


@dataclass
class _Membership:
    peers: _Peers
    identity: _Identity = field(default_factory=_Identity)
    active: bool = True

    def client_for(self, pod: str) -> _Peers:
        return self.peers


@dataclass
class _Here:
    """This pod (pod-a): its view says pod-b holds the adapter with ``heartbeat_in_flight``
    requests, as pod-b's last heartbeat said."""

    heartbeat_in_flight: int
    local_in_flight: int = 0
    unloads: int = 0

    async def load_adapter(self, name: str, *, local_only: bool = False) -> str | None:
        raise AssertionError("not a load")

    async def unload_adapter(self, name: str) -> list[str]:
        self.unloads += 1
        return []

    def adapter_view(self, name: str) -> AdapterView:
        return AdapterView(
            name=name,
            base="base",
            adapter_path="/adapters/sql",
            state="active",
            loaded_on=[
                AdapterPlacement(
                    pod_id="pod-a", instance_id="a1", in_flight=self.local_in_flight, sleeping=False
                ),
                AdapterPlacement(
                    pod_id="pod-b",
                    instance_id="b1",
                    in_flight=self.heartbeat_in_flight,
                    sleeping=False,
                ),
            ],
        )


def _orders(here: _Here, peers: _Peers) -> AdapterOrders:
    return AdapterOrders(cast(Membership, _Membership(peers)), here, timeout=1.0)


def test_a_peer_whose_heartbeat_still_counts_the_load_is_asked_and_unloaded() -> None:
    here, peers = _Here(heartbeat_in_flight=1), _Peers(busy={})
    view = asyncio.run(_orders(here, peers).unload(NAME))
    assert peers.calls == [
        ("pod-b", routes.ADAPTER_BUSY.template),
        ("pod-b", routes.ADAPTER_UNLOAD.template),
    ]
    assert here.unloads == 1
    assert [(p.pod_id, p.instance_id) for p in view.loaded_on] == [("pod-a", "a1")]


def test_a_peer_that_says_it_serves_the_adapter_refuses_the_unload_before_any() -> None:
    here, peers = _Here(heartbeat_in_flight=0), _Peers(busy={"pod-b": ["b1"]})
    with pytest.raises(Conflict, match="pod-b/b1") as refused:
        asyncio.run(_orders(here, peers).unload(NAME))
    assert refused.value.code == "adapter_in_use"
    assert here.unloads == 0
    assert peers.calls == [("pod-b", routes.ADAPTER_BUSY.template)]


def test_this_pods_own_requests_refuse_the_unload() -> None:
    here, peers = _Here(heartbeat_in_flight=0, local_in_flight=2), _Peers(busy={})
    with pytest.raises(Conflict, match="pod-a/a1"):
        asyncio.run(_orders(here, peers).unload(NAME))
    assert here.unloads == 0
