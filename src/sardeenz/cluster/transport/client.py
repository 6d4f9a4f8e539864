"""The one signed client for requests to other pods.

Every call to another pod's ``/internal/*`` goes through :class:`PodClient`:
it signs (security/cluster_hmac.py), applies a timeout, adds the leader's term
to a fenced route's body, and turns every failure into one of the project's
errors (or ``None`` for the callers that only want an answer if there is one):

* ``await client.call(pod_id, ROUTE, payload, **params)`` -> the pod's JSON
  object. Raises ``NotFound`` ``pod_not_found`` (no such pod),
  ``Conflict`` ``not_leader`` (a fenced route while this pod does not lead),
  ``Unavailable`` ``pod_unavailable`` (the failure detector says so, no
  answer in time, or the pod refused our signature: its 401 is not passed on,
  a clock skewed past the signing window or another secret shows as
  ``peerCode``), or the pod's own refusal with its status, code and extras.
  A pod just discovered (listed by ``GET /api/cluster/status``, never heard
  from yet) is waited for, within the call's deadline, until its first sign of
  life: a load placed on it right after it joined is not refused for the
  heartbeat it has not sent yet.
* ``await client.ask(pod_id, ROUTE, payload, **params)`` -> the JSON object or
  ``None`` on any failure (logged).
* ``await client.call_at(address, ROUTE, payload, pod_id=...)`` -> the JSON
  object or ``None``, to an address (membership's pings, heartbeats and votes,
  before or regardless of what the directory knows). Failures per (route,
  address) back off exponentially; ``client.due(ROUTE, address)`` says whether
  the next attempt is due.

Who the pods are, where they are and who leads comes from a
:class:`PodDirectory` (membership implements it), so this module imports
nothing above it. httpcore (httpx's connection pool) is imported only when a cluster
starts the client.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from sardeenz.cluster.identity import PeerAddress
from sardeenz.cluster.transport.backoff import Backoff
from sardeenz.cluster.transport.routes import InternalRoute
from sardeenz.errors import Conflict, NotFound, SardeenzError, Unavailable
from sardeenz.security.cluster_hmac import ANY_TARGET, Signer
from sardeenz.tls import client_tls

if TYPE_CHECKING:
    import httpcore

log = logging.getLogger(__name__)

_TIMEOUTS = ("connect", "read", "write", "pool")
"""httpcore's timeouts; each internal call sets all four to its own."""


class PodDirectory(Protocol):
    """What the client asks of membership."""

    def address_of(self, pod_id: str) -> PeerAddress | None:
        """Where ``pod_id`` listens; None for a pod this one does not know."""

    def reachable(self, pod_id: str) -> bool:
        """False while the failure detector calls ``pod_id`` unavailable."""

    async def first_heard(
        self,
        pod_id: str,
        timeout: float,  # noqa: ASYNC109
        *,
        silent_too: bool = False,
    ) -> bool:
        """Whether ``pod_id`` is reachable, waiting up to ``timeout`` s for its first sign of
        life if it is a member this pod has never heard from (just discovered); a pod
        that was heard and went silent is answered at once, unless ``silent_too``: then
        it is waited for as well (its next heartbeat: a pod merely late under load)."""

    def leader(self) -> str | None: ...

    def is_leader(self) -> bool: ...

    def current_term(self) -> int: ...


