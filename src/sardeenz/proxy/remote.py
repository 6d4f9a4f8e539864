"""Requests that do not go to an engine of this node: another pod's proxy, an external server.

Why a module of its own: both are the proxy's business only at the edges (the
relay sends the bytes the same way), and each changes what is sent. A request
for another pod (cluster mode) goes to that pod's proxy, once, with the header
lines ``RemoteHeaders`` gives (a hop marker and an HMAC; cluster/forwarding.py
implements it); a request that already made its hop is served here or refused.
A request for an external catalog server goes with that server's path prefix,
its API key instead of the client's, and its name for the model.

The relay (asgirelay.py) calls these only for such endpoints, so a request for
a local engine pays nothing for them.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import orjson

from sardeenz.proxy.intake import with_model
from sardeenz.proxy.routing import ExternalTarget
from sardeenz.proxy.wire import ErrorReply, replace_authorization

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
    return ext.path_prefix + target, replace_authorization(headers, ext.auth), body
