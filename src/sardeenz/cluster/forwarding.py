"""Both ends of a /v1 request that one pod forwards to another.

Sending pod (the proxy's remote branch): the request goes to the serving
pod's own proxy, as the client sent it, plus ``X-Sardeenz-Hop`` (our pod id)
and the HMAC headers over ``POST\\nPATH\\nTIMESTAMP\\nTARGET\\nSOURCE\\nBODY``,
TARGET being the serving pod's id (so no other pod accepts it) and SOURCE ours. A
request that already carries the hop header is never forwarded again (one hop at most).

Receiving pod (the gateway, only when the client's API key check failed):
a request whose cluster signature is valid was authenticated where it
entered the cluster, so it is served without the client's key; a replay, a bad
signature, or a hop header that is not the signing pod (``X-Cluster-Source``)
gets the same 401 as a bad key. The signature's headers are
checked before the body is read, and the body counts against the node-wide
budget of unverified bytes until the signature is checked (security/unverified.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sardeenz.asgi import Message, Receive, Scope, Send, header
from sardeenz.cluster.identity import Identity
from sardeenz.cluster.transport.routes import HOP_HEADER
from sardeenz.cluster.transport.server import BodyError, read_verified
from sardeenz.proxy.remote import RemoteHeaders
from sardeenz.proxy.wire import INVALID_API_KEY, openai_error, send_json
from sardeenz.security.cluster_hmac import ANY_TARGET, ClusterAuthError, Signer, Verifier
from sardeenz.security.unverified import UnverifiedBodies

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]
_REFUSED = [(b"connection", b"close")]
"""A refusal may leave the body unread: the connection is not reused."""


def remote_headers(identity: Identity, signer: Signer) -> RemoteHeaders:
    """The proxy's hook: extra header lines for a remote endpoint, None if it must not go."""
    hop = HOP_HEADER + b": " + identity.pod_id.encode("latin-1", "replace") + b"\r\n"

    def build(
        headers: list[tuple[bytes, bytes]], method: bytes, target: bytes, body: bytes, pod: str
    ) -> bytes | None:
        if header(headers, HOP_HEADER) is not None or not pod:
            return None  # forwarded to us already (never a second hop), or no pod to sign for
        block = signer.header_block(
            method.decode("latin-1"), target.decode("latin-1"), body, target=pod
        )
        return hop + block

    return build


def trusted_forward(
    verifier: Verifier, unverified: UnverifiedBodies, max_body_bytes: int
) -> Callable[[Scope, Receive, Send, Handler], Awaitable[None]]:
    """The gateway's hook for a /v1 request with a cluster signature and no valid API key."""

    async def run(scope: Scope, receive: Receive, send: Send, handler: Handler) -> None:
        try:
            body, checked = await read_verified(
                verifier, scope, receive, unverified, max_body_bytes
            )
            if checked.target == ANY_TARGET:  # only a ping may be for anyone
                raise ClusterAuthError("a forwarded request must name this pod", "wrong_target")
            hop = header(scope["headers"], HOP_HEADER)
            if checked.source is not None and hop != checked.source.encode("latin-1"):
                # Signed by one pod, presented as forwarded by another (or not as forwarded
                # at all, so it could be forwarded again): not what the sender signed.
                raise ClusterAuthError("X-Sardeenz-Hop is not the signing pod", "wrong_source")
        except ClusterAuthError:
            await send_json(
                send, 401, INVALID_API_KEY, [*_REFUSED, (b"www-authenticate", b"Bearer")]
            )
            return
        except BodyError as exc:
            if exc.status != 499:
                reply = openai_error(exc.detail, "invalid_request_error", exc.code)
                await send_json(send, exc.status, reply, _REFUSED)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await handler(scope, replay, send)

    return run
