"""The suite's httpx clients share one TLS context (testkit/tls.py; tests/conftest.py)."""

from __future__ import annotations

import ssl
from typing import Any

import httpx
import openai
import pytest

from sardeenz.tls import client_tls
from testkit import tls


def _context(client: Any) -> ssl.SSLContext:
    """The TLS context of an httpx or httpx2 client's connection pool."""
    pool = client._transport._pool
    context: ssl.SSLContext = pool._ssl_context
    return context


def test_every_default_client_gets_the_shared_context() -> None:
    tls.share_default_context()  # again: idempotent
    with httpx.Client() as a, httpx.Client(base_url="http://127.0.0.1:1") as b:
        assert _context(a) is client_tls()
        assert _context(b) is client_tls()
    assert _context(httpx.AsyncClient()) is client_tls()


def test_a_client_given_its_own_verify_keeps_it() -> None:
    own = ssl.create_default_context()
    with httpx.Client(verify=own) as mine, httpx.Client(verify=False) as unchecked:
        assert _context(mine) is own
        assert _context(unchecked) is not client_tls()
        assert _context(unchecked).verify_mode == ssl.CERT_NONE


def test_the_shared_context_verifies_like_httpx_own() -> None:
    shared = client_tls()
    assert shared.verify_mode == ssl.CERT_REQUIRED
    assert shared.check_hostname
    assert shared.cert_store_stats()["x509_ca"] > 0  # the CA bundle is loaded


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every TLS context built (and CA bundle loaded) from here on; the shared one is
    built before counting starts."""
    client_tls()
    contexts: list[object] = []
    real = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        contexts.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    return contexts


def test_making_a_client_no_longer_loads_the_ca_bundle(built: list[object]) -> None:
    """What the sharing is for: httpx builds a context (and loads the bundle, ~20 ms of CPU)
    only for a client that asks for one of its own."""
    for _ in range(5):
        httpx.Client().close()
    with httpx.Client(base_url="http://127.0.0.1:1") as client:
        assert client.base_url.host == "127.0.0.1"
    assert built == []
    httpx.Client(verify=httpx.create_ssl_context()).close()
    assert len(built) == 1


def test_one_controller_context_per_trust_env_however_it_is_asked_for() -> None:
    assert client_tls() is client_tls(True) is client_tls(trust_env=True)
    assert client_tls(False) is client_tls(trust_env=False)
    assert client_tls(False) is not client_tls()


def test_the_official_openai_clients_get_it_too(built: list[object]) -> None:
    """``openai`` builds its clients with httpx2, a fork of httpx: ``OpenAI()`` loaded the CA
    bundle each time (31 ms of CPU) until its defaults were shared as well."""
    tls.share_default_context()  # again: idempotent
    with openai.OpenAI(base_url="http://127.0.0.1:1/v1", api_key="unused") as sync_client:
        assert _context(sync_client._client) is client_tls()
    async_client = openai.AsyncOpenAI(base_url="http://127.0.0.1:1/v1", api_key="unused")
    assert _context(async_client._client) is client_tls()
    assert built == []
