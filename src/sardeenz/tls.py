"""One TLS context per process for the controller's HTTP clients.

Building an ``httpx`` client without one loads the CA bundle, about 20 ms of CPU; a
server start built two or three (the supervisor's, the external servers' probe, the
cluster transport's), a few per cent of the start, and the catalog's warm-up, the
adapter calls and the instance relay one more each when first used; all of these take
their context from here (the sign-in clients do not yet: OIDC discovery, the OpenShift
token exchange and the TokenReview client build their own). A context is safe to share
between clients; the two kept here are the ones httpx would build itself, with and without
the ``SSL_CERT_FILE``/``SSL_CERT_DIR`` environment (a client's ``trust_env``).
"""

from __future__ import annotations

import functools
import ssl

import httpx


def client_tls(trust_env: bool = True) -> ssl.SSLContext:
    """The context ``httpx.AsyncClient(trust_env=trust_env)`` would build for itself."""
    return _context(trust_env)  # one cache key per value, however the caller spells it


@functools.cache
def _context(trust_env: bool) -> ssl.SSLContext:
    return httpx.create_ssl_context(trust_env=trust_env)
