"""/docs is served with local Swagger UI assets: it renders on a node without internet."""

from __future__ import annotations

import re

import httpx

from testkit.servers import ServerProcess


def test_docs_page_loads_nothing_from_another_host(module_server: ServerProcess) -> None:
    page = httpx.get(f"{module_server.url}/docs")
    assert page.status_code == 200
    refs = re.findall(r"""(?:src|href)=["']([^"']+)["']|url:\s*['"]([^'"]+)['"]""", page.text)
    urls = [u for pair in refs for u in pair if u]
    assert urls, "the page references its assets"
    assert not [u for u in urls if re.match(r"^(https?:)?//", u)], urls
    for url in urls:
        resp = httpx.get(f"{module_server.url}{url}")
        assert resp.status_code == 200, url
    js = httpx.get(f"{module_server.url}/docs/assets/swagger-ui-bundle.js")
    assert "javascript" in js.headers["content-type"]
    assert len(js.content) > 100_000
    assert httpx.get(f"{module_server.url}/docs/oauth2-redirect").status_code == 200
