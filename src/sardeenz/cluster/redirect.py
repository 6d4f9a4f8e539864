"""Leader-coordinated admin: a follower sends admin API and dashboard requests to the leader.

With a leader known elsewhere: 307 to the same path and query on the leader's
advertised address (307 keeps the method and the body, so a POST is repeated
there). With no leader (an election, or the minority side of a partition):
reads are answered locally and writes refused with 503 ``no_leader``, so a
pod that cannot reach a quorum changes nothing.

Always local, so each pod's own view can be read: health probes, metrics,
``/api/cluster/*`` (but the moves and presets, which the leader holds and
writes: cluster/control_state.py), the login configuration, the API documents,
and the request log, usage and metrics history (every pod collects the whole
cluster's). ``/v1`` and ``/api/direct`` never come here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from sardeenz.asgi import Scope, Send
from sardeenz.cluster.membership.service import Membership
from sardeenz.proxy.wire import api_error, send_json
from sardeenz.security.policy import is_mutation

LOCAL_PREFIXES: Final = (
    "/api/health",
    "/api/cluster/",
    "/api/auth/config",
    "/api/auth/openshift/token",  # the sign-in's code exchange: any pod can make it
    # every pod collects the whole cluster's request log (cluster/observe.py): its
    # answer is the leader's, a few seconds apart at most
    "/api/v1/requests",
    "/api/v1/usage",
    "/api/v1/metrics/history",
    "/openapi.json",
    "/docs",
    "/redoc",
)

LEADER_PREFIXES: Final = ("/api/cluster/moves", "/api/cluster/presets")
"""Under a local prefix, but held by the leader: redirected like the rest of the admin API."""

Redirect = Callable[[Scope, Send], Awaitable[bool]]


def leader_redirect(membership: Membership) -> Redirect:
    """The gateway's hook: answers (307 or 503) and returns True, or returns False."""

    async def redirect(scope: Scope, send: Send) -> bool:
        path: str = scope["path"]
        local = path.startswith(LOCAL_PREFIXES) and not path.startswith(LEADER_PREFIXES)
        if local or membership.is_leader():
            return False
        leader = membership.leader()
        peer = membership.peers.get(leader) if leader is not None else None
        if peer is None:
            if not is_mutation(scope["method"], path):
                return False
            await send_json(
                send,
                503,
                api_error(
                    "no cluster leader right now (election under way, or this pod cannot "
                    "reach a quorum): admin changes are refused; retry shortly",
                    "no_leader",
                ),
                [(b"retry-after", b"2")],
            )
            return True
        raw: bytes = scope.get("raw_path") or path.encode()
        query: bytes = scope.get("query_string", b"")
        location = peer.address.url.encode() + raw + (b"?" + query if query else b"")
        body = api_error(f"this pod follows; the leader is {leader}", "leader_redirect")
        await send_json(send, 307, body, [(b"location", location)])
        return True

    return redirect
