"""Swagger UI at ``/docs`` with its assets served by Sardeenz itself.

FastAPI's default ``/docs`` page loads ``swagger-ui-bundle.js`` and ``swagger-ui.css``
from cdn.jsdelivr.net (and a favicon from fastapi.tiangolo.com), so on an air-gapped
node, the usual place for a GPU box, the page stays blank. The same files ship in the
``swagger-ui-bundle-v2`` wheel (Swagger UI 5, which renders OpenAPI 3.1 as FastAPI
emits it); they are mounted under ``/docs/assets`` and the page points there.
"""

from __future__ import annotations

from pathlib import Path

import swagger_ui_bundle
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_URL = "/docs"
ASSETS_URL = "/docs/assets"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
ASSETS_DIR = Path(swagger_ui_bundle.swagger_ui_path)


def install_docs(app: FastAPI) -> None:
    """Adds ``/docs`` (create the app with ``docs_url=None``) and its local assets."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="swagger-ui-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=OAUTH2_REDIRECT_URL,
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon-32x32.png",
        )

    @app.get(OAUTH2_REDIRECT_URL, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
