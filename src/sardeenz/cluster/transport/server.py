"""The receiving end of ``/internal/*``: signature first, then the route table.

Nothing here answers without a valid signature (security/cluster_hmac.py):
the signature's headers are checked first (present, for this pod, fresh, not
seen), then the body is read (bounded, and counted against the node-wide
budget of unverified bytes, security/unverified.py), the signature checked,
and only then is the path even looked at, so an unsigned caller learns nothing (not even which paths
exist). Not part of FastAPI, so none of it is in the public OpenAPI document.

Routes are :class:`~sardeenz.cluster.transport.routes.InternalRoute`
constants bound to handlers with :meth:`InternalRouter.add`; the router, not
the handler, enforces what the declaration says: a fenced route's ``term`` is
checked (409 ``stale_term``, :func:`fence`) before its handler runs.

A handler takes an :class:`InternalRequest` and returns the JSON answer (any
value ``orjson`` encodes, or bytes already encoded), sync or async. It
refuses by raising: a ``SardeenzError`` becomes its status with ``detail``,
``code`` and the error's extras (a leader hands a pod's refusal on as it came);
a pydantic ``ValidationError`` (from ``request.parse``) becomes 400
``invalid_request``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import orjson
from pydantic import BaseModel, Field, ValidationError

from sardeenz.asgi import Receive, Scope, Send, header
from sardeenz.cluster.transport.routes import PREFIX, InternalRoute
from sardeenz.errors import Conflict, SardeenzError
from sardeenz.proxy.wire import api_error, send_json
from sardeenz.security.cluster_hmac import ANY_TARGET, Checked, ClusterAuthError, Signed, Verifier
from sardeenz.security.unverified import DEFAULT_LIMIT, BodyRefused, UnverifiedBodies

log = logging.getLogger(__name__)

MAX_BODY = 8 * 2**20

M = TypeVar("M", bound=BaseModel)


class Fencing(Protocol):
    """What fencing needs of the election: the newest term seen, and the check."""

    def accepts_order(self, term: int) -> bool:
        """False for an order older than the newest term seen (it may raise the term)."""

    def current_term(self) -> int: ...


class StaleTerm(Conflict):
    """The one refusal of a leader order older than the newest term this pod has seen."""

    def __init__(self, term: int, seen: int) -> None:
        super().__init__(
            f"order of term {term} refused: this pod has seen term {seen}",
            code="stale_term",
            term=seen,
        )


def fence(fencing: Fencing, term: int) -> None:
    """Raise :class:`StaleTerm` unless an order of ``term`` may act here."""
    if not fencing.accepts_order(term):
        raise StaleTerm(term, fencing.current_term())


class BodyError(Exception):
    """The request body could not be read: too large (413) or the client left (499)."""

    def __init__(self, status: int, detail: str, code: str) -> None:
        super().__init__(detail)
        self.status, self.detail, self.code = status, detail, code


async def read_body(receive: Receive, limit: int = MAX_BODY) -> bytes:
    """The whole body, refused past ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BodyError(499, "client went away", "client_closed")
        data: bytes = message.get("body", b"")
        size += len(data)
        if size > limit:
            raise BodyError(413, f"body larger than {limit} bytes", "payload_too_large")
        chunks.append(data)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def read_verified(
    verifier: Verifier,
    scope: Scope,
    receive: Receive,
    unverified: UnverifiedBodies,
    limit: int = MAX_BODY,
) -> tuple[bytes, Checked]:
    """The body of a signed request and what its signature says (the pod it was signed
    for, the pod that signed it), once verified.

    The signature's headers are checked before a byte of the body is read (an
    unsigned, misdirected, stale or replayed request costs nothing), the body is
    read under the node-wide budget of unverified bytes (security/unverified.py),
    and the signature checked over it. Raises ``ClusterAuthError`` or ``BodyError``.
    """
    verifier.check_headers(signed_headers(scope))
    try:
        return await unverified.read(receive, limit, lambda body: verify(verifier, scope, body))
    except BodyRefused as exc:
        raise BodyError(exc.status, exc.detail, exc.code) from None


def signed_headers(scope: Scope) -> Signed:
    headers = scope["headers"]
    return Signed.of(lambda name: header(headers, name))


