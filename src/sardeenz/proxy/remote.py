"""Requests that do not go to an engine of this node: another pod's proxy, an external server.

Why a module of its own: both are the proxy's business only at the edges (the
relay sends the bytes the same way), and each changes what is sent. A request
for another pod (cluster mode) goes to that pod's proxy, once, with the header
lines ``RemoteHeaders`` gives (a hop marker and an HMAC; cluster/forwarding.py
implements it); a request that already made its hop is served here or refused.
A request for an external catalog server goes with that server's path prefix,
its API key instead of the client's, its name for the model, and a ``Via``
naming this server process: a request that comes back with it and would go to
an external server again is in a loop, and is answered 508 ``forwarding_loop``.

``outgoing`` is the one choice between the three (a local engine, another pod,
an external server): the express path (express.py) and the handler
(asgirelay.py) both call it, so they cannot send a request differently. A
request for a local engine pays one branch for it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Final

import orjson

from sardeenz.proxy.intake import with_model
from sardeenz.proxy.routing import Endpoint, ExternalTarget
from sardeenz.proxy.wire import ErrorReply, header, replace_authorization

NODE_MARK: Final = b"sardeenz-" + secrets.token_hex(8).encode()
"""This server process in a ``Via`` header (RFC 9110 7.6.3): random, so that two
servers on one host, or a restarted one, never take each other's requests for their own."""
_VIA_LINE: Final = b"via: 1.1 " + NODE_MARK + b"\r\n"


def forwarded_by_us(headers: list[tuple[bytes, bytes]]) -> bool:
    """Did this server already send this request to an external server?

    Then sending it to an external server again is a loop: an entry whose url leads
    back here, directly or through other servers that keep ``Via`` (another
    Sardeenz does). Before this check one such request recursed into 1,000+ nested
    requests and 1,046 open files before failing (issue 23).
    """
    return any(name == b"via" and NODE_MARK in value for name, value in headers)


def forwarding_loop(model: str | None) -> ErrorReply:
    """The answer to a request that would go round a loop of external servers."""
    return ErrorReply(
        508,
        f"Model {model!r} is served by an external server that sends requests back to "
        "this server (a forwarding loop): check the catalog entry's url",
        "invalid_request_error",
        "forwarding_loop",
    )


RemoteHeaders = Callable[[list[tuple[bytes, bytes]], bytes, bytes, bytes, str], bytes | None]
"""Called with the client's headers, method, target, body and the receiving pod's id: the
extra header lines that send the request to that pod's proxy, or None when it must not
go there."""


def no_local_instance(model: str | None) -> ErrorReply:
    """The answer to a request that made its hop here and has no instance on this pod."""
    return ErrorReply(
        503,
        f"Model {model!r} has no instance on this pod and the request was already "
        "forwarded once by another pod",
        "service_unavailable_error",
        "no_healthy_endpoint",
    )


def for_external(
    ext: ExternalTarget, target: bytes, headers: bytes, body: bytes
) -> tuple[bytes, bytes, bytes]:
    """(target, headers, body) for a catalog server we do not run: its path prefix,
    its API key in place of the client's, and its name for the model."""
    if ext.model is not None:
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            payload = json.loads(body)  # parsed once already: the stdlib accepted it
        body = with_model(payload, ext.model)
    return ext.path_prefix + target, external_headers(headers, ext), body


def external_headers(block: bytes, ext: ExternalTarget) -> bytes:
    """A request header block as it goes to an external server: its key, our ``Via``."""
    return replace_authorization(block, ext.auth) + _VIA_LINE


def outgoing(
    ep: Endpoint,
    hook: RemoteHeaders | None,
    client_headers: list[tuple[bytes, bytes]],
    method: bytes,
    target: bytes,
    block: bytes,
    body: bytes,
) -> tuple[bytes, bytes, bytes] | None:
    """(target, header block, body) that send this request to ``ep``.

    ``block``: the request's header lines as relayed to an engine. None when ``ep``
    is another pod's proxy and the request must not go there (it already made its
    hop, or this node is not in a cluster): the caller serves it locally or refuses.
    """
    ext = ep.external
    if ext is not None:
        return for_external(ext, target, block, body)
    if ep.local:
        return target, block, body
    extra = (
        hook(client_headers, method, target, body, ep.pod_id or "") if hook is not None else None
    )
    if extra is None:
        return None
    return target, block + extra, body


def to_another_pod(
    ep: Endpoint, hop: bytes | None, client_headers: list[tuple[bytes, bytes]]
) -> bool:
    """Will this request be sent to another pod's proxy? That pod admits its tenant
    (tenancy/admission.py: the request carries the client's key there), so this one
    does not: a request is admitted once, by the pod that serves it."""
    return not ep.local and ep.external is None and entered_here(hop, client_headers)


def entered_here(hop: bytes | None, client_headers: list[tuple[bytes, bytes]]) -> bool:
    """Did the client send this request to this pod (not another pod, forwarding it)?

    ``hop``: the cluster's hop header name (None: a single node, where every request
    entered here). The request log records a request on the pod it entered only.
    """
    return hop is None or header(client_headers, hop) is None
