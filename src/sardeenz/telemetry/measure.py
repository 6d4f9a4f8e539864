"""The seed's ``ResourceMetrics`` of this node's instances, measured when asked.

One node sample (telemetry/node.py: memory held per instance) joined with the
proxy's request counters and in-flight counts, and each instance's own answered
requests in the request log (its latency quantiles, telemetry/resources.py).
``GET /api/v1/models/metrics`` reads every instance; the locator reads one
(cluster/locator.py).
"""

from __future__ import annotations

from sardeenz.errors import NotFound
from sardeenz.proxy import metrics as proxy_metrics
from sardeenz.proxy.forwarder import InferenceProxy
from sardeenz.proxy.history import RequestHistory
from sardeenz.telemetry.node import NodeSampler
from sardeenz.telemetry.resources import ResourceMetrics, resource_metrics


class ResourceMeter:
    def __init__(self, node: NodeSampler, proxy: InferenceProxy, requests: RequestHistory) -> None:
        self._node = node
        self._proxy = proxy
        self._requests = requests

    async def all(self, instance_id: str | None = None) -> list[ResourceMetrics]:
        """Every instance of this node (or only ``instance_id``), measured now."""
        sample = await self._node.sample()
        answered = await self._requests.answered_by_instance()
        return [
            resource_metrics(
                inst,
                sample.held.get(inst.id, {}),
                sample.at,
                proxy_metrics.peek(inst.served_model_name),
                self._proxy.inflight.count(inst.id),
                answered.get(inst.id),
            )
            for inst in sample.instances
            if instance_id is None or inst.id == instance_id
        ]

    async def one(self, instance_id: str) -> ResourceMetrics:
        """One instance of this node (404 ``instance_not_found`` when it has none such)."""
        found = await self.all(instance_id)
        if not found:
            raise NotFound(f"no instance with id {instance_id!r}", code="instance_not_found")
        return found[0]
