"""``/internal/*``: the pod-to-pod API, as a plain ASGI handler.

Nothing here answers without a valid signature (security/cluster_hmac.py):
the body is read (bounded), the signature over ``METHOD\\nPATH\\nTIMESTAMP\\nBODY``
checked, and only then is the path even looked at, so an unsigned caller
learns nothing (not even which paths exist). Not part of FastAPI, so none of
it is in the public OpenAPI document. Leader orders (model load, unload,
sleep, wake) carry the leader's ``term`` and are refused with 409
``stale_term`` when it is older than the newest term this pod has seen.

Routes: ``GET ping``, ``POST heartbeat``, ``GET state``, ``GET routes``, ``POST
election/vote``, ``POST models/load``, ``POST models/{id}/unload|sleep|wake``,
``POST models/{id}/withdraw|restore|drain`` (a move's steps, cluster/handover.py),
``GET memory-profiles`` (this pod's profiles) and ``POST memory-profiles``
(the leader's merged set, fenced; cluster/profile_sync.py), ``POST
ondemand/place`` (a pod asks the leader to place a catalog model's on-demand
start; cluster/ondemand.py), ``POST
control/write|read`` (the replicated control state: a copy the leader sends, a
new leader reading ours; both fenced; cluster/control_state.py).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from pydantic import BaseModel, Field, ValidationError

from sardeenz.asgi import Receive, Scope, Send
from sardeenz.cluster import handover
from sardeenz.cluster.control_state import ControlRegister
from sardeenz.cluster.manager import ClusterManager
from sardeenz.cluster.ondemand import ClusterStarts
from sardeenz.cluster.peers import Heartbeat
from sardeenz.cluster.profile_sync import ProfileSync
from sardeenz.domain import LoadRequest
from sardeenz.errors import SardeenzError
from sardeenz.proxy.wire import api_error, header, send_json
from sardeenz.security.cluster_hmac import SIGNATURE_HEADER, TIMESTAMP_HEADER, ClusterAuthError

log = logging.getLogger(__name__)

MAX_BODY = 8 * 2**20


class _Vote(BaseModel):
    candidate: str = Field(min_length=1, max_length=253)
    term: int = Field(ge=1)


class _Order(BaseModel):
    term: int = Field(ge=0)
    level: int = Field(1, ge=1, le=2)


class _HandoverOrder(BaseModel):
    term: int = Field(ge=0)
    seconds: float = Field(30.0, ge=0, le=86400)


class _LoadOrder(BaseModel):
    term: int = Field(ge=0)
    request: LoadRequest


class _Reply(Exception):
    def __init__(self, status: int, detail: str, code: str) -> None:
        super().__init__(detail)
        self.status, self.detail, self.code = status, detail, code


async def read_body(receive: Receive, limit: int = MAX_BODY) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Reply(499, "client went away", "client_closed")
        data: bytes = message.get("body", b"")
        size += len(data)
        if size > limit:
            raise _Reply(413, f"body larger than {limit} bytes", "payload_too_large")
        chunks.append(data)
        if not message.get("more_body", False):
            return b"".join(chunks)


def target_of(scope: Scope) -> str:
    """The request target as signed: raw path plus ``?query``."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string", b"")
    return (raw + b"?" + query if query else raw).decode("latin-1")


def verify(manager: ClusterManager, scope: Scope, body: bytes) -> None:
    verifier = manager.verifier
    if verifier is None:
        raise ClusterAuthError("this node is not in a cluster", "not_clustered")
    headers = scope["headers"]
    verifier.verify(
        scope["method"],
        target_of(scope),
        header(headers, TIMESTAMP_HEADER),
        header(headers, SIGNATURE_HEADER),
        body,
    )


