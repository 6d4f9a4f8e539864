"""ClusterView.instances(): GET /api/v1/models of a cluster, from the heartbeats held."""

from __future__ import annotations

from typing import Any, cast

from sardeenz.cluster.manager import ClusterManager
from sardeenz.cluster.membership.peers import Heartbeat
from sardeenz.config import Settings
from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from sardeenz.gpu.inventory import GpuInventory
from sardeenz.proxy.routing import RoutingTable
from sardeenz.runtime.supervisor import Supervisor


def instance(iid: str, status: InstanceStatus = InstanceStatus.ACTIVE) -> ModelInstance:
    return ModelInstance(
        id=iid,
        model_path=iid,
        served_model_name=iid,
        display_name=iid,
        engine=EngineKind.SIM,
        status=status,
        port=20000,
    )


class FakeSupervisor:
    def __init__(self, *instances: ModelInstance) -> None:
        self.instances = list(instances)

    def list_instances(self) -> list[ModelInstance]:
        return list(self.instances)


def manager(supervisor: FakeSupervisor, **settings: Any) -> ClusterManager:
    return ClusterManager(
        Settings(**settings),
        RoutingTable(),
        cast(Supervisor, supervisor),
        cast(GpuInventory, None),
        environ={},
    )


def beat(pod: str, host: str, *instances: ModelInstance) -> Heartbeat:
    return Heartbeat(pod_id=pod, host=host, port=3000, term=1, instances=list(instances))


def test_a_single_node_lists_its_instances_as_they_are() -> None:
    local = instance("i-local")
    cm = manager(FakeSupervisor(local))
    listed = cm.view.instances()
    assert listed == [local]
    assert listed[0].pod_id is None
    assert listed[0].model_dump(mode="json")["podId"] is None


def test_a_cluster_lists_every_pods_instances_with_its_pod_and_drops_unavailable_pods() -> None:
    local = instance("i-a")
    cm = manager(
        FakeSupervisor(local),
        cluster_peers="10.0.0.1:3000,10.0.0.2:3000,10.0.0.3:3000",
        cluster_secret="s" * 64,
        pod_name="pod-a",
        advertise_address="10.0.0.1",
        port=3000,
    )
    assert cm.active
    cm.membership.on_heartbeat(beat("pod-b", "10.0.0.2", instance("i-b1"), instance("i-b2")))
    cm.membership.on_heartbeat(beat("pod-c", "10.0.0.3", instance("i-c", InstanceStatus.SLEEPING)))
    listed = {i.id: (i.pod_id, i.status) for i in cm.view.instances()}
    assert listed == {
        "i-a": ("pod-a", InstanceStatus.ACTIVE),
        "i-b1": ("pod-b", InstanceStatus.ACTIVE),
        "i-b2": ("pod-b", InstanceStatus.ACTIVE),
        "i-c": ("pod-c", InstanceStatus.SLEEPING),
    }
    assert local.pod_id is None  # the supervisor's own record is not touched
    # pod-c falls silent past the unavailable threshold: its instances leave the list.
    members = cm.membership
    heard = members.detector.last_heard("pod-c")
    assert heard is not None
    members.now = lambda: heard + members.timing.unavailable_after + 1  # type: ignore[method-assign]
    members.detector.heard("pod-b", members.now())
    assert sorted(i.id for i in cm.view.instances()) == ["i-a", "i-b1", "i-b2"]
