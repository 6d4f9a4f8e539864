"""Opaque bearer tokens checked by the Kubernetes API server: TokenReview + access reviews.

Why: an OpenShift OAuth access token (``sha256~...``) is opaque, and a ServiceAccount
token is signed by a key only the API server holds; neither can be verified here. The
API server says who the token belongs to (``TokenReview``: user name, uid, groups) and,
asked, what that user may do (``SubjectAccessReview``). The Sardeenz role comes from the
groups (``SARDEENZ_TOKEN_REVIEW_ROLE_GROUPS``) or from access reviews
(``SARDEENZ_TOKEN_REVIEW_ROLE_ACCESS``: a role is held when its review is allowed).

Every answer is remembered for a short time (accepted: ``..._CACHE_SECONDS``, refused:
``..._NEGATIVE_CACHE_SECONDS``), by the token's SHA-256 (never the token), in a bounded
LRU; concurrent requests with one token share one review. A review has one deadline for
all its calls (``..._TIMEOUT_SECONDS``), retried with backoff inside it; when the API
server cannot answer (down, slow, or refusing Sardeenz's own ServiceAccount), the caller
gets 503 ``token_review_unavailable`` with ``Retry-After``, and new reviews wait a
doubling backoff (up to 30 s) before the API server is asked again: never a hang, never
a storm of calls against a struggling API server. Accepted tokens in the cache keep
working meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Final

import httpx

from sardeenz.config import ConfigError, Settings
from sardeenz.errors import SardeenzError
from sardeenz.security.auth import AuthError, Principal, Role

log = logging.getLogger(__name__)

_mono = time.monotonic

TOKEN_REVIEWS: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS: Final = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
TOKEN_REREAD_SECONDS: Final = 60.0
"""The ServiceAccount token Sardeenz calls with is re-read this often (the kubelet rotates
projected tokens)."""
RETRY_FIRST: Final = 0.1
"""The first retry of a failed call inside one review's deadline; doubles."""
BACKOFF_FIRST: Final = 0.5
BACKOFF_MAX: Final = 30.0
"""After a review the API server could not answer, new reviews wait this long (doubling
from the first to the max while it keeps failing; reset by an answer)."""


class ReviewUnavailable(SardeenzError):
    """503: the API server could not say whether the token is good."""

    status = 503
    code = "token_review_unavailable"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _NoAnswer(Exception):
    """One call got no usable answer (transport error, timeout, 5xx, 429, our 401/403)."""

    def __init__(self, why: str, *, retry: bool = True) -> None:
        super().__init__(why)
        self.retry = retry


Post = Callable[[str, dict[str, Any], float], Awaitable[httpx.Response]]
"""POST a JSON body to an API path with a timeout (seconds); the reviewer's one way out."""


