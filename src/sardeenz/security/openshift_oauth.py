"""The dashboard's sign-in through OpenShift's OAuth server (authorization-code flow).

OpenShift's OAuth server is not an OIDC provider: no discovery document, no ID token, and
its access tokens (``sha256~...``) are opaque. The flow the dashboard already runs for an
OIDC issuer (frontend/src/auth/oidc.ts: PKCE, a code at ``/auth/callback``, then the token
endpoint) works against it with two differences, both here:

- the scopes are OpenShift's (``user:info user:check-access``), sent in
  ``/api/auth/config``;
- an ``OAuthClient`` of OpenShift is confidential (it has a secret), which a browser must
  not hold. The dashboard sends the code to Sardeenz (``POST
  /api/auth/openshift/token``), which adds the client's secret and asks the OAuth
  server's ``/oauth/token`` for the access token. The code is only good for the redirect
  URI registered with the ``OAuthClient``, so Sardeenz adds its secret to nothing else.

The access token is then a bearer token like any other: the API server reviews it
(security/tokenreview.py), hence ``SARDEENZ_TOKEN_REVIEW`` is required.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import httpx

from sardeenz.config import ConfigError, Settings
from sardeenz.errors import SardeenzError

EXCHANGE_TIMEOUT_SECONDS: Final = 10.0
_FIELD_MAX: Final = 2048


class OAuthFailed(SardeenzError):
    """The OAuth server refused the code (or the form was not an exchange)."""

    status = 400
    code = "oauth_failed"


class OAuthUnavailable(SardeenzError):
    status = 503
    code = "oauth_unavailable"


class OpenShiftOAuth:
    """The OAuth server's endpoints and the code exchange; see module doc."""

    def __init__(self, settings: Settings) -> None:
        url = settings.openshift_oauth_url
        assert url is not None
        secret = settings.openshift_oauth_client_secret
        if not settings.openshift_oauth_client_id or secret is None:
            raise ConfigError(
                "SARDEENZ_OPENSHIFT_OAUTH_URL needs SARDEENZ_OPENSHIFT_OAUTH_CLIENT_ID and "
                "SARDEENZ_OPENSHIFT_OAUTH_CLIENT_SECRET (the OAuthClient's name and secret)"
            )
        if not settings.token_review:
            raise ConfigError(
                "SARDEENZ_OPENSHIFT_OAUTH_URL needs SARDEENZ_TOKEN_REVIEW=true: the access "
                "tokens of OpenShift's OAuth server are checked by the API server"
            )
        self.url = url.rstrip("/")
        self.client_id = settings.openshift_oauth_client_id
        self.scope = settings.openshift_oauth_scope
        self._secret = secret.get_secret_value()
        self.authorization_endpoint = f"{self.url}/oauth/authorize"
        self.token_endpoint = f"{self.url}/oauth/token"

    async def exchange(self, form: Mapping[str, str]) -> dict[str, Any]:
        """The OAuth server's token answer for the dashboard's code (``access_token``,
        ``token_type``, ``expires_in``): ``OAuthFailed`` (400) when it refuses,
        ``OAuthUnavailable`` (503) when it does not answer."""
        fields = {k: form.get(k, "") for k in ("grant_type", "code", "redirect_uri")}
        if fields["grant_type"] != "authorization_code":
            raise OAuthFailed("grant_type must be 'authorization_code'", code="oauth_bad_request")
        if not fields["code"] or not fields["redirect_uri"]:
            raise OAuthFailed("code and redirect_uri are required", code="oauth_bad_request")
        if form.get("client_id", self.client_id) != self.client_id:
            raise OAuthFailed("unknown client_id", code="oauth_bad_request")
        if any(len(v) > _FIELD_MAX for v in form.values()):
            raise OAuthFailed("a field is too long", code="oauth_bad_request")
        data = {**fields, "client_id": self.client_id}
        verifier = form.get("code_verifier")
        if verifier:
            data["code_verifier"] = verifier
        try:
            async with httpx.AsyncClient(timeout=EXCHANGE_TIMEOUT_SECONDS) as client:
                resp = await client.post(
                    self.token_endpoint,
                    data=data,
                    auth=(self.client_id, self._secret),
                    headers={"accept": "application/json"},
                )
        except httpx.HTTPError as exc:
            raise OAuthUnavailable(
                f"the OpenShift OAuth server did not answer ({type(exc).__name__})"
            ) from None
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise OAuthUnavailable(f"the OpenShift OAuth server answered {resp.status_code}")
        if resp.status_code != 200 or not isinstance(body.get("access_token"), str):
            error = str(body.get("error") or f"HTTP {resp.status_code}")[:100]
            why = str(body.get("error_description") or "")[:300]
            if resp.status_code >= 500:
                raise OAuthUnavailable(f"the OpenShift OAuth server failed: {error}")
            raise OAuthFailed(
                f"the OpenShift OAuth server refused the code: {error}"
                + (f" ({why})" if why else ""),
                code="oauth_refused",
            )
        out: dict[str, Any] = {
            "access_token": body["access_token"],
            "token_type": body.get("token_type", "Bearer"),
        }
        if isinstance(body.get("expires_in"), int):
            out["expires_in"] = body["expires_in"]
        return out
