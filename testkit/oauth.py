"""A small OAuth 2.0 server with the HTTP interface of OpenShift's (``/oauth/authorize``,
``/oauth/token``), for the dashboard's OpenShift sign-in, and
an OIDC issuer (discovery document and JWKS) for the admin API's RS256 tokens.

Why a stand-in: the real OpenShift OAuth server needs a whole OpenShift cluster, which
cannot run here. This one speaks the same protocol the sign-in relies on, over real HTTP:
the authorization-code grant with PKCE (S256), a confidential client authenticated by
HTTP Basic at the token endpoint, one-time codes bound to the client, the redirect URI
and the challenge, and OAuth's JSON errors (``invalid_grant``, ``invalid_client``). It
has no login page: ``/oauth/authorize`` signs in the user the test chose
(``OAuthServer.user_token``) and redirects at once, as OpenShift does for a user with a
session. The access token it issues is whatever the test gives it (in the kube tier: a
real ServiceAccount token, so the API server's TokenReview accepts it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from testkit.ports import free_port


@dataclass
class _Grant:
    client_id: str
    redirect_uri: str
    challenge: str
    token: str


class _JsonHandler(BaseHTTPRequestHandler):
    """Answers in JSON and logs nothing (pytest shows a failing test's own output)."""

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


class _LoopbackServer:
    """A ``ThreadingHTTPServer`` on a free loopback port in a thread; ``close()`` stops it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class OidcIssuer(_LoopbackServer):
    """An OIDC issuer: ``/.well-known/openid-configuration`` and the JWKS it names.

    What the admin API's RS256 validation fetches (discovery, then the keys); the
    authorization and token endpoints are only named, for ``/api/auth/config``.
    """

    def __init__(self, jwks: dict[str, Any]) -> None:
        super().__init__()
        documents = {
            "/.well-known/openid-configuration": {
                "issuer": self.url,
                "jwks_uri": f"{self.url}/jwks.json",
                "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token",
            },
            "/jwks.json": jwks,
        }

        class Handler(_JsonHandler):
            def do_GET(self) -> None:
                self._json(200 if self.path in documents else 404, documents.get(self.path, {}))

        self._serve(Handler)


class OAuthServer(_LoopbackServer):
    """OpenShift's OAuth endpoints on a free loopback port in a thread."""

    def __init__(self, client_id: str, client_secret: str, redirect_uri: str) -> None:
        super().__init__()
        self.client_id = client_id
        self.client_secret = client_secret
        self.redirect_uri = redirect_uri
        self.user_token = ""
        """The access token the next sign-in issues (the signed-in user's)."""
        self.grants: dict[str, _Grant] = {}
        self.token_requests = 0
        self.last_scope: str | None = None
        server = self

        class Handler(_JsonHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if url.path != "/oauth/authorize":
                    return self._json(404, {"error": "not_found"})
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                if q.get("client_id") != server.client_id:
                    return self._json(400, {"error": "unauthorized_client"})
                if q.get("redirect_uri") != server.redirect_uri:
                    return self._json(400, {"error": "invalid_request"})
                if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256":
                    return self._json(400, {"error": "invalid_request"})
                server.last_scope = q.get("scope")
                code = secrets.token_urlsafe(24)
                server.grants[code] = _Grant(
                    server.client_id,
                    server.redirect_uri,
                    q.get("code_challenge", ""),
                    server.user_token,
                )
                back = f"{server.redirect_uri}?{urlencode({'code': code, 'state': q['state']})}"
                self.send_response(302)
                self.send_header("location", back)
                self.send_header("content-length", "0")
                self.end_headers()
                return None

            def do_POST(self) -> None:
                if self.path != "/oauth/token":
                    return self._json(404, {"error": "not_found"})
                server.token_requests += 1
                length = int(self.headers.get("content-length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                scheme, _, creds = (self.headers.get("authorization") or "").partition(" ")
                expected = f"{server.client_id}:{server.client_secret}".encode()
                if scheme.lower() != "basic" or base64.b64decode(creds or "=") != expected:
                    return self._json(401, {"error": "invalid_client"})
                grant = server.grants.pop(form.get("code", ""), None)  # one use only
                verifier = form.get("code_verifier", "")
                digest = hashlib.sha256(verifier.encode()).digest()
                challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
                if (
                    grant is None
                    or form.get("grant_type") != "authorization_code"
                    or form.get("redirect_uri") != grant.redirect_uri
                    or challenge != grant.challenge
                ):
                    return self._json(
                        400,
                        {
                            "error": "invalid_grant",
                            "error_description": "The provided authorization grant is invalid",
                        },
                    )
                return self._json(
                    200,
                    {"access_token": grant.token, "token_type": "Bearer", "expires_in": 86400},
                )

        self._serve(Handler)
