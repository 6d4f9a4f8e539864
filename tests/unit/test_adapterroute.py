"""Routing by LoRA adapter across pods: the pure choices, the peers' adapters from
heartbeats, and the loader's decisions when nothing needs an engine call."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sardeenz.catalog.adapterroute import Holder, load_pod, pick_holder, rendezvous
from sardeenz.catalog.adapters import AdapterLoader
from sardeenz.cluster.membership.peers import Heartbeat, remote_endpoints
from sardeenz.cluster.remote_routes import RemoteRoutes
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, ModelInstance
from sardeenz.errors import NotFound
from sardeenz.proxy.routing import Endpoint, RoutingTable
from sardeenz.proxy.wire import ErrorReply
from sardeenz.store.records import CatalogEntry
from tests.unit.test_cluster_peers import instance

holders = st.lists(
    st.builds(
        Holder,
        endpoint_id=st.sampled_from(["i1", "i2", "b/i1", "c/i9"]),
        inflight=st.integers(0, 20),
        local=st.booleans(),
    ),
    max_size=6,
)


@given(hs=holders, saturation=st.integers(1, 10))
def test_the_least_busy_holder_is_picked_and_saturation_is_every_holders(
    hs: list[Holder], saturation: int
) -> None:
    best, saturated = pick_holder(hs, saturation)
    if not hs:
        assert (best, saturated) == (None, False)
        return
    assert best is not None
    assert best.inflight == min(h.inflight for h in hs)
    assert saturated == all(h.inflight >= saturation for h in hs)
    if any(h.local and h.inflight == best.inflight for h in hs):
        assert best.local  # no network hop on a tie


@given(
    adapter=st.text(min_size=1, max_size=20),
    pods=st.sets(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1),
)
def test_every_pod_agrees_on_the_loader_and_losing_another_pod_keeps_it(
    adapter: str, pods: set[str]
) -> None:
    chosen = load_pod(adapter, sorted(pods))
    assert chosen == load_pod(adapter, sorted(pods, reverse=True)) == rendezvous(adapter, pods)[0]
    for other in pods - {chosen}:
        assert load_pod(adapter, pods - {other}) == chosen  # rendezvous: stable choice
    assert load_pod(adapter, []) is None


def test_rendezvous_spreads_adapters_over_pods() -> None:
    counts = {p: 0 for p in ("pod-a", "pod-b", "pod-c")}
    for n in range(300):
        chosen = load_pod(f"adapter-{n}", counts)
        assert chosen is not None
        counts[chosen] += 1
    assert min(counts.values()) >= 70, counts  # 100 each on average


def beat(pod: str, adapters: dict[str, dict[str, int]], *insts: ModelInstance) -> Heartbeat:
    return Heartbeat(
        pod_id=pod, host="10.0.0.2", port=3000, term=1, instances=list(insts), adapters=adapters
    )


def test_peer_adapters_come_from_heartbeats_active_and_sleeping_apart() -> None:
    routes = RemoteRoutes(RoutingTable())
    hb = beat(
        "pod-b",
        {"i1": {"sql": 2}, "i2": {"poem": 0}, "i3": {"old": 0}},
        instance("i1", "llama", InstanceStatus.ACTIVE),
        instance("i2", "llama", InstanceStatus.SLEEPING),
        instance("i3", "llama", InstanceStatus.STOPPING),
    )
    routes.peer_heartbeat(hb)
    assert routes.adapters_of("pod-b/i1") == {"sql": 2}
    assert routes.adapters_of("pod-b/i2") is None  # asleep: no route to it
    assert routes.sleeping_with("poem")
    assert not routes.sleeping_with("sql")
    assert routes.placements("poem") == [("pod-b/i2", 0, True)]
    assert routes.placements("sql") == [("pod-b/i1", 2, False)]
    assert routes.adapters_of("pod-b/i3") is None
    assert not routes.sleeping_with("old")
    v = routes.version
    routes.peer_heartbeat(beat("pod-b", {"i1": {"sql": 5}}, *hb.instances))
    assert routes.version == v + 1  # poem no longer kept asleep
    v = routes.version
    routes.peer_heartbeat(beat("pod-b", {"i1": {"sql": 0}}, *hb.instances))
    assert routes.version == v  # a count changed: no listing changes
    assert routes.peer_gone("pod-b")
    assert routes.adapters_of("pod-b/i1") is None
    assert routes.version == v + 1


class Peers:
    """What other pods hold: ``pod/instance`` -> {adapter: in flight}."""

    def __init__(self, held: dict[str, dict[str, int]]) -> None:
        self.held = held
        self.version = 0

    def adapters_of(self, endpoint_id: str) -> Mapping[str, int] | None:
        return self.held.get(endpoint_id)

    def sleeping_with(self, adapter: str) -> bool:
        return False

    def placements(self, adapter: str) -> list[tuple[str, int, bool]]:
        return sorted((e, h[adapter], False) for e, h in self.held.items() if adapter in h)


class NoInstances:
    def get(self, instance_id: str) -> ModelInstance:
        raise NotFound(instance_id)


async def never_started(base: str) -> Endpoint | ErrorReply:
    raise AssertionError(f"the base {base} was running: nothing to start")


def loader(
    tmp_path: Path, peers: Peers, pods: list[str], *, local: bool = True, saturation: int = 8
) -> tuple[AdapterLoader, RoutingTable]:
    """Pod ``pod-a`` (one local instance ``la`` of ``llama`` when ``local``) with the
    others' instances of it routed from their heartbeats."""
    table = RoutingTable()
    if local:
        table.apply(instance("la", "llama", InstanceStatus.ACTIVE))
    for pod in pods:
        hb = beat(pod, {}, instance(f"{pod}-i", "llama", InstanceStatus.ACTIVE))
        table.set_remote(pod, remote_endpoints(hb))
    settings = Settings(data_dir=tmp_path, adapter_saturation_inflight=saturation)
    ld = AdapterLoader(settings, table, NoInstances(), never_started)
    ld.peers, ld.pod_id = peers, "pod-a"
    return ld, table


