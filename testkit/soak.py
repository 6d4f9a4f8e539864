"""The chaos soak: a 5-pod static cluster, each pod in its own network namespace, under
steady traffic and a seeded schedule of faults, its invariants checked all along
(benchmarks/soak.py runs it for minutes, tests/soak/ for ~90 s; docs/testing.md).

Faults, one at a time, drawn from ``random.Random(seed)``: SIGKILL or SIGSTOP of the
leader, of a follower, SIGKILL of an engine, a 2|3 partition, one pod isolated, one
pod's outbound data link lossy and slow (asymmetric), one pod's wall clock jumping
(libfaketime; its monotonic clock does not move), one pod's data dir (a small tmpfs)
full. A run opens with the last three (``OPENING``, in a seeded order) so that even
the short variant has each of them; the rest are drawn uniformly. Admin
operations run beside them (their own seeded loop): preset applies, moves, sleeps,
wakes, unloads, loads. Models: ``soak-a`` (a preset, 2 replicas), ``soak-b`` (the same
preset, 1 or 2 replicas as the applies switch it) and ``soak-cat`` (a catalog model
started on demand, put to sleep when idle and woken by the next request).

Invariants (each a named ``Violation`` with the timeline around it):

* ``one-leader-per-term``: no two pods ever claim the lead in the same term (sampled);
* ``old-term-write-refused``: after each fault, a fenced leader order signed by the
  harness with an older term than a pod's (the newest such term it saw) is refused
  by that pod with 409 ``stale_term`` (testkit/soak_fence.py);
* ``every-request-answered``: a request ends ok or with a clean OpenAI error within its
  deadline; one that broke or hung is allowed only while a fault killed or stopped a pod
  or an engine (counted, printed), never for a network cut, a lossy link, a clock jump
  or a full disk;
* ``acknowledged-write-kept``: a catalog write the leader acknowledged while a pod's
  disk was full is on every pod once the disk is freed (a 507 is not acknowledged);
* ``routing-converges``: after each fault heals, within ``bound`` every pod lists every
  model that runs somewhere and none that runs nowhere, and all agree on one leader;
* ``no-orphan-or-double-engine``: after each step, every engine process of a pod is an
  instance that pod lists, and no instance runs twice;
* ``control-state-agrees`` / ``registry-agrees``: after healing, every pod holds the
  same presets, catalog and moves (term, revision), and sees each pod's instances as
  that pod does;
* ``ledger-within-gpu``: no pod's instances reserve more of a GPU than it has;
* ``controller-rss-bounded``: every pod's RSS stays under ``rss_cap`` (curve printed).

The seed fixes every choice (fault kinds, victims, hold times, admin operations, the
traffic's mix); the times at which they happen also depend on how fast the cluster
heals, so a replay repeats the same sequence, not the same clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from testkit import netns
from testkit.cluster import TIMING
from testkit.servers import (
    ServerProcess,
    engine_processes,
    engine_roots,
    kill_engines,
    start_first_then_rest,
)
from testkit.soak_faults import SkewedClock, SmallDisk
from testkit.soak_fence import FenceProbe
from testkit.soak_traffic import TrafficLog

NAMES = ["pod-a", "pod-b", "pod-c", "pod-d", "pod-e"]
LEFT = 2
GPUS = "NVIDIA L4:24GiB,NVIDIA L4:24GiB"
SIM = ["--load-seconds", "0.5", "--ttft-ms", "10", "--itl-ms", "5", "--memory-gib", "4"]
PRESET = "soak"
CATALOG_MODEL = "soak-cat"
FAULTS = (
    "kill-leader",
    "stop-leader",
    "kill-follower",
    "stop-follower",
    "kill-engine",
    "partition-2-3",
    "isolate-one",
    "degrade-link",
    "clock-jump",
    "disk-full",
)
OPENING = ("degrade-link", "clock-jump", "disk-full")
"""Injected first, in an order drawn from the seed, before the uniform draws."""
ADMIN_OPS = ("apply", "move", "sleep", "wake", "unload", "load", "unload-extra")
SOAK_ENV = {
    **TIMING,
    "SARDEENZ_SIM_GPUS": GPUS,
    "SARDEENZ_PRESET_RECONCILE_SECONDS": "2",
    "SARDEENZ_STOP_GRACE_SECONDS": "3",
    "SARDEENZ_PROXY_READY_WAIT_SECONDS": "20",
    # Below the traffic's 30 s deadline (soak_traffic.DEADLINE): a request waiting for an
    # on-demand start or wake ends with a clean 503 ``model_not_ready`` by then, so a
    # ``hang`` always means a request that nothing would have ended (the default, 120 s,
    # made a legitimate wait and a stuck one look the same).
    "SARDEENZ_ONDEMAND_MAX_WAIT_SECONDS": "20",
}


class Violation(AssertionError):
    """An invariant that did not hold: its name, what was seen, the timeline around it."""

    def __init__(self, name: str, detail: str, timeline: str) -> None:
        super().__init__(f"invariant {name!r} violated: {detail}\n{timeline}")
        self.name = name


@dataclass
class Fault:
    kind: str
    target: str
    start: float
    end: float = float("inf")


@dataclass
class Report:
    seed: int
    duration: float
    faults: list[Fault] = field(default_factory=list)
    admin: dict[str, dict[str, int]] = field(default_factory=dict)
    converge: list[tuple[str, float]] = field(default_factory=list)
    rss: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    traffic: TrafficLog = field(default_factory=TrafficLog)
    unavailable: dict[str, float] = field(default_factory=dict)
    transitions: dict[str, int] = field(default_factory=dict)
    """The catalog model's instances seen entering each state (it sleeps and wakes)."""
    fenced: dict[str, int] = field(default_factory=dict)
    """Stale-term orders the harness sent, by the answer (``409 stale_term`` expected)."""
    terms: set[int] = field(default_factory=set)
    """Every term the harness saw a pod in."""
    acknowledged: dict[str, int] = field(default_factory=dict)
    """Catalog writes sent while a disk was full, by the answer."""


