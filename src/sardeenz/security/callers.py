"""Bearer-token callers of ``/v1``: a JWT (or a Kubernetes token) in place of an API key.

With ``SARDEENZ_V1_BEARER_AUTH``, ``/v1`` accepts the tokens ``/api`` accepts
(security/auth.py ``Authenticator``: HS256, JWKS, OIDC, and with
``SARDEENZ_TOKEN_REVIEW`` the API server's TokenReview). A caller is turned into the
same ``ApiKey`` the proxy knows for a key, so nothing downstream changes:

- ``id`` (the request log, usage, the ``key`` label of metrics): ``jwt:<subject>``;
- ``models``: the token's models claim (``SARDEENZ_JWT_MODELS_CLAIM``), else all;
- ``member``: the tenant member it is admitted as: ``sub:<subject>`` when a tenant lists
  its subject, else ``group:<g>`` for the first of its groups a tenant lists
  (tenancy/admission.py registers both kinds of member).

Why a cache here: verifying a token costs a signature check (tens of microseconds),
a JWKS fetch or a TokenReview round trip; an inference client sends the same token for
many requests. A verified token is remembered by its SHA-256 for
``SARDEENZ_V1_TOKEN_CACHE_SECONDS`` (never past its ``exp``), in a bounded LRU, so the
fast lane and the express path find it from memory (``cached``, synchronous) and only a
first sight of a token goes the slower way (``authenticate``, before any body byte is
read). The tenant member is resolved at each request from the remembered subject and
groups, so a tenant change applies at once, as it does for keys.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Final

from sardeenz.config import ConfigError, Settings
from sardeenz.security.auth import ApiKey, Authenticator, Forbidden, Principal, Role

_mono = time.monotonic
_wall = time.time

CACHE_SIZE: Final = 4096
"""Tokens remembered for ``/v1``; the least recently used go first."""

MemberOf = Callable[[str, Iterable[str]], str | None]
"""(subject, groups) -> the tenant member (``sub:...``/``group:...``), or None."""


class BearerCallers:
    """Identifies ``/v1`` callers by bearer token; see module doc."""

    def __init__(self, auth: Authenticator, settings: Settings) -> None:
        if not auth.enabled:
            raise ConfigError(
                "SARDEENZ_V1_BEARER_AUTH needs a token source: SARDEENZ_JWT_SECRET, "
                "SARDEENZ_JWT_JWKS_URL, SARDEENZ_OIDC_ISSUER or SARDEENZ_TOKEN_REVIEW"
            )
        self._auth = auth
        self._role = settings.v1_role
        self._ttl = settings.v1_token_cache_seconds
        self._cache: OrderedDict[bytes, tuple[float, Principal]] = OrderedDict()
        self.member_of: MemberOf = lambda subject, groups: None
        """Set by the wiring to the tenants' lookup (``Admission.member_of_principal``)."""

    def cached(self, authorization: bytes) -> ApiKey | None:
        """The caller of a token verified recently, from memory alone (no await)."""
        digest = hashlib.sha256(authorization[7:].strip()).digest()
        held = self._cache.get(digest)
        if held is None:
            return None
        if _mono() >= held[0]:
            del self._cache[digest]
            return None
        return self._caller(held[1])

    async def authenticate(self, authorization: bytes) -> ApiKey:
        """Verify a token not in memory: ``AuthError`` (401), ``Forbidden`` (403, no
        ``SARDEENZ_V1_ROLE``) or ``ReviewUnavailable`` (503) when it cannot be."""
        principal = await self._auth.authenticate(authorization.decode("latin-1"))
        if self._role is not None and not (
            self._role in principal.roles or Role.ADMIN in principal.roles
        ):
            raise Forbidden(f"role {self._role!r} required on /v1", code="forbidden")
        ttl = self._ttl
        if principal.expires is not None:
            ttl = min(ttl, principal.expires - _wall())
        if ttl > 0:
            digest = hashlib.sha256(authorization[7:].strip()).digest()
            cache = self._cache
            cache[digest] = (_mono() + ttl, principal)
            cache.move_to_end(digest)
            while len(cache) > CACHE_SIZE:
                cache.popitem(last=False)
        return self._caller(principal)

    def _caller(self, principal: Principal) -> ApiKey:
        member = self.member_of(principal.subject, principal.groups)
        return ApiKey(
            id=f"jwt:{principal.subject}"[:64],
            models=principal.models,
            member=member or f"sub:{principal.subject}",
        )
