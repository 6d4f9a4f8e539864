"""One TLS context for every httpx client a test process makes.

httpx builds a client's TLS context when the client is made, whatever the URL's scheme:
loading the CA bundle costs about 20 ms of CPU. The suite makes clients by the thousand,
most of them in polling loops (an ``httpx.get`` each turn), and py-spy found that a tenth
of the pytest workers' CPU. The controller shares one context for the same reason
(``sardeenz.tls.client_tls``); ``share_default_context`` makes that context the default
``verify`` of httpx's clients and of its request functions in this process. A client given
a ``verify`` of its own (a test's CA, ``False``) keeps it, and the shared context is the one
httpx would have built (the certifi bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from sardeenz.tls import client_tls


def _defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    target = getattr(fn, "__wrapped__", fn)  # httpx.stream is a @contextmanager
    defaults: dict[str, Any] | None = target.__kwdefaults__
    if defaults is None or "verify" not in defaults:
        raise RuntimeError(f"httpx changed: {fn.__qualname__} has no keyword-only 'verify'")
    return defaults


def share_default_context() -> None:
    """Make ``client_tls()`` the default ``verify`` of httpx in this process (idempotent)."""
    shared = client_tls()
    api: list[Callable[..., Any]] = [
        httpx.Client.__init__,
        httpx.AsyncClient.__init__,
        httpx.request,
        httpx.stream,
        httpx.get,
        httpx.options,
        httpx.head,
        httpx.post,
        httpx.put,
        httpx.patch,
        httpx.delete,
    ]
    for fn in api:
        defaults = _defaults(fn)
        if defaults["verify"] is not True and defaults["verify"] is not shared:
            raise RuntimeError(f"{fn.__qualname__}: default verify is {defaults['verify']!r}")
        defaults["verify"] = shared
