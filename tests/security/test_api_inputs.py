"""User input that used to reach SQLite or a policy unchecked: bounded, ordered, allowed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jwt
import pytest

from testkit.servers import ServerProcess, kill_engines

SECRET = "hardening-tests-hs256-secret-0123456789abcdef"
BEYOND_SQLITE = str(2**63)  # one past SQLite's largest INTEGER


def _token(role: str) -> str:
    claims = {"sub": f"{role}-user", "exp": int(time.time()) + 3600, "roles": [role]}
    return jwt.encode(claims, SECRET, algorithm="HS256")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("inputs")
    srv = ServerProcess(data_dir, extra_env={"SARDEENZ_JWT_SECRET": SECRET}).start()
    yield srv
    srv.stop()
    kill_engines(data_dir)


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {_token('admin')}"}, timeout=30
    ) as client:
        yield client


@pytest.mark.parametrize(
    ("path", "param"),
    [
        (f"/api/benchmarks?offset={BEYOND_SQLITE}", "offset"),
        (f"/api/audit?beforeId={BEYOND_SQLITE}", "beforeId"),
    ],
)
def test_integers_beyond_sqlite_are_a_validation_error(
    admin: httpx.Client, path: str, param: str
) -> None:
    resp = admin.get(path)
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert body["code"] == "validation_error"
    assert [e["field"] for e in body["errors"]] == [param]


def test_the_largest_sqlite_integer_is_still_accepted(admin: httpx.Client) -> None:
    assert admin.get(f"/api/benchmarks?offset={2**63 - 1}").status_code == 200
    assert admin.get(f"/api/audit?beforeId={2**63 - 1}").status_code == 200


def test_readonly_may_ask_the_fit_check_and_it_is_not_audited(
    server: ServerProcess, admin: httpx.Client
) -> None:
    readonly = {"Authorization": f"Bearer {_token('admin-readonly')}"}
    resp = httpx.post(
        f"{server.url}/api/memory/profiles/check",
        json={"modelPath": "some/model"},
        headers=readonly,
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    assert "fits" in resp.json()
    # A question changes nothing: it neither needs admin nor floods the trail.
    trail = admin.get("/api/audit").json()
    assert all(e["path"] != "/api/memory/profiles/check" for e in trail)
    # Real mutations stay admin-only.
    refused = httpx.post(
        f"{server.url}/api/v1/models/load", json={"modelPath": "x"}, headers=readonly, timeout=30
    )
    assert refused.status_code == 403


def test_audit_ids_follow_the_order_requests_finished(admin: httpx.Client) -> None:
    def unload(i: int) -> int:
        return admin.post(f"/api/v1/models/missing-{i}/unload").status_code

    with ThreadPoolExecutor(16) as pool:
        assert set(pool.map(unload, range(64))) == {404}
    # The trail is written behind the responses: wait (bounded) for all 64.
    deadline = time.monotonic() + 15
    while True:
        trail = admin.get("/api/audit?limit=1000").json()
        entries = [e for e in trail if "missing-" in e["path"]]
        if len(entries) == 64 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(entries) == 64
    # Newest first: ids strictly decrease, and so (never increasing) does the time.
    ids = [e["id"] for e in entries]
    assert ids == sorted(ids, reverse=True)
    times = [e["at"] for e in entries]
    assert times == sorted(times, reverse=True), times
