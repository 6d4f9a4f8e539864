"""The soak's Kubernetes-mode cluster: 3 pods on the real kube-apiserver tier, the same
traffic, admin operations and invariants as the static soak (testkit/soak.py), and the
faults a Kubernetes pod meets (benchmarks/soak.py runs both clusters side by side;
tests/kube/test_kube_soak.py runs this one on the kube tier's API server).

The pods are testkit/kube_pods.py's (the harness plays the kubelet): one ``sardeenz
serve`` per Pod object on its own loopback address, the leader elected through the
``sardeenz-leader`` Lease, the control state (presets, catalog, moves) kept in
ConfigMaps. No network namespaces: the API server is on the host's loopback, and
partitions are the static soak's. Faults: SIGKILL or SIGSTOP of the Lease holder or of
a follower, SIGKILL of an engine. A killed pod is what the kubelet sees die: its Pod
is marked not Ready at once, and at the heal the container is restarted (same data
dir) and marked Ready when it answers its probe. A stopped pod stays Ready (a kubelet's
readiness probe takes longer than a hold to notice): only the pods' own failure
detector and the Lease's expiry take it out.

What Kubernetes mode adds to the invariants:

* ``one-leader-per-term``: the Lease is sampled with the pods; its holder in term
  ``leaseTransitions + 1`` counts as that term's leader, so a pod claiming the same
  term is caught even when no other pod claims it;
* ``control-state-agrees``: every pod's copy of each control document has the term and
  revision of the ConfigMap the API server holds (not only the same as each other's).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import httpx

from sardeenz.cluster.control_configmap import SELECTOR, CorruptDocument, decode
from testkit.kube import KubeApiServer
from testkit.kube_pods import LEASE, KubePods
from testkit.soak import SOAK_ENV, Fault, Report, Soak
from testkit.soak_run import PROCESS_FAULTS, Chaos, drive

SIZE = 3
KINDS = tuple(sorted(PROCESS_FAULTS))
"""Processes only: a partition of loopback addresses is not one (the static soak's
network namespaces cover partitions)."""


class KubeSoak(Soak):
    """A :class:`Soak` whose cluster is :class:`KubePods` in a namespace of ``kube``."""

    def __init__(
        self,
        kube: KubeApiServer,
        root: Path,
        seed: int,
        duration: float,
        *,
        verbose: bool = True,
        rss_cap_mb: int = 600,
    ) -> None:
        super().__init__(root, seed, duration, rss_cap_mb=rss_cap_mb, verbose=verbose)
        self.kube = kube
        self.pods: KubePods | None = None
        self.names = [f"pod-{chr(ord('a') + i)}" for i in range(SIZE)]

    def note(self, what: str) -> None:
        # Both clusters print to one terminal in benchmarks/soak.py.
        super().note(f"[kube] {what}")

    def open(self) -> KubeSoak:
        self.pods = KubePods(self.kube, self.root, SIZE, extra_env=SOAK_ENV)
        self.servers.update(self.pods.pods)
        self.pods.start(90)
        self.note(f"cluster started in namespace {self.pods.namespace}")
        return self

    def close(self) -> None:
        if self.pods is None:
            return
        for srv in self.servers.values():
            if srv.proc is not None and srv.proc.poll() is None:
                with contextlib.suppress(OSError):
                    srv.proc.send_signal(signal.SIGCONT)
        # SIGKILL and every engine killed. The namespace stays: without a
        # controller-manager nothing would finalize its deletion (its Pods, Lease and
        # ConfigMaps go with the API server).
        self.pods.close()
        self.down.clear()

    # ------------------------------------------------------- the API server's view
    def lease(self) -> tuple[str, int] | None:
        """(holder, term) as the Lease says, None without a holder (blocking)."""
        assert self.pods is not None
        spec = self.pods.lease()
        if not spec or not spec.get("holderIdentity"):
            return None
        return str(spec["holderIdentity"]), int(spec.get("leaseTransitions") or 0) + 1

    def configmaps(self) -> dict[str, tuple[int, int]]:
        """Each control document's (term, revision) as the API server holds it (blocking)."""
        assert self.pods is not None
        with self.kube.client(timeout=5) as api:
            resp = api.get(
                f"/api/v1/namespaces/{self.pods.namespace}/configmaps",
                params={"labelSelector": SELECTOR},
            )
        resp.raise_for_status()
        stored = (decode(obj) for obj in resp.json()["items"])
        return {s.doc.key: (s.doc.term, s.doc.revision) for s in stored if s is not None}

    async def sample(self, http: httpx.AsyncClient) -> None:
        try:
            held = await asyncio.to_thread(self.lease)
        except (httpx.HTTPError, AssertionError) as exc:
            self.note(f"Lease {LEASE} not read: {exc}")
            held = None
        if held is not None:
            holder, term = held
            claimants = self._claims.setdefault(term, set())
            claimants.add(holder)
            if len(claimants) > 1:
                self.violate(
                    "one-leader-per-term",
                    f"term {term} led by {sorted(claimants)} (the Lease names {holder})",
                )
        await super().sample(http)

    async def _disagreement(self, http: httpx.AsyncClient) -> str:
        why = await super()._disagreement(http)
        if why:
            return why
        try:
            stored = await asyncio.to_thread(self.configmaps)
        except (httpx.HTTPError, CorruptDocument) as exc:
            return f"ConfigMaps not read: {exc}"
        # The pods agree with each other (above): one copy stands for them all.
        if not self.up():
            return ""
        name = self.up()[0]
        held = await self.control_copy(http, name)
        if held != stored:
            return f"{name} holds {held}, the API server's ConfigMaps {stored}"
        return ""

    async def _routing_gap(self, http: httpx.AsyncClient) -> str | None:
        why = await super()._routing_gap(http)
        if why is None or "route" not in why:
            return why
        return f"{why}; {await self._views(http)}"

    async def _views(self, http: httpx.AsyncClient) -> str:
        """What each pod lists (``/v1/models`` states) and sees every pod run (its
        status): where a route went missing, for the violation's message."""
        parts = []
        for name in self.up():
            try:
                resp = await http.get(f"{self.url(name)}/v1/models", timeout=2)
                states = {m["id"]: m.get("state") for m in resp.json()["data"]}
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                states = {"?": type(exc).__name__}
            st = await self.status(http, name)
            seen = {
                p["id"]: sorted(f"{i['servedModelName']}:{i['status']}" for i in p["instances"])
                for p in (st or {}).get("pods", [])
            }
            parts.append(f"{name} lists {states}, sees {seen}")
        return " | ".join(parts)


