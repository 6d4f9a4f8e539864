"""One TLS context for every httpx client a test process makes, the official openai
client's included.

httpx builds a client's TLS context when the client is made, whatever the URL's scheme:
loading the CA bundle costs about 20 ms of CPU. The suite makes clients by the thousand,
most of them in polling loops (an ``httpx.get`` each turn), and py-spy found that a tenth
of the pytest workers' CPU. The controller shares one context for the same reason
(``sardeenz.tls.client_tls``); ``share_default_context`` makes that context the default
``verify`` of httpx's clients and of its request functions in this process, and of
``httpx2``'s, the fork of httpx that the ``openai`` package builds its clients with (an
``OpenAI()`` cost 31 ms of CPU, most of it that bundle; many tests make one per request,
and the suite's traffic loops one per stream). A client given
a ``verify`` of its own (a test's CA, ``False``) keeps it, and the shared context is the one
httpx would have built (the certifi bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import httpx2

from sardeenz.tls import client_tls


def _defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    target = getattr(fn, "__wrapped__", fn)  # httpx.stream is a @contextmanager
    defaults: dict[str, Any] | None = target.__kwdefaults__
    if defaults is None or "verify" not in defaults:
        raise RuntimeError(f"httpx changed: {fn.__qualname__} has no keyword-only 'verify'")
    return defaults


def share_default_context() -> None:
    """Make ``client_tls()`` the default ``verify`` of httpx and httpx2 in this process
    (idempotent)."""
    shared = client_tls()
    api: list[Callable[..., Any]] = [
        fn
        for module in (httpx, httpx2)
        for fn in (
            module.Client.__init__,
            module.AsyncClient.__init__,
            module.request,
            module.stream,
            module.get,
            module.options,
            module.head,
            module.post,
            module.put,
            module.patch,
            module.delete,
        )
    ]
    for fn in api:
        defaults = _defaults(fn)
        if defaults["verify"] is not True and defaults["verify"] is not shared:
            raise RuntimeError(f"{fn.__qualname__}: default verify is {defaults['verify']!r}")
        defaults["verify"] = shared
