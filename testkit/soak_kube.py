"""The soak's Kubernetes-mode cluster: 3 pods on the real kube-apiserver tier, the same
traffic, admin operations and invariants as the static soak (testkit/soak.py), and the
faults a Kubernetes pod meets (benchmarks/soak.py runs both clusters side by side;
tests/kube/test_kube_soak.py runs this one on the kube tier's API server).

The pods are testkit/kube_pods.py's (the harness plays the kubelet): one ``sardeenz
serve`` per Pod object, each in its own network namespace (testkit/netns.py: pod-a on
one switch, pod-b and pod-c on the other), the leader elected through the
``sardeenz-leader`` Lease, the control state (presets, catalog, moves) kept in
ConfigMaps. The API server stays in the harness's namespace; the fabric ``publish``-es
it to the pods at the ``kubernetes`` Service's address, so a fault can cut a pod from
its peers, from the API server, or both. Faults: SIGKILL or SIGSTOP of the Lease holder
or of a follower, SIGKILL of an engine, and (``NET_FAULTS``, every run opens with them
in a seeded order, so the short run has each):

* ``isolate-leader``: the Lease holder cut from its peers AND the API server, so its
  renewals fail. It must stop acting as leader within ``STEP_DOWN_BOUND`` of the cut
  and another pod must hold the Lease in a higher term within ``TAKEOVER_BOUND``
  (``leader-steps-down``, ``lease-taken-over``); a catalog write sent to it at the cut
  and writes through the new leader during the cut must be kept if acknowledged; after
  the heal it rejoins (routing, control state, fencing checked as after every fault);
* ``cut-api``: one pod cut from the API server only (its peers still reach it): the
  holder must step down and be replaced as above; a follower misses the ConfigMaps'
  watch events meanwhile and must catch up after;
* ``partition-1-2``: pod-a | pod-b, pod-c, all still reaching the API server: the Lease
  decides (no election among peers), writes go on through the leader.

A killed pod is what the kubelet sees die: its Pod
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
import time
from pathlib import Path

import httpx

from sardeenz.cluster.control_configmap import SELECTOR, CorruptDocument, decode
from testkit import netns
from testkit.kube import KubeApiServer
from testkit.kube_pods import LEASE, LEASE_TIMING, KubePods
from testkit.soak import SOAK_ENV, Fault, Report, Soak
from testkit.soak_run import PROCESS_FAULTS, Chaos, drive

SIZE = 3
NET_FAULTS = ("isolate-leader", "cut-api", "partition-1-2")
KINDS = (*sorted(PROCESS_FAULTS), *NET_FAULTS)
LEASE_SECONDS = float(LEASE_TIMING["SARDEENZ_KUBE_LEASE_DURATION_SECONDS"])
STEP_DOWN_BOUND = LEASE_SECONDS + 1.0
"""A holder that cannot renew stops leading at its renew deadline, before the Lease
expires (others may take it then): within the Lease's duration of the cut, plus a
second for the status answer that shows it on a loaded machine."""
TAKEOVER_BOUND = 2 * LEASE_SECONDS + float(LEASE_TIMING["SARDEENZ_KUBE_REQUEST_TIMEOUT_SECONDS"])
"""Another pod takes a Lease it has seen unchanged for its duration: once the holder's
last renewal expired, plus a retry and a request."""


API_SERVER = "(API server)"
"""The ConfigMaps' place among the control copies compared."""


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
        self.fabric = netns.Fabric(1, SIZE - 1)

    def note(self, what: str) -> None:
        # Both clusters print to one terminal in benchmarks/soak.py.
        super().note(f"[kube] {what}")

    def open(self) -> KubeSoak:
        self.fabric.open()
        try:
            self.fabric.publish(self.kube.port)
            self.pods = KubePods(self.kube, self.root, SIZE, extra_env=SOAK_ENV, fabric=self.fabric)
            self.servers.update(self.pods.pods)
            self.pods.start(90)
        except BaseException:
            self.close()
            raise
        self.note(
            f"cluster started in namespace {self.pods.namespace}, network namespaces "
            f"{self.fabric.namespaces}, API server at {netns.SERVICE_IP}:443"
        )
        return self

    def close(self) -> None:
        if self.pods is None:
            self.fabric.close()
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
        self.fabric.close()

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

    async def control_copies(
        self, http: httpx.AsyncClient
    ) -> dict[str, dict[str, tuple[int, int]]]:
        """The pods' copies and the API server's ConfigMaps, which every pod's copy must
        reach (they are the state: a pod's copy is its watch of them)."""
        copies = await super().control_copies(http)
        try:
            copies[API_SERVER] = await asyncio.to_thread(self.configmaps)
        except (httpx.HTTPError, CorruptDocument) as exc:
            raise LookupError(f"ConfigMaps not read: {exc}") from exc
        return copies

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
    opening_kinds = NET_FAULTS

    def __init__(self, soak: KubeSoak) -> None:
        super().__init__(soak)
        self.k = soak
        self._deposed: tuple[str, int] | None = None
        """(pod, term) of the Lease holder the running fault cut from the API server."""

    async def _inject(self, http: httpx.AsyncClient, kind: str, pick: float) -> Fault | None:
        if kind in NET_FAULTS:
            return await self._cut(http, kind, pick)
        fault = await super()._inject(http, kind, pick)
        if fault is not None and kind in ("kill-leader", "kill-follower"):
            assert self.k.pods is not None
            await asyncio.to_thread(self.k.pods.mark_ready, fault.target, False)
        return fault

    async def _cut(self, http: httpx.AsyncClient, kind: str, pick: float) -> Fault | None:
        k, fabric = self.k, self.k.fabric
        leader = await k.leader(http)
        st = await k.status(http, leader) if leader is not None else None
        if leader is None or st is None or k.down:
            return None
        now = time.monotonic()
        self._deposed = None
        if kind == "partition-1-2":
            await asyncio.to_thread(fabric.partition)
            k.note(
                f"FAULT partition 1|2: {k.names[0]} | {', '.join(k.names[1:])} (leader {leader})"
            )
            return Fault(kind, f"{k.names[0]}|{','.join(k.names[1:])}", now)
        victim = leader if kind == "isolate-leader" else k.names[int(pick * SIZE)]
        i = k.names.index(victim)
        if kind == "isolate-leader":
            await asyncio.to_thread(fabric.isolate, i)
            k.isolated.add(victim)
        await asyncio.to_thread(fabric.cut_host, i)
        if victim == leader:
            self._deposed = (victim, int(st["term"]))
        role = f"the leader, term {st['term']}" if victim == leader else f"leader {leader}"
        cut = "its peers and the API server" if kind == "isolate-leader" else "the API server"
        k.note(f"FAULT {kind}: {victim} ({role}) cut from {cut}")
        return Fault(kind, victim, now)

    async def _hold(self, http: httpx.AsyncClient, fault: Fault, hold: float) -> None:
        if fault.kind not in NET_FAULTS:
            await super()._hold(http, fault, hold)
            return
        why = f"{fault.kind} {fault.target}"
        if self._deposed is not None:
            victim, term = self._deposed
            # A write sent to the deposed holder as it loses the Lease: refused, or kept.
            late = asyncio.create_task(self.write_mark(http, victim, f"{why}, to the deposed"))
            try:
                await self._hand_over(http, fault, victim, term)
            finally:
                await late
        rest = hold - (time.monotonic() - fault.start)
        await self._write_during(http, max(rest, 1.0), why)

    async def _hand_over(
        self, http: httpx.AsyncClient, fault: Fault, victim: str, term: int
    ) -> None:
        """``leader-steps-down`` and ``lease-taken-over`` after ``victim``, the holder in
        ``term``, lost the API server at ``fault.start``: it stops naming itself leader
        within ``STEP_DOWN_BOUND``, and another pod holds the Lease in a higher term
        within ``TAKEOVER_BOUND`` (and not before the deposed stopped leading)."""
        k = self.k
        stepped: float | None = None
        taken: tuple[str, int, float] | None = None
        overlap = False
        while time.monotonic() - fault.start < TAKEOVER_BOUND + 1.0:
            if taken is None:
                with contextlib.suppress(httpx.HTTPError, AssertionError):
                    held = await asyncio.to_thread(k.lease)
                    if held is not None and held[0] != victim and held[1] > term:
                        taken = (held[0], held[1], time.monotonic() - fault.start)
                        k.note(f"Lease taken by {held[0]} in term {held[1]} after {taken[2]:.2f}s")
            # Asked after the Lease was read: a claim now, with the Lease taken, overlaps.
            # Not leading by the time the answer came (so within the bound for sure).
            st = await k.status(http, victim)
            if stepped is None and st is not None:
                if st["leader"] != victim:
                    stepped = time.monotonic() - fault.start
                    k.note(
                        f"{victim} stopped leading {stepped:.2f}s after the cut "
                        f"(now {st['leader']})"
                    )
                elif taken is not None and not overlap:
                    overlap = True
                    k.violate(
                        "leader-steps-down",
                        f"{victim} still leads term {term} after {taken[0]} took the Lease "
                        f"in term {taken[1]}",
                    )
            if stepped is not None and taken is not None:
                break
            await asyncio.sleep(0.1)
        if not overlap and (stepped is None or stepped > STEP_DOWN_BOUND):
            k.violate(
                "leader-steps-down",
                f"{victim}, cut from the API server, still led term {term} "
                f"{STEP_DOWN_BOUND:g}s after the cut ({fault.kind})",
                fault.start,
            )
        if taken is None or taken[2] > TAKEOVER_BOUND:
            k.violate(
                "lease-taken-over",
                f"no other pod held the Lease in a term above {term} within "
                f"{TAKEOVER_BOUND:g}s of cutting {victim} ({fault.kind}): {taken}",
                fault.start,
            )

    async def _heal(self, fault: Fault) -> None:
        if fault.kind in NET_FAULTS:
            await self._rejoin(fault)
            return
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

    async def _rejoin(self, fault: Fault) -> None:
        k, fabric = self.k, self.k.fabric
        if fault.kind == "partition-1-2":
            await asyncio.to_thread(fabric.heal)
            k.note("HEAL partition")
            return
        i = k.names.index(fault.target)
        await asyncio.to_thread(fabric.reach_host, i)
        if fault.kind == "isolate-leader":
            await asyncio.to_thread(fabric.rejoin, i)
            k.isolated.discard(fault.target)
        k.note(f"HEAL {fault.target} reconnected")


async def run_kube(
    kube: KubeApiServer, root: Path, seed: int, duration: float, clients: int = 4
) -> Report:
    """The Kubernetes-mode soak on ``kube`` for ``duration`` s (opened, checked, closed)."""
    soak = KubeSoak(kube, root, seed, duration)
    print(
        f"soak (kube): seed {seed}, {duration:g}s, {SIZE} pods in network namespaces on {kube.url}",
        flush=True,
    )
    return await drive(soak, KubeChaos(soak), clients)
