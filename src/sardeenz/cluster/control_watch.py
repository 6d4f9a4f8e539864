"""Kubernetes mode: every pod's view of the control ConfigMaps, level-triggered.

List the ``sardeenz.io/control=document`` ConfigMaps (a consistent read),
then watch from the list's resourceVersion (membership/kube_watch.py's loop,
the pod watch's: resumed from the last version seen, listed again on 410
Gone, backoff and RBAC warnings). So the view converges to the API server's
whatever was missed: a pod that was restarted or partitioned lists on its
way back, one whose watch broke resumes from the version it had.

What a ConfigMap means is the sink's (cluster/control_kube.py).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from sardeenz.cluster.control_configmap import SELECTOR, key_of, name_of
from sardeenz.cluster.membership.kube_api import KubeApi
from sardeenz.cluster.membership.kube_watch import list_then_watch, watch_seconds
from sardeenz.cluster.replicated import KEYS

log = logging.getLogger(__name__)

RESOURCE = "configmaps"


class Sink(Protocol):
    async def observe(self, obj: dict[str, Any], *, fresh: bool) -> None:
        """A control ConfigMap as the API server holds it (``fresh``: from a list)."""

    def gone(self, key: str) -> None:
        """No ConfigMap holds ``key`` (deleted, or never written)."""


class ConfigMapWatch:
    def __init__(self, api: KubeApi, sink: Sink, retry: float) -> None:
        self._api = api
        self._sink = sink
        self._retry = retry
        self.listed = False
        """A list has succeeded: what is missing from the view is missing in the API."""

    async def run(self) -> None:
        await list_then_watch(
            self._api, RESOURCE, lambda: self.relist(self._api), self._watch, self._retry
        )

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

    async def _watch(self, version: str) -> str:
        """One watch from ``version``; the last version seen when the server ends it."""
        events = self._api.config_map_events(SELECTOR, version, watch_seconds())
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
