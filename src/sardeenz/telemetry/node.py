"""GPU and instance memory as Prometheus series, read when ``/metrics`` is scraped.

``NodeSampler.refresh`` (awaited by the gateway just before it renders ``/metrics``) takes
one inventory snapshot (NVML in a worker thread, or the simulated books), the ledger's
promises and the supervisor's instances; the collector registered below turns the last
sample into metric families. Nothing is polled in the background and nothing runs per
``/v1`` request: a node nobody scrapes pays nothing.

Series:

* ``sardeenz_gpu_memory_bytes{gpu,kind}``: ``kind`` = ``total``, ``used``, ``free`` (as the
  driver reports them) and ``promised`` (granted to engines still starting or waking that
  the driver does not show as used yet: what placement adds to ``used``);
* ``sardeenz_instance_memory_bytes{instance_id,model,gpu}``: what an instance's processes
  hold on each GPU now (its baseline when its processes cannot be seen).

The label is ``instance_id``, not ``instance``: Prometheus sets ``instance`` on every
scraped series (the target), and a scraped ``instance`` label would be renamed
``exported_instance``. Instance status is ``sardeenz_instance_status`` (proxy/metrics.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sardeenz.domain import ModelInstance, utcnow
from sardeenz.gpu.budget import held_by_instance
from sardeenz.gpu.inventory import GpuInfo, GpuInventory
from sardeenz.proxy.metrics import REGISTRY

GPU_KINDS = ("total", "used", "free", "promised")


class _Instances(Protocol):
    def list_instances(self) -> list[ModelInstance]: ...

    def baselines_bytes(self) -> dict[str, dict[int, int]]: ...

    def instance_pids(self) -> dict[str, list[int]]: ...


class _Promises(Protocol):
    async def promised_bytes_by_gpu(self, gpus: list[GpuInfo]) -> dict[int, int]: ...


@dataclass(frozen=True, slots=True)
class NodeSample:
    """One look at the node's memory."""

    at: datetime
    gpus: list[GpuInfo] = field(default_factory=list)
    promised: dict[int, int] = field(default_factory=dict)
    instances: list[ModelInstance] = field(default_factory=list)
    held: dict[str, dict[int, int]] = field(default_factory=dict)
    """``{instance_id: {gpu_index: bytes}}`` (``gpu.budget.held_by_instance``)."""


class NodeSampler:
    """Takes samples for the collector and for ``ResourceMetrics``; keeps the last one."""

    def __init__(self, inventory: GpuInventory, instances: _Instances, promises: _Promises) -> None:
        self._inventory = inventory
        self._instances = instances
        self._promises = promises
        self.last = NodeSample(at=utcnow())

    async def sample(self) -> NodeSample:
        gpus = await self._inventory.snapshot() if self._inventory.available else []
        sup = self._instances
        self.last = NodeSample(
            at=utcnow(),
            gpus=gpus,
            promised=await self._promises.promised_bytes_by_gpu(gpus),
            instances=sup.list_instances(),
            held=held_by_instance(gpus, sup.baselines_bytes(), instance_pids=sup.instance_pids()),
        )
        return self.last

    async def refresh(self) -> None:
        """The gateway's hook before rendering ``/metrics``."""
        await self.sample()


def families(sample: NodeSample) -> Iterator[Metric]:
    """The metric families of one sample (pure; unit-tested)."""
    gpu = GaugeMetricFamily(
        "sardeenz_gpu_memory_bytes",
        "GPU memory by kind: total, used and free as the driver reports them; promised: "
        "granted to engines starting or waking that the driver does not show as used yet.",
        labels=["gpu", "kind"],
    )
    for g in sample.gpus:
        values = (g.total_bytes, g.used_bytes, g.free_bytes, sample.promised.get(g.index, 0))
        for kind, value in zip(GPU_KINDS, values, strict=True):
            gpu.add_metric([str(g.index), kind], value)
    yield gpu
    inst = GaugeMetricFamily(
        "sardeenz_instance_memory_bytes",
        "GPU memory an instance's processes hold now, per GPU (its baseline when they "
        "cannot be seen).",
        labels=["instance_id", "model", "gpu"],
    )
    for i in sorted(sample.instances, key=lambda x: x.id):
        for index, held in sorted(sample.held.get(i.id, {}).items()):
            inst.add_metric([i.id, i.served_model_name, str(index)], held)
    yield inst


class _Collector(Collector):
    def __init__(self) -> None:
        self.sampler: NodeSampler | None = None

    def attach(self, sampler: NodeSampler) -> None:
        """Render ``sampler``'s last sample on ``/metrics``.

        The collector is registered once per process (prometheus' global registry) and
        outlives any app, so the app built last hands it its sampler (app.py).
        """
        self.sampler = sampler

    def collect(self) -> Iterator[Metric]:
        sample = self.sampler.last if self.sampler is not None else NodeSample(at=utcnow())
        yield from families(sample)

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("sardeenz_gpu_memory_bytes", "", labels=["gpu", "kind"])
        yield GaugeMetricFamily(
            "sardeenz_instance_memory_bytes", "", labels=["instance_id", "model", "gpu"]
        )


COLLECTOR = _Collector()
REGISTRY.register(COLLECTOR)
