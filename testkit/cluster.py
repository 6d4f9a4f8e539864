"""A static-peers cluster of real `sardeenz serve` processes on loopback addresses.

Used by tests/cluster/, tests/browser/ and the cluster benchmarks.

Each pod binds its own address of 127/8 (the whole block answers locally), so
pods are told apart by address as they would be on a network, and every pod
gets the same ``CLUSTER_PEERS`` list (itself included), as in a StatefulSet.
Intervals are short so that elections and failure detection take seconds.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from testkit.ports import free_port
from testkit.servers import (
    HTTP,
    ServerProcess,
    engine_processes,
    kill_engines,
    start_first_then_rest,
)

SECRET = "c" * 64
TESTER = "pod-tester"
"""The pod id a test signs its own inter-pod requests as (``X-Cluster-Source``)."""
TIMING = {
    "SARDEENZ_CLUSTER_HEARTBEAT_INTERVAL_SECONDS": "0.3",
    "SARDEENZ_CLUSTER_SUSPECT_AFTER_SECONDS": "1.5",
    "SARDEENZ_CLUSTER_UNAVAILABLE_AFTER_SECONDS": "2.5",
    "SARDEENZ_CLUSTER_PING_INTERVAL_SECONDS": "1",
    "SARDEENZ_CLUSTER_REQUEST_TIMEOUT_SECONDS": "0.5",
}


class Cluster:
    def __init__(
        self,
        root: Path,
        size: int,
        pod_env: dict[str, dict[str, str]] | None = None,
        **extra_env: str,
    ) -> None:
        """``pod_env``: environment of single pods by name (e.g. their simulated GPUs)."""
        self.names = [f"pod-{chr(ord('a') + i)}" for i in range(size)]
        hosts = [f"127.0.0.{i + 1}" for i in range(size)]
        ports = [free_port() for _ in range(size)]
        peers = ",".join(f"{h}:{p}" for h, p in zip(hosts, ports, strict=True))
        self.pods: dict[str, ServerProcess] = {}
        for name, host, port in zip(self.names, hosts, ports, strict=True):
            env = {
                "CLUSTER_PEERS": peers,
                "CLUSTER_SECRET": SECRET,
                "POD_NAME": name,
                **TIMING,
                **extra_env,
                **(pod_env or {}).get(name, {}),
            }
            self.pods[name] = ServerProcess(root / name, host=host, port=port, extra_env=env)

    def start(self, timeout: float = 60.0) -> Cluster:
        """Start pod-a, then all the others at once (pod-a leads: ``start_first_then_rest``)."""
        start_first_then_rest(list(self.pods.values()), timeout)
        return self

    def status(self, name: str) -> dict[str, Any] | None:
        try:
            resp = HTTP.get(f"{self.pods[name].url}/api/cluster/status", timeout=2)
        except httpx.HTTPError:
            return None
        return resp.json() if resp.status_code == 200 else None

    def alive(self) -> list[str]:
        return [n for n, p in self.pods.items() if p.proc is not None and p.proc.poll() is None]

    def wait(
        self, check: Callable[[dict[str, dict[str, Any]]], bool], timeout: float, what: str
    ) -> dict[str, dict[str, Any]]:
        """Poll every live pod's status until ``check(statuses)``; the statuses then."""
        deadline = time.monotonic() + timeout
        seen: dict[str, dict[str, Any]] = {}
        while time.monotonic() < deadline:
            seen = {}
            for name in self.alive():
                st = self.status(name)
                if st is not None:
                    seen[name] = st
            if len(seen) == len(self.alive()) and check(seen):
                return seen
            time.sleep(0.1)
        brief = {n: (s["leader"], s["term"]) for n, s in seen.items()}
        raise AssertionError(f"{what} not within {timeout}s: {brief}")

    def wait_one_leader(self, timeout: float = 15.0) -> tuple[str, int]:
        statuses = self.wait(agreed_leader, timeout, "one leader, one term")
        first = next(iter(statuses.values()))
        return first["leader"], first["term"]

    def leader_url(self) -> str:
        leader, _ = self.wait_one_leader()
        return self.pods[leader].url

    def instances(self, pod: str) -> list[dict[str, Any]]:
        """``pod``'s instances as the leader's status shows them (followers redirect
        ``/api/v1/models`` to the leader)."""
        status = self.status(pod)
        assert status is not None
        me = next(p for p in status["pods"] if p.get("self"))
        instances: list[dict[str, Any]] = me["instances"]
        return instances

    def load_on(self, pod: str, name: str, *extra: str, timeout: float = 30) -> dict[str, Any]:
        """Load a sim model on ``pod`` through the leader (``podId``); wait until active."""
        body = {
            "modelPath": name,
            "engine": "sim",
            "extraArgs": ["--load-seconds", "0.2", *extra],
            "podId": pod,
        }
        resp = HTTP.post(f"{self.leader_url()}/api/v1/models/load", json=body, timeout=30)
        assert resp.status_code == 202, resp.text
        iid = resp.json()["id"]
        found = self.wait_instance(pod, iid, "active", timeout) or {}
        # What the test does next (a move, an unload, a preset) the leader decides from
        # its view, which hears of the start a heartbeat after ``pod`` (a move right
        # after a load was refused: "instance ... is starting").
        self.wait_leader_sees(pod, iid, "active", timeout)
        return found

    def wait_leader_sees(self, pod: str, iid: str, status: str, timeout: float = 30) -> None:
        """Wait until the leader's ``/api/cluster/status`` shows ``pod``'s ``iid`` in
        ``status``."""
        leader, _ = self.wait_one_leader()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = self.status(leader) or {"pods": []}
            listed: list[dict[str, Any]] = next(
                (p["instances"] for p in seen["pods"] if p["id"] == pod), []
            )
            if any(i["id"] == iid and i["status"] == status for i in listed):
                return
            time.sleep(0.1)
        raise AssertionError(f"leader {leader} does not see {iid} on {pod} {status} in {timeout}s")

    def unload(self, pod: str, iid: str, timeout: float = 30) -> None:
        """Unload ``pod``'s instance ``iid`` through the leader; wait until it is gone.

        The leader learns of an instance from its pod's heartbeat: until then it answers
        404, so a 404 is retried until ``timeout``."""
        url = f"{self.leader_url()}/api/v1/models/{iid}/unload"
        deadline = time.monotonic() + timeout
        resp = HTTP.post(url, timeout=30)
        while resp.status_code == 404 and time.monotonic() < deadline:
            time.sleep(0.1)
            resp = HTTP.post(url, timeout=30)
        assert resp.status_code == 200, f"unload of {iid} on {pod} through the leader: {resp.text}"
        assert resp.json()["id"] == iid
        self.wait_instance(pod, iid, None, timeout)

    def wait_instance(
        self, pod: str, iid: str, status: str | None, timeout: float = 30
    ) -> dict[str, Any] | None:
        """Wait until ``pod`` has instance ``iid`` in ``status`` (None: until it is gone)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((i for i in self.instances(pod) if i["id"] == iid), None)
            if (found is None and status is None) or (found and found["status"] == status):
                return found
            time.sleep(0.1)
        raise AssertionError(f"instance {iid} on {pod} not {status} in {timeout}s")

    def rejoin(self, name: str, timeout: float = 60.0) -> None:
        """Start ``name`` again (stopped or killed; same data dir, so it re-adopts the
        engines that outlived it) and wait until every pod sees every pod healthy under
        one leader: the cluster as it was before the stop."""
        self.pods[name].start(timeout)
        self.wait_whole(timeout, f"{name} back")

    def wait_whole(self, timeout: float, what: str) -> None:
        """Wait until every pod runs and sees every pod healthy under one leader."""

        def whole(st: dict[str, dict[str, Any]]) -> bool:
            healthy = all(
                len(s["pods"]) == len(self.pods) and all(p["state"] == "healthy" for p in s["pods"])
                for s in st.values()
            )
            return len(st) == len(self.pods) and healthy and agreed_leader(st)

        self.wait(whole, timeout, f"{what}: every pod healthy in every view, one leader")

    def leftovers(self) -> list[str]:
        """What a module left on the cluster: instances on any pod, presets, catalog
        entries (the state a module sharing the cluster must clean up), named."""
        left = [
            f"instance {i['servedModelName']} on {pod}"
            for pod in self.names
            for i in self.instances(pod)
        ]
        leader = self.leader_url()
        for what, path, key in (
            ("preset", "/api/cluster/presets", "name"),
            ("catalog entry", "/api/v1/catalog", "name"),
        ):
            resp = HTTP.get(f"{leader}{path}", timeout=10)
            assert resp.status_code == 200, f"GET {path}: {resp.text}"
            left += [f"{what} {item[key]}" for item in resp.json()]
        return left

    def close(self) -> None:
        for pod in self.pods.values():
            pod.stop(signal.SIGKILL)
            kill_engines(pod.data_dir)

    def orphans(self) -> list[int]:
        return [p.pid for pod in self.pods.values() for p in engine_processes(pod.data_dir)]


def agreed_leader(statuses: dict[str, dict[str, Any]]) -> bool:
    views = {(s["leader"], s["term"]) for s in statuses.values()}
    return len(views) == 1 and next(iter(views))[0] is not None


def poll(
    what: str, get: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 30
) -> Any:
    """``get()`` every 0.3 s until ``done`` holds for its value; that value (an assertion
    naming ``what`` and the last value after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"{what} not within {timeout}s: {value}"
        time.sleep(0.3)


def listed_models(url: str) -> list[str]:
    """The model names ``GET /v1/models`` lists at ``url`` (every pod lists the cluster's)."""
    return [m["id"] for m in HTTP.get(f"{url}/v1/models", timeout=5).json()["data"]]


def wait_listed(url: str, name: str, want: bool, timeout: float = 10.0) -> float:
    """Seconds until ``name`` is listed at ``url`` (``want``) or no longer is; fails the
    test, naming the model and the pod, after ``timeout`` s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if (name in listed_models(url)) is want:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"{name} {'not ' if want else ''}listed at {url} in {timeout}s")


def assert_answers_through(url: str, model: str) -> None:
    """``model``, served by another pod, answers a chat completion through the pod at
    ``url`` with the official client, whole and streamed (the cross-pod routing check
    of the static and the Kubernetes tiers)."""
    import openai  # a test dependency: the benchmarks importing this module do not need it

    oai = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "hello there"}]
    reply = oai.chat.completions.create(model=model, messages=messages, max_tokens=8)
    assert reply.model == model
    assert reply.choices[0].message.content
    chunks = list(
        oai.chat.completions.create(model=model, messages=messages, max_tokens=8, stream=True)
    )
    assert len(chunks) >= 3
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
