"""create_app(settings): wires the node's services, routers and lifespan.

The returned ASGI callable (``Gateway``) dispatches on the path before FastAPI
sees the request: ``/v1/*`` and ``/api/direct/*`` go straight to the inference
proxy (the hot path: no dependency injection, no middleware stack), everything
else to the FastAPI app (``gateway.api``) with the admin API, docs and dashboard.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI

from sardeenz import __version__
from sardeenz.api import (
    adapters,
    auth,
    benchmarks,
    catalog,
    cluster,
    engines,
    gpus,
    health,
    memory,
    models,
    moves,
    presets,
    requests,
    tenants,
    usage,
)
from sardeenz.api.docs_ui import install_docs
from sardeenz.api.errors import document_error_shapes, install_error_handlers
from sardeenz.api.metrics_history import router as metrics_history_router
from sardeenz.bench.runner import BenchmarkRunner
from sardeenz.catalog.demand import OnDemand
from sardeenz.catalog.external import ExternalServers
from sardeenz.catalog.reaper import IdleReaper
from sardeenz.catalog.registry import Catalog
from sardeenz.catalog.room import RoomMaker
from sardeenz.catalog.validation import is_external
from sardeenz.catalog.warmup import WarmUp
from sardeenz.cluster.adapter_orders import AdapterOrders
from sardeenz.cluster.catalog_sync import ReplicatedEntries, bind_catalog
from sardeenz.cluster.handover import Pods, PodSide
from sardeenz.cluster.loads import Loads
from sardeenz.cluster.locator import InstanceLocator
from sardeenz.cluster.manager import ClusterManager
from sardeenz.cluster.moves import MoveService
from sardeenz.cluster.observe import RequestCollector
from sardeenz.cluster.ondemand import ClusterStarts
from sardeenz.cluster.ondemand_surplus import SurplusReducer
from sardeenz.cluster.placement import ClusterPlacement
from sardeenz.cluster.preset_service import PresetService
from sardeenz.cluster.profile_sync import ProfileSync
from sardeenz.cluster.stewards import Stewards
from sardeenz.cluster.tenant_shares import TenantShares
from sardeenz.cluster.tenant_sync import ReplicatedTenants, bind_tenants
from sardeenz.cluster.transport.routes import HOP_HEADER
from sardeenz.cluster.usage_fanout import UsageFanout, usage_routes
from sardeenz.cluster.wiring import control_state, gateway_hooks, proxy_remote_headers
from sardeenz.config import Settings
from sardeenz.dashboard import WEB_DIR, mount_dashboard
from sardeenz.demo import load_demo_models
from sardeenz.domain import EngineKind, InstanceStatus
from sardeenz.engines.availability import EngineAvailability
from sardeenz.engines.vllm_probe import VllmProbe
from sardeenz.errors import SardeenzError
from sardeenz.events import EventBus
from sardeenz.gateway import Gateway
from sardeenz.gpu.budget import GpuBudgets
from sardeenz.gpu.inventory import GpuInventory, create_inventory
from sardeenz.gpu.kvcached import Kvctl, SegmentTracker
from sardeenz.logsetup import RequestIdMiddleware
from sardeenz.memory.kvlimits import KvcachedLimits, RoomByGpu
from sardeenz.memory.ledger import MemoryLedger
from sardeenz.memory.profiles import ProfileService
from sardeenz.metrics_history import GpuPoint, MetricsHistory
from sardeenz.proxy.forwarder import InferenceProxy
from sardeenz.proxy.history import RequestHistory
from sardeenz.proxy.inflight import Inflight, ProxyTraffic, in_flight_by_model
from sardeenz.proxy.routing import InstanceView, RoutingTable, RoutingUpdater, WakeFailed
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.security.audit import AuditTrail
from sardeenz.security.auth import ApiKeys, Authenticator
from sardeenz.security.callers import BearerCallers
from sardeenz.security.unverified import UnverifiedBodies
from sardeenz.services import Services
from sardeenz.shutdown import Step, run_steps
from sardeenz.store.audit import AuditRepository
from sardeenz.store.benchmarks import BenchmarkRepository
from sardeenz.store.catalog import CatalogRepository
from sardeenz.store.control import ControlRepository
from sardeenz.store.db import Database
from sardeenz.store.instances import InstanceRepository
from sardeenz.store.presets import PresetRepository
from sardeenz.store.profiles import ProfileRepository
from sardeenz.store.requests import RequestRepository
from sardeenz.store.tenants import TenantRepository
from sardeenz.store.usage import UsageRepository
from sardeenz.telemetry import node as node_metrics
from sardeenz.telemetry.measure import ResourceMeter
from sardeenz.tenancy.admission import Admission
from sardeenz.tenancy.meter import UsageMeter
from sardeenz.tenancy.service import TenantService
from sardeenz.tenancy.usage import UsageService

log = logging.getLogger("sardeenz")


def build_services(settings: Settings) -> Services:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    bus = EventBus()
    db = Database(settings.effective_database_url)
    inventory = create_inventory(settings)
    segments = SegmentTracker()
    kvctl = Kvctl.for_settings(settings)
    profiles = ProfileRepository(db)
    ledger = MemoryLedger(settings, inventory, profiles, segments)
    vllm_probe = VllmProbe(
        settings.vllm_python, settings.vllm_device, settings.vllm_probe_timeout_seconds
    )
    table = RoutingTable(engine_host=settings.engine_host)
    inflight = Inflight()
    supervisor = Supervisor(
        settings,
        bus,
        InstanceRepository(db),
        ledger,
        vllm_probe,
        traffic=ProxyTraffic(table, inflight),
    )
    if settings.proxy_auto_wake:
        table.set_waker(_waker(supervisor))
    api_keys = ApiKeys.from_settings(settings)
    authenticator = Authenticator(settings)
    cluster = ClusterManager(
        settings,
        table,
        supervisor,
        inventory,
        promised_bytes=ledger.promised_bytes_by_gpu,
        profiles_version=lambda: profiles.version,
        inflight=inflight,  # a pod given up ends the requests forwarded to it
    )
    members, view, orders = cluster.membership, cluster.view, cluster.orders
    control = control_state(members, ControlRepository(db))
    entries = CatalogRepository(db)
    catalog = Catalog(
        settings.catalog,
        EngineKind(settings.effective_default_engine),
        ReplicatedEntries(control) if cluster.active else entries,
        supervisor.list_instances,
    )
    if cluster.active:  # the API entries are the cluster's (cluster/catalog_sync.py)
        bind_catalog(control, catalog, entries)
    external = ExternalServers(settings, catalog, table)
    catalog.attach_external(external)
    warmup = WarmUp(settings, catalog, bus)
    supervisor.set_after_wake(warmup.after_wake)
    reaper = IdleReaper(settings, catalog, supervisor, bus=bus, host_room=ledger.host_room)
    room = RoomMaker(settings, supervisor, bus, ledger.host_room, evictor=reaper)
    placement = ClusterPlacement(members, settings, supervisor, inventory, orders, profiles)
    starts = ClusterStarts(members, view, placement)
    ondemand = OnDemand(
        settings,
        catalog,
        table,
        supervisor,
        room,
        cluster=starts if cluster.active else None,
        external=external,
    )
    # What this pod's instances hold: its heartbeats carry it, and a move (between pods
    # or between GPUs of this one) reads the source's there.
    cluster.local.adapters = ondemand.adapters.snapshot
    if cluster.active:  # adapters routed across pods
        ondemand.adapters.peers = cluster.remote_routes
        ondemand.adapters.pod_id = members.identity.pod_id
        ondemand.adapters.on_change = members.beat_soon
    usage_meter = UsageMeter()
    admission = Admission(
        default_completion=settings.tenancy_default_completion_tokens, meter=usage_meter
    )
    if settings.v1_bearer_auth:  # /v1 also takes the tokens /api takes (security/callers.py)
        callers = BearerCallers(authenticator, settings)
        callers.member_of = admission.member_of_principal
        api_keys.tokens = callers
    proxy = InferenceProxy(
        settings,
        table,
        proxy_remote_headers(cluster),
        hop_header=HOP_HEADER if cluster.active else None,
        demand=ondemand,
        inflight=inflight,
        pod=members.identity.pod_id,
        admission=admission,
    )
    tenant_repository = TenantRepository(db)
    tenant_shares = TenantShares(
        members,
        control,
        admission,
        settings.cluster_tenancy_sync_seconds,
        settings.tenancy_flush_seconds,
    )
    tenant_service = TenantService(
        settings,
        admission,
        tenant_repository,
        api_keys.ids,
        # in a cluster: the API's tenants and the counters are the cluster's
        definitions=ReplicatedTenants(control) if cluster.active else None,
        counters=tenant_shares.counters if cluster.active else None,
    )
    if cluster.active:
        bind_tenants(control, tenant_service, tenant_repository)
    usage_service = UsageService(
        settings,
        usage_meter,
        UsageRepository(db),
        own_pod=members.identity.pod_id if cluster.active else None,
        fanout=UsageFanout(members) if cluster.active else None,
    )
    retention = (
        RequestRepository(db, settings.request_log_max_rows)
        if settings.request_log_retention
        else None
    )
    pod_side = PodSide(cluster.local, members)
    pod_side.adapters = ondemand  # a move's target takes its source's adapters
    pods = Pods(members, pod_side, orders, settings)
    moves = MoveService(pods, settings, control)
    requests = RequestHistory(proxy.requests, retention)
    own_pod = proxy.requests.pod

    def in_flight() -> dict[str, int]:
        return in_flight_by_model(table, proxy.inflight)

    def peer_gpus() -> list[GpuPoint]:
        return [
            GpuPoint(
                pod=pod,
                index=g.index,
                name=g.name,
                used_bytes=g.used_bytes,
                total_bytes=g.total_bytes,
            )
            for pod, g in view.peer_gpus()
        ]

    def all_in_flight() -> dict[str | None, dict[str, int]]:
        flights: dict[str | None, dict[str, int]] = {own_pod: in_flight()}
        flights.update(requests.book.peer_in_flight())
        return flights

    collector = RequestCollector(
        members, settings.cluster_collect_interval_seconds, requests, in_flight
    )
    # Heartbeats say when there is something to pull (cluster/observe.py).
    cluster.local.request_log_version = collector.version
    node = node_metrics.NodeSampler(inventory, supervisor, ledger)
    preset_service = PresetService(
        members,
        view,
        orders,
        supervisor,
        settings,
        PresetRepository(db),
        placement,
        control,
        moving=moves.moving_models,
    )
    proxy.desired = preset_service.declares  # a 503, not a 404, between two replicas

    def reducible(name: str) -> bool:
        """A catalog model started on demand whose copies the leader may reduce."""
        entry = catalog.entry(name)
        return (
            entry is not None
            and not is_external(entry)
            and entry.adapter_of is None
            and not preset_service.declares(name)
        )

    surplus = SurplusReducer(
        pods,
        settings,
        term=lambda: members.leadership.term,
        now=members.now,
        reducible=reducible,
        moving=moves.moving_models,
    )
    meter = ResourceMeter(node, proxy, requests)
    budgets = GpuBudgets(supervisor)
    locator = InstanceLocator(members, view, settings, supervisor, bus, inventory, meter.one)
    return Services(
        settings=settings,
        bus=bus,
        db=db,
        supervisor=supervisor,
        inventory=inventory,
        ledger=ledger,
        vllm_probe=vllm_probe,
        segments=segments,
        kvctl=kvctl,
        kv_limits=KvcachedLimits(bus, kvctl, segments, _kv_room(inventory, budgets, ledger)),
        routing=table,
        proxy=proxy,
        routing_updater=RoutingUpdater(bus, table, resync=supervisor.list_instances),
        auth=authenticator,
        api_keys=api_keys,
        audit=AuditTrail(AuditRepository(db), authenticator),
        requests=requests,
        profiles=ProfileService(profiles, locator),
        benchmarks=BenchmarkRunner(settings, locator, BenchmarkRepository(db), api_keys),
        catalog=catalog,
        ondemand=ondemand,
        adapter_orders=AdapterOrders(members, ondemand, settings.ondemand_max_wait_seconds),
        reaper=reaper,
        warmup=warmup,
        cluster=cluster,
        view=view,
        loads=Loads(orders, placement, supervisor),
        engines=EngineAvailability(vllm_probe),
        budgets=budgets,
        meter=meter,
        pod_side=pod_side,
        locator=locator,
        control=control,
        moves=moves,
        placement=placement,
        starts=starts,
        surplus=surplus,
        presets=preset_service,
        stewards=Stewards(preset_service, catalog),
        profile_sync=ProfileSync(members, settings, profiles),
        node=node,
        metrics_history=MetricsHistory(
            inventory, requests, all_in_flight, peer_gpus if cluster.active else None
        ),
        collector=collector,
        external=external,
        tenants=tenant_service,
        tenant_shares=tenant_shares,
        usage=usage_service,
    )


def _kv_room(inventory: GpuInventory, budgets: GpuBudgets, ledger: MemoryLedger) -> RoomByGpu:
    """The KV cache room per GPU that kvcached limits share out (memory/kvlimits.py):
    the GPU budget's ``kvCacheTotalBytes`` less what starting or waking engines were
    promised and have not taken yet."""

    async def room() -> dict[int, int]:
        gpus = await inventory.snapshot()
        promised = await ledger.promised_bytes_by_gpu(gpus)
        return {
            b.index: max(0, b.kv_cache_total_bytes - promised.get(b.index, 0))
            for b in budgets.of(gpus)
        }

    return room


def _waker(supervisor: Supervisor) -> Callable[[str, Sequence[InstanceView]], Awaitable[None]]:
    """Auto-wake for the proxy: a request for a sleeping model wakes one instance.

    ``Supervisor.wake`` is single-flight, so 50 requests arriving together
    cause exactly one wake-up; they all wait for it. A refused wake-up (no
    GPU memory to take back, engine gone) raises ``WakeFailed``.
    """

    async def wake(name: str, sleeping: Sequence[InstanceView]) -> None:
        refusals = []
        for view in sleeping:
            try:
                await supervisor.wake(view.instance_id)
                return
            except SardeenzError as exc:
                log.warning("auto-wake of %s (%s) failed: %s", view.instance_id, name, exc)
                refusals.append(exc.message)
        if refusals:  # the requests waiting for it get a 503 now, with the reason
            raise WakeFailed("; ".join(refusals))

    return wake


def _shutdown_steps(services: Services) -> list[Step]:
    """The node's stops in order: what feeds the engines first, the engines, then what
    serves requests and records them, the database last."""

    async def kvcached_segments() -> None:
        removed = await services.segments.cleanup(services.kvctl)
        if removed:
            log.info("deleted kvcached segments: %s", ", ".join(removed))

    async def external() -> None:
        if services.external is not None:
            await services.external.stop()

    return [
        ("benchmark runs", services.benchmarks.shutdown),  # cancelled before their engines go
        ("idle reaper", services.reaper.stop),
        ("kvcached limits", services.kv_limits.stop),
        ("metrics history", services.metrics_history.stop),
        ("on-demand starts", services.ondemand.close),
        ("moves", services.moves.stop),
        ("profile sync", services.profile_sync.stop),
        ("presets", services.presets.stop),
        ("surplus copies", services.surplus.stop),
        ("tenant shares", services.tenant_shares.stop),
        ("request-log collector", services.collector.stop),
        ("control state", services.control.stop),
        ("cluster", services.cluster.stop),
        ("instance locator", services.locator.stop),
        ("external endpoints", external),
        ("engines", services.supervisor.shutdown),
        ("warm-ups", services.warmup.close),
        ("routing updater", services.routing_updater.stop),
        ("proxy", services.proxy.close),
        ("tenants", services.tenants.stop),
        ("usage", services.usage.stop),
        ("audit log", services.audit.close),
        ("auth", services.auth.close),
        ("kvcached segments", kvcached_segments),
        ("GPU inventory", services.inventory.close),
        ("database", services.db.close),
    ]


def create_app(settings: Settings) -> Gateway:
    services = build_services(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await services.db.migrate()
        await services.inventory.open()
        await services.auth.start()
        await services.proxy.start()
        # Subscribe before seeding: no transition can fall between the two.
        services.routing_updater.start()
        await services.supervisor.start()
        await services.benchmarks.start()  # fails runs a dead predecessor left running
        services.routing.replace_all(services.supervisor.list_instances())
        await services.control.load()  # this pod's copy of the cluster's control state
        await services.presets.load()  # the names the proxy answers 503 for, not 404
        await services.catalog.start()
        await services.tenants.start()
        await services.usage.start()
        if services.external is not None:
            services.external.start()
        await services.ondemand.preload()
        services.reaper.start()
        services.kv_limits.start()
        services.metrics_history.start()
        await services.cluster.start()  # static peers: one task; single node: nothing
        services.collector.start()  # cluster only: pulls the other pods' request logs
        services.control.start()  # cluster only: adoption, replication, catch-up
        services.profile_sync.start()  # cluster only: the leader's profile reconciliation
        services.presets.start()  # reconciles the applied preset (on the leader)
        if services.cluster.active:
            services.surplus.start()  # reduces surplus on-demand copies (on the leader)
        services.tenant_shares.start()  # cluster only: each pod's share of the tenants' limits
        services.started = True
        if settings.demo:
            await load_demo_models(services)
        try:
            yield
        finally:
            services.stopping = True
            count = len(services.supervisor.list_instances())
            log.info("shutting down: stopping %d engine(s)", count)
            await run_steps(_shutdown_steps(services))
            log.info("shut down: every service stopped")

    app = FastAPI(
        title="Sardeenz",
        version=__version__,
        summary="Many LLM engines on shared GPUs behind one OpenAI-compatible endpoint",
        lifespan=lifespan,
        docs_url=None,  # install_docs: the same page with local assets (works offline)
    )
    app.state.services = services
    install_error_handlers(app)
    app.add_middleware(RequestIdMiddleware)  # admin requests only: /v1 bypasses FastAPI
    document_error_shapes(app)
    app.include_router(health.router)
    app.include_router(models.router)
    app.include_router(models.events_router)
    app.include_router(gpus.router)
    app.include_router(engines.router)
    app.include_router(auth.router)
    app.include_router(memory.router)
    app.include_router(benchmarks.router)
    app.include_router(catalog.router)
    app.include_router(adapters.router)
    app.include_router(cluster.router)
    app.include_router(moves.router)
    app.include_router(presets.router)
    app.include_router(requests.router)
    app.include_router(tenants.router)
    app.include_router(usage.router)
    app.include_router(metrics_history_router)
    install_docs(app)

    mount_dashboard(app, WEB_DIR)  # last: its catch-all must not shadow any route above

    unverified = UnverifiedBodies(settings.unverified_body_bytes)
    hooks = gateway_hooks(
        services.cluster,
        services.pod_side,
        services.profile_sync,
        services.control,
        services.starts,
        services.collector,
        services.locator,
        services.tenant_shares,
        unverified,
        settings.proxy_max_body_bytes,
        extra_routes=[
            *usage_routes(services.usage.local),
            *services.adapter_orders.internal_routes(),
        ],
    )
    gateway = Gateway(
        app,
        services.proxy,
        services.auth,
        services.api_keys,
        settings,
        services.audit,
        services=services,
        internal=hooks.internal,
        trusted_forward=hooks.trusted_forward,
        redirect=hooks.redirect,
        before_scrape=services.node.refresh,
        unverified=unverified,
    )
    node_metrics.COLLECTOR.attach(services.node)
    return gateway


__all__ = ["InstanceStatus", "create_app"]
