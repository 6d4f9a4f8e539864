"""The Kubernetes API as Kubernetes mode uses it: configuration, calls, RBAC problems.

In a pod the defaults need no setting: the API server is
``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`` and the
ServiceAccount's ``token``, ``ca.crt`` and ``namespace`` are in
``/var/run/secrets/kubernetes.io/serviceaccount``. ``SARDEENZ_KUBE_API_URL``
and ``SARDEENZ_KUBE_SERVICE_ACCOUNT_DIR`` override them (tests, or a node
outside the cluster with ``SARDEENZ_CLUSTER_MODE=kubernetes``).

Every call has a timeout (``SARDEENZ_KUBE_REQUEST_TIMEOUT_SECONDS``); files
are read off the event loop, and the token is read again every minute (the
kubelet rotates projected tokens). A 403 becomes a :class:`RbacProblem`: one
ERROR log line and one ``warnings`` entry of ``GET /api/cluster/status``
naming the verb, the resource, the namespace and the Role that must grant it;
it goes away (logged) when the same call is allowed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sardeenz.cluster.membership.kube_lease import LeaseTiming
from sardeenz.config import ConfigError, Settings

log = logging.getLogger(__name__)

LEASE_NAME = "sardeenz-leader"
POD_SELECTOR = "app=sardeenz"
ROLE_HINT = "the Role bound to this pod's ServiceAccount (deploy/kubernetes/base/rbac.yaml)"
TOKEN_REREAD_SECONDS = 60.0

GROUPS = {"leases": "coordination.k8s.io", "pods": "", "configmaps": ""}


def lease_timing(settings: Settings) -> LeaseTiming:
    return LeaseTiming(
        duration=settings.kube_lease_duration_seconds,
        renew_deadline=settings.kube_renew_deadline_seconds,
        renew_interval=settings.kube_renew_interval_seconds,
        retry_period=settings.kube_retry_period_seconds,
    )


def api_url(settings: Settings, environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    if settings.kube_api_url:
        return settings.kube_api_url.rstrip("/")
    host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
    if not host:
        return None
    port = env.get("KUBERNETES_SERVICE_PORT", "443").strip() or "443"
    return f"https://{f'[{host}]' if ':' in host else host}:{port}"


def check_kube_settings(settings: Settings, environ: Mapping[str, str] | None = None) -> None:
    """Raise ``ConfigError`` (one line) for a Kubernetes mode that cannot work."""
    if api_url(settings, environ) is None:
        raise ConfigError(
            "Kubernetes cluster mode needs the API server: set KUBERNETES_SERVICE_HOST "
            "(every pod has it) or SARDEENZ_KUBE_API_URL"
        )
    try:
        lease_timing(settings)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class KubeConfig:
    url: str
    token_file: Path
    ca_file: Path | None
    namespace: str


def _read_config(settings: Settings, url: str) -> KubeConfig:
    """Blocking (file reads): run in a thread."""
    sa = settings.kube_service_account_dir
    namespace = settings.namespace
    if "namespace" not in settings.model_fields_set:
        with contextlib.suppress(OSError):
            namespace = (sa / "namespace").read_text().strip() or namespace
    ca = sa / "ca.crt"
    return KubeConfig(url, sa / "token", ca if ca.is_file() else None, namespace)


async def load_config(settings: Settings) -> KubeConfig:
    url = api_url(settings)
    if url is None:  # check_kube_settings ran at start-up; this is a programming error
        raise ConfigError("no Kubernetes API server configured")
    return await asyncio.to_thread(_read_config, settings, url)


@dataclass(frozen=True, slots=True)
class RbacProblem:
    verb: str
    resource: str
    namespace: str
    server_says: str

    def __str__(self) -> str:
        group = GROUPS.get(self.resource, "")
        return (
            f"Kubernetes RBAC: {self.server_says or 'forbidden'} (403). Sardeenz needs to "
            f"{self.verb} {self.resource} in namespace {self.namespace!r}: {ROLE_HINT} must "
            f'grant apiGroups ["{group}"] resources ["{self.resource}"] verbs ["{self.verb}"]'
        )


def status_code(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def describe(exc: BaseException) -> str:
    """One line for the log: the status and reason of an API error, else the exception."""
    if isinstance(exc, KubeError):
        return str(exc)
    status = status_code(exc)
    if status is not None:
        return f"HTTP {status} {getattr(exc, 'reason', '')}".strip()
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _server_message(exc: BaseException) -> str:
    """The Status message of an ApiException or a KubeError."""
    if isinstance(exc, KubeError):
        return exc.message
    body = getattr(exc, "body", None)
    if body:
        try:
            message = json.loads(body).get("message")
            if isinstance(message, str):
                return message
        except (ValueError, AttributeError):
            pass
    reason = str(getattr(exc, "reason", "") or "")
    return reason.partition(": ")[2] or reason


class KubeApi:
    """One ``kubernetes_asyncio`` ApiClient for the Lease and the pod watch."""

    def __init__(self, config: KubeConfig, timeout: float) -> None:
        self.config = config
        self.namespace = config.namespace
        self.timeout = timeout
        self.problems: dict[tuple[str, str], RbacProblem] = {}
        self._client: Any = None
        self._token_read = float("-inf")

    async def open(self) -> None:
        from kubernetes_asyncio import client  # only Kubernetes mode pays for the import

        token = await asyncio.to_thread(self._read_token)
        cfg = client.Configuration(
            host=self.config.url,
            api_key={"BearerToken": token},
            api_key_prefix={"BearerToken": "Bearer"},
        )
        if self.config.ca_file is not None:
            # RESTClientObject reads this file when the client is made: once, at start-up.
            cfg.ssl_ca_cert = str(self.config.ca_file)
        self._client = client.ApiClient(configuration=cfg)
        self._token_read = time.monotonic()

    async def close(self) -> None:
        api, self._client = self._client, None
        if api is not None:
            await api.close()

    def _read_token(self) -> str:
        try:
            return self.config.token_file.read_text().strip()
        except OSError as exc:
            log.error("Kubernetes: cannot read the ServiceAccount token: %s", exc)
            return ""

    async def _fresh(self) -> Any:
        """The client, with the token re-read when it is a minute old."""
        api = self._client
        assert api is not None, "KubeApi.open() first"
        if time.monotonic() - self._token_read > TOKEN_REREAD_SECONDS:
            self._token_read = time.monotonic()
            token = await asyncio.to_thread(self._read_token)
            if token:
                api.configuration.api_key["BearerToken"] = token
        return api

    # ------------------------------------------------------------- problems
    def forbidden(self, verb: str, resource: str, exc: BaseException) -> RbacProblem:
        problem = RbacProblem(verb, resource, self.namespace, _server_message(exc))
        if self.problems.get((verb, resource)) != problem:
            log.error("%s", problem)
        self.problems[(verb, resource)] = problem
        return problem

    def allowed(self, verb: str, resource: str) -> None:
        if self.problems.pop((verb, resource), None) is not None:
            log.warning("Kubernetes RBAC: %s %s is allowed now", verb, resource)

    def not_needed(self, verb: str, resource: str, why: str) -> None:
        """A refused call this pod has no need to make now (the Lease another pod created):
        its warning goes, and comes back if the call is needed and refused again."""
        if self.problems.pop((verb, resource), None) is not None:
            log.warning("Kubernetes RBAC: %s %s is not needed now (%s)", verb, resource, why)

    def warnings(self) -> list[str]:
        return [str(p) for _, p in sorted(self.problems.items())]

    # ---------------------------------------------------------------- Lease
    async def read_lease(self) -> Any:
        from kubernetes_asyncio import client

        api = client.CoordinationV1Api(await self._fresh())
        return await api.read_namespaced_lease(
            LEASE_NAME, self.namespace, _request_timeout=self.timeout
        )

    async def create_lease(self, body: Any) -> Any:
        from kubernetes_asyncio import client

        api = client.CoordinationV1Api(await self._fresh())
        return await api.create_namespaced_lease(
            self.namespace, body, _request_timeout=self.timeout
        )

    async def replace_lease(self, body: Any) -> Any:
        from kubernetes_asyncio import client

        api = client.CoordinationV1Api(await self._fresh())
        return await api.replace_namespaced_lease(
            LEASE_NAME, self.namespace, body, _request_timeout=self.timeout
        )

    # ----------------------------------------------------------------- pods
    async def list_pods(self) -> dict[str, Any]:
        """The ``app=sardeenz`` pods as the API's JSON (a PodList)."""
        from kubernetes_asyncio import client

        api = client.CoreV1Api(await self._fresh())
        resp: Any = await api.list_namespaced_pod(
            self.namespace,
            label_selector=POD_SELECTOR,
            _preload_content=False,
            _request_timeout=self.timeout,
        )
        # Unpreloaded, the client raises on no status: a 403's Status object would
        # otherwise read as an empty pod list (every peer gone, no RBAC warning).
        return await _json_reply(resp, (200,))

    async def pod_events(
        self, resource_version: str, seconds: int
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch events of the ``app=sardeenz`` pods (:meth:`_events`)."""
        from kubernetes_asyncio import client

        api = client.CoreV1Api(await self._fresh())
        async for event in self._events(
            api.list_namespaced_pod, "pods", resource_version, seconds, POD_SELECTOR
        ):
            yield event

    # ----------------------------------------------------------- ConfigMaps
    async def list_config_maps(
        self, selector: str, field_selector: str | None = None
    ) -> dict[str, Any]:
        """The ConfigMaps matching ``selector`` as the API's JSON (a ConfigMapList); a
        list without a resourceVersion is a consistent read (from etcd's quorum)."""
        from kubernetes_asyncio import client

        api = client.CoreV1Api(await self._fresh())
        resp: Any = await api.list_namespaced_config_map(
            self.namespace,
            label_selector=selector,
            field_selector=field_selector or "",
            _preload_content=False,
            _request_timeout=self.timeout,
        )
        return await _json_reply(resp, (200,))

    async def create_config_map(self, body: Any) -> dict[str, Any]:
        """Create; 409 (AlreadyExists) raises :class:`KubeError` as every refusal does."""
        from kubernetes_asyncio import client

        api = client.CoreV1Api(await self._fresh())
        resp: Any = await api.create_namespaced_config_map(
            self.namespace, body, _preload_content=False, _request_timeout=self.timeout
        )
        return await _json_reply(resp, (200, 201))

    async def replace_config_map(self, name: str, body: Any) -> dict[str, Any]:
        """Update guarded by the body's ``metadata.resourceVersion``: 409 Conflict when
        another write came first."""
        from kubernetes_asyncio import client

        api = client.CoreV1Api(await self._fresh())
        resp: Any = await api.replace_namespaced_config_map(
            name, self.namespace, body, _preload_content=False, _request_timeout=self.timeout
        )
        return await _json_reply(resp, (200,))

    async def config_map_events(
        self, selector: str, resource_version: str, seconds: int
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch events of the ConfigMaps matching ``selector`` (:meth:`_events`)."""
        from kubernetes_asyncio import client

        api = client.CoreV1Api(await self._fresh())
        async for event in self._events(
            api.list_namespaced_config_map, "configmaps", resource_version, seconds, selector
        ):
            yield event

    # ---------------------------------------------------------------- watch
    async def _events(
        self, list_call: Any, resource: str, resource_version: str, seconds: int, selector: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch events (``{type, object}``, JSON) from ``resource_version`` until the
        server ends the watch after ``seconds``. An ERROR event (410 Gone: the version
        is too old) or a refused watch raises :class:`KubeError` with its code.

        Read line by line here rather than with ``kubernetes_asyncio.watch.Watch``, which
        makes a second ApiClient (loading the system CA bundle, on the loop) per watch.
        """
        import aiohttp

        resp: Any = await list_call(
            self.namespace,
            label_selector=selector,
            watch=True,
            resource_version=resource_version,
            timeout_seconds=seconds,
            allow_watch_bookmarks=True,
            _preload_content=False,
            # Connect within the timeout; then silence longer than the watch itself
            # (plus the timeout) means a dead connection.
            _request_timeout=aiohttp.ClientTimeout(
                sock_connect=self.timeout, sock_read=seconds + self.timeout
            ),
        )
        try:
            if resp.status != 200:
                raise KubeError(resp.status, _status_message(await resp.read()))
            # Accepted: a watch of an idle namespace may carry no event for minutes, and
            # a restored Role's warning must not wait for one.
            self.allowed("watch", resource)
            async for line in resp.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                if not isinstance(event, dict):
                    continue
                obj = event.get("object")
                if event.get("type") == "ERROR" and isinstance(obj, dict):
                    raise KubeError(int(obj.get("code") or 500), str(obj.get("message", "")))
                yield event
        finally:
            resp.release()


async def _json_reply(resp: Any, ok: tuple[int, ...]) -> dict[str, Any]:
    """The JSON object of an unpreloaded reply; any other status raises :class:`KubeError`
    (unpreloaded, the client raises on none: a Status object would otherwise read as data)."""
    try:
        body = await resp.read()
    finally:
        resp.release()
    if resp.status not in ok:
        raise KubeError(resp.status, _status_message(body))
    data = json.loads(body)
    if not isinstance(data, dict):
        raise KubeError(502, "an API reply that is not an object")
    return data


class KubeError(Exception):
    """A failed call of the raw (JSON) paths; ``status`` as an ApiException has it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def _status_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body[:200].decode(errors="replace")
    message = data.get("message") if isinstance(data, dict) else None
    return message if isinstance(message, str) else ""
