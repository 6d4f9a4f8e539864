"""Route policy: every ``/api`` route declares, on its decorator, who may call it.

    @router.get("/things", dependencies=[READONLY])
    @router.post("/things", dependencies=[ADMIN])
    @router.get("/health", dependencies=[PUBLIC])

A test walks ``app.routes`` and fails when an ``/api`` route has no policy or
when a mutating method admits ``admin-readonly`` (``QUERY_POSTS`` excepted); a new route cannot slip
through unguarded. The chosen principal is kept on ``request.state.principal``
for the audit trail.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator

from fastapi import Depends, Request
from fastapi.params import Depends as DependsParam
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from sardeenz.security.auth import Authenticator, Forbidden, Principal, Role

WWW_AUTHENTICATE = 'Bearer realm="sardeenz"'


def _authenticator(request: Request) -> Authenticator:
    auth: Authenticator = request.app.state.services.auth
    return auth


def _requiring(role: Role) -> Callable[[Request], Awaitable[Principal]]:
    async def check(request: Request) -> Principal:
        principal = await _authenticator(request).authenticate(request.headers.get("authorization"))
        request.state.principal = principal
        if not principal.allows(role):
            raise Forbidden(
                f"role {role.value!r} required; you have "
                f"{', '.join(sorted(principal.roles)) or 'no Sardeenz role'}",
                code="forbidden",
            )
        return principal

    check.__name__ = f"require_{role.name.lower()}"
    check.policy = role.value  # type: ignore[attr-defined]
    return check


async def _public(request: Request) -> None:
    """Open to anyone (health probes, the login configuration)."""


_public.policy = "public"  # type: ignore[attr-defined]

ADMIN: DependsParam = Depends(_requiring(Role.ADMIN))
READONLY: DependsParam = Depends(_requiring(Role.READONLY))
PUBLIC: DependsParam = Depends(_public)

MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
QUERY_POSTS = frozenset({"/api/memory/profiles/check", "/api/cluster/schedule"})
"""POSTs that change nothing (a question with a body, like the fit check the load dialog
asks as the operator types): read-only callers may ask them, and the audit trail skips
them."""


PUBLIC_POSTS = frozenset({"/api/auth/openshift/token"})
"""POSTs open to anyone because they are how one signs in (the dashboard's OAuth code
exchange): they change nothing here, so the audit trail skips them, and their small
declared body is read without a token (``PUBLIC_POST_MAX_BODY``)."""
PUBLIC_POST_MAX_BODY = 8192


def is_mutation(method: str, path: str) -> bool:
    return method in MUTATING_METHODS and path not in QUERY_POSTS and path not in PUBLIC_POSTS


def policy_of(dependency: DependsParam) -> str | None:
    return getattr(dependency.dependency, "policy", None)


def iter_api_routes(routes: Iterable[BaseRoute]) -> Iterator[APIRoute]:
    """Every APIRoute of an app, including those of included routers.

    FastAPI >= 0.16x keeps included routers as nodes (``original_router``)
    instead of copying their routes into the app; walk both shapes.
    """
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from iter_api_routes(inner.routes)