def unsettled_documents(
    samples: list[dict[str, dict[str, tuple[int, int]]]],
) -> dict[str, dict[str, tuple[int, int] | None]]:
    """The control documents whose copies have not settled over ``samples`` (each maps
    a copy's holder to document key -> (term, revision); oldest first), with each
    holder's version in the last sample.

    A document has settled if one sample saw every copy at the same version, or if
    every holder of the first sample was seen, in a later sample, at or past the
    newest version any copy had in the first one: the write that was on its way when
    the check began reached everyone, though the leader has written again since. A
    copy stuck behind, or one ahead with a write the others never get, settles
    neither way."""
    first = samples[0]
    keys = {key for sample in samples for copy in sample.values() for key in copy}
    apart: dict[str, dict[str, tuple[int, int] | None]] = {}
    for key in sorted(keys):
        if any(len({copy.get(key) for copy in sample.values()}) == 1 for sample in samples):
            continue
        versions = [copy[key] for copy in first.values() if key in copy]
        if versions and all(
            any(
                key in later.get(holder, {}) and later[holder][key] >= max(versions)
                for later in samples[1:]
            )
            for holder in first
        ):
            continue
        apart[key] = {holder: copy.get(key) for holder, copy in samples[-1].items()}
    return apart


class Soak:
    def __init__(
        self, root: Path, seed: int, duration: float, *, rss_cap_mb: int = 600, verbose: bool = True
    ) -> None:
        self.root = root
        self.verbose = verbose
        self.seed = seed
        self.duration = duration
        self.rss_cap = rss_cap_mb * 2**20
        self.rng = random.Random(seed)
        self.fabric = netns.Fabric(LEFT, len(NAMES) - LEFT)
        self.names = list(NAMES)
        self.servers: dict[str, ServerProcess] = {}
        self.down: set[str] = set()
        """Pods killed or stopped now (traffic avoids them)."""
        self.isolated: set[str] = set()
        self.t0 = time.monotonic()
        self.events: list[tuple[float, str]] = []
        self.report = Report(seed, duration)
        self.bound = 2 * float(TIMING["SARDEENZ_CLUSTER_UNAVAILABLE_AFTER_SECONDS"]) + 2 * float(
            TIMING["SARDEENZ_CLUSTER_PING_INTERVAL_SECONDS"]
        )
        """Seconds after a fault heals within which routing must have converged."""
        self._claims: dict[int, set[str]] = {}
        self.fence = FenceProbe()
        self._catalog_states: dict[str, str] = {}
        self.clock_pod, self.disk_pod = self.rng.sample(NAMES, 2)
        """The pod whose wall clock jumps, the pod whose data dir fills (fixed per run:
        one is started under libfaketime, the other on a tmpfs)."""
        self.clock = SkewedClock(root / "clock")
        self.disk = SmallDisk(root / self.disk_pod)

    # ------------------------------------------------------------ timeline
    def note(self, what: str) -> None:
        now = time.monotonic()
        self.events.append((now, what))
        if self.verbose:
            print(f"  {now - self.t0:8.2f}s {what}", flush=True)

    def timeline(self, around: float | None = None, span: float = 30.0) -> str:
        lines = []
        for t, what in self.events:
            if around is None or abs(t - around) <= span:
                lines.append(f"  {t - self.t0:8.2f}s {what}")
        return "timeline:\n" + "\n".join(lines[-80:])

    def violate(self, name: str, detail: str, at: float | None = None) -> None:
        self.note(f"VIOLATION {name}: {detail}")
        v = Violation(name, detail, self.timeline(at or time.monotonic()))
        self.report.violations.append(v)
        print(v, flush=True)

    # ------------------------------------------------------------- cluster
    def open(self) -> Soak:
        self.fabric.open()
        self.servers.update(netns.pod_servers(self.fabric, self.root, NAMES, SOAK_ENV))
        self.servers[self.clock_pod].env.update(self.clock.env())
        self.disk.mount()
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        # Its log stays whole (and readable) off the disk that fills.
        self.servers[self.disk_pod].log_path = logs / f"{self.disk_pod}.log"
        self.note(f"clock jumps on {self.clock_pod}, disk fills on {self.disk_pod}")
        start_first_then_rest(list(self.servers.values()), 90)
        self.note("cluster started")
        return self

    def close(self) -> None:
        for name, srv in self.servers.items():
            if srv.proc is not None and srv.proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.kill(srv.proc.pid, signal.SIGCONT)
            srv.stop(signal.SIGKILL)
            kill_engines(srv.data_dir)
            self.down.discard(name)
        self.fabric.close()
        self.disk.unmount()

    def url(self, name: str) -> str:
        return self.servers[name].url

    def up(self) -> list[str]:
        return [n for n in self.names if n not in self.down]

    async def status(self, http: httpx.AsyncClient, name: str) -> dict[str, Any] | None:
        try:
            resp = await http.get(f"{self.url(name)}/api/cluster/status", timeout=2)
        except httpx.HTTPError:
            return None
        return resp.json() if resp.status_code == 200 else None

    async def statuses(self, http: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
        names = self.up()
        got = await asyncio.gather(*(self.status(http, n) for n in names))
        return {n: s for n, s in zip(names, got, strict=True) if s is not None}

    async def leader(self, http: httpx.AsyncClient) -> str | None:
        for st in (await self.statuses(http)).values():
            if st["leader"] and st["leader"] not in self.down:
                return str(st["leader"])
        return None

    # ------------------------------------------------------------- set-up
    async def prepare(self, http: httpx.AsyncClient) -> None:
        leader = await self.wait_leader(http, 60)
        url = self.url(leader)
        preset = self._preset(b_replicas=1)
        resp = await http.put(f"{url}/api/cluster/presets/{PRESET}", json=preset, timeout=30)
        assert resp.status_code == 200, resp.text
        await self._apply(http, url)
        entry = {
            "modelPath": CATALOG_MODEL,
            "engine": "sim",
            "extraArgs": SIM,
            "sleepLevel": 1,
            "idleSleepSeconds": 4,
            "idleUnloadSeconds": 40,
        }
        resp = await http.put(f"{url}/api/v1/catalog/{CATALOG_MODEL}", json=entry, timeout=30)
        assert resp.status_code == 200, resp.text
        await self.converged(http, "set-up", 90)

    @staticmethod
    def _preset(b_replicas: int) -> dict[str, Any]:
        def model(name: str, replicas: int) -> dict[str, Any]:
            return {
                "modelPath": name,
                "servedModelName": name,
                "engine": "sim",
                "extraArgs": SIM,
                "replicas": replicas,
                "sleepLevel": 1,
            }

        return {"models": [model("soak-a", 2), model("soak-b", b_replicas)]}

    async def _apply(self, http: httpx.AsyncClient, url: str) -> str:
        """Apply the preset; the ``done`` event's state (or the refusal's code)."""
        async with http.stream(
            "POST", f"{url}/api/cluster/presets/{PRESET}/apply", timeout=60
        ) as resp:
            if resp.status_code != 200:
                body = (await resp.aread()).decode(errors="replace")
                return f"HTTP {resp.status_code} {body[:120]}"
            state = "no done event"
            event = ""
            async for line in resp.aiter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event == "done":
                    try:
                        done = json.loads(line[5:])
                        state = f"{done.get('state')} ({done.get('failed')} failed)"
                    except ValueError:
                        state = line[5:].strip()[:120]
            return state

    async def wait_leader(self, http: httpx.AsyncClient, within: float) -> str:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            seen = await self.statuses(http)
            views = {(s["leader"], s["term"]) for s in seen.values()}
            if len(seen) == len(self.up()) and len(views) == 1:
                leader = next(iter(views))[0]
                if leader is not None:
                    return str(leader)
            await asyncio.sleep(0.2)
        raise AssertionError(f"no agreed leader in {within}s")

    # ------------------------------------------------------------ checks
    async def sample(self, http: httpx.AsyncClient) -> None:
        """One round: leader claims per term, the ledger's reservations, RSS."""
        seen = await self.statuses(http)
        now = time.monotonic()
        for name, st in seen.items():
            self.report.terms.add(int(st["term"]))
            if st["leader"] == name:
                claimants = self._claims.setdefault(int(st["term"]), set())
                claimants.add(name)
                if len(claimants) > 1:
                    self.violate(
                        "one-leader-per-term", f"term {st['term']} led by {sorted(claimants)}"
                    )
            me = next((p for p in st["pods"] if p.get("self")), None)
            if me is None:
                continue
            for i in me["instances"]:
                if i["servedModelName"] == CATALOG_MODEL:
                    was = self._catalog_states.get(i["id"])
                    if was != i["status"]:
                        self._catalog_states[i["id"]] = i["status"]
                        self.note(f"{CATALOG_MODEL} {i['id']} on {name}: {was} -> {i['status']}")
                        key = f"{CATALOG_MODEL} {i['status']}"
                        self.report.transitions[key] = self.report.transitions.get(key, 0) + 1
            for gpu in me["gpus"]:
                held = sum(
                    i.get("reservedBytesPerGpu") or 0
                    for i in me["instances"]
                    if gpu["index"] in (i.get("gpuIds") or [])
                    and i["status"] in ("starting", "active", "sleeping")
                )
                if held > gpu["totalBytes"]:
                    self.violate(
                        "ledger-within-gpu",
                        f"{name} GPU {gpu['index']}: {held} B reserved of {gpu['totalBytes']} B",
                    )
        for name in self.up():
            proc = self.servers[name].proc
            if proc is None or proc.poll() is not None:
                continue
            with contextlib.suppress(psutil.Error):
                rss = psutil.Process(proc.pid).memory_info().rss
                self.report.rss.setdefault(name, []).append((now - self.t0, rss))
                if rss > self.rss_cap:
                    self.violate("controller-rss-bounded", f"{name} RSS {rss / 2**20:.0f} MiB")

    async def _models(self, http: httpx.AsyncClient, name: str) -> set[str] | None:
        try:
            resp = await http.get(f"{self.url(name)}/v1/models", timeout=2)
            data = resp.json()["data"]
        except (httpx.HTTPError, ValueError, KeyError):
            return None
        return {m["id"] for m in data if m.get("state", "active") in ("active", "sleeping")}

    async def _routing_gap(self, http: httpx.AsyncClient) -> str | None:
        """None when every pod up agrees on a leader and routes what runs; else why not."""
        seen = await self.statuses(http)
        if len(seen) != len(self.up()):
            return f"status from {sorted(seen)} of {self.up()}"
        views = {(s["leader"], s["term"]) for s in seen.values()}
        if len(views) != 1 or next(iter(views))[0] is None:
            return f"leaders {views}"
        active: set[str] = set()
        present: set[str] = {CATALOG_MODEL}
        for st in seen.values():
            me = next(p for p in st["pods"] if p.get("self"))
            for i in me["instances"]:
                if i["status"] == "active":
                    active.add(i["servedModelName"])
                if i["status"] in ("active", "sleeping", "starting", "stopping"):
                    present.add(i["servedModelName"])
        for name in self.up():
            listed = await self._models(http, name)
            if listed is None:
                return f"{name}: no /v1/models"
            missing = active - listed
            if missing:
                return f"{name} does not route {sorted(missing)}"
            gone = listed - present
            if gone:
                return f"{name} still routes {sorted(gone)}, which runs nowhere"
        return None

    async def converged(self, http: httpx.AsyncClient, after: str, within: float) -> float:
        """Wait until routing converged; the seconds it took (a violation past ``within``)."""
        t0 = time.monotonic()
        why: str | None = "not checked"
        while time.monotonic() - t0 < within:
            why = await self._routing_gap(http)
            if why is None:
                took = time.monotonic() - t0
                self.report.converge.append((after, took))
                self.note(f"converged after {after} in {took:.2f}s")
                return took
            await asyncio.sleep(0.2)
        self.violate("routing-converges", f"after {after}, {within:.1f}s: {why}", t0)
        return within

    async def check_engines(self) -> None:
        """No orphan engine and none twice, on every pod up (retried while stops finish)."""
        problem = ""
        async with httpx.AsyncClient() as http:
            for _ in range(20):
                problem = await self._engine_problem(http)
                if not problem:
                    return
                await asyncio.sleep(0.5)
        self.violate("no-orphan-or-double-engine", problem)

    async def _engine_problem(self, http: httpx.AsyncClient) -> str:
        for name in self.up():
            st = await self.status(http, name)
            if st is None:
                return f"{name}: no status"
            me = next(p for p in st["pods"] if p.get("self"))
            known = {i["id"] for i in me["instances"] if i["status"] != "failed"}
            procs = await asyncio.to_thread(engine_processes, self.servers[name].data_dir)
            roots: dict[str, int] = {}
            for _, iid in engine_roots(procs):
                roots[iid] = roots.get(iid, 0) + 1
            orphans = sorted(set(roots) - known)
            doubled = sorted(i for i, n in roots.items() if n > 1)
            if orphans or doubled:
                return f"{name}: orphan engines {orphans}, doubled {doubled}"
        return ""

    async def check_agreement(self, http: httpx.AsyncClient, within: float) -> None:
        """Control state (presets, catalog, moves) and the registry agree across pods.

        The control copies are judged over every sample of the bound, not one (see
        ``unsettled_documents``): a write reaches the leader's copy before the others'
        (a push or a watch later), and while a move runs the leader writes its
        document at every step, so one sample of the pods often straddles a write
        (run61: the leader at ``moves`` (12, 108), the others at (12, 107) 0.1 s after
        the leader wrote it). A copy that stays behind or apart for the whole bound is
        still a violation."""
        t0 = time.monotonic()
        samples: list[dict[str, dict[str, tuple[int, int]]]] = []
        why = ""
        while time.monotonic() - t0 < within:
            why = await self._disagreement(http, samples)
            if not why:
                return
            await asyncio.sleep(0.3)
        self.violate("control-state-agrees", why, t0)

    async def control_copy(
        self, http: httpx.AsyncClient, name: str
    ) -> dict[str, tuple[int, int]] | None:
        """``name``'s copy of the control state: (term, revision) by document key."""
        try:
            resp = await http.get(f"{self.url(name)}/api/cluster/control", timeout=2)
            docs = resp.json()["documents"]
        except (httpx.HTTPError, ValueError, KeyError):
            return None
        return {d["key"]: (d["term"], d["revision"]) for d in docs}

    async def control_copies(
        self, http: httpx.AsyncClient
    ) -> dict[str, dict[str, tuple[int, int]]]:
        """Every copy of the control state to compare, by who holds it (the pods up);
        raises ``LookupError`` naming a pod that answered with none."""
        copies = {}
        for name in self.up():
            copy = await self.control_copy(http, name)
            if copy is None:
                raise LookupError(f"{name}: no control state")
            copies[name] = copy
        return copies

    async def _disagreement(
        self, http: httpx.AsyncClient, samples: list[dict[str, dict[str, tuple[int, int]]]]
    ) -> str:
        """What does not agree yet (empty: all of it does); ``samples`` keeps the control
        copies seen by the check so far, this one's appended."""
        try:
            samples.append(await self.control_copies(http))
        except LookupError as exc:
            return str(exc)
        if apart := unsettled_documents(samples):
            return f"control-state copies differ (each copy's last version): {apart}"
        seen = await self.statuses(http)
        own = {
            n: {i["id"] for i in next(p for p in s["pods"] if p.get("self"))["instances"]}
            for n, s in seen.items()
        }
        for viewer, st in seen.items():
            for pod in st["pods"]:
                if pod.get("self") or pod["id"] not in own:
                    continue
                theirs = {i["id"] for i in pod["instances"]}
                if theirs != own[pod["id"]]:
                    return (
                        f"registry: {viewer} sees {pod['id']} run {sorted(theirs)}, "
                        f"it runs {sorted(own[pod['id']])}"
                    )
        return ""
