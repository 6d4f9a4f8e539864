"""Kubernetes mode: the owner of the API client, the Lease election and the pod watch.

Membership starts it (besides the heartbeat driver it shares with
static mode) and stops it at shutdown: the two tasks are cancelled, the
leader releases the Lease, the client is closed. Start-up never fails on the
API: a pod that cannot reach it, or is refused (403), serves its own models,
leads nothing (admin writes answer 503 ``no_leader``) and reports why in the
log and in ``warnings`` of ``GET /api/cluster/status``, retrying with backoff
until the Role is fixed; no restart is needed, and no crash loop hides the
message.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from sardeenz.cluster.membership.kube_api import LEASE_NAME, POD_SELECTOR, KubeApi, load_config
from sardeenz.cluster.membership.kube_discovery import PodMembers, PodWatcher
from sardeenz.cluster.membership.kube_elector import LeaseElector
from sardeenz.cluster.membership.kube_lease import LeaseElection
from sardeenz.tasks import stop_task

if TYPE_CHECKING:
    from sardeenz.cluster.membership.service import Membership

log = logging.getLogger(__name__)


class KubeCluster:
    def __init__(self, membership: Membership, state: LeaseElection) -> None:
        self._m = membership
        self._state = state
        self._api: KubeApi | None = None
        self._elector: LeaseElector | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        m = self._m
        config = await load_config(m.settings)
        api = self._api = KubeApi(config, m.settings.kube_request_timeout_seconds)
        await api.open()
        self._elector = LeaseElector(m, api, self._state)
        watcher = PodWatcher(
            PodMembers(m), api, self._state.timing.retry_period, m.identity.address.port
        )
        log.info(
            "cluster: Kubernetes mode as %s (%s) in namespace %s: Lease %s, pods %s, API %s",
            m.identity.pod_id,
            m.identity.address,
            config.namespace,
            LEASE_NAME,
            POD_SELECTOR,
            config.url,
        )
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._elector.run(), name="sardeenz-kube-lease"),
            loop.create_task(watcher.run(), name="sardeenz-kube-pods"),
        ]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            await stop_task(task)
        if self._elector is not None:
            await self._elector.release()
        api, self._api = self._api, None
        if api is not None:
            await api.close()

    def warnings(self) -> list[str]:
        return self._api.warnings() if self._api is not None else []

    @property
    def api(self) -> KubeApi | None:
        """The API client while started: the control state keeps its ConfigMaps with it
        (cluster/control_kube.py), so their RBAC problems are reported with the others."""
        return self._api