class PodClient:
    def __init__(
        self,
        signer: Signer,
        directory: PodDirectory,
        *,
        timeout: float,
        order_timeout: float,
        backoff_base: float,
        backoff_cap: float,
    ) -> None:
        self._signer = signer
        self._directory = directory
        self._timeout = timeout
        self._order_timeout = order_timeout
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._backoffs: dict[InternalRoute, Backoff] = {}
        self._http: httpcore.AsyncConnectionPool | None = None

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        import httpcore  # only a cluster pays for it

        # httpx logs every request at INFO: a heartbeat every 2 s to every peer would
        # drown the log (no per-request logging at INFO, DESIGN.md).
        logging.getLogger("httpx").setLevel(logging.WARNING)
        # httpx's connection pool itself (httpcore), not an ``httpx.AsyncClient`` around
        # it: a cluster sends a heartbeat to every pod every interval, all day, and the
        # client's layers (URL parsing and merging, cookie jar, auth and redirect
        # handling, request and response models) cost more CPU than the exchange on the
        # wire, for nothing an internal route uses: peers are direct (no proxy), never
        # redirect, set no cookies, and answer small JSON objects uncompressed.
        # Connections are still kept alive, and each request has its own timeout.
        self._http = httpcore.AsyncConnectionPool(
            ssl_context=client_tls(trust_env=False),
            max_connections=64,
            max_keepalive_connections=32,
            keepalive_expiry=5.0,
        )

    async def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    # ---------------------------------------------------------------- calls
    async def call(
        self,
        pod_id: str,
        route: InternalRoute,
        payload: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - passed to the HTTP client
        **params: str,
    ) -> dict[str, Any]:
        """``route`` on ``pod_id``; its JSON object, or an error (module docstring)."""
        d = self._directory
        address = d.address_of(pod_id)
        if address is None or self._http is None:
            raise NotFound(f"no pod {pod_id!r} in this cluster", code="pod_not_found")
        body = dict(payload or {})
        if route.fenced:
            if not d.is_leader():
                raise Conflict(
                    f"only the leader gives orders to other pods; the leader is {d.leader()!r}",
                    code="not_leader",
                )
            body["term"] = d.current_term()
        wait = timeout or (self._order_timeout if route.fenced else self._timeout)
        if not d.reachable(pod_id):
            # An order (the leader's: a load, a move's step) waits within its deadline for
            # a member the detector gave up on, as for one not heard yet: a pod whose
            # heartbeats were late (a busy machine, a pause) answers its next one, and an
            # operator's load or a move is not refused for it. Reads and fan-outs do not
            # wait: they skip a silent pod and are asked again.
            started = time.monotonic()
            if not await d.first_heard(pod_id, wait, silent_too=route.fenced):
                raise Unavailable(f"pod {pod_id!r} is unavailable", code="pod_unavailable")
            wait = max(0.1, wait - (time.monotonic() - started))
        try:
            path = route.path(**params)
            status, data = await self._send(address, pod_id, route, path, body, wait)
        except OSError as exc:  # a wire error is mapped to OSError by _send_raw
            raise Unavailable(
                f"pod {pod_id!r} did not answer: {exc}", code="pod_unavailable"
            ) from exc
        if status == 401:
            raise _signature_refused(pod_id, data)
        if status >= 400:
            raise _refusal(pod_id, status, data)
        if not isinstance(data, dict):
            raise Unavailable(f"pod {pod_id!r} answered no object", code="pod_unavailable")
        return data

    async def ask(
        self,
        pod_id: str,
        route: InternalRoute,
        payload: dict[str, Any] | None = None,
        **params: str,
    ) -> dict[str, Any] | None:
        """``call``, with None for any failure (logged: debug, or a warning for a refusal)."""
        try:
            return await self.call(pod_id, route, payload, timeout=None, **params)
        except SardeenzError as exc:
            level = logging.WARNING if exc.status not in (404, 503) else logging.DEBUG
            log.log(level, "cluster: %s on %s: %s", route, pod_id, exc.message)
            return None

    def due(self, route: InternalRoute, address: PeerAddress) -> bool:
        """Whether ``call_at(address, route)`` is out of its backoff."""
        return self._backoff(route).due(address, time.monotonic())

    async def call_at(
        self,
        address: PeerAddress,
        route: InternalRoute,
        payload: Any = None,
        *,
        pod_id: str | None = None,
    ) -> dict[str, Any] | None:
        """``route`` at ``address``: its JSON object, or None on any failure (logged).

        Signed for ``pod_id``, the pod expected there; only a route declared
        ``any_target`` (the ping) may go without one. ``payload`` may be given
        already encoded (``bytes``: a heartbeat encoded once for every peer).
        """
        if pod_id is None and not route.any_target:
            raise ValueError(f"{route} must name the pod it is for")
        target = pod_id or ANY_TARGET
        backoff = self._backoff(route)
        if isinstance(payload, bytes):
            body = payload
        else:
            body = orjson.dumps(payload) if payload is not None else b""
        try:
            status, data = await self._send_raw(
                address, target, route, route.path(), body, self._timeout
            )
        except OSError as exc:
            log.debug("cluster: %s at %s failed: %s", route, address, exc)
            backoff.failed(address, time.monotonic())
            return None
        if status != 200 or not isinstance(data, dict):
            if status != 200:
                log.warning("cluster: %s at %s answered %d: %.200s", route, address, status, data)
            backoff.failed(address, time.monotonic())
            return None
        backoff.ok(address)
        return data

    # -------------------------------------------------------------- the wire
    def _backoff(self, route: InternalRoute) -> Backoff:
        found = self._backoffs.get(route)
        if found is None:
            found = self._backoffs[route] = Backoff(self._backoff_base, self._backoff_cap)
        return found

    async def _send(
        self,
        address: PeerAddress,
        target: str,
        route: InternalRoute,
        path: str,
        payload: dict[str, Any],
        timeout: float,  # noqa: ASYNC109 - passed to the HTTP client
    ) -> tuple[int, Any]:
        body = orjson.dumps(payload) if payload or route.method != "GET" else b""
        return await self._send_raw(address, target, route, path, body, timeout)

    async def _send_raw(
        self,
        address: PeerAddress,
        target: str,
        route: InternalRoute,
        path: str,
        body: bytes,
        timeout: float,  # noqa: ASYNC109 - passed to the HTTP client
    ) -> tuple[int, Any]:
        """(status, decoded JSON or the text) of one signed request; OSError if none came."""
        import httpcore

        http = self._http
        if http is None:
            raise OSError("the cluster client is closed")
        headers = self._signer.headers(route.method, path, body, target=target)
        if body:
            headers["Content-Type"] = "application/json"
        host = address.url.removeprefix("http://")
        wire = [(b"Host", host.encode()), (b"Content-Length", b"%d" % len(body))]
        wire += [(k.encode(), v.encode()) for k, v in headers.items()]
        request = httpcore.Request(
            route.method.encode(),
            httpcore.URL(
                scheme=b"http", host=address.host.encode(), port=address.port, target=path.encode()
            ),
            headers=wire,
            content=body,
            extensions={"timeout": dict.fromkeys(_TIMEOUTS, timeout)},
        )
        try:
            resp = await http.handle_async_request(request)
            try:
                content = await resp.aread()
            finally:
                await resp.aclose()
        except (
            httpcore.TimeoutException,
            httpcore.NetworkError,
            httpcore.ProtocolError,
            httpcore.UnsupportedProtocol,
        ) as exc:
            raise OSError(str(exc) or type(exc).__name__) from exc
        try:
            return resp.status, orjson.loads(content)
        except orjson.JSONDecodeError:
            return resp.status, content[:200].decode("utf-8", "replace")


