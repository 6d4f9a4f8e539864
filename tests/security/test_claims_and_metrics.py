"""Two decisions of issue 23 (informational), held by a real server.

* ``SARDEENZ_JWT_ROLES_CLAIM=realm_access.roles`` reads the nested claim only: a
  top-level claim literally named ``realm_access.roles`` used to grant the roles too.
* ``/metrics`` names models and API key ids; it stays open by default (scrapers), and
  ``SARDEENZ_METRICS_PUBLIC=false`` puts it behind the ``admin-readonly`` role.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest

from testkit.servers import ServerProcess, kill_engines

SECRET = "claims-tests-hs256-secret-0123456789abcdef"
API_KEY = "claims-inference-key-0123456789"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("claims")
    srv = ServerProcess(
        data_dir,
        extra_env={
            "SARDEENZ_JWT_SECRET": SECRET,
            "SARDEENZ_JWT_ROLES_CLAIM": "realm_access.roles",
            "SARDEENZ_API_KEYS": API_KEY,
            "SARDEENZ_METRICS_PUBLIC": "false",
        },
    ).start()
    yield srv
    srv.stop()
    kill_engines(data_dir)


def _token(**claims: Any) -> dict[str, str]:
    payload = {"sub": "someone", "exp": int(time.time()) + 600, **claims}
    return {"Authorization": f"Bearer {jwt.encode(payload, SECRET, algorithm='HS256')}"}


def test_a_literal_dotted_claim_grants_nothing(server: ServerProcess) -> None:
    literal = _token(**{"realm_access.roles": ["admin"]})
    resp = httpx.get(f"{server.url}/api/v1/models", headers=literal, timeout=10)
    assert resp.status_code == 403, resp.text
    nested = _token(realm_access={"roles": ["admin-readonly"]})
    assert httpx.get(f"{server.url}/api/v1/models", headers=nested, timeout=10).status_code == 200
    me = httpx.get(f"{server.url}/api/auth/me", headers=literal, timeout=10).json()
    assert "admin" not in str(me.get("roles", []))


def test_metrics_can_require_a_token(server: ServerProcess) -> None:
    httpx.get(f"{server.url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10)
    anonymous = httpx.get(f"{server.url}/metrics", timeout=10)
    assert anonymous.status_code == 401
    assert "key-" not in anonymous.text
    reader = _token(realm_access={"roles": ["admin-readonly"]})
    scraped = httpx.get(f"{server.url}/metrics", headers=reader, timeout=10)
    assert scraped.status_code == 200
    assert "sardeenz_" in scraped.text
