"""The route tables of docs/api.md, generated from the app's OpenAPI document.

``python -m sardeenz.tools.gendocs`` rewrites them (with the settings table of
docs/configuration.md); ``--check`` fails when they drifted. One table per OpenAPI
tag, between markers the hand-written prose around it keeps in place::

    <!-- BEGIN GENERATED: routes models (python -m sardeenz.tools.gendocs) -->
    <!-- END GENERATED: routes models -->

Per route, from the code: the method, the path with its query parameters (and their
defaults), the role its security dependency requires (``sardeenz.security.policy``:
the OpenAPI document does not carry it), the success answers (status codes, ``SSE``
for an event stream) and the first paragraph of the route's docstring. A route
without a docstring, a route without a policy, a tag without a table and a table
without a tag all fail the generation: the doc cannot silently miss a route.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["DOC", "Routes", "begin", "end", "render", "route_roles", "routes_by_tag", "tables"]

DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"

HEADER = "| method | path | role | answers | what |\n|---|---|---|---|---|"
ROLE_NAMES = {"admin": "admin", "admin-readonly": "read-only", "public": "public"}
"""The policy of a route's dependency -> its name in the docs (the role's own name
for admin, the words security.md uses for the others)."""

_MARKER = re.compile(r"<!-- BEGIN GENERATED: routes (\S+) ")


Routes = tuple[dict[str, Any], dict[tuple[str, str], str]]
"""An OpenAPI document and the policy of each of its routes (``app_routes()``)."""


def begin(tag: str) -> str:
    return f"<!-- BEGIN GENERATED: routes {tag} (python -m sardeenz.tools.gendocs) -->"


def end(tag: str) -> str:
    return f"<!-- END GENERATED: routes {tag} -->"


def app_routes() -> Routes:
    """The OpenAPI document of a freshly built app, and each route's policy.

    The app is built as ``serve`` builds it, on a throw-away data directory; nothing
    starts (no lifespan), so this takes no port and no engine.
    """
    from sardeenz.app import create_app
    from sardeenz.config import load_settings

    with tempfile.TemporaryDirectory(prefix="sardeenz-gendocs-") as tmp:
        api = create_app(load_settings(data_dir=Path(tmp))).api
        return api.openapi(), route_roles(api.routes)


def route_roles(routes: Any) -> dict[tuple[str, str], str]:
    """``(METHOD, path)`` -> the policy its dependencies declare (paths as OpenAPI
    writes them: ``{name}``, not ``{name:path}``)."""
    from sardeenz.security.policy import iter_api_routes, policy_of

    roles: dict[tuple[str, str], str] = {}
    for route in iter_api_routes(routes):
        policies = [p for p in map(policy_of, route.dependencies) if p is not None]
        for method in route.methods or ():
            if policies:
                roles[(method, route.path_format)] = policies[0]
    return roles


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            yield method.upper(), path, op


def _query(op: dict[str, Any]) -> str:
    """``?name=default&...`` for the query parameters (empty value: no default)."""
    parts = []
    for param in op.get("parameters", []):
        if param["in"] != "query":
            continue
        default = param.get("schema", {}).get("default")
        if isinstance(default, bool):
            default = str(default).lower()  # as a client writes it in a URL
        shown = "" if default is None else default
        parts.append(f"{param['name']}={shown}")
    return "?" + "&".join(parts) if parts else ""


def _answers(op: dict[str, Any]) -> str:
    codes = []
    for code, response in op.get("responses", {}).items():
        if code.startswith("2"):
            sse = "text/event-stream" in response.get("content", {})
            codes.append(f"{code} SSE" if sse else code)
    return ", ".join(codes)


def _summary(op: dict[str, Any]) -> str:
    """The docstring's first paragraph, on one line, in markdown (``x`` -> `x`)."""
    first = (op.get("description") or "").strip().split("\n\n")[0]
    return " ".join(first.split()).replace("``", "`").replace("|", "\\|")


def routes_by_tag(
    document: dict[str, Any], roles: dict[tuple[str, str], str]
) -> dict[str, list[str]]:
    """Tag -> the table rows of its routes, in the app's order (the routers')."""
    rows: dict[str, list[str]] = {}
    problems = []
    for method, path, op in _operations(document):
        where = f"{method} {path}"
        summary = _summary(op)
        role = roles.get((method, path))
        tags = op.get("tags") or []
        if not summary:
            problems.append(f"{where}: no docstring")
        if role is None:
            problems.append(f"{where}: no policy (READONLY, ADMIN or PUBLIC)")
        if len(tags) != 1:
            problems.append(f"{where}: tags {tags} (one tag per route names its table)")
        if problems or role is None:
            continue
        cells = [
            method,
            f"`{path}{_query(op)}`",
            ROLE_NAMES.get(role, role),
            _answers(op),
            summary,
        ]
        rows.setdefault(tags[0], []).append("| " + " | ".join(cells) + " |")
    if problems:
        raise SystemExit("routes docs/api.md cannot document:\n  " + "\n  ".join(problems))
    return rows


def tables(routes: Routes | None = None) -> dict[str, str]:
    """Tag -> its generated markdown table (of the app's routes unless given)."""
    document, roles = app_routes() if routes is None else routes
    return {tag: "\n".join([HEADER, *rows]) for tag, rows in routes_by_tag(document, roles).items()}


def render(doc: str, generated: dict[str, str] | None = None) -> str:
    """``doc`` with every route table replaced by a fresh one.

    Every tag needs its markers somewhere in the doc, and every marker a tag: a new
    router's routes, or a renamed tag, fail the generation instead of vanishing.
    """
    generated = tables() if generated is None else generated
    marked = _MARKER.findall(doc)
    missing = sorted(set(generated) - set(marked))
    stale = sorted(set(marked) - set(generated))
    if missing or stale:
        raise SystemExit(
            f"docs/api.md route tables: no markers for tags {missing} "
            f"(add {begin('TAG')} ... {end('TAG')} where they belong); "
            f"markers of tags no route has: {stale}"
        )
    for tag, table in generated.items():
        head, _, rest = doc.partition(begin(tag))
        _, sep, tail = rest.partition(end(tag))
        if not sep:
            raise SystemExit(f"docs/api.md: {begin(tag)} has no {end(tag)}")
        doc = f"{head}{begin(tag)}\n{table}\n{end(tag)}{tail}"
    return doc
