"""Login support for the dashboard, and the audit trail."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from sardeenz.api.deps import ServicesDep
from sardeenz.domain import CamelModel
from sardeenz.errors import InvalidRequest, NotFound
from sardeenz.security.auth import Principal
from sardeenz.security.policy import PUBLIC, READONLY
from sardeenz.store.audit import AuditEntry
from sardeenz.store.db import SQL_INT_MAX

router = APIRouter(prefix="/api", tags=["auth"])


class OidcConfig(CamelModel):
    issuer: str
    client_id: str | None
    authorization_endpoint: str | None
    token_endpoint: str | None
    scope: str | None = None
    """The scopes to ask for; None: ``openid profile``."""
    provider: str = "oidc"
    """``oidc``, or ``openshift``: OpenShift's OAuth server, whose code Sardeenz exchanges
    (``tokenEndpoint`` is then Sardeenz's ``/api/auth/openshift/token``)."""


class AuthConfig(CamelModel):
    auth_enabled: bool
    oidc: OidcConfig | None
    roles_claim: str


class Me(CamelModel):
    subject: str
    role: str | None
    roles: list[str]
    auth_enabled: bool


@router.get("/auth/config", response_model=AuthConfig, dependencies=[PUBLIC])
async def auth_config(services: ServicesDep) -> AuthConfig:
    """What the dashboard needs to log in: is auth on, and the OIDC issuer if any."""
    s = services.settings
    auth = services.auth
    oidc = None
    openshift = auth.openshift_sign_in()
    if openshift is not None:
        url, client_id, authorization_endpoint, scope = openshift
        oidc = OidcConfig(
            issuer=url,
            client_id=client_id,
            authorization_endpoint=authorization_endpoint,
            token_endpoint="/api/auth/openshift/token",
            scope=scope,
            provider="openshift",
        )
    elif s.oidc_issuer:
        oidc = OidcConfig(
            issuer=s.oidc_issuer,
            client_id=s.oidc_client_id,
            authorization_endpoint=auth.authorization_endpoint,
            token_endpoint=auth.token_endpoint,
        )
    return AuthConfig(auth_enabled=auth.enabled, oidc=oidc, roles_claim=s.jwt_roles_claim)


class TokenAnswer(BaseModel):
    """OAuth 2.0's token response (RFC 6749 5.1), as the dashboard reads it."""

    access_token: str
    token_type: str
    expires_in: int | None = None


@router.post("/auth/openshift/token", response_model=TokenAnswer, dependencies=[PUBLIC])
async def openshift_token(request: Request, services: ServicesDep) -> TokenAnswer:
    """The dashboard's OpenShift sign-in: its authorization code (a form, as OAuth 2.0
    sends it) exchanged at OpenShift's OAuth server with the OAuthClient's secret."""
    if services.auth.openshift_sign_in() is None:
        raise NotFound("OpenShift sign-in is not configured", code="openshift_oauth_off")
    try:
        form = dict(parse_qsl((await request.body()).decode(), max_num_fields=10))
    except (UnicodeDecodeError, ValueError):
        raise InvalidRequest(
            "expected an application/x-www-form-urlencoded body", code="oauth_bad_request"
        ) from None
    return TokenAnswer.model_validate(await services.auth.exchange_openshift_code(form))


@router.get("/auth/me", response_model=Me, dependencies=[READONLY])
async def me(request: Request, services: ServicesDep) -> Me:
    """Who the caller is: subject, the role that applies and every Sardeenz role held."""
    principal: Principal = request.state.principal
    return Me(
        subject=principal.subject,
        role=principal.role,
        roles=sorted(principal.roles),
        auth_enabled=services.auth.enabled,
    )


@router.get("/audit", response_model=list[AuditEntry], dependencies=[READONLY])
async def audit(
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before_id: Annotated[int | None, Query(alias="beforeId", ge=1, le=SQL_INT_MAX)] = None,
) -> list[AuditEntry]:
    """State-changing admin operations, newest first (page with ``beforeId``)."""
    return await services.audit.entries(limit=limit, before_id=before_id)
