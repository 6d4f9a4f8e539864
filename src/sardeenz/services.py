"""The services of one node, built once by the app and shared by routers."""

from __future__ import annotations

from dataclasses import dataclass

from sardeenz.bench.runner import BenchmarkRunner
from sardeenz.catalog.demand import OnDemand
from sardeenz.catalog.external import ExternalServers
from sardeenz.catalog.reaper import IdleReaper
from sardeenz.catalog.registry import Catalog
from sardeenz.cluster.manager import ClusterManager
from sardeenz.config import Settings
from sardeenz.domain import LoadRequest, ModelInstance
from sardeenz.engines.vllm_probe import VllmInstall, VllmProbe
from sardeenz.events import EventBus
from sardeenz.gpu.budget import GpuBudget, compute_budget
from sardeenz.gpu.inventory import GpuInfo, GpuInventory
from sardeenz.gpu.kvcached import Kvctl, SegmentTracker
from sardeenz.memory.ledger import MemoryLedger
from sardeenz.memory.profiles import ProfileService
from sardeenz.metrics_history import MetricsHistory
from sardeenz.proxy.forwarder import InferenceProxy
from sardeenz.proxy.routing import RoutingTable, RoutingUpdater
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.security.audit import AuditTrail
from sardeenz.security.auth import ApiKeys, Authenticator
from sardeenz.store.db import Database


@dataclass
class Services:
    settings: Settings
    bus: EventBus
    db: Database
    supervisor: Supervisor
    inventory: GpuInventory
    ledger: MemoryLedger
    vllm_probe: VllmProbe
    segments: SegmentTracker
    kvctl: Kvctl
    routing: RoutingTable
    proxy: InferenceProxy
    routing_updater: RoutingUpdater
    auth: Authenticator
    api_keys: ApiKeys
    audit: AuditTrail
    profiles: ProfileService
    benchmarks: BenchmarkRunner
    catalog: Catalog
    ondemand: OnDemand
    reaper: IdleReaper
    cluster: ClusterManager
    metrics_history: MetricsHistory
    """The dashboard charts' last hour, sampled in the server (metrics_history.py)."""
    started: bool = False
    stopping: bool = False
    external: ExternalServers | None = None
    """The catalog's ``engine: external`` servers (health checks, routes)."""

    async def load_model(self, req: LoadRequest) -> ModelInstance:
        """Load through the supervisor; the memory ledger admits it (the same verdict
        ``POST /api/memory/profiles/check`` answers, refused with 409
        ``model_does_not_fit`` unless ``force``; an unknown verdict never blocks)."""
        return await self.supervisor.load(req)

    async def vllm_install(self) -> VllmInstall:
        """The vLLM install this node would launch (probed once per controller).

        A narrow method so the API never reaches into the supervisor's parts;
        where the probe lives is this object's business.
        """
        return await self.vllm_probe.get()

    def gpu_budgets(self, gpus: list[GpuInfo]) -> list[GpuBudget]:
        """Per-GPU budget of a snapshot: model baselines, other processes, KV cache total."""
        sup = self.supervisor
        return compute_budget(gpus, sup.baselines_bytes(), instance_pids=sup.instance_pids())
