"""The dashboard's files: served at ``/`` by the admin API's FastAPI app.

Why a module of its own: ``app.py`` wires services; how a built single-page
app is served (precompressed siblings chosen by ``Accept-Encoding``, a year
of caching for hashed assets, ``index.html`` for deep links, a page that
says how to build it when it is missing) is a concern of its own.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from starlette.convertors import StringConvertor, register_url_convertor

WEB_DIR = Path(__file__).parent / "web"
"""The built dashboard (``make web``: frontend/ -> here; not committed)."""

_NO_BUILD_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sardeenz: dashboard not built</title></head>
<body style="font-family: sans-serif; max-width: 40rem; margin: 3rem auto; line-height: 1.5">
<h1>The dashboard is not built</h1>
<p>This server runs, but its web dashboard was not built into
<code>src/sardeenz/web/</code>. From a source checkout run <code>make web</code>
(or <code>cd frontend &amp;&amp; npm ci &amp;&amp; npm run build</code>; Node.js 20.19+),
then reload this page. <code>make run</code> builds it for you.</p>
<p>Meanwhile the API works: <a href="/docs">/docs</a>, <a href="/openapi.json">/openapi.json</a>,
<a href="/metrics">/metrics</a>.</p>
</body></html>
"""


class _DashboardPath(StringConvertor):
    """Any path but the server's own: ``/api``, ``/v1``, ``/internal`` (cluster), docs,
    OpenAPI and metrics keep their answers (404 and 405 included) instead of falling
    through to the dashboard, whatever order their routes are added in."""

    regex = r"(?!(?:api|v1|internal|docs|redoc|openapi\.json|metrics)(?:/|$)).*"


register_url_convertor("dashboard", _DashboardPath())


_PRECOMPRESSED = (("br", ".br"), ("gzip", ".gz"))
"""Sibling files the build writes (``x.js.br``, ``x.js.gz``), preferred in this order."""


def _accepted_codings(accept_encoding: str) -> dict[str, float]:
    """``Accept-Encoding`` as coding -> q (``br;q=0`` refuses br; ``*`` stands for the rest)."""
    codings: dict[str, float] = {}
    for item in accept_encoding.lower().split(","):
        coding, *params = (p.strip() for p in item.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if coding:
            codings[coding] = q
    return codings


def _dashboard_file(request: Request, file: Path, cache: str) -> FileResponse:
    """``file``, or its precompressed sibling when the client accepts that coding.

    The body, ``Content-Length`` and ``ETag`` are the sibling's; ``Content-Type`` stays
    the original's. Nothing is compressed per request: without a sibling the file goes
    out as it is.
    """
    headers = {"Cache-Control": cache}
    siblings = [(c, file.with_name(file.name + s)) for c, s in _PRECOMPRESSED]
    siblings = [(c, f) for c, f in siblings if f.is_file()]
    if not siblings:
        return FileResponse(file, headers=headers)
    headers["Vary"] = "Accept-Encoding"
    accepted = _accepted_codings(request.headers.get("accept-encoding", ""))
    best: tuple[float, str, Path] | None = None
    for coding, sibling in siblings:
        q = accepted.get(coding, accepted.get("*", 0.0))
        if q > 0 and (best is None or q > best[0]):
            best = (q, coding, sibling)
    if best is None:
        return FileResponse(file, headers=headers)
    media_type = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    headers["Content-Encoding"] = best[1]
    return FileResponse(best[2], headers=headers, media_type=media_type)


def _existing_file(root: Path, path: str) -> Path | None:
    """The build's file at ``path``, or None: also for a name the file system refuses
    (too long: ENAMETOOLONG, a NUL byte), which is no file of the build either."""
    if not path:
        return None
    try:
        file = (root / path).resolve()
        return file if file.is_file() and file.is_relative_to(root) else None
    except (OSError, ValueError):
        return None


def mount_dashboard(app: FastAPI, web_dir: Path) -> None:
    """Serve the dashboard at ``/`` with client-side routing.

    Files of the build are served as they are (hashed ``assets/`` cached for a
    year), or precompressed (``.br``/``.gz`` siblings written by the build) when
    the client accepts it; any other path gets ``index.html`` so deep links
    reload. Without a build, a short page says how to make one.
    """
    root = web_dir.resolve()

    @app.api_route("/{path:dashboard}", methods=["GET", "HEAD"], include_in_schema=False)
    async def dashboard(path: str, request: Request) -> Response:
        index = root / "index.html"
        if not index.is_file():
            return HTMLResponse(_NO_BUILD_PAGE)
        file = _existing_file(root, path)
        if file is not None:
            immutable = file.parent == root / "assets"
            cache = "public, max-age=31536000, immutable" if immutable else "no-cache"
            return _dashboard_file(request, file, cache)
        if path.startswith("assets/"):  # a stale hashed name: never answer HTML for a script
            raise HTTPException(404, "no such dashboard asset")
        return _dashboard_file(request, index, "no-cache")
