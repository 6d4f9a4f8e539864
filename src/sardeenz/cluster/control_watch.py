"""Kubernetes mode: every pod's view of the control ConfigMaps, level-triggered.

List the ``sardeenz.io/control=document`` ConfigMaps (a consistent read),
then watch from the list's resourceVersion, resuming each watch from the last
version seen (bookmarks included). 410 Gone (the version left the API
server's window), a refused or broken watch, any failure: list again, after a
backoff (the retry period doubling up to 30 s) when it failed. So the view
converges to the API server's whatever was missed: a pod that was restarted
or partitioned lists on its way back. A 403 becomes an RBAC warning
(cluster/membership/kube_api.py), as for the pod watch.

What a ConfigMap means is the sink's (cluster/control_kube.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any, Protocol

from sardeenz.cluster.control_configmap import SELECTOR, key_of, name_of
from sardeenz.cluster.membership.kube_api import KubeApi, describe, status_code
from sardeenz.cluster.replicated import KEYS

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 30.0
WATCH_SECONDS = (240, 360)
"""Each watch asks the server to end it within this range (spread, as client-go does)."""
RESOURCE = "configmaps"


class Sink(Protocol):
    async def observe(self, obj: dict[str, Any], *, fresh: bool) -> None:
        """A control ConfigMap as the API server holds it (``fresh``: from a list)."""

    def gone(self, key: str) -> None:
        """No ConfigMap holds ``key`` (deleted, or never written)."""


class ConfigMapWatch:
    def __init__(self, api: Callable[[], KubeApi | None], sink: Sink, retry: float) -> None:
        self._api = api
        self._sink = sink
        self._retry = retry
        self.listed = False
        """A list has succeeded: what is missing from the view is missing in the API."""

    async def run(self) -> None:
        failures = 0
        version: str | None = None  # None: list (again)
        while True:
            verb = "list" if version is None else "watch"
            api = self._api()
            try:
                if api is None:
                    raise RuntimeError("the Kubernetes API client is not started")
                version = await (self.relist(api) if version is None else self._watch(api, version))
                failures = 0
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                status = status_code(exc)
                if status == 410:
                    log.info("Kubernetes: control ConfigMap watch expired (410 Gone): listing")
                    version = None
                    continue
                if status == 403 and api is not None:
                    api.forbidden(verb, RESOURCE, exc)
                else:
                    log.warning("Kubernetes: control ConfigMap %s failed: %s", verb, describe(exc))
                version = None
            failures += 1
            delay = min(MAX_BACKOFF_SECONDS, self._retry * 2 ** (failures - 1))
            await asyncio.sleep(delay * (0.8 + 0.4 * random.random()))

    async def relist(self, api: KubeApi) -> str:
        """The whole state now; the resourceVersion to watch from."""
        data = await api.list_config_maps(SELECTOR)
        api.allowed("list", RESOURCE)
        seen: set[str] = set()
        for obj in data.get("items") or []:
            key = key_of(str((obj.get("metadata") or {}).get("name") or ""))
            if key is not None:
                seen.add(key)
                await self._sink.observe(obj, fresh=True)
        for key in set(KEYS) - seen:
            self._sink.gone(key)
        self.listed = True
        return str((data.get("metadata") or {}).get("resourceVersion") or "")

    async def _watch(self, api: KubeApi, version: str) -> str:
        """One watch from ``version``; the last version seen when the server ends it."""
        events = api.config_map_events(SELECTOR, version, random.randint(*WATCH_SECONDS))
        try:
            async for event in events:
                obj = event.get("object") or {}
                seen = (obj.get("metadata") or {}).get("resourceVersion")
                if seen:
                    version = str(seen)
                kind = event.get("type")
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    key = key_of(str((obj.get("metadata") or {}).get("name") or ""))
                    if key is not None:
                        log.warning("control state: ConfigMap %s deleted", name_of(key))
                        self._sink.gone(key)
                    continue
                await self._sink.observe(obj, fresh=False)
        finally:
            await events.aclose()
        return version