class TokenReviewer:
    """Reviews opaque tokens (see module doc). ``start()`` before use, ``close()`` after."""

    def __init__(self, settings: Settings, post: Post | None = None) -> None:
        self._settings = settings
        self._audiences = list(settings.token_review_audiences)
        self._role_groups = {r: frozenset(g) for r, g in settings.token_review_role_groups.items()}
        self._role_access = dict(settings.token_review_role_access)
        self._namespace = settings.namespace
        """Of an access review that names none: the pod's (set again by ``start``)."""
        self._ttl = settings.token_review_cache_seconds
        self._negative_ttl = settings.token_review_negative_cache_seconds
        self._size = settings.token_review_cache_size
        self._timeout = settings.token_review_timeout_seconds
        self._cache: OrderedDict[bytes, tuple[float, Principal | AuthError]] = OrderedDict()
        self._pending: dict[bytes, asyncio.Task[Principal]] = {}
        self._backoff = 0.0
        self._blocked_until = 0.0
        self._post: Post | None = post
        self._client: httpx.AsyncClient | None = None
        self._token_file: Any = None
        self._sa_token = ""
        self._token_read = -math.inf
        self.calls = 0
        """API calls made (TokenReviews and access reviews): what the cache saves."""
        if post is None:
            from sardeenz.cluster.membership.kube_api import api_url

            if api_url(settings) is None:  # a one-line refusal at start, not a traceback
                raise ConfigError(
                    "SARDEENZ_TOKEN_REVIEW needs the Kubernetes API server: run in a pod "
                    "(KUBERNETES_SERVICE_HOST) or set SARDEENZ_KUBE_API_URL"
                )

    async def start(self) -> None:
        if self._post is not None:
            return
        from sardeenz.cluster.membership.kube_api import load_config

        config = await load_config(self._settings)  # ConfigError without an API server
        self._token_file = config.token_file
        self._namespace = config.namespace
        verify: Any = str(config.ca_file) if config.ca_file is not None else True
        self._client = httpx.AsyncClient(base_url=config.url, verify=verify)
        self._post = self._http_post

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        for task in list(self._pending.values()):
            task.cancel()

    # ------------------------------------------------------------------ review
    async def review(self, token: str) -> Principal:
        """The principal of ``token``: raises ``AuthError`` (401) when the API server
        refuses it, ``ReviewUnavailable`` (503) when it cannot say."""
        digest = hashlib.sha256(token.encode()).digest()
        now = _mono()
        held = self._cache.get(digest)
        if held is not None:
            expires, outcome = held
            if now < expires:
                if isinstance(outcome, AuthError):
                    raise AuthError(outcome.message, code=outcome.code)
                return outcome
            del self._cache[digest]
        pending = self._pending.get(digest)
        if pending is not None:
            return await asyncio.shield(pending)
        if now < self._blocked_until:
            wait = math.ceil(self._blocked_until - now)
            raise ReviewUnavailable(
                f"the Kubernetes API server did not answer token reviews; retrying in {wait} s",
                wait,
            )
        # A task of its own (owned here, cancelled by ``close``): a caller that goes away
        # (its client left) must not cancel the review the other callers wait for.
        task = asyncio.get_running_loop().create_task(self._settle(digest, token, now))
        self._pending[digest] = task
        task.add_done_callback(_retrieved)
        return await asyncio.shield(task)

    async def _settle(self, digest: bytes, token: str, now: float) -> Principal:
        """One review, remembered; bounded by the review deadline."""
        try:
            principal = await self._review(token, now + self._timeout)
        except AuthError as exc:
            self._remember(digest, exc, self._negative_ttl)
            raise
        finally:
            self._pending.pop(digest, None)
        self._remember(digest, principal, self._ttl)
        return principal

    def _remember(self, digest: bytes, outcome: Principal | AuthError, ttl: float) -> None:
        if ttl <= 0:
            return
        cache = self._cache
        cache[digest] = (_mono() + ttl, outcome)
        cache.move_to_end(digest)
        while len(cache) > self._size:
            cache.popitem(last=False)

    async def _review(self, token: str, deadline: float) -> Principal:
        spec: dict[str, Any] = {"token": token}
        if self._audiences:
            spec["audiences"] = self._audiences
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        try:
            status = await self._call(TOKEN_REVIEWS, body, deadline)
            if not status.get("authenticated"):
                why = str(status.get("error") or "not authenticated")[:200]
                raise AuthError(
                    f"the Kubernetes API server does not accept this token ({why})",
                    code="invalid_token",
                )
            user = status.get("user") or {}
            name = user.get("username")
            if not isinstance(name, str) or not name:
                raise AuthError("the token review names no user", code="invalid_token")
            groups = frozenset(g for g in user.get("groups") or () if isinstance(g, str))
            roles = {r for r, needed in self._role_groups.items() if groups & needed}
            # Admin implies read-only: a question whose answer changes nothing is not asked.
            asked = [
                r
                for r in self._role_access
                if r not in roles and not (r == Role.READONLY and Role.ADMIN in roles)
            ]
            if asked:
                # Every answer is awaited (one failing does not leave the others running
                # unobserved); the first failure is the review's.
                answers = await asyncio.gather(
                    *(self._allowed(user, self._role_access[r], deadline) for r in asked),
                    return_exceptions=True,
                )
                for answer in answers:
                    if isinstance(answer, BaseException):
                        raise answer
                roles.update(r for r, ok in zip(asked, answers, strict=True) if ok is True)
        except _NoAnswer as exc:
            self._backoff = min(max(self._backoff * 2, BACKOFF_FIRST), BACKOFF_MAX)
            self._blocked_until = _mono() + self._backoff
            log.warning(
                "token review: the Kubernetes API server gave no answer (%s); next try in %.1f s",
                exc,
                self._backoff,
            )
            raise ReviewUnavailable(
                f"the Kubernetes API server could not review the token: {exc}",
                max(1, math.ceil(self._backoff)),
            ) from None
        if self._backoff:
            log.warning("token review: the Kubernetes API server answers again")
        self._backoff = 0.0
        return Principal(subject=name, roles=frozenset(roles), authenticated=True, groups=groups)

    async def _allowed(
        self, user: dict[str, Any], attributes: dict[str, str], deadline: float
    ) -> bool:
        spec: dict[str, Any] = {
            "user": user.get("username"),
            "groups": user.get("groups") or [],
            "resourceAttributes": {"namespace": self._namespace, **attributes},
        }
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        return bool((await self._call(ACCESS_REVIEWS, body, deadline)).get("allowed"))

    async def _call(self, path: str, body: dict[str, Any], deadline: float) -> dict[str, Any]:
        """The ``status`` of one review, retried with backoff until ``deadline``."""
        post = self._post
        assert post is not None, "TokenReviewer.start() first"
        delay = RETRY_FIRST
        while True:
            left = deadline - _mono()
            if left <= 0:
                raise _NoAnswer(f"no answer within {self._timeout:g} s")
            try:
                self.calls += 1
                resp = await post(path, body, left)
                return _status_of(resp, path)
            except httpx.TimeoutException:
                raise _NoAnswer(f"no answer within {self._timeout:g} s") from None
            except httpx.HTTPError as exc:
                error: _NoAnswer = _NoAnswer(f"{type(exc).__name__}: {exc}"[:200])
            except _NoAnswer as exc:
                error = exc
            if not error.retry or deadline - _mono() <= delay:
                raise error
            await asyncio.sleep(delay)
            delay *= 2

    async def _http_post(self, path: str, body: dict[str, Any], seconds: float) -> httpx.Response:
        client = self._client
        assert client is not None
        if _mono() - self._token_read > TOKEN_REREAD_SECONDS:
            self._token_read = _mono()
            self._sa_token = await asyncio.to_thread(_read_token, self._token_file)
        headers = {"authorization": f"Bearer {self._sa_token}"} if self._sa_token else {}
        return await client.post(path, json=body, headers=headers, timeout=seconds)