def target_of(scope: Scope) -> str:
    """The request target as signed: raw path plus ``?query``."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string", b"")
    return (raw + b"?" + query if query else raw).decode("latin-1")


def verify(verifier: Verifier, scope: Scope, body: bytes) -> Checked:
    """Raise ``ClusterAuthError`` unless the request carries a valid, fresh, new signature
    for this pod; what it says (signed for this pod or ``*``: any pod; by which pod)."""
    return verifier.verify(scope["method"], target_of(scope), signed_headers(scope), body)


class WrongSource(SardeenzError):
    """A request speaking for another pod than the one that signed it."""

    status = 401
    code = "wrong_source"


@dataclass(frozen=True, slots=True)
class InternalRequest:
    """One signed request, as a handler sees it."""

    route: InternalRoute
    params: dict[str, str]
    """The ``{name}`` segments of the route's template."""
    body: bytes
    term: int | None
    """A fenced route's term (already accepted); None on other routes."""
    source: str | None = None
    """The pod that signed it (``X-Cluster-Source``); None for a request of a pod of the
    previous version, signed without it (accepted only during a rolling upgrade)."""

    def check_sender(self, pod_id: str) -> None:
        """Raise :class:`WrongSource` (401) unless ``pod_id``, the pod the body speaks for
        (a heartbeat's sender, a vote's candidate), signed the request. A request of a
        previous-version pod (no source) passes: it is accepted only during an upgrade."""
        if self.source is not None and self.source != pod_id:
            raise WrongSource(f"signed by {self.source}, speaking for {pod_id[:253]}")

    def parse(self, model: type[M]) -> M:
        """The JSON body as ``model`` (an empty body is ``{}``); 400 when it does not fit."""
        return model.model_validate_json(self.body or b"{}")


Handler = Callable[[InternalRequest], Any]
"""``(request) -> JSON value``, or an awaitable of it, or a ``Streamed``."""


@dataclass(frozen=True, slots=True)
class Streamed:
    """A handler's answer that sends itself (a stream): given the connection's ``receive``
    (to see the reader leave) and ``send``, it sends the whole response."""

    run: Callable[[Receive, Send], Awaitable[None]]


class _Term(BaseModel):
    term: int = Field(ge=0)


class InternalRouter:
    """The ``/internal/*`` ASGI app: verify, match a declared route, fence, run its handler."""

    def __init__(
        self,
        verifier: Verifier,
        fencing: Fencing,
        unverified: UnverifiedBodies | None = None,
        max_body: int = MAX_BODY,
    ) -> None:
        self._verifier = verifier
        self._fencing = fencing
        # The node's budget (gateway.unverified); one of its own when built alone.
        self._unverified = unverified or UnverifiedBodies(DEFAULT_LIMIT)
        self._max_body = max_body
        self._routes: list[tuple[InternalRoute, Handler]] = []

    def add(self, route: InternalRoute, handler: Handler) -> None:
        """Bind ``handler`` to ``route``; a route is bound once."""
        if any(r == route for r, _ in self._routes):
            raise ValueError(f"internal route {route} is bound twice")
        self._routes.append((route, handler))

    def include(self, bindings: Iterable[tuple[InternalRoute, Handler]]) -> None:
        """Bind several (a feature's ``internal_routes()``)."""
        for route, handler in bindings:
            self.add(route, handler)

    @property
    def routes(self) -> list[InternalRoute]:
        return [r for r, _ in self._routes]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            try:
                body, checked = await read_verified(
                    self._verifier, scope, receive, self._unverified, self._max_body
                )
            except ClusterAuthError as exc:
                log.warning(
                    "cluster: refused %s %s from %s: %s",
                    scope["method"],
                    scope["path"][:100],
                    (scope.get("client") or ("?",))[0],
                    exc.message,
                )
                raise BodyError(401, exc.message, exc.code) from None
            # The raw path: a percent-encoded "/" inside a parameter stays inside it.
            raw: bytes = scope.get("raw_path") or scope["path"].encode()
            status, data = await self._dispatch(
                scope["method"], raw.decode("latin-1"), body, checked
            )
            if isinstance(data, Streamed):
                await data.run(receive, send)
                return
        except BodyError as r:
            if r.status == 499:
                return
            status, data = r.status, {"detail": r.detail, "code": r.code}
        except ValidationError as exc:
            status, data = 400, {"detail": _first_error(exc), "code": "invalid_request"}
        except SardeenzError as exc:
            # extras too (a refusal's fit verdict): the leader hands them on as they came
            status, data = exc.status, {**exc.extra, "detail": exc.message, "code": exc.code}
        except Exception:
            log.exception("internal route %s failed", scope["path"][:100])
            status, data = 500, {"detail": "internal error", "code": "internal_error"}
        # A refusal may leave the body unread: the connection is not reused then.
        extra = [(b"connection", b"close")] if status in (401, 413, 503) else None
        await send_json(
            send, status, data if isinstance(data, bytes) else orjson.dumps(data), extra
        )

    async def _dispatch(
        self, method: str, path: str, body: bytes, checked: Checked
    ) -> tuple[int, Any]:
        if path.startswith(PREFIX):
            for route, handler in self._routes:
                params = route.match(method, path)
                if params is None:
                    continue
                if checked.target == ANY_TARGET and not route.any_target:
                    log.warning("cluster: refused %s signed for any pod", route)
                    raise BodyError(401, f"{route} must be signed for this pod", "wrong_target")
                term = None
                if route.fenced:
                    term = _Term.model_validate_json(body or b"{}").term
                    fence(self._fencing, term)
                result = handler(InternalRequest(route, params, body, term, checked.source))
                if inspect.isawaitable(result):
                    result = await result
                return 200, result
        return 404, api_error(f"no internal route {method} {path[:100]}", "not_found")


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid body"
    where = ".".join(str(p) for p in errors[0]["loc"]) or "body"
    return f"{where}: {errors[0]['msg']}"
