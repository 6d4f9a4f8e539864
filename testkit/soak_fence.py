"""The soak's check, from outside the pods, that no write with an old term is accepted.

The pods' own tests show fencing from the inside (cluster/transport/server.py refuses
a fenced order older than the newest term a pod has seen). The soak checks it where
it matters: after every fault, when terms have moved and a deposed leader may still
send. The harness knows the cluster secret, so it signs a fenced leader order exactly
as a pod would (security/cluster_hmac.py) and sends it to each pod with the newest
term it observed that is older than the pod's own. The order is the unload of an
instance that does not exist: were the fence to let it through, the handler would
answer 404 ``instance_not_found`` and change nothing; the fence must answer 409
``stale_term`` first. An answer of 401 (the probe itself badly signed) is a failure
too: the check must reach the fence to mean anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import httpx
import orjson

from sardeenz.cluster.transport import routes
from sardeenz.security.cluster_hmac import Signer
from testkit.cluster import SECRET, TESTER

if TYPE_CHECKING:
    from testkit.soak import Soak

PROBE_INSTANCE = "soak-fence-probe"
"""The instance the probe orders unloaded: none has this id (ids are 12 hex digits)."""


def older_term(observed: Iterable[int], current: int) -> int | None:
    """The term to send a pod whose term is ``current``: the newest term the harness saw
    lead that is older (a real deposed leader's), else ``current - 1``; None at term 0."""
    older = [t for t in observed if t < current]
    if older:
        return max(older)
    return current - 1 if current > 0 else None


class FenceProbe:
    """Signs and sends stale fenced orders (one signer: its timestamps never repeat)."""

    def __init__(self) -> None:
        self._signer = Signer(SECRET.encode(), source=TESTER)

    async def send(
        self, http: httpx.AsyncClient, url: str, pod_id: str, term: int
    ) -> tuple[int, str | None]:
        """(HTTP status, ``code``) of one fenced unload order of ``term`` to ``pod_id``."""
        route = routes.UNLOAD
        path = route.path(instance_id=PROBE_INSTANCE)
        body = orjson.dumps({"term": term})
        headers = self._signer.headers(route.method, path, body, target=pod_id)
        headers["Content-Type"] = "application/json"
        resp = await http.request(route.method, f"{url}{path}", content=body, headers=headers)
        try:
            code = resp.json().get("code")
        except ValueError:
            code = None
        return resp.status_code, code if isinstance(code, str) else None

    async def answer(self, http: httpx.AsyncClient, url: str, pod_id: str, term: int) -> str:
        """``"<status> <code>"`` of one probe (``no answer (...)`` when none came)."""
        try:
            status, code = await self.send(http, url, pod_id, term)
        except httpx.HTTPError as exc:
            return f"no answer ({type(exc).__name__})"
        return f"{status} {code}"


async def check_fencing(soak: Soak, http: httpx.AsyncClient) -> None:
    """``old-term-write-refused``: each pod up (and not cut off) refuses a fenced order
    carrying a term older than its own."""
    report = soak.report
    for name, st in (await soak.statuses(http)).items():
        if name in soak.isolated:
            continue
        current = int(st["term"])
        report.terms.add(current)
        old = older_term(report.terms, current)
        if old is None:
            continue
        url = soak.url(name)
        # The same order with the pod's own term passes the fence and reaches the handler
        # (404: no such instance): the refusal below is the fence's, not a bad
        # signature's. A term that moved meanwhile answers stale_term: fine too.
        control = await soak.fence.answer(http, url, name, current)
        if control not in ("404 instance_not_found", "409 stale_term"):
            soak.violate(
                "old-term-write-refused",
                f"{name}: an order of its own term {current} answered {control}",
            )
        answer = await soak.fence.answer(http, url, name, old)
        report.fenced[answer] = report.fenced.get(answer, 0) + 1
        if answer != "409 stale_term":
            soak.violate(
                "old-term-write-refused",
                f"{name} (term {current}) answered {answer} to an order of term {old}",
            )