def _signature_refused(pod_id: str, data: Any) -> Unavailable:
    """A pod that refused this pod's signature cannot be told anything: to the caller it
    is unavailable (503 ``pod_unavailable``, its reason as ``peerCode``), never a 401,
    which would tell an operator whose own credentials are fine that they are not."""
    info: dict[str, Any] = data if isinstance(data, dict) else {}
    peer_code = str(info.get("code") or "unauthorized")
    detail = str(info.get("detail") or data)[:200]
    return Unavailable(
        f"pod {pod_id!r} refused this pod's signature ({peer_code}: {detail}); the two "
        "clocks must agree within 30 s and the cluster secret must be the same",
        code="pod_unavailable",
        peerCode=peer_code,
    )


def _refusal(pod_id: str, status: int, data: Any) -> SardeenzError:
    """A pod's refusal as the same error here: status, code and extras kept."""
    if not isinstance(data, dict):
        data = {"detail": str(data)[:200] or status, "code": "bad_peer_answer"}
    info: dict[str, Any] = data
    detail = info.get("detail") or status
    code = info.get("code") or "peer_error"
    extra = {k: v for k, v in info.items() if k not in ("detail", "code")}
    err = SardeenzError(f"pod {pod_id}: {detail}", code=str(code), **extra)
    err.status = status
    return err
