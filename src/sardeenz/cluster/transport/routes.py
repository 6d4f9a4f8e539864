"""Every ``/internal/*`` route, declared once: method, path template, fencing.

A route is an :class:`InternalRoute` constant. Both ends use the same object:
the server binds a handler to it (``InternalRouter.add``) and the client sends
to it (``PodClient.call(pod, ROUTE, payload, **params)``), so a path string,
its method and whether it is fenced are written here and nowhere else.

* ``fenced``: a leader order. The client adds the leader's ``term`` to the JSON
  body (and refuses to send it unless this pod leads); the server refuses it
  with 409 ``stale_term`` when that term is older than the newest it has seen,
  before the handler runs.
* ``any_target``: the request may be signed for whichever pod answers at an
  address (the signature names no pod). Only the ping is: it is how a pod
  learns who is at a configured address, and it changes nothing.

A feature adding a route declares its constant here, next to the others
(a table one can read top to bottom), and binds its handler where it is wired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import quote, unquote

PREFIX: Final = "/internal/"

HOP_HEADER: Final = b"x-sardeenz-hop"
"""Set on a /v1 request one pod forwards to another: the receiver never forwards it again."""

Method = Literal["GET", "POST", "PUT", "DELETE"]


@dataclass(frozen=True, slots=True)
class InternalRoute:
    method: Method
    template: str
    """``/internal/...``; a ``{name}`` segment matches one path segment."""
    fenced: bool = False
    any_target: bool = False

    def path(self, **params: str) -> str:
        """The path to send, with each ``{name}`` filled in (percent-encoded)."""
        return self.template.format(**{k: quote(v, safe="") for k, v in params.items()})

    def match(self, method: str, path: str) -> dict[str, str] | None:
        """The ``{name}`` values when ``method path`` is this route, else None."""
        if method != self.method:
            return None
        want = self.template.strip("/").split("/")
        got = path.strip("/").split("/")
        if len(want) != len(got):
            return None
        params: dict[str, str] = {}
        for w, g in zip(want, got, strict=True):
            if w.startswith("{") and w.endswith("}"):
                if not g:
                    return None
                params[w[1:-1]] = unquote(g)
            elif w != g:
                return None
        return params

    def __str__(self) -> str:
        return f"{self.method} {self.template}"


# --- membership: who is there, who leads
PING = InternalRoute("GET", "/internal/ping", any_target=True)
HEARTBEAT = InternalRoute("POST", "/internal/heartbeat")
STATE = InternalRoute("GET", "/internal/state")
PREVOTE = InternalRoute("POST", "/internal/election/prevote")
VOTE = InternalRoute("POST", "/internal/election/vote")

# --- leader orders on this pod's instances (fenced)
LOAD = InternalRoute("POST", "/internal/models/load", fenced=True)
UNLOAD = InternalRoute("POST", "/internal/models/{instance_id}/unload", fenced=True)
SLEEP = InternalRoute("POST", "/internal/models/{instance_id}/sleep", fenced=True)
WAKE = InternalRoute("POST", "/internal/models/{instance_id}/wake", fenced=True)

# --- a move's steps (cluster/handover.py)
ROUTES = InternalRoute("GET", "/internal/routes")
WITHDRAW = InternalRoute("POST", "/internal/models/{instance_id}/withdraw", fenced=True)
RESTORE = InternalRoute("POST", "/internal/models/{instance_id}/restore", fenced=True)
DRAIN = InternalRoute("POST", "/internal/models/{instance_id}/drain", fenced=True)
ADAPTERS_CARRY = InternalRoute("POST", "/internal/models/{instance_id}/adapters", fenced=True)

# --- memory profiles shared across the cluster (cluster/profile_sync.py)
PROFILES = InternalRoute("GET", "/internal/memory-profiles")
PROFILES_PUSH = InternalRoute("POST", "/internal/memory-profiles", fenced=True)

# --- the replicated control state: presets, catalog, moves (cluster/control_state.py)
CONTROL_WRITE = InternalRoute("POST", "/internal/control/write", fenced=True)
CONTROL_READ = InternalRoute("POST", "/internal/control/read", fenced=True)

# --- on-demand starts placed by the leader (cluster/ondemand.py)
ONDEMAND_PLACE = InternalRoute("POST", "/internal/ondemand/place")

# --- tenants' limits split between the pods, asked of the leader (cluster/tenant_shares.py):
# not fenced (a pod asks whoever it believes leads; a follower answers 409 not_leader)
TENANCY_SYNC = InternalRoute("POST", "/internal/tenancy/sync")

# --- an operator's LoRA adapter load and unload on the pods concerned
# (cluster/adapter_orders.py)
ADAPTER_LOAD = InternalRoute("POST", "/internal/adapters/{name}/load")
ADAPTER_UNLOAD = InternalRoute("POST", "/internal/adapters/{name}/unload")
ADAPTER_BUSY = InternalRoute("GET", "/internal/adapters/{name}/busy")

# --- the cluster-wide request log, pulled by every pod (cluster/observe.py)
REQUESTS_PULL = InternalRoute("POST", "/internal/requests/pull")

# --- billable usage of this pod, summed by the pod that answers the API (cluster/usage_fanout.py)
USAGE_QUERY = InternalRoute("POST", "/internal/usage/query")

# --- reads of this pod's instances by another pod's locator (cluster/instance_routes.py):
# not fenced (they change nothing; asked also while no leader is known)
INSTANCE = InternalRoute("GET", "/internal/instances/{instance_id}")
INSTANCE_LOGS = InternalRoute("GET", "/internal/instances/{instance_id}/logs/{lines}")
INSTANCE_METRICS = InternalRoute("GET", "/internal/instances/{instance_id}/metrics")
INSTANCE_EVENTS = InternalRoute("GET", "/internal/instances/{instance_id}/events/{replay}")
"""NDJSON stream (``replay``: ``0`` or ``1``); its handler answers a ``Streamed``."""

INSTANCE_ACTIONS: Final = {"unload": UNLOAD, "sleep": SLEEP, "wake": WAKE}
"""The leader's orders on one instance, by the action's name."""
