"""The dashboard's precompressed assets over real HTTP against a real `sardeenz serve`.

The build (``make web``) writes ``.br`` and ``.gz`` siblings next to every compressible
file; the server picks one by ``Accept-Encoding`` and never compresses per request.
Needs the built dashboard, like tests/browser (``make pytest`` builds it first).
Bodies are read raw (``iter_raw``), so what is compared is what went over the wire.
"""

from __future__ import annotations

import gzip
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit.servers import ServerProcess, kill_engines

WEB = Path(__file__).resolve().parents[2] / "src" / "sardeenz" / "web"
COMPRESSIBLE = {".js", ".mjs", ".css", ".html", ".svg", ".json", ".map", ".txt"}
MIN_BYTES = 1024  # the build's threshold (frontend/vite.config.ts)
BR_GZIP = {"Accept-Encoding": "br, gzip"}

pytestmark = pytest.mark.skipif(
    not (WEB / "index.html").is_file(), reason="the dashboard is not built: run `make web`"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module: the tests only read."""
    srv = ServerProcess(tmp_path_factory.mktemp("assets")).start()
    yield srv
    srv.stop(signal.SIGKILL)
    kill_engines(srv.data_dir)


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


@pytest.fixture(scope="module")
def main_bundle() -> str:
    """The entry script index.html loads (``/assets/index-<hash>.js``)."""
    found = re.search(
        r'<script[^>]+src="(/assets/index-[^"]+\.js)"', (WEB / "index.html").read_text()
    )
    assert found, "no entry script in index.html"
    return found.group(1)


def fetch(
    client: httpx.Client, path: str, accept: str, method: str = "GET"
) -> tuple[httpx.Response, bytes]:
    """The response and its body exactly as sent (not decoded)."""
    with client.stream(method, path, headers={"Accept-Encoding": accept}) as r:
        return r, b"".join(r.iter_raw())


def brotli_decode(data: bytes) -> bytes:
    """Python has no Brotli decoder here; Node, which built the dashboard, has one."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is needed to decode Brotli")
    script = (
        "process.stdout.write(require('zlib').brotliDecompressSync(require('fs').readFileSync(0)))"
    )
    return subprocess.run([node, "-e", script], input=data, capture_output=True, check=True).stdout


def build_files() -> list[Path]:
    return sorted(
        f
        for f in WEB.rglob("*")
        if f.is_file() and f.suffix not in {".br", ".gz"} and f.name != ".built"
    )


def test_build_writes_a_br_and_gz_sibling_of_every_compressible_file() -> None:
    expected = [
        f for f in build_files() if f.suffix in COMPRESSIBLE and f.stat().st_size >= MIN_BYTES
    ]
    assert any(f.name.startswith("index-") and f.suffix == ".js" for f in expected)
    for f in expected:
        plain = f.read_bytes()
        gz, br = f.with_name(f.name + ".gz"), f.with_name(f.name + ".br")
        assert gz.is_file(), f"no .gz sibling of {f.name}"
        assert br.is_file(), f"no .br sibling of {f.name}"
        assert gzip.decompress(gz.read_bytes()) == plain, gz.name
        assert len(br.read_bytes()) < len(plain)
    # Already compressed formats (fonts) and tiny files get no sibling.
    for f in build_files():
        if f.suffix not in COMPRESSIBLE or f.stat().st_size < MIN_BYTES:
            assert not f.with_name(f.name + ".gz").exists(), f.name


@pytest.mark.parametrize(
    ("accept", "coding"),
    [
        ("br, gzip", "br"),
        ("gzip, deflate, br, zstd", "br"),  # what Chromium sends
        ("gzip", "gzip"),
        ("gzip, br;q=0", "gzip"),
        ("br;q=0.5, gzip", "gzip"),
        ("*", "br"),
        ("identity", None),
        ("", None),
        ("br;q=0, gzip;q=0", None),
    ],
)
def test_main_bundle_is_sent_in_the_best_accepted_coding(
    client: httpx.Client, main_bundle: str, accept: str, coding: str | None
) -> None:
    plain = (WEB / main_bundle.lstrip("/")).read_bytes()
    r, body = fetch(client, main_bundle, accept)
    assert r.status_code == 200
    assert r.headers.get("content-encoding") == coding
    assert r.headers["content-type"].startswith("text/javascript")
    assert r.headers["vary"] == "Accept-Encoding"
    assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert int(r.headers["content-length"]) == len(body)
    if coding == "br":
        assert brotli_decode(body) == plain
        assert len(body) < len(plain) // 3
    elif coding == "gzip":
        assert gzip.decompress(body) == plain
        assert len(body) < len(plain) // 3
    else:
        assert body == plain


def test_every_file_of_the_build_is_served_as_its_sibling_with_its_own_type(
    client: httpx.Client,
) -> None:
    for f in build_files():
        path = "/" + f.relative_to(WEB).as_posix()
        plain_r, plain = fetch(client, path, "identity")
        r, body = fetch(client, path, "br, gzip")
        assert plain_r.status_code == r.status_code == 200, path
        assert plain == f.read_bytes(), path
        assert r.headers["content-type"] == plain_r.headers["content-type"], path
        br = f.with_name(f.name + ".br")
        if br.is_file():
            assert r.headers["content-encoding"] == "br", path
            assert body == br.read_bytes(), path
            assert r.headers["vary"] == plain_r.headers["vary"] == "Accept-Encoding", path
        else:
            assert "content-encoding" not in r.headers, path
            assert body == plain, path


def test_a_deep_link_gets_index_html_compressed_and_not_cached(client: httpx.Client) -> None:
    index = (WEB / "index.html").read_bytes()
    r, body = fetch(client, "/models/abc", "br, gzip")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["content-encoding"] == "br"
    assert r.headers["vary"] == "Accept-Encoding"
    assert brotli_decode(body) == index
    r, body = fetch(client, "/models/abc", "gzip")
    assert r.headers["content-encoding"] == "gzip"
    assert gzip.decompress(body) == index
    r, body = fetch(client, "/models/abc", "identity")
    assert "content-encoding" not in r.headers
    assert body == index


def test_head_sends_the_headers_of_the_compressed_file_and_no_body(
    client: httpx.Client, main_bundle: str
) -> None:
    br = WEB / (main_bundle.lstrip("/") + ".br")
    r, body = fetch(client, main_bundle, "br, gzip", method="HEAD")
    assert r.status_code == 200
    assert r.headers["content-encoding"] == "br"
    assert int(r.headers["content-length"]) == br.stat().st_size
    assert body == b""
    r, body = fetch(client, "/models/abc", "gzip", method="HEAD")
    assert r.status_code == 200
    assert r.headers["content-encoding"] == "gzip"
    assert int(r.headers["content-length"]) == (WEB / "index.html.gz").stat().st_size
    assert body == b""


def test_a_missing_asset_is_still_a_404(client: httpx.Client) -> None:
    r, _ = fetch(client, "/assets/index-nothere.js", "br, gzip")
    assert r.status_code == 404
    assert "content-encoding" not in r.headers


@pytest.mark.parametrize("path", ["/api/health/ready", "/metrics", "/openapi.json", "/v1/models"])
def test_the_server_s_own_answers_are_never_compressed(client: httpx.Client, path: str) -> None:
    r, body = fetch(client, path, "br, gzip")
    assert "content-encoding" not in r.headers
    assert "accept-encoding" not in r.headers.get("vary", "").lower()
    assert len(body) == int(r.headers.get("content-length", len(body)))
