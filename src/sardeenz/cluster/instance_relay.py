"""Reads from the pod that runs an instance, and its event stream relayed to our client.

The asking side of ``/internal/instances/...`` (cluster/instance_routes.py answers).
Requests are signed like every ``/internal`` call. A pod's refusal comes back with its
status, ``code`` and ``detail`` unchanged, so an answer relayed from another pod is the
answer that pod gives its own clients; a pod that does not answer is 503
``pod_unavailable`` naming it.

A relayed stream (``stream``) reads the owning pod's NDJSON lines, one SSE item each,
with the pod's keep-alive blank lines in between. It ends

* after ``removed`` (the instance is gone), as a local stream does;
* when our client leaves: the SSE response cancels the generator, whose ``finally``
  closes the upstream connection at once (shielded from the cancellation), and the
  owning pod stops its stream when it sees the disconnect;
* when the owning pod dies or falls silent (connection reset, end of the body without
  ``removed``, or no line, not even a keep-alive, within ``read_timeout``): a final
  ``unavailable`` event with ``code`` ``pod_unavailable`` and ``podId``, then the end.
  Never a hang.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import orjson

from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.routes import InternalRoute
from sardeenz.config import Settings
from sardeenz.errors import SardeenzError, Unavailable
from sardeenz.runtime.event_stream import SseItem
from sardeenz.tls import client_tls

log = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 1.0
"""How often the owning pod writes a blank line on an idle stream."""


def read_timeout(settings: Settings) -> float:
    """Silence after which a relayed stream's pod counts as gone: a few keep-alives, and
    at most the failure detector's suspicion delay (the detector would say it anyway)."""
    return max(3 * KEEPALIVE_SECONDS, settings.cluster_suspect_after_seconds)


def unavailable_item(instance_id: str, pod_id: str, why: str) -> SseItem:
    data = {
        "instanceId": instance_id,
        "podId": pod_id,
        "code": "pod_unavailable",
        "detail": f"pod {pod_id} stopped sending the events of instance {instance_id}: {why}",
    }
    return {"event": "unavailable", "data": orjson.dumps(data).decode()}


def _refusal(pod_id: str, status: int, body: bytes) -> SardeenzError:
    """The pod's own error, as it gave it (status, code, detail, extras)."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return Unavailable(
            f"pod {pod_id} answered {status} without a JSON body", code="pod_unavailable"
        )
    extra = {k: v for k, v in data.items() if k not in ("detail", "code")}
    err = SardeenzError(
        str(data.get("detail") or status), code=str(data.get("code") or "peer_error"), **extra
    )
    err.status = status
    return err


class PodReads:
    """Signed reads from other pods: JSON through the pod client; streams on a pooled
    client of their own (they stay open as long as a client follows, so they never hold
    up heartbeats or orders)."""

    def __init__(self, membership: Membership, settings: Settings) -> None:
        self._m = membership
        self._settings = settings
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(max(5.0, self._settings.cluster_request_timeout_seconds)),
                limits=httpx.Limits(max_connections=256, max_keepalive_connections=16),
                trust_env=False,  # peers are direct: no HTTP(S)_PROXY detour for /internal
                verify=client_tls(False),
            )
        return self._client

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def get(self, pod_id: str, route: InternalRoute, **params: str) -> dict[str, Any]:
        """The pod's JSON answer; its refusal re-raised as it was; 503 if it is silent."""
        return await self.call(pod_id, route, None, **params)

    async def call(
        self, pod_id: str, route: InternalRoute, payload: dict[str, Any] | None, **params: str
    ) -> dict[str, Any]:
        """``route`` on ``pod_id`` through the pod client; a 503 names the pod (``podId``)."""
        try:
            return await self._m.client_for(pod_id).call(
                pod_id, route, payload, timeout=None, **params
            )
        except SardeenzError as exc:
            if exc.status == 503 and "podId" not in exc.extra:
                raise Unavailable(exc.message, code=exc.code, podId=pod_id) from exc
            raise

    async def stream(self, pod_id: str, instance_id: str, replay: bool) -> AsyncIterator[SseItem]:
        """Open the pod's stream (its refusal, e.g. 404, is raised here, before any event)
        and return the relaying generator (module docstring: how it ends)."""
        peer = self._m.peers.get(pod_id)
        signer = self._m.signer
        if peer is None or signer is None:
            raise Unavailable(f"pod {pod_id} is not known here", code="pod_unavailable")
        path = routes.INSTANCE_EVENTS.path(instance_id=instance_id, replay=str(int(replay)))
        headers = signer.headers("GET", path, b"", target=pod_id)
        request = self._http().build_request("GET", peer.address.url + path, headers=headers)
        request.extensions["timeout"] = httpx.Timeout(
            max(5.0, self._settings.cluster_request_timeout_seconds),
            read=read_timeout(self._settings),
        ).as_dict()
        try:
            resp = await self._http().send(request, stream=True)
        except httpx.HTTPError as exc:
            raise Unavailable(
                f"pod {pod_id} did not answer: {exc!r}", code="pod_unavailable", podId=pod_id
            ) from exc
        if resp.status_code != 200:
            body = await resp.aread()
            await resp.aclose()
            raise _refusal(pod_id, resp.status_code, body)
        return self._relay(resp, pod_id, instance_id)

    async def _relay(
        self, resp: httpx.Response, pod_id: str, instance_id: str
    ) -> AsyncIterator[SseItem]:
        why = "it closed the stream"
        try:
            async for line in resp.aiter_lines():
                if not line:
                    continue  # keep-alive
                item = orjson.loads(line)
                yield {"event": str(item["event"]), "data": str(item["data"])}
                if item["event"] == "removed":
                    return
        except httpx.ReadTimeout:
            why = f"nothing for {read_timeout(self._settings):g} s"
        except (httpx.HTTPError, orjson.JSONDecodeError, KeyError) as exc:
            why = f"{type(exc).__name__}: {exc}"
        finally:
            with anyio.CancelScope(shield=True):
                await resp.aclose()
        log.warning("cluster: relay of instance %s from pod %s ended: %s", instance_id, pod_id, why)
        yield unavailable_item(instance_id, pod_id, why)
