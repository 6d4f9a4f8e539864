"""LoRA adapters across a real 3-pod cluster (the shared one): routing by adapter and a
move that carries them.

The base ``lc-base`` (a catalog entry with ``loraSlots``) runs where each test loads it
(through the leader, on chosen pods); the adapters are catalog entries of their own,
replicated to every pod. Each engine's own ``/sim/state`` says which adapters it holds
and how many loads it made, so a second load anywhere would show.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import httpx
import openai
import pytest

from testkit.adapters import make_adapter, metric_value
from testkit.cluster import Cluster
from testkit.servers import HTTP
from testkit.waiting import wait_until

BASE = "lc-base"
ADAPTERS = ("lc-sql", "lc-poem", "lc-moved")
LORA = ("--enable-lora", "--max-loras", "2", "--lora-load-ms", "300")


@pytest.fixture(scope="module")
def cluster(shared_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The shared cluster with the base and its adapters in the catalog (removed after)."""
    root = tmp_path_factory.mktemp("lc-adapters")
    leader = shared_cluster.leader_url()
    entries: dict[str, dict[str, Any]] = {
        BASE: {"modelPath": BASE, "engine": "sim", "loraSlots": 2},
        **{
            name: {"adapterOf": BASE, "adapterPath": str(make_adapter(root / name, rank=8))}
            for name in ADAPTERS
        },
    }
    try:
        for name, entry in entries.items():
            resp = HTTP.put(f"{leader}/api/v1/catalog/{name}", json=entry, timeout=10)
            assert resp.status_code == 200, resp.text
        for pod in shared_cluster.names:  # replicated to every pod
            wait_until(
                partial(lists_all, shared_cluster, pod),
                f"the adapters in {pod}'s /v1/models",
                20,
            )
        yield shared_cluster
    finally:
        for name in reversed(entries):
            HTTP.delete(f"{leader}/api/v1/catalog/{name}", timeout=10)


def cards(cluster: Cluster, pod: str) -> dict[str, dict[str, Any]]:
    """``pod``'s ``GET /v1/models``, by id."""
    data = HTTP.get(f"{cluster.pods[pod].url}/v1/models", timeout=5).json()["data"]
    return {c["id"]: c for c in data}


def listed_as(cluster: Cluster, pod: str, adapter: str, state: str) -> bool:
    return cards(cluster, pod)[adapter].get("state") == state


def lists_all(cluster: Cluster, pod: str) -> bool:
    return set(ADAPTERS) <= set(cards(cluster, pod))


def sim_state(cluster: Cluster, pod: str, inst: dict[str, Any]) -> dict[str, Any]:
    """What the engine of ``inst`` (on ``pod``) says it holds and did."""
    url = f"{cluster.pods[pod].url}/api/direct/{inst['port']}/sim/state"
    state: dict[str, Any] = HTTP.get(url, timeout=5).json()
    return state


def complete(cluster: Cluster, pod: str, model: str) -> str:
    """A completion for ``model`` entering ``pod``; the model the engine answered as."""
    client = openai.OpenAI(base_url=f"{cluster.pods[pod].url}/v1", api_key="unused", timeout=30)
    return client.completions.create(model=model, prompt="hi", max_tokens=2).model


def metric(cluster: Cluster, pod: str, line_start: str) -> float:
    return metric_value(cluster.pods[pod].url, line_start)


def test_an_adapter_loaded_on_pod_b_is_served_there_from_pod_a(cluster: Cluster) -> None:
    inst = cluster.load_on("pod-b", BASE, *LORA)
    try:
        assert complete(cluster, "pod-b", "lc-sql") == "lc-sql"  # loaded on pod-b
        assert sim_state(cluster, "pod-b", inst)["lora_loads"] == 1
        for pod in ("pod-a", "pod-c"):  # every pod lists it, with its base and state
            wait_until(
                partial(listed_as, cluster, pod, "lc-sql", "active"),
                f"lc-sql active in {pod}'s /v1/models",
                20,
            )
            card = cards(cluster, pod)["lc-sql"]
            assert card["parent"] == BASE
            assert cards(cluster, pod)["lc-poem"]["state"] == "unloaded"
        hits = metric(cluster, "pod-a", 'sardeenz_adapter_hits_total{model="lc-sql"}')
        hits_b = metric(cluster, "pod-b", 'sardeenz_adapter_hits_total{model="lc-sql"}')
        for _ in range(3):
            assert complete(cluster, "pod-a", "lc-sql") == "lc-sql"
        # Counted where they entered only: the pods' counts add up to the cluster's.
        assert metric(cluster, "pod-b", 'sardeenz_adapter_hits_total{model="lc-sql"}') == hits_b
        state = sim_state(cluster, "pod-b", inst)
        assert state["lora_loads"] == 1  # served where it was: never loaded again
        assert set(state["lora_adapters"]) == {"lc-sql"}
        assert metric(cluster, "pod-a", 'sardeenz_adapter_hits_total{model="lc-sql"}') == hits + 3
    finally:
        cluster.unload("pod-b", inst["id"])
    for pod in cluster.names:  # the base went: so did its adapter, everywhere
        wait_until(
            partial(listed_as, cluster, pod, "lc-sql", "unloaded"),
            f"lc-sql unloaded in {pod}'s /v1/models",
            20,
        )


