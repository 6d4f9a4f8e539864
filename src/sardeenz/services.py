"""The services of one node, built once by the app (app.py) and shared by routers."""

from __future__ import annotations

from dataclasses import dataclass

from sardeenz.bench.runner import BenchmarkRunner
from sardeenz.catalog.demand import OnDemand
from sardeenz.catalog.external import ExternalServers
from sardeenz.catalog.reaper import IdleReaper
from sardeenz.catalog.registry import Catalog
from sardeenz.catalog.warmup import WarmUp
from sardeenz.cluster.adapter_orders import AdapterOrders
from sardeenz.cluster.control import ControlState
from sardeenz.cluster.handover import PodSide
from sardeenz.cluster.loads import Loads
from sardeenz.cluster.locator import InstanceLocator
from sardeenz.cluster.manager import ClusterManager
from sardeenz.cluster.moves import MoveService
from sardeenz.cluster.observe import RequestCollector
from sardeenz.cluster.ondemand import ClusterStarts
from sardeenz.cluster.placement import ClusterPlacement
from sardeenz.cluster.preset_service import PresetService
from sardeenz.cluster.profile_sync import ProfileSync
from sardeenz.cluster.stewards import Stewards
from sardeenz.cluster.tenant_shares import TenantShares
from sardeenz.cluster.view import ClusterView
from sardeenz.config import Settings
from sardeenz.engines.availability import EngineAvailability
from sardeenz.engines.vllm_probe import VllmProbe
from sardeenz.events import EventBus
from sardeenz.gpu.budget import GpuBudgets
from sardeenz.gpu.inventory import GpuInventory
from sardeenz.gpu.kvcached import Kvctl, SegmentTracker
from sardeenz.memory.kvlimits import KvcachedLimits
from sardeenz.memory.ledger import MemoryLedger
from sardeenz.memory.profiles import ProfileService
from sardeenz.metrics_history import MetricsHistory
from sardeenz.proxy.forwarder import InferenceProxy
from sardeenz.proxy.history import RequestHistory
from sardeenz.proxy.routing import RoutingTable, RoutingUpdater
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.security.audit import AuditTrail
from sardeenz.security.auth import ApiKeys, Authenticator
from sardeenz.store.db import Database
from sardeenz.telemetry.measure import ResourceMeter
from sardeenz.telemetry.node import NodeSampler
from sardeenz.tenancy.service import TenantService
from sardeenz.tenancy.usage import UsageService


@dataclass
class Services:
    """What the routers and the lifespan reach: every service of the node, built once
    by ``app.build_services``. A field is a service with its own narrow methods; this
    class has no behaviour of its own (each responsibility lives in its module)."""

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
    adapter_orders: AdapterOrders
    reaper: IdleReaper
    warmup: WarmUp
    cluster: ClusterManager
    """Builds and starts/stops the cluster core (cluster/manager.py); routers use ``view``."""
    view: ClusterView
    """Every pod's instances and GPUs, and the cluster status (cluster/view.py)."""
    loads: Loads
    """Where a load goes: ``podId``, the leader's scheduler, or here (cluster/loads.py)."""
    engines: EngineAvailability
    """The vLLM install this node would launch; can an engine run here (engines/availability.py)."""
    budgets: GpuBudgets
    """Per-GPU budgets of this node's engines (gpu/budget.py)."""
    meter: ResourceMeter
    pod_side: PodSide
    """This pod's side of a move's steps (cluster/handover.py), served under ``/internal``."""
    """The seed's ``ResourceMetrics`` of this node's instances (telemetry/measure.py)."""
    locator: InstanceLocator
    """Where an instance lives; every action on one, here or on its pod (cluster/locator.py)."""
    control: ControlState
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
    tenants: TenantService
    """Tenants and their limits; the proxy asks its ``Admission`` (tenancy/)."""
    tenant_shares: TenantShares
    """In a cluster: this pod's share of every tenant limit, synced with the leader."""
    usage: UsageService
    """Billable usage per tenant, key, model and minute (tenancy/usage.py)."""
    started: bool = False
    stopping: bool = False
    external: ExternalServers | None = None
    """The catalog's ``engine: external`` servers (health checks, routes)."""
