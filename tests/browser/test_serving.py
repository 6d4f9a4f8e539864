"""How `sardeenz serve` serves the dashboard build (no browser needed).

The catch-all must hand index.html to client-side routes, serve build files with
the right caching, refuse paths outside the build, leave the API's own answers
alone, and explain how to build when there is no build.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from sardeenz.dashboard import mount_dashboard

INDEX = "<!doctype html><title>Sardeenz</title><div id=root></div>"


def client(web_dir: Path) -> TestClient:
    app = FastAPI()

    @app.get("/api/v1/things")
    async def things() -> list[str]:
        return []

    mount_dashboard(app, web_dir)
    return TestClient(app)


@pytest.fixture
def built(tmp_path: Path) -> Path:
    web = tmp_path / "web"
    (web / "assets").mkdir(parents=True)
    (web / "index.html").write_text(INDEX)
    (web / "assets" / "index-abc123.js").write_text("console.log(1)")
    (web / "favicon.svg").write_text("<svg/>")
    (tmp_path / "secret.txt").write_text("not for you")
    return web


@pytest.mark.parametrize("path", ["/", "/models", "/models/abc123", "/logs/x?replay=1", "/charts"])
def test_client_routes_get_index_html_uncached(built: Path, path: str) -> None:
    resp = client(built).get(path)
    assert resp.status_code == 200
    assert resp.text == INDEX
    assert resp.headers["cache-control"] == "no-cache"


def test_hashed_assets_are_cached_for_a_year_other_files_revalidate(built: Path) -> None:
    c = client(built)
    js = c.get("/assets/index-abc123.js")
    assert js.status_code == 200
    assert js.text == "console.log(1)"
    assert "javascript" in js.headers["content-type"]
    assert js.headers["cache-control"] == "public, max-age=31536000, immutable"
    icon = c.get("/favicon.svg")
    assert icon.headers["content-type"].startswith("image/svg")
    assert icon.headers["cache-control"] == "no-cache"


def test_a_missing_asset_is_404_not_html(built: Path) -> None:
    assert client(built).get("/assets/index-old.js").status_code == 404


@pytest.mark.parametrize(
    "path", ["/..%2fsecret.txt", "/assets/..%2f..%2fsecret.txt", "/%2e%2e/secret.txt"]
)
def test_nothing_outside_the_build_is_served(built: Path, path: str) -> None:
    resp = client(built).get(path)
    assert "not for you" not in resp.text


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/api/v1/things", 200),
        ("GET", "/api/v1/nothing", 404),
        ("POST", "/api/v1/nothing", 404),
        ("POST", "/api/v1/things", 405),
        ("GET", "/api", 404),
        ("GET", "/v1/models", 404),
        ("GET", "/metrics", 404),
        ("GET", "/internal/ping", 404),
        ("GET", "/openapi.json", 200),
        ("GET", "/docs", 200),
    ],
)
def test_server_paths_keep_their_own_answers(
    built: Path, method: str, path: str, status: int
) -> None:
    resp = client(built).request(method, path)
    assert resp.status_code == status
    assert resp.text != INDEX


def test_without_a_build_a_page_says_how_to_build(tmp_path: Path) -> None:
    c = client(tmp_path / "missing")
    for path in ("/", "/models/abc"):
        resp = c.get(path)
        assert resp.status_code == 200
        assert "make web" in resp.text
        assert "npm ci" in resp.text
    assert c.get("/api/v1/things").status_code == 200
    assert c.head("/").status_code == 200
