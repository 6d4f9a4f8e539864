"""Pod-to-pod transport: the signed client, the ``/internal/*`` routes, the leader loop.

The lowest cluster layer: it imports no membership and no feature module
(``tests/unit/test_layering.py`` keeps it so); membership and the features
use it.

Declaring a route (``routes.py``, one table)::

    MY_THING = InternalRoute("POST", "/internal/my-feature/{name}", fenced=True)

``fenced=True`` makes it a leader order: the client adds the leader's term
and refuses to send it from a follower (409 ``not_leader``); the receiving
pod refuses an older term than it has seen (409 ``stale_term``,
``server.StaleTerm``) before the handler runs.

Serving it (the feature, given only what it needs)::

    class MyFeature:
        async def receive(self, request: InternalRequest) -> dict[str, Any]:
            order = request.parse(MyOrder)           # 400 invalid_request if bad
            name = request.params["name"]            # the {name} segment
            ...
            return {"ok": True}                      # 200 with this JSON

        def internal_routes(self) -> list[tuple[InternalRoute, Handler]]:
            return [(MY_THING, self.receive)]

and where the cluster is wired (cluster/wiring.py)::

    router.include(my_feature.internal_routes())     # or router.add(MY_THING, fn)

A handler refuses by raising a ``SardeenzError`` (its status, ``code`` and
extras are sent back and re-raised as such by ``PodClient.call`` on the
calling pod).

Calling it (``client.PodClient``, one per pod)::

    data = await client.call(pod_id, MY_THING, {"x": 1}, name="a")   # raises
    data = await client.ask(pod_id, routes.PROFILES)                   # or None
    data = await client.call_at(address, routes.PING)                  # or None

A loop that runs only while this pod leads: ``leader_loop.LeaderLoop``.
``routes.HOP_HEADER`` marks a ``/v1`` request one pod forwarded to another.
"""

from sardeenz.cluster.transport.client import PodClient, PodDirectory
from sardeenz.cluster.transport.leader_loop import LeaderLoop
from sardeenz.cluster.transport.routes import HOP_HEADER, InternalRoute
from sardeenz.cluster.transport.server import (
    Fencing,
    Handler,
    InternalRequest,
    InternalRouter,
    StaleTerm,
    fence,
)

__all__ = [
    "HOP_HEADER",
    "Fencing",
    "Handler",
    "InternalRequest",
    "InternalRoute",
    "InternalRouter",
    "LeaderLoop",
    "PodClient",
    "PodDirectory",
    "StaleTerm",
    "fence",
]
