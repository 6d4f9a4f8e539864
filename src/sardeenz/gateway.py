"""The node's ASGI entry point: a path switch in front of FastAPI.

``/v1/*`` is the hot path: it goes straight to the inference proxy, checked
only against the optional inference API keys (and, with ``SARDEENZ_V1_BEARER_AUTH``,
bearer tokens: remembered ones like keys, a new one verified here first,
security/callers.py); no middleware stack, no
dependency injection, no per-request logging. ``/api/direct/*`` goes to the
same proxy after an admin check. ``/metrics`` is rendered here. Everything
else (admin API, docs, dashboard) goes to FastAPI, with a body-size limit on
``/api`` so an admin endpoint cannot be fed an unbounded body either.

No body is read before its sender is authenticated: ``/v1`` keys and ``/api``
tokens are checked from the headers first (the fast lane asks ``_admit_v1``
before it buffers a body; the one public POST, the dashboard's OAuth code exchange,
takes only a small declared body), a refusal closes the connection without reading
the body, and the cluster's signed requests, which can only be verified with
their body, are read under one node-wide budget (security/unverified.py).

``sardeenz serve`` puts FastAPI behind it; the proxy without a supervisor
(standalone.py) puts a bare 404 app there and no audit trail, so both
dispatch with this one class.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

from sardeenz.asgi import ASGIApp, Message, Receive, Scope, Send
from sardeenz.config import Settings
from sardeenz.errors import PayloadTooLarge, SardeenzError
from sardeenz.proxy.express import ExpressRelay
from sardeenz.proxy.fastlane import HAND_OVER, Refusal, fast_lane_protocol
from sardeenz.proxy.forwarder import InferenceProxy
from sardeenz.proxy.headguard import HeadLimits, guarded_protocol
from sardeenz.proxy.metrics import render_metrics
from sardeenz.proxy.wire import (
    API_KEY_SCOPE,
    INVALID_API_KEY,
    api_error,
    ascii_int,
    header,
    openai_error,
    send_json,
)
from sardeenz.safetext import first_unsafe
from sardeenz.security.audit import AuditTrail
from sardeenz.security.auth import ApiKeys, Authenticator, Role
from sardeenz.security.policy import PUBLIC_POST_MAX_BODY, PUBLIC_POSTS, WWW_AUTHENTICATE
from sardeenz.security.unverified import UnverifiedBodies
from sardeenz.telemetry.admin import STATS as ADMIN_API

TrustedForward = Callable[[Scope, Receive, Send, ASGIApp], Awaitable[None]]


class Gateway:
    def __init__(
        self,
        api: ASGIApp,
        proxy: InferenceProxy,
        auth: Authenticator,
        api_keys: ApiKeys,
        settings: Settings,
        audit: AuditTrail | None,
        *,
        services: Any = None,
        internal: ASGIApp | None = None,
        trusted_forward: TrustedForward | None = None,
        redirect: Callable[[Scope, Send], Awaitable[bool]] | None = None,
        before_scrape: Callable[[], Awaitable[None]] | None = None,
        unverified: UnverifiedBodies | None = None,
    ) -> None:
        self._api = api
        self._proxy = proxy
        self._auth = auth
        self._keys = api_keys
        self._api_limit = settings.api_max_body_bytes
        self._metrics_public = settings.metrics_public
        self.unverified = unverified or UnverifiedBodies(settings.unverified_body_bytes)
        """Bodies read before their signature is checked (cluster mode), all together: the
        same budget the ``/internal`` router and the trusted forward read under."""
        # No audit trail: the standalone proxy, which has no database.
        self._admin = audit.wrap(self._limited) if audit is not None else self._limited
        self._admin = ADMIN_API.wrap(self._admin)  # count + latency by route template
        self._direct = audit.wrap(self._direct_proxy) if audit is not None else self._direct_proxy
        self.api: Any = api  # the FastAPI app (routes, OpenAPI) for tests and tools
        self.services = services
        # Cluster mode only (cluster/wiring.py); None on a single node.
        self.internal = internal
        """``/internal/*``: the HMAC-guarded pod-to-pod API."""
        self.trusted_forward = trusted_forward
        """A /v1 request another pod forwarded (cluster signature instead of an API key)."""
        self.redirect = redirect
        """A follower sends admin and dashboard requests to the leader (True: answered)."""
        self.before_scrape = before_scrape
        """Refreshes what ``/metrics`` reads at scrape time (GPU and instance memory)."""

    def http_protocol(self, settings: Settings) -> type[asyncio.Protocol]:
        """uvicorn's ``http=``: the fast lane with the express path in front of this app.

        ``SARDEENZ_PROXY_FAST_LANE=false`` gives uvicorn's own protocol instead,
        with the same request-head limits (proxy/headguard.py) as the lane.
        """
        limits = HeadLimits.from_settings(settings)
        if not settings.proxy_fast_lane:
            return guarded_protocol(limits)
        return fast_lane_protocol(
            self,
            max_body_bytes=settings.proxy_max_body_bytes,
            express=ExpressRelay(self._proxy, self._keys),
            limits=limits,
            admission=self._admit_v1,
        )

    def _admit_v1(
        self, headers: list[tuple[bytes, bytes]]
    ) -> Refusal | Literal["hand over"] | None:
        """The fast lane asks before it buffers a ``/v1`` body: the key, from the headers.

        A request another pod forwarded (a cluster signature instead of a key) goes to
        uvicorn's protocol, where ``trusted_forward`` reads it under the budget of
        unverified bytes.
        """
        keys = self._keys
        if not keys.enabled:
            return None
        authorization = header(headers, b"authorization")
        if keys.identify(authorization):
            return None
        if self.trusted_forward is not None and header(headers, b"x-cluster-signature"):
            return HAND_OVER
        if keys.tokens is not None and authorization:
            # A bearer token seen for the first time: verified (perhaps by the API server)
            # in ``__call__``, before uvicorn's protocol reads more than its first 64 KiB.
            return HAND_OVER
        return Refusal(401, INVALID_API_KEY, ((b"www-authenticate", b"Bearer"),))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._api(scope, receive, send)  # lifespan (and nothing else)
            return
        path: str = scope["path"]
        if path.startswith("/v1/"):
            keys = self._keys
            authorization = header(scope["headers"], b"authorization") if keys.enabled else None
            key = keys.identify(authorization) if keys.enabled else None
            if key is not None:
                scope[API_KEY_SCOPE] = key  # the proxy applies its model scope
            elif keys.enabled:
                if self.trusted_forward is not None and header(
                    scope["headers"], b"x-cluster-signature"
                ):
                    await self.trusted_forward(scope, receive, send, self._proxy.handle_v1)
                    return
                tokens = keys.tokens
                if tokens is None or not authorization or authorization[:7].lower() != b"bearer ":
                    await send_json(send, 401, INVALID_API_KEY, [_WWW_BEARER, _CLOSE])
                    return
                try:
                    key = await tokens.authenticate(authorization)
                except SardeenzError as exc:
                    await _v1_refusal(send, exc)
                    return
                scope[API_KEY_SCOPE] = key
            await self._proxy.handle_v1(scope, receive, send)
        elif (bad := first_unsafe(path)) is not None:
            # No route, file or name here has one, and a NUL reached the dashboard's file
            # lookup as a 500 ("embedded null byte"): refused before anything looks it up.
            await _api_error(
                send, 400, f"the request path contains a control character ({bad})", "invalid_path"
            )
        elif path.startswith("/api/direct/"):
            await self._direct(scope, receive, send)
        elif path == "/metrics" or path == "/api/v1/metrics":
            guarded = path != "/metrics" or not self._metrics_public
            if guarded and not await self._authorize(scope, send, Role.READONLY):
                return
            if self.before_scrape is not None:
                await self.before_scrape()
            self._proxy.requests.drain()  # the usage counters, current
            body, content_type = render_metrics()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", content_type.encode()),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
        elif path.startswith("/api/"):
            if self.redirect is None or not await self.redirect(scope, send):
                await self._admin(scope, receive, send)
        elif path.startswith("/internal/"):
            if self.internal is not None:
                await self.internal(scope, receive, send)
            else:  # never the dashboard's catch-all: a peer must see "no cluster here"
                await _api_error(send, 404, "this node is not in a cluster", "not_clustered")
        elif self.redirect is None or not await self.redirect(scope, send):
            await self._api(scope, receive, send)

    async def _direct_proxy(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not await self._authorize(scope, send, Role.ADMIN):
            return
        port_text, _, rest = scope["path"][len("/api/direct/") :].partition("/")
        port = ascii_int(port_text)
        if port is None or not 0 < port < 65536:
            await send_json(send, 404, api_error("not a managed engine port", "unknown_port"))
            return
        await self._proxy.handle_direct(scope, receive, send, port, rest)

    async def _authorize(self, scope: Scope, send: Send, role: Role) -> bool:
        """Authenticate from the headers, before any body byte is read.

        A refusal closes the connection (the body, if any, is never read).
        """
        auth = header(scope["headers"], b"authorization")
        try:
            principal = await self._auth.authenticate(auth.decode("latin-1") if auth else None)
        except SardeenzError as exc:
            retry_after = getattr(exc, "retry_after", None)
            await _api_error(
                send,
                exc.status,
                exc.message,
                exc.code,
                close=True,
                retry_after=retry_after if isinstance(retry_after, int) else None,
            )
            return False
        scope.setdefault("state", {})["principal"] = principal  # for the audit trail
        if not principal.allows(role):
            await _api_error(send, 403, f"role {role.value!r} required", "forbidden", close=True)
            return False
        return True

    async def _limited(self, scope: Scope, receive: Receive, send: Send) -> None:
        """FastAPI with a request-body limit: declared length first, then counted.

        A request with a body is authenticated here first: FastAPI reads a route's
        body before its dependencies (the role check) run, so without this an
        anonymous client could make the node read and hold any body up to the limit.
        Every ``/api`` route that takes a body requires a role (security/policy.py).
        """
        headers = scope["headers"]
        declared = header(headers, b"content-length")
        length = ascii_int(declared) if declared is not None else None
        if length is not None and length > self._api_limit:
            await _api_error(send, 413, self._too_large_message(), "payload_too_large", close=True)
            return
        chunked = header(headers, b"transfer-encoding") is not None
        has_body = bool(length) or chunked
        sign_in = (  # how one gets a token: a small declared body, read without one
            scope["path"] in PUBLIC_POSTS
            and not chunked
            and length is not None
            and length <= PUBLIC_POST_MAX_BODY
        )
        if has_body and not sign_in and not await self._authorize(scope, send, Role.READONLY):
            return
        seen = 0
        started = False
        over = False

        async def counting_receive() -> Message:
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self._api_limit:
                    over = True
                    raise PayloadTooLarge(self._too_large_message())
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if over:
                # FastAPI turns an error while reading a body into its own 400
                # ("error parsing the body"): a counted (chunked) body over the
                # limit must be the same 413 as a declared one, so that answer
                # is replaced here, whatever the route made of the error.
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await _api_error(send, 413, self._too_large_message(), "payload_too_large")
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self._api(scope, counting_receive, tracking_send)
        except PayloadTooLarge:
            if not started:
                await _api_error(send, 413, self._too_large_message(), "payload_too_large")

    def _too_large_message(self) -> str:
        return f"request body larger than {self._api_limit} bytes (SARDEENZ_API_MAX_BODY_BYTES)"


_CLOSE: Final = (b"connection", b"close")
_WWW_BEARER: Final = (b"www-authenticate", b"Bearer")


async def _v1_refusal(send: Send, exc: SardeenzError) -> None:
    """A bearer token refused on ``/v1``, in OpenAI's shape; the body is left unread."""
    extra = [_CLOSE]
    if exc.status == 401:
        extra.append(_WWW_BEARER)
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, int):
        extra.append((b"retry-after", b"%d" % retry_after))
    kind = "invalid_request_error" if exc.status < 500 else "api_error"
    await send_json(send, exc.status, openai_error(exc.message, kind, exc.code), extra)


async def _api_error(
    send: Send,
    status: int,
    detail: str,
    code: str,
    *,
    close: bool = False,
    retry_after: int | None = None,
) -> None:
    """``{detail, code}``; ``close`` when the request's body is left unread."""
    extra = [(b"www-authenticate", WWW_AUTHENTICATE.encode())] if status == 401 else []
    if retry_after is not None:
        extra.append((b"retry-after", b"%d" % retry_after))
    if close:
        extra.append(_CLOSE)
    await send_json(send, status, api_error(detail, code), extra)
