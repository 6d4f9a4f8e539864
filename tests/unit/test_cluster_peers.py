"""cluster/membership/peers.py: heartbeats -> remote endpoints, and the peer store's bookkeeping."""

from __future__ import annotations

from sardeenz.cluster.identity import PeerAddress
from sardeenz.cluster.membership.peers import Heartbeat, PeerStore, remote_endpoints, route_key
from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance


def instance(iid: str, name: str, status: InstanceStatus) -> ModelInstance:
    return ModelInstance(
        id=iid,
        model_path=name,
        served_model_name=name,
        display_name=name,
        engine=EngineKind.SIM,
        status=status,
        port=20000,
    )


def beat(*instances: ModelInstance, host: str = "10.0.0.2") -> Heartbeat:
    return Heartbeat(pod_id="pod-b", host=host, port=3000, term=1, instances=list(instances))


def test_only_active_instances_become_remote_endpoints_of_the_pods_proxy() -> None:
    hb = beat(
        instance("i1", "m", InstanceStatus.ACTIVE),
        instance("i2", "m", InstanceStatus.STARTING),
        instance("i3", "n", InstanceStatus.SLEEPING),
    )
    eps = remote_endpoints(hb)
    assert [(e.instance_id, e.served_name, e.host, e.port, e.local, e.weight) for e in eps] == [
        ("pod-b/i1", "m", "10.0.0.2", 3000, False, 1)
    ]
    # Only what routing needs is in the key: a starting instance changes nothing.
    assert route_key(hb) == route_key(beat(instance("i1", "m", InstanceStatus.ACTIVE)))
    assert route_key(hb) != route_key(beat(instance("i1", "m", InstanceStatus.ACTIVE), host="x"))


def test_heartbeat_json_round_trip() -> None:
    hb = beat(instance("i1", "m", InstanceStatus.ACTIVE))
    again = Heartbeat.model_validate_json(hb.model_dump_json())
    assert again == hb
    assert '"podId"' in hb.model_dump_json()


def test_a_pod_replaced_at_the_same_address_is_forgotten() -> None:
    store = PeerStore()
    addr = PeerAddress("10.0.0.2", 3000)
    store.upsert("old-name", addr)
    store.upsert("new-name", addr)
    assert store.ids() == {"new-name"}
    assert store.pod_at(addr) == "new-name"
    assert store.replaced == ["old-name"]
    moved = PeerAddress("10.0.0.3", 3000)
    store.upsert("new-name", moved)
    assert store.pod_at(moved) == "new-name"
    assert store.pod_at(addr) is None


def test_an_unrouted_instance_is_no_endpoint_but_still_listed() -> None:
    """A move's withdrawn source: peers stop routing to it, the pod still shows it."""
    active = InstanceStatus.ACTIVE
    hb = beat(instance("i1", "m", active), instance("i2", "m", active))
    withdrawn = hb.model_copy(update={"unrouted": ["i1"]})
    assert [e.instance_id for e in remote_endpoints(withdrawn)] == ["pod-b/i2"]
    assert [i.id for i in withdrawn.instances] == ["i1", "i2"]
    assert route_key(withdrawn) != route_key(hb)
    assert Heartbeat.model_validate_json(withdrawn.model_dump_json()).unrouted == ["i1"]


def test_a_withdrawal_carries_the_term_that_made_it_and_older_pods_send_none() -> None:
    hb = beat(instance("i1", "m", InstanceStatus.ACTIVE))
    update = {"unrouted": ["i1", "i2"], "withdrawn_terms": {"i1": 4}, "held_terms": {"i2": 5}}
    wire = hb.model_copy(update=update).model_dump(mode="json", by_alias=True)
    assert (wire["withdrawnTerms"], wire["heldTerms"]) == ({"i1": 4}, {"i2": 5})
    back = Heartbeat.model_validate(wire)
    assert (back.withdrawn_terms, back.held_terms) == ({"i1": 4}, {"i2": 5})
    del wire["withdrawnTerms"], wire["heldTerms"]  # a pod of the previous version
    back = Heartbeat.model_validate(wire)
    assert (back.withdrawn_terms, back.held_terms) == ({}, {})