ENTRY = CatalogEntry.model_validate({"adapterOf": "llama", "adapterPath": "/x"})


async def test_an_adapter_held_on_another_pod_is_served_there(tmp_path: Path) -> None:
    ld, _ = loader(tmp_path, Peers({"pod-b/pod-b-i": {"sql": 3}}), ["pod-b"])
    ep = await ld.wait("sql", ENTRY)
    assert isinstance(ep, Endpoint)
    assert ep.instance_id == "pod-b/pod-b-i"
    assert not ep.local
    assert ld.state("sql", "llama") == "active"
    (where,) = ld.placements("sql")
    assert (where.pod_id, where.instance_id, where.inflight, where.asleep) == (
        "pod-b",
        "pod-b-i",
        3,
        False,
    )
    ld.release("sql", ep)


async def test_a_forwarded_request_is_never_sent_on(tmp_path: Path) -> None:
    """Made its hop: only this pod's instances; the remote holder is not an answer."""
    ld, _ = loader(tmp_path, Peers({"pod-b/pod-b-i": {"sql": 0}}), ["pod-b"], local=False)
    ld._max_wait = 0.05

    async def base_elsewhere(base: str) -> Endpoint | ErrorReply:
        return ErrorReply(503, "not here", "service_unavailable_error", "model_not_ready")

    ld._base_wait = base_elsewhere
    answer = await ld.wait("sql", ENTRY, local_only=True)
    assert isinstance(answer, ErrorReply)
    assert answer.message == "not here"


async def test_a_first_request_goes_to_the_rendezvous_pod(tmp_path: Path) -> None:
    pods = ["pod-b", "pod-c"]
    ld, _ = loader(tmp_path, Peers({}), pods)
    names = [n for n in (f"a{i}" for i in range(40)) if load_pod(n, ["pod-a", *pods]) != "pod-a"]
    assert names  # some adapters belong to another pod
    for name in names[:5]:
        ep = await ld.wait(name, ENTRY)
        assert isinstance(ep, Endpoint)
        assert ep.pod_id == load_pod(name, ["pod-a", *pods])
        # Every request for it goes there while it is not known loaded (one load).
        again = await ld.wait(name, ENTRY)
        assert isinstance(again, Endpoint)
        assert again.pod_id == ep.pod_id
        ld.release(name, ep)
        ld.release(name, again)
    assert ld._sent == {}


async def test_a_saturated_holder_sends_the_next_request_to_one_more_instance(
    tmp_path: Path,
) -> None:
    """pod-b holds it (saturation 2): once pod-b has 2 in flight the next request goes
    to pod-c, which loads it; with both saturated and no other instance, the least busy
    holder serves."""
    peers = Peers({"pod-b/pod-b-i": {"sql": 1}})
    ld, _ = loader(tmp_path, peers, ["pod-b", "pod-c"], local=False, saturation=2)
    first = await ld.wait("sql", ENTRY)
    assert isinstance(first, Endpoint)
    assert first.pod_id == "pod-b"
    second = await ld.wait("sql", ENTRY)  # ours counted before any heartbeat says so
    assert isinstance(second, Endpoint)
    assert second.pod_id == "pod-b"
    third = await ld.wait("sql", ENTRY)  # pod-b has 2 (ours): saturated
    assert isinstance(third, Endpoint)
    assert third.pod_id == "pod-c"
    peers.held["pod-c/pod-c-i"] = {"sql": 5}
    fourth = await ld.wait("sql", ENTRY)
    assert isinstance(fourth, Endpoint)
    assert fourth.pod_id == "pod-b"
    for ep in (first, second, third, fourth):
        ld.release("sql", ep)
    assert ld._sent == {}