class KubeChaos(Chaos):
    """:class:`Chaos` with the kubelet's part: a killed pod's Pod goes not Ready at
    once and comes back Ready after its restart."""

    kinds = KINDS
    opening_kinds = ()  # the link, clock and disk faults need the static pods' namespaces

    def __init__(self, soak: KubeSoak) -> None:
        super().__init__(soak)
        self.k = soak

    async def _inject(self, http: httpx.AsyncClient, kind: str, pick: float) -> Fault | None:
        fault = await super()._inject(http, kind, pick)
        if fault is not None and kind in ("kill-leader", "kill-follower"):
            assert self.k.pods is not None
            await asyncio.to_thread(self.k.pods.mark_ready, fault.target, False)
        return fault

    async def _heal(self, fault: Fault) -> None:
        if fault.kind not in ("kill-leader", "kill-follower"):
            await super()._heal(fault)
            return
        pods = self.k.pods
        assert pods is not None
        srv = pods.pods[fault.target]
        assert srv.proc is not None
        await asyncio.to_thread(srv.proc.wait, 10)
        await asyncio.to_thread(pods.restart, fault.target)
        self.k.down.discard(fault.target)
        self.k.note(f"HEAL {fault.target} restarted, Pod Ready")


async def run_kube(
    kube: KubeApiServer, root: Path, seed: int, duration: float, clients: int = 4
) -> Report:
    """The Kubernetes-mode soak on ``kube`` for ``duration`` s (opened, checked, closed)."""
    soak = KubeSoak(kube, root, seed, duration)
    print(f"soak (kube): seed {seed}, {duration:g}s, {SIZE} pods on {kube.url}", flush=True)
    return await drive(soak, KubeChaos(soak), clients)
