"""The services of one node, built once by the app and shared by routers."""

from __future__ import annotations

from dataclasses import dataclass

from sardeenz.bench.runner import BenchmarkRunner
from sardeenz.config import Settings
from sardeenz.domain import LoadRequest, ModelInstance
from sardeenz.engines.vllm_probe import VllmInstall
from sardeenz.events import EventBus
from sardeenz.gpu.budget import GpuBudget, compute_budget
from sardeenz.gpu.inventory import GpuInfo, GpuInventory
from sardeenz.gpu.kvcached import Kvctl, SegmentTracker
from sardeenz.memory.fit import fit_request_for_load, load_refusal
from sardeenz.memory.profiles import ProfileService
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
    started: bool = False
    stopping: bool = False

    async def load_model(self, req: LoadRequest) -> ModelInstance:
        """Load after the same fit check ``POST /api/memory/profiles/check`` answers.

        A verdict of "does not fit" (from a profile, or the estimate from the
        model directory) refuses with 409 ``model_does_not_fit`` unless
        ``force`` is set; an unknown verdict (no profile, no readable model
        directory) never blocks. The supervisor then places the instance.
        """
        if not req.force:
            refusal = load_refusal(await self.profiles.check(fit_request_for_load(req)))
            if refusal is not None:
                raise refusal
        return await self.supervisor.load(req)

    async def vllm_install(self) -> VllmInstall:
        """The vLLM install this node would launch (probed once at start-up).

        A narrow method so the API never reaches into the supervisor's parts;
        where the probe lives is this object's business.
        """
        return await self.supervisor.vllm_probe.get()

    def gpu_budgets(self, gpus: list[GpuInfo]) -> list[GpuBudget]:
        """Per-GPU budget of a snapshot: model baselines, other processes, KV cache total."""
        sup = self.supervisor
        return compute_budget(gpus, sup.baselines_bytes(), instance_pids=sup.instance_pids())
