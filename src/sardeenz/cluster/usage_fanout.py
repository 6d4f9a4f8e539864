"""Billable usage across pods: the answering pod asks every other one, with a timeout.

Why ask at read time rather than replicate: each pod stores the usage of the
requests that entered through it (its own SQLite, written off the hot path),
so nothing is sent per request and no pod holds another's billing rows. A
usage question is rare (a report, a dashboard refresh); answering it costs one
signed ``POST /internal/usage/query`` per other pod, all at once, each bounded
by ``SARDEENZ_CLUSTER_REQUEST_TIMEOUT_SECONDS``. ``/api/v1/usage`` is answered
by the pod asked (cluster/redirect.py keeps it local, as the request log), so
every pod gives the same sum and none has to be the leader. A pod that is
unavailable or does not answer in time is listed in ``missingPods``: the
answer says what it lacks instead of silently counting less.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.server import Handler, InternalRequest
from sardeenz.store.usage import UsageRow
from sardeenz.tasks import await_within
from sardeenz.tenancy.usage_query import UsageQuery, query_of

Local = Callable[[UsageQuery], Awaitable[list[UsageRow]]]
_ROW_WIDTH = 10


class UsageFanout:
    """The asking side (``__call__``) for the usage service."""

    def __init__(self, membership: Membership) -> None:
        self._m = membership

    async def __call__(self, q: UsageQuery) -> tuple[list[UsageRow], list[str], list[str]]:
        m = self._m
        pods = [p.pod_id for p in m.peers.all() if p.pod_id != m.me]
        reachable = [p for p in pods if m.reachable(p)]
        missing = [p for p in pods if p not in reachable]
        answers = await asyncio.gather(*(self._ask(p, q) for p in reachable))
        rows: list[UsageRow] = []
        answered: list[str] = []
        for pod, got in zip(reachable, answers, strict=True):
            if got is None:
                missing.append(pod)
            else:
                answered.append(pod)
                rows.extend(got)
        return rows, sorted(answered), sorted(missing)

    async def _ask(self, pod: str, q: UsageQuery) -> list[UsageRow] | None:
        timeout = self._m.settings.cluster_request_timeout_seconds
        try:
            data = await await_within(
                self._m.client_for(pod).ask(pod, routes.USAGE_QUERY, q.as_json()), timeout
            )
        except TimeoutError:
            return None
        return rows_of(data)


def rows_of(data: dict[str, Any] | None) -> list[UsageRow] | None:
    """Another pod's rows, checked field by field (None: not an answer)."""
    found = data.get("rows") if data is not None else None
    if not isinstance(found, list):
        return None
    rows: list[UsageRow] = []
    for r in found:
        if not (isinstance(r, list) and len(r) == _ROW_WIDTH):
            return None
        if not all(type(v) is int for v in (r[0], *r[5:])):
            return None
        if not all(isinstance(v, str) for v in r[1:5]):
            return None
        rows.append(tuple(r))
    return rows


def usage_routes(local: Local) -> list[tuple[routes.InternalRoute, Handler]]:
    """``POST /internal/usage/query``: this pod's own rows for the question."""

    async def answer(request: InternalRequest) -> dict[str, Any]:
        try:
            body = json.loads(request.body or b"{}")
        except ValueError:
            body = None
        q = query_of(body if isinstance(body, dict) else {})
        return {"rows": [list(r) for r in await local(q)]}

    return [(routes.USAGE_QUERY, answer)]
