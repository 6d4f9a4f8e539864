"""A 5-pod cluster cut 2|3 with network namespaces: quorum decides, never two leaders.

Every pod runs in its own network namespace (testkit/netns.py); the
left pair and the right trio are joined by one virtual cable, which the test
unplugs and plugs back. Every pod's status is sampled every ~100 ms
throughout, and the timeline is printed. Checked: one leader before the cut;
after it the minority (which holds the lowest ids, hence the old leader) has
no leader within the lease time and refuses leader orders, the majority
elects one; at no sampled moment do two pods both claim leadership; after
healing, one leader and one term everywhere and the same model list.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit import netns
from testkit.cluster import TIMING
from testkit.servers import HTTP

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not netns.available(), reason="needs root and iproute2 (ip netns)"),
]

NAMES = ["pod-a", "pod-b", "pod-c", "pod-d", "pod-e"]
LEFT = 2


class Pods(netns.Pods):
    def __init__(self, running: netns.Pods) -> None:
        super().__init__(running.fabric, running.servers)
        self.timeline: list[tuple[float, str, dict[str, tuple[str | None, int]]]] = []
        self.t0 = time.monotonic()
        self.term1 = 0
        """The majority's term during the cut."""
        self.settled = 0.0
        """Seconds from the cut until the minority was leaderless and the majority led."""

    def sample(self, phase: str) -> dict[str, dict[str, Any]]:
        """One round of every pod's status; asserts no two pods claim leadership."""
        seen = {n: s for n in NAMES if (s := self.status(n)) is not None}
        claims = [n for n, s in seen.items() if s["leader"] == n]
        views = {n: (s["leader"], s["term"]) for n, s in seen.items()}
        t = time.monotonic() - self.t0
        self.timeline.append((t, phase, views))
        assert len(claims) <= 1, f"t={t:.2f}s two pods lead at once: {views}"
        return seen

    def watch(self, phase: str, seconds: float, until: Any = None) -> dict[str, dict[str, Any]]:
        deadline = time.monotonic() + seconds
        seen: dict[str, dict[str, Any]] = {}
        while time.monotonic() < deadline:
            seen = self.sample(phase)
            if until is not None and until(seen):
                return seen
            time.sleep(0.1)
        if until is not None:
            raise AssertionError(f"{phase}: not reached in {seconds}s: {self.last()}")
        return seen

    def last(self) -> dict[str, tuple[str | None, int]]:
        return self.timeline[-1][2] if self.timeline else {}

    def print_timeline(self) -> None:
        print("\ntimeline (s, phase, pod: leader/term):")
        previous = None
        for t, phase, views in self.timeline:
            line = " ".join(f"{n[-1]}:{(v[0] or '-')[-1]}/{v[1]}" for n, v in sorted(views.items()))
            if line != previous:
                print(f"  {t:6.2f} {phase:9} {line}")
                previous = line


def agreed(names: list[str]) -> Any:
    def check(seen: dict[str, dict[str, Any]]) -> bool:
        views = {(seen[n]["leader"], seen[n]["term"]) for n in names if n in seen}
        return len(views) == 1 and len(seen) >= len(names) and next(iter(views))[0] is not None

    return check


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pods]:
    root = tmp_path_factory.mktemp("partition")
    # pod-a first (it must lead, as in a one-by-one start), the rest side by side.
    with netns.running_pods(root, NAMES, TIMING, left=LEFT) as run:
        cluster = Pods(run)
        try:
            yield cluster
        finally:
            cluster.print_timeline()


def _lists(pods: Pods, name: str, model: str) -> bool:
    try:
        data = HTTP.get(f"{pods.servers[name].url}/v1/models", timeout=1).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return any(m["id"] == model for m in data)


def test_partition_2_3_then_heal(pods: Pods) -> None:
    seen = pods.watch("start", 15, agreed(NAMES))
    assert seen["pod-a"]["leader"] == "pod-a"
    term0 = seen["pod-a"]["term"]
    with pods.servers["pod-a"].client() as client:  # the leader places it on pod-e
        resp = client.post(
            "/api/v1/models/load",
            json={"modelPath": "right-model", "engine": "sim", "podId": "pod-e"},
        )
        assert resp.status_code == 202, resp.text
    pods.watch("spread", 10, lambda s: all(_lists(pods, n, "right-model") for n in NAMES))

    cut = time.monotonic()
    with pods.fabric.split():
        _while_cut(pods, cut, term0)
    healed = time.monotonic()
    seen = pods.watch(
        "healed",
        15,
        lambda s: agreed(NAMES)(s) and all(_lists(pods, n, "right-model") for n in NAMES),
    )
    rejoined = time.monotonic() - healed
    leader, term = seen["pod-a"]["leader"], seen["pod-a"]["term"]
    assert leader == "pod-c"  # a leader holding its quorum is not deposed by the return
    assert term == pods.term1
    models = {
        n: sorted(m["id"] for m in HTTP.get(f"{pods.servers[n].url}/v1/models").json()["data"])
        for n in NAMES
    }
    assert len({tuple(v) for v in models.values()}) == 1, models
    print(
        f"\npartition 2|3: minority leaderless and majority led by pod-c (term {pods.term1}) "
        f"{pods.settled:.2f}s after the cut; one leader and one routing table {rejoined:.2f}s "
        "after healing"
    )


def _while_cut(pods: Pods, cut: float, term0: int) -> None:
    """The checks of the partition itself (the cable is unplugged throughout)."""
    left, right = NAMES[:LEFT], NAMES[LEFT:]
    # Minority: the old leader loses its lease (E) and nobody there can win a vote.
    pods.watch(
        "cut",
        10,
        lambda s: (
            all(n in s and s[n]["leader"] is None for n in left)
            and agreed(right)(s)
            and s["pod-c"]["leader"] != "pod-a"
        ),
    )
    pods.settled = time.monotonic() - cut
    seen = pods.watch("cut", 2.0)  # and it stays that way
    assert all(seen[n]["leader"] is None for n in left)
    assert seen["pod-c"]["leader"] == "pod-c"  # lowest id of the majority
    pods.term1 = seen["pod-c"]["term"]
    assert pods.term1 > term0
    # The minority refuses admin writes (no leader); reads still answer locally.
    for name in left:
        with pods.servers[name].client() as client:
            resp = client.post("/api/v1/models/load", json={"modelPath": "x", "engine": "sim"})
            assert resp.status_code == 503, resp.text
            assert resp.json()["code"] == "no_leader"
            assert client.get("/api/v1/models").status_code == 200
    # The majority's followers send admin requests to their leader.
    with pods.servers["pod-d"].client() as client:
        resp = client.post("/api/v1/models/load", json={"modelPath": "x", "engine": "sim"})
        assert resp.status_code == 307
        assert resp.headers["location"].startswith(f"http://{pods.fabric.data_ip(2)}:3000/")
    # The minority's routes to the majority are gone; the majority keeps serving.
    pods.watch("cut", 10, lambda s: not _lists(pods, "pod-a", "right-model"))
    assert _lists(pods, "pod-c", "right-model")
