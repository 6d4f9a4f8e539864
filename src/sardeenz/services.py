"""The services of one node, built once by the app and shared by routers."""

from __future__ import annotations

from dataclasses import dataclass

from sardeenz.bench.runner import BenchmarkRunner
from sardeenz.catalog.demand import OnDemand
from sardeenz.catalog.external import ExternalServers
from sardeenz.catalog.reaper import IdleReaper
from sardeenz.catalog.registry import Catalog
from sardeenz.catalog.warmup import WarmUp
from sardeenz.cluster.control_state import ControlRegister
from sardeenz.cluster.locator import InstanceLocator
from sardeenz.cluster.manager import ClusterManager
from sardeenz.cluster.moves import MoveService
from sardeenz.cluster.observe import RequestCollector
from sardeenz.cluster.ondemand import ClusterStarts
from sardeenz.cluster.placement import ClusterPlacement
from sardeenz.cluster.preset_service import PresetService
from sardeenz.cluster.profile_sync import ProfileSync
from sardeenz.cluster.stewards import Stewards
from sardeenz.config import Settings
from sardeenz.domain import EngineKind, LoadRequest, ModelInstance
from sardeenz.engines import get_adapter
from sardeenz.engines.vllm_probe import VllmInstall, VllmProbe
from sardeenz.errors import NotFound
from sardeenz.events import EventBus
from sardeenz.gpu.budget import GpuBudget, compute_budget
from sardeenz.gpu.inventory import GpuInfo, GpuInventory
from sardeenz.gpu.kvcached import Kvctl, SegmentTracker
from sardeenz.memory.kvlimits import KvcachedLimits
from sardeenz.memory.ledger import MemoryLedger
from sardeenz.memory.profiles import ProfileService
from sardeenz.metrics_history import MetricsHistory
from sardeenz.proxy import metrics as proxy_metrics
from sardeenz.proxy.forwarder import InferenceProxy
from sardeenz.proxy.history import RequestHistory
from sardeenz.proxy.routing import RoutingTable, RoutingUpdater
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.security.audit import AuditTrail
from sardeenz.security.auth import ApiKeys, Authenticator
from sardeenz.store.db import Database
from sardeenz.telemetry.node import NodeSampler
from sardeenz.telemetry.resources import ResourceMetrics, resource_metrics


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
    kv_limits: KvcachedLimits
    """Keeps every kvcached segment's limit within its GPU's KV room (memory/kvlimits.py)."""
    routing: RoutingTable
    proxy: InferenceProxy
    routing_updater: RoutingUpdater
    auth: Authenticator
    api_keys: ApiKeys
    audit: AuditTrail
    requests: RequestHistory
    profiles: ProfileService
    benchmarks: BenchmarkRunner
    catalog: Catalog
    ondemand: OnDemand
    reaper: IdleReaper
    warmup: WarmUp
    cluster: ClusterManager
    locator: InstanceLocator
    """Where an instance lives; every action on one, here or on its pod (cluster/locator.py)."""
    control: ControlRegister
    """The cluster's replicated control state (cluster/control_state.py)."""
    moves: MoveService
    placement: ClusterPlacement
    """The leader's scheduler acting on loads without ``podId`` (cluster/placement.py)."""
    starts: ClusterStarts
    """On-demand starts placed by the leader (cluster/ondemand.py)."""
    profile_sync: ProfileSync
    """Memory profiles shared across the cluster (cluster/profile_sync.py)."""
    presets: PresetService
    """Desired states: storage, distribution, apply, reconcile (cluster/preset_service.py)."""
    stewards: Stewards
    """Which instances the applied preset or the catalog manages (cluster/stewards.py)."""
    node: NodeSampler
    """Memory samples for ``/metrics`` and ``ResourceMetrics`` (taken when asked)."""
    metrics_history: MetricsHistory
    """The dashboard charts' last hour, sampled in the server (metrics_history.py)."""
    collector: RequestCollector
    """Cluster mode: pulls every other pod's request log and usage (cluster/observe.py)."""
    started: bool = False
    stopping: bool = False
    external: ExternalServers | None = None
    """The catalog's ``engine: external`` servers (health checks, routes)."""

    async def load_model(self, req: LoadRequest) -> ModelInstance:
        """Load through the supervisor; the memory ledger admits it (the same verdict
        ``POST /api/memory/profiles/check`` answers, refused with 409
        ``model_does_not_fit`` unless ``force``; an unknown verdict never blocks).

        In a cluster the instance is created where ``podId`` says (the leader's fenced
        order to that pod), or where the leader's scheduler places it; a single node
        loads here."""
        if req.pod_id is not None:
            remote = await self.cluster.load_on(req.pod_id, req)
        else:
            remote = await self.placement.place(req)
        if remote is not None:
            return remote
        return await self.supervisor.load(req)

    async def vllm_install(self, refresh: bool = False) -> VllmInstall:
        """The vLLM install this node would launch (see ``VllmProbe`` for when it is re-probed).

        A narrow method so the API never reaches into the supervisor's parts;
        where the probe lives is this object's business.
        """
        return await self.vllm_probe.get(refresh)

    async def require_engine(self, engine: object) -> None:
        """Raise ``engine_unavailable`` (409) when ``engine``, named explicitly, cannot run here.

        The same check a load makes (the adapter's ``target``), for what would load later:
        a catalog entry added through the API. An entry that names no engine takes the
        default when it starts (which may change by then), so it is not checked now.
        """
        if isinstance(engine, EngineKind):
            refusal = (await get_adapter(engine).target(self.vllm_probe)).refusal
            if refusal is not None:
                raise refusal

    async def resource_metrics(self) -> list[ResourceMetrics]:
        """The seed's ``ResourceMetrics`` of every instance of this node."""
        return await measure_resources(self.node, self.proxy, self.requests)

    def gpu_budgets(self, gpus: list[GpuInfo]) -> list[GpuBudget]:
        """Per-GPU budget of a snapshot: model baselines, other processes, KV cache total."""
        sup = self.supervisor
        return compute_budget(gpus, sup.baselines_bytes(), instance_pids=sup.instance_pids())


async def measure_resources(
    node: NodeSampler,
    proxy: InferenceProxy,
    requests: RequestHistory,
    instance_id: str | None = None,
) -> list[ResourceMetrics]:
    """The seed's ``ResourceMetrics`` of this node's instances (or of one), measured now."""
    sample = await node.sample()
    answered = await requests.answered_by_instance()
    return [
        resource_metrics(
            inst,
            sample.held.get(inst.id, {}),
            sample.at,
            proxy_metrics.peek(inst.served_model_name),
            proxy.inflight.count(inst.id),
            answered.get(inst.id),
        )
        for inst in sample.instances
        if instance_id is None or inst.id == instance_id
    ]


async def measure_instance(
    node: NodeSampler, proxy: InferenceProxy, requests: RequestHistory, instance_id: str
) -> ResourceMetrics:
    """One instance of this node (404 ``instance_not_found`` when it has none such)."""
    found = await measure_resources(node, proxy, requests, instance_id)
    if not found:
        raise NotFound(f"no instance with id {instance_id!r}", code="instance_not_found")
    return found[0]
