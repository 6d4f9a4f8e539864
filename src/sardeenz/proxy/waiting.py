"""Holding a request for a model that exists but is not routable yet.

Why a module of its own: it is the one place that turns "known, not active"
into either an endpoint (after a start or a wake) or the 503 that says why not
and when to retry, and only requests that miss the routing table come here
(never the express path). Catalog models that start on demand wait through
``Demand.wait`` (proxy/demand.py) instead. See docs/proxy.md, "Models that are
not ready yet".
"""

from __future__ import annotations

import math

from sardeenz.proxy.routing import Endpoint, RoutingTable, WakeFailed
from sardeenz.proxy.wire import ErrorReply


async def wait_for(table: RoutingTable, model: str, ready_wait: float) -> Endpoint | ErrorReply:
    """An endpoint of ``model`` within ``ready_wait`` seconds, or the reply saying why not.

    A starting model is waited for; a sleeping one is woken by the table (one wake
    shared by every request meanwhile) unless auto-wake is off; a model with only
    failed or stopping instances is refused at once: nothing would come of waiting.
    """
    if table.pending(model):
        try:
            ep = await table.wait_until_routable(model, ready_wait)
        except WakeFailed as exc:
            return ErrorReply(
                503,
                f"Model {model!r} is asleep and could not be woken: {exc}",
                "service_unavailable_error",
                "wake_failed",
                headers=[(b"retry-after", b"10")],
            )
        if ep is not None:
            return ep
        if table.pending(model):
            return ErrorReply(
                503,
                f"Model {model!r} is not ready yet (still starting after "
                f"{ready_wait:g} s); retry later",
                "service_unavailable_error",
                "model_not_ready",
                headers=[(b"retry-after", _retry_after(ready_wait))],
            )
    statuses = sorted({i.status.value for i in table.instances(model)})
    if "sleeping" in statuses:  # auto-wake is off: say so, and when to retry
        return ErrorReply(
            503,
            f"Model {model!r} is asleep and auto-wake is off (SARDEENZ_PROXY_AUTO_WAKE); "
            "wake it with POST /api/v1/models/{id}/wake",
            "service_unavailable_error",
            "model_sleeping",
            headers=[(b"retry-after", b"10")],
        )
    return ErrorReply(
        503,
        f"Model {model!r} has no healthy instance (status: {', '.join(statuses) or 'none'})",
        "service_unavailable_error",
        "no_healthy_endpoint",
    )


def between_replicas(model: str, ready_wait: float) -> ErrorReply:
    """The 503 for a model the cluster means to serve while no instance of it exists.

    The applied preset declares it, so its absence is a moment between two replicas
    (a move, a restart of its engines, a pod that died before the reconcile loop
    replaced it), or one the reconcile loop cannot place for now: a client that got
    404 would drop the model as unknown.
    """
    return ErrorReply(
        503,
        f"Model {model!r} has no instance right now; the cluster's applied preset "
        "declares it (between two replicas, or waiting for room: see the preset's "
        "reconcile status); retry later",
        "service_unavailable_error",
        "model_not_ready",
        headers=[(b"retry-after", _retry_after(ready_wait))],
    )


def _retry_after(ready_wait: float) -> bytes:
    """``Retry-After`` of a model that is not ready: a quarter of the wait, 1 to 30 s."""
    return str(max(1, min(30, math.ceil(ready_wait / 4) or 1))).encode()