def test_concurrent_first_requests_on_every_pod_load_the_adapter_once(cluster: Cluster) -> None:
    """The base on pod-b and pod-c; 30 first requests for lc-poem enter all three pods at
    once: one load in the whole cluster (the pods agree on which pod loads it)."""
    with ThreadPoolExecutor(2) as pool:  # side by side: each start is mostly waiting
        b, c = pool.map(lambda pod: cluster.load_on(pod, BASE, *LORA), ("pod-b", "pod-c"))
    try:
        for pod in cluster.names:  # every pod routes the base to both instances
            wait_until(
                partial(_routes_to_both, cluster, pod),
                f"{pod} sees {BASE} active on pod-b and pod-c",
                20,
            )

        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=30) as client:
                body = {"model": "lc-poem", "prompt": "hi", "max_tokens": 2}
                return await asyncio.gather(
                    *(
                        client.post(f"{cluster.pods[pod].url}/v1/completions", json=body)
                        for _ in range(10)
                        for pod in cluster.names
                    )
                )

        replies = asyncio.run(burst())
        assert [r.status_code for r in replies] == [200] * 30, [r.text for r in replies]
        assert {r.json()["model"] for r in replies} == {"lc-poem"}
        loads = {
            pod: sim_state(cluster, pod, inst)["lora_loads"]
            for pod, inst in (("pod-b", b), ("pod-c", c))
        }
        assert sorted(loads.values()) == [0, 1], loads
    finally:
        cluster.unload("pod-b", b["id"])
        cluster.unload("pod-c", c["id"])


def _routes_to_both(cluster: Cluster, pod: str) -> bool:
    routes = HTTP.get(f"{cluster.pods[pod].url}/api/cluster/status", timeout=5).json()
    served = [
        p["id"]
        for p in routes["pods"]
        for i in p["instances"]
        if i["servedModelName"] == BASE and i["status"] == "active"
    ]
    return sorted(served) == ["pod-b", "pod-c"]


def test_a_move_carries_the_adapters_to_the_target(cluster: Cluster) -> None:
    source = cluster.load_on("pod-b", BASE, *LORA)
    target_id: str | None = None
    try:
        assert complete(cluster, "pod-b", "lc-moved") == "lc-moved"
        wait_until(
            lambda: cards(cluster, "pod-a")["lc-moved"].get("state") == "active",
            "the leader learns pod-b holds lc-moved",
            20,
        )
        leader = cluster.leader_url()
        resp = HTTP.post(
            f"{leader}/api/cluster/moves",
            json={"instanceId": source["id"], "targetPodId": "pod-c"},
            timeout=10,
        )
        assert resp.status_code == 202, resp.text
        move_id = resp.json()["id"]
        move: dict[str, Any] = {}

        def finished() -> bool:
            nonlocal move
            move = HTTP.get(f"{leader}/api/cluster/moves/{move_id}", timeout=5).json()
            return move["state"] in ("done", "failed")

        wait_until(finished, f"move {move_id} finished", 60)
        assert move["state"] == "done", move
        target_id = move["targetInstanceId"]
        carried = [s for s in move["steps"] if s["name"] == "adapters-carried"]
        assert [s["detail"] for s in carried] == ["loaded on the target: lc-moved"]
        target = next(i for i in cluster.instances("pod-c") if i["id"] == target_id)
        state = sim_state(cluster, "pod-c", target)
        assert set(state["lora_adapters"]) == {"lc-moved"}
        assert state["lora_loads"] == 1  # loaded by the move, before any request
        assert complete(cluster, "pod-a", "lc-moved") == "lc-moved"
        assert sim_state(cluster, "pod-c", target)["lora_loads"] == 1  # a hit there
    finally:
        if target_id is not None:
            cluster.unload("pod-c", target_id)
        if any(i["id"] == source["id"] for i in cluster.instances("pod-b")):
            cluster.unload("pod-b", source["id"])


def test_an_operator_loads_and_unloads_on_the_pod_running_the_base(cluster: Cluster) -> None:
    """The admin API (on the leader, pod-a) loads on pod-b, which runs the base, and
    unloads there; every pod's listing follows."""
    inst = cluster.load_on("pod-b", BASE, *LORA)
    try:
        leader = cluster.leader_url()
        resp = HTTP.post(f"{leader}/api/v1/adapters/lc-sql/load", timeout=40)
        assert resp.status_code == 200, resp.text
        assert resp.json()["loadedOn"] == [
            {"podId": "pod-b", "instanceId": inst["id"], "inFlight": 0, "sleeping": False}
        ]
        assert list(sim_state(cluster, "pod-b", inst)["lora_adapters"]) == ["lc-sql"]
        wait_until(
            lambda: cards(cluster, "pod-c")["lc-sql"].get("state") == "active",
            "pod-c lists lc-sql active",
            20,
        )
        resp = HTTP.post(f"{leader}/api/v1/adapters/lc-sql/unload", timeout=40)
        assert resp.status_code == 200, resp.text
        assert not sim_state(cluster, "pod-b", inst)["lora_adapters"]
        wait_until(
            lambda: cards(cluster, "pod-c")["lc-sql"].get("state") == "unloaded",
            "pod-c lists lc-sql unloaded",
            20,
        )
        wait_until(
            lambda: _listed(cluster, "lc-sql")["loadedOn"] == [],
            "the leader's adapter list: lc-sql loaded nowhere",
            20,
        )
    finally:
        cluster.unload("pod-b", inst["id"])


def _listed(cluster: Cluster, name: str) -> dict[str, Any]:
    listed = HTTP.get(f"{cluster.leader_url()}/api/v1/adapters", timeout=5).json()
    found: dict[str, Any] = next(a for a in listed if a["name"] == name)
    return found