class InternalApi:
    def __init__(
        self,
        manager: ClusterManager,
        profile_sync: ProfileSync | None = None,
        starts: ClusterStarts | None = None,
        control: ControlRegister | None = None,
    ) -> None:
        self._m = manager
        self._control = control
        self._profiles = profile_sync
        self._starts = starts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await read_body(receive)
            try:
                verify(self._m, scope, body)
            except ClusterAuthError as exc:
                log.warning(
                    "cluster: refused %s %s from %s: %s",
                    scope["method"],
                    scope["path"][:100],
                    (scope.get("client") or ("?",))[0],
                    exc.message,
                )
                raise _Reply(401, exc.message, exc.code) from None
            status, data = await self._dispatch(scope["method"], scope["path"], body)
        except _Reply as r:
            if r.status == 499:
                return
            status, data = r.status, {"detail": r.detail, "code": r.code}
        except ValidationError as exc:
            status, data = 400, {"detail": _first_error(exc), "code": "invalid_request"}
        except SardeenzError as exc:
            # extras too (a refusal's fit verdict): the leader hands them on as they came
            status, data = exc.status, {**exc.extra, "detail": exc.message, "code": exc.code}
        except Exception:
            log.exception("internal route %s failed", scope["path"])
            status, data = 500, {"detail": "internal error", "code": "internal_error"}
        if isinstance(data, bytes):
            await send_json(send, status, data)
        else:
            await send_json(send, status, orjson.dumps(data))

    async def _dispatch(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        m = self._m
        sup = m.supervisor
        route = path[len("/internal/") :].rstrip("/")
        if route == "ping" and method == "GET":
            return 200, m.ping()
        if route == "heartbeat" and method == "POST":
            return 200, m.on_heartbeat(Heartbeat.model_validate_json(body))
        if route == "state" and method == "GET":
            return 200, await m.status()
        if route == "routes" and method == "GET":
            return 200, handover.routes_here(m)
        if route == "election/prevote" and method == "POST":
            vote = _Vote.model_validate_json(body)
            return 200, m.on_prevote(vote.candidate, vote.term)
        if route == "election/vote" and method == "POST":
            vote = _Vote.model_validate_json(body)
            return 200, await m.on_vote(vote.candidate, vote.term)
        if route == "models/load" and method == "POST":
            load = _LoadOrder.model_validate_json(body)
            self._fence(load.term)
            instance = await sup.load(load.request.model_copy(update={"pod_id": None}))
            return 200, instance.model_dump(mode="json")
        parts = route.split("/")
        if len(parts) == 3 and parts[0] == "models" and method == "POST":
            order = _Order.model_validate_json(body or b"{}")
            iid, action = parts[1], parts[2]
            if action in ("unload", "sleep", "wake"):
                self._fence(order.term)
                if action == "unload":
                    inst = await sup.unload(iid)
                elif action == "sleep":
                    inst = await sup.sleep(iid, order.level)
                else:
                    inst = await sup.wake(iid)
                return 200, inst.model_dump(mode="json")
            if action in ("withdraw", "restore", "drain"):
                return 200, await self._handover(iid, action, body)
        if route == "memory-profiles" and self._profiles is not None:
            if method == "GET":
                return 200, await self._profiles.local()
            if method == "POST":
                return await self._profiles.receive(body)
        if route == "ondemand/place" and method == "POST" and self._starts is not None:
            return await self._starts.receive(body)
        if route.startswith("control/") and method == "POST" and self._control is not None:
            if route == "control/write":
                return await self._control.receive_write(body)
            if route == "control/read":
                return await self._control.receive_read(body)
        return 404, api_error(f"no internal route {method} {path[:100]}", "not_found")

    async def _handover(self, iid: str, action: str, body: bytes) -> dict[str, Any]:
        """A move's steps on this pod's instance (cluster/handover.py)."""
        order = _HandoverOrder.model_validate_json(body or b"{}")
        self._fence(order.term)
        if action == "withdraw":
            return handover.withdraw_here(self._m, iid, order.seconds)
        if action == "restore":
            return handover.restore_here(self._m, iid)
        return await handover.drain_here(self._m, iid, order.seconds)

    def _fence(self, term: int) -> None:
        if not self._m.accepts_order(term):
            raise _Reply(
                409,
                f"order of term {term} refused: this pod has seen term {self._m.leadership.term}",
                "stale_term",
            )


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid body"
    where = ".".join(str(p) for p in errors[0]["loc"]) or "body"
    return f"{where}: {errors[0]['msg']}"
