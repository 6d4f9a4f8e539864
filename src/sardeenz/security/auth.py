"""Who is calling: bearer JWTs for the admin API, API keys for inference.

Admin API (``/api/*``): OAuth 2.0 bearer tokens verified with PyJWT, either
HS256 with a shared secret or RS256/ES256 with keys from a JWKS URL (given, or
found through an OIDC issuer's discovery document). Roles come from a claim
(``roles``, ``groups`` or a dotted path such as ``realm_access.roles``). With
no JWT setting, auth is off: the server binds loopback only and every caller
is a local admin.

Inference (``/v1/*``): gateway auth by default (the seed), optionally API keys
from a setting or a file of SHA-256 hashes, compared in constant time.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from sardeenz.config import ConfigError, Settings
from sardeenz.errors import NotFound, SardeenzError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from jwt import PyJWKClient

    from sardeenz.security.openshift_oauth import OpenShiftOAuth
    from sardeenz.security.tokenreview import TokenReviewer

log = logging.getLogger(__name__)

ASYMMETRIC_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]


class Role(StrEnum):
    ADMIN = "admin"
    READONLY = "admin-readonly"


class AuthError(SardeenzError):
    """401: no usable credentials. ``code`` says why (stable)."""

    status = 401
    code = "unauthorized"


class Forbidden(SardeenzError):
    status = 403
    code = "forbidden"


@dataclass(frozen=True, slots=True)
class Principal:
    subject: str
    roles: frozenset[str]
    authenticated: bool
    groups: frozenset[str] = frozenset()
    """What maps a caller to its tenant by group (the groups claim, or the token review's)."""
    expires: float | None = None
    """The token's ``exp`` (epoch seconds), when it has one: no cache keeps it longer."""
    models: frozenset[str] | None = None
    """The served models its token may use on ``/v1`` (a models claim); None: all."""

    def allows(self, needed: Role) -> bool:
        if Role.ADMIN in self.roles:
            return True
        return needed == Role.READONLY and Role.READONLY in self.roles

    @property
    def role(self) -> str | None:
        if Role.ADMIN in self.roles:
            return Role.ADMIN.value
        if Role.READONLY in self.roles:
            return Role.READONLY.value
        return None


LOCAL_ADMIN = Principal(subject="local", roles=frozenset({Role.ADMIN.value}), authenticated=False)


def claim_at(claims: dict[str, Any], path: str) -> Any:
    """``realm_access.roles`` -> claims["realm_access"]["roles"]: one meaning per name.

    Dots separate levels, and a top-level claim literally named ``realm_access.roles``
    is never read (it used to grant the roles too: two claims, either one enough).
    A name with ``://`` is a namespaced claim (``https://example.com/roles``, as
    Auth0 writes them): read as one literal top-level key, never as a path.
    """
    if "://" in path:
        return claims.get(path)
    node: Any = claims
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def roles_from(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(value.replace(",", " ").split())
    if isinstance(value, list | tuple):
        return frozenset(str(v) for v in value)
    return frozenset()


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class Authenticator:
    """Verifies admin bearer tokens. Construct once; ``start()`` before use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.enabled = settings.auth_enabled
        self._secret = settings.jwt_secret.get_secret_value() if settings.jwt_secret else None
        self._jwks_url = settings.jwt_jwks_url
        self._issuer = settings.jwt_issuer or settings.oidc_issuer
        self._jwks: PyJWKClient | None = None
        if self.enabled:
            # PyJWT, with the cryptography it loads, is imported only where a token can
            # arrive (a tenth of a server start's CPU otherwise); here, at start, so a
            # broken install stops the start instead of failing the first request.
            import jwt  # noqa: F401
        self.reviewer: TokenReviewer | None = None
        """Kubernetes TokenReview for the tokens no JWT setting verifies (tokenreview.py)."""
        if settings.token_review:
            from sardeenz.security.tokenreview import TokenReviewer

            self.reviewer = TokenReviewer(settings)
        self.authorization_endpoint: str | None = None
        self.token_endpoint: str | None = None
        self.openshift: OpenShiftOAuth | None = None
        """The dashboard's sign-in through OpenShift's OAuth server (openshift_oauth.py)."""
        if settings.openshift_oauth_url:
            from sardeenz.security.openshift_oauth import OpenShiftOAuth

            self.openshift = OpenShiftOAuth(settings)

    def openshift_sign_in(self) -> tuple[str, str, str, str] | None:
        """The dashboard's OpenShift sign-in, when configured: (OAuth server URL, client
        id, authorization endpoint, scope); None when it is off."""
        oauth = self.openshift
        if oauth is None:
            return None
        return oauth.url, oauth.client_id, oauth.authorization_endpoint, oauth.scope

    async def exchange_openshift_code(self, form: Mapping[str, str]) -> dict[str, Any]:
        """The dashboard's authorization code exchanged at OpenShift's OAuth server with
        the OAuthClient's secret (the browser never holds it)."""
        if self.openshift is None:
            raise NotFound("OpenShift sign-in is not configured", code="openshift_oauth_off")
        return await self.openshift.exchange(form)

    async def start(self) -> None:
        """Resolve the OIDC discovery document (jwks_uri, endpoints for the dashboard)."""
        if self.reviewer is not None:
            await self.reviewer.start()
        if self.settings.oidc_issuer:
            url = self.settings.oidc_issuer.rstrip("/") + "/.well-known/openid-configuration"
            try:
                async with httpx.AsyncClient(timeout=10) as client:
                    doc = (await client.get(url)).raise_for_status().json()
                self._jwks_url = self._jwks_url or doc.get("jwks_uri")
                self.authorization_endpoint = doc.get("authorization_endpoint")
                self.token_endpoint = doc.get("token_endpoint")
            except (httpx.HTTPError, ValueError) as exc:
                # Keep running: tokens fail with a clear code until the issuer answers.
                log.error("OIDC discovery at %s failed: %s", url, exc)
        if self._jwks_url:
            import jwt

            try:
                self._jwks = jwt.PyJWKClient(
                    self._jwks_url, cache_keys=True, lifespan=300, timeout=10
                )
            except jwt.PyJWKClientError as exc:
                # A discovery document's jwks_uri (a configured URL is checked in Settings):
                # tokens fail with a clear code, as when the issuer does not answer.
                log.error("JWKS URL %r cannot be used: %s", self._jwks_url, exc)

    async def authenticate(self, authorization: str | None) -> Principal:
        if not self.enabled:
            return LOCAL_ADMIN
        token = bearer_token(authorization)
        if token is None:
            raise AuthError("a bearer token is required", code="missing_token")
        if self.reviewer is not None and not self._verifies(token):
            return await self.reviewer.review(token)
        claims = await self._verify(token)
        subject = str(claims.get("preferred_username") or claims.get("sub") or "unknown")
        roles = roles_from(claim_at(claims, self.settings.jwt_roles_claim))
        groups = roles_from(claim_at(claims, self.settings.jwt_groups_claim))
        exp = claims.get("exp")
        return Principal(
            subject=subject,
            roles=roles,
            authenticated=True,
            groups=groups,
            expires=float(exp) if isinstance(exp, int | float) else None,
            models=self._models(claims),
        )

    async def close(self) -> None:
        if self.reviewer is not None:
            await self.reviewer.close()

    def _models(self, claims: dict[str, Any]) -> frozenset[str] | None:
        """The models the token may use on ``/v1`` (``SARDEENZ_JWT_MODELS_CLAIM``); None:
        all (no such setting, no such claim, or ``*``)."""
        name = self.settings.jwt_models_claim
        if not name:
            return None
        value = claim_at(claims, name)
        if value is None:
            return None
        models = roles_from(value)
        return None if "*" in models else models

    def _verifies(self, token: str) -> bool:
        """Is ``token`` one of the configured issuers' to verify here (else: a token review)?

        Decided from the unverified header and ``iss``: an HS256 token with a secret set,
        or an asymmetric one of the configured issuer (any issuer when none is set) with a
        JWKS. Anything else (an opaque OpenShift token, a ServiceAccount JWT signed by the
        API server) goes to the API server, which is the only one that can check it.
        """
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return False
        alg = header.get("alg")
        if alg == "HS256":
            return self._secret is not None
        if alg not in ASYMMETRIC_ALGORITHMS or self._jwks is None:
            return False
        if self._issuer is None:
            return True
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return False
        return bool(claims.get("iss") == self._issuer)

    async def _verify(self, token: str) -> dict[str, Any]:
        options = {"require": ["exp"], "verify_aud": self.settings.jwt_audience is not None}
        common: dict[str, Any] = {
            "audience": self.settings.jwt_audience,
            "issuer": self._issuer,
            "leeway": self.settings.jwt_leeway_seconds,
            "options": options,
        }
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthError("the token is not a JWT", code="invalid_token") from exc
        alg = header.get("alg")
        try:
            if alg == "HS256" and self._secret:
                claims: dict[str, Any] = jwt.decode(
                    token, self._secret, algorithms=["HS256"], **common
                )
                return claims
            if alg in ASYMMETRIC_ALGORITHMS and self._jwks is not None:
                jwks = self._jwks
                # PyJWKClient fetches over blocking urllib: keep it off the loop.
                key = await asyncio.to_thread(jwks.get_signing_key_from_jwt, token)
                claims = jwt.decode(token, key.key, algorithms=[alg], **common)
                return claims
        except jwt.ExpiredSignatureError as exc:
            raise AuthError("the token has expired", code="token_expired") from exc
        except jwt.InvalidAudienceError as exc:
            raise AuthError("the token is for another audience", code="invalid_audience") from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthError("the token is from another issuer", code="invalid_issuer") from exc
        except jwt.InvalidSignatureError as exc:
            raise AuthError("the token's signature is invalid", code="invalid_signature") from exc
        except jwt.PyJWKClientError as exc:
            raise AuthError(
                "no key to verify the token (unknown kid or JWKS unreachable)",
                code="invalid_signature",
            ) from exc
        except jwt.PyJWTError as exc:
            raise AuthError(f"invalid token: {type(exc).__name__}", code="invalid_token") from exc
        raise AuthError(f"tokens signed with {alg!r} are not accepted here", code="invalid_token")


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One inference key as the proxy knows it: never the key itself.

    ``id`` names it in the request log, usage and metrics (from the keys file, or
    ``key-`` + the first 8 hex digits of its SHA-256 for a key given in
    ``SARDEENZ_API_KEYS``). ``models``: the served names it may use; None: all.
    """

    id: str
    models: frozenset[str] | None = None
    member: str = ""
    """The tenant member it is admitted as (tenancy/admission.py): the key's id, or for a
    bearer token's caller ``sub:<subject>`` / ``group:<group>``. Defaults to ``id``."""

    def __post_init__(self) -> None:
        if not self.member:
            object.__setattr__(self, "member", self.id)

    def allows(self, model: str) -> bool:
        models = self.models
        return models is None or model in models


_KEY_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@")


class CachedCallers(Protocol):
    """Bearer-token callers of ``/v1`` verified recently (security/callers.py)."""

    def cached(self, authorization: bytes) -> ApiKey | None: ...

    async def authenticate(self, authorization: bytes) -> ApiKey: ...


class ApiKeys:
    """Inference API keys. Stored and compared as SHA-256 digests, in constant time.

    ``tokens``: with ``SARDEENZ_V1_BEARER_AUTH``, a presented value that is no key may be
    a bearer token verified recently (a memory lookup): the fast lane and the express
    path ask ``identify`` alone, and a key is found exactly as before.
    """

    def __init__(self, keys: list[tuple[bytes, ApiKey]]) -> None:
        self._keys = keys
        self.tokens: CachedCallers | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> ApiKeys:
        """The keys of ``SARDEENZ_API_KEYS`` and ``SARDEENZ_API_KEYS_FILE``.

        Raises ``ConfigError`` (one line naming the setting) for a file that cannot be read
        or has a bad line, and for a ``SARDEENZ_API_KEYS`` that is set but holds no key:
        either would otherwise leave ``/v1`` open while the operator believes it closed.
        """
        keys: list[tuple[bytes, ApiKey]] = []
        if settings.api_keys:
            for key in settings.api_keys.get_secret_value().split(","):
                if key.strip():
                    digest = hashlib.sha256(key.strip().encode()).digest()
                    keys.append((digest, ApiKey(id=f"key-{digest.hex()[:8]}")))
            if not keys:
                raise ConfigError("SARDEENZ_API_KEYS is set but holds no key (only spaces/commas)")
        if settings.api_keys_file:
            path = settings.api_keys_file
            try:
                from_file = read_keys_file(path)
            except OSError as exc:
                raise ConfigError(
                    f"SARDEENZ_API_KEYS_FILE: cannot read {path}: {exc.strerror or exc}"
                ) from None
            except UnicodeDecodeError:
                raise ConfigError(f"SARDEENZ_API_KEYS_FILE: {path} is not UTF-8 text") from None
            except ValueError as exc:  # a bad line: the message names the file and line
                raise ConfigError(f"SARDEENZ_API_KEYS_FILE: {exc}") from None
            if not from_file:
                raise ConfigError(f"SARDEENZ_API_KEYS_FILE: {path} holds no key")
            keys += from_file
        return cls(keys)

    @property
    def enabled(self) -> bool:
        """``/v1`` asks for a credential (keys, or bearer tokens)."""
        return bool(self._keys) or self.tokens is not None

    @property
    def ids(self) -> list[str]:
        return [key.id for _, key in self._keys]

    def identify(self, authorization: bytes | None) -> ApiKey | None:
        """The key this ``Authorization`` value presents, or None (missing or wrong)."""
        if not authorization or authorization[:7].lower() != b"bearer ":
            return None
        presented = hashlib.sha256(authorization[7:].strip()).digest()
        found = None
        for digest, key in self._keys:  # no early exit: the time does not depend on which key
            if hmac.compare_digest(presented, digest):
                found = key
        if found is None and self.tokens is not None:
            return self.tokens.cached(authorization)
        return found

    def check(self, authorization: bytes | None) -> bool:
        if not self._keys:
            return True
        return self.identify(authorization) is not None


def read_keys_file(path: Path) -> list[tuple[bytes, ApiKey]]:
    """The keys of ``SARDEENZ_API_KEYS_FILE``: one key a line, ``#`` comments.

        <sha256 hex digest> [<id> [<model>,<model>...]]

    ``printf %s "$KEY" | sha256sum`` prints the digest;
    without an id the key is ``key-`` + its first 8 hex digits; without models (or
    ``*``) it may use every model.
    """
    keys: list[tuple[bytes, ApiKey]] = []
    seen: set[str] = set()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        text = fields[0]
        try:
            raw = bytes.fromhex(text.removeprefix("sha256:"))
        except ValueError as exc:
            raise ValueError(f"{path}:{n}: not a SHA-256 hex digest") from exc
        if len(raw) != 32:
            raise ValueError(f"{path}:{n}: not a SHA-256 hex digest")
        if len(fields) > 3:
            raise ValueError(f"{path}:{n}: expected '<digest> [<id> [<model>,...]]'")
        key_id = fields[1] if len(fields) > 1 else f"key-{raw.hex()[:8]}"
        if not set(key_id) <= _KEY_ID_CHARS or len(key_id) > 64:
            raise ValueError(
                f"{path}:{n}: key id {key_id[:64]!r} may use letters, digits and ._-@ only"
                " (at most 64)"
            )
        if key_id in seen:
            raise ValueError(f"{path}:{n}: key id {key_id!r} is used twice")
        seen.add(key_id)
        models: frozenset[str] | None = None
        if len(fields) == 3 and fields[2] != "*":
            models = frozenset(m for m in fields[2].split(",") if m)
            if not models:
                raise ValueError(f"{path}:{n}: an empty model list (use '*' for every model)")
        keys.append((raw, ApiKey(id=key_id, models=models)))
    return keys