def _retrieved(task: asyncio.Task[Principal]) -> None:
    """Every caller may have left: the outcome is read here, so none is 'never retrieved'."""
    if not task.cancelled():
        task.exception()


def _read_token(path: Any) -> str:
    try:
        return str(path.read_text().strip())
    except OSError as exc:
        log.error("token review: cannot read the ServiceAccount token %s: %s", path, exc)
        return ""


def _status_of(resp: httpx.Response, path: str) -> dict[str, Any]:
    """The review's ``status``; a reply that is no answer raises ``_NoAnswer``."""
    code = resp.status_code
    if code in (401, 403):
        # Sardeenz's own ServiceAccount is refused: retrying will not help, and the
        # operator must grant it (deploy/kubernetes: tokenreviews/subjectaccessreviews create).
        raise _NoAnswer(
            f"HTTP {code}: Sardeenz's ServiceAccount may not create "
            f"{path.rsplit('/', 1)[-1]}"
            " (grant it the ClusterRole of deploy/kubernetes)",
            retry=False,
        )
    if code == 429 or code >= 500:
        raise _NoAnswer(f"HTTP {code}")
    if code not in (200, 201):
        raise _NoAnswer(f"HTTP {code}: {resp.text[:200]}", retry=False)
    try:
        data = resp.json()
    except ValueError:
        raise _NoAnswer("a reply that is not JSON", retry=False) from None
    status = data.get("status") if isinstance(data, dict) else None
    if not isinstance(status, dict):
        raise _NoAnswer("a reply without a status", retry=False)
    return status
