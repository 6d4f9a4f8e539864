"""The soak's two seeded loops (faults, admin operations) and its run and summary.

testkit/soak.py holds the cluster and the invariants; this module decides what happens
when, from the seed, and prints the figures (benchmarks/soak.py, tests/soak/).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

import httpx
import psutil

from testkit.servers import engine_processes, engine_roots
from testkit.soak import (
    ADMIN_OPS,
    CATALOG_MODEL,
    FAULTS,
    NAMES,
    OPENING,
    SIM,
    Fault,
    Report,
    Soak,
)
from testkit.soak_fence import check_fencing
from testkit.soak_traffic import run_traffic

PROCESS_FAULTS = {"kill-leader", "stop-leader", "kill-follower", "stop-follower", "kill-engine"}


class Chaos:
    kinds: tuple[str, ...] = FAULTS
    """The faults this soak's cluster can be given (testkit/soak_kube.py: processes only)."""
    opening_kinds: tuple[str, ...] = OPENING
    """Faults every run opens with, in a seeded order (so a short run has each of them)."""

    def __init__(self, soak: Soak) -> None:
        self.s = soak
        self.rng = random.Random(soak.rng.randrange(2**32))
        self.admin_rng = random.Random(soak.rng.randrange(2**32))
        self.traffic_rng = random.Random(soak.rng.randrange(2**32))
        self.catalog_on = True
        self.opening = list(self.opening_kinds)
        self.rng.shuffle(self.opening)
        self._marks: list[str] = []
        """Catalog entries acknowledged during a fault (checked after the heal)."""
        self._sent = 0

    # ------------------------------------------------------------ traffic
    def pick_entry(self) -> tuple[str, str] | None:
        up = self.s.up()
        if not up:
            return None
        name = self.traffic_rng.choice(up)
        return name, self.s.url(name)

    def pick_model(self) -> str:
        models = ["soak-a", "soak-a", "soak-b"]
        if self.catalog_on:
            models.append(CATALOG_MODEL)
        return self.traffic_rng.choice(models)

    async def catalog_rhythm(self, stop: asyncio.Event) -> None:
        """Requests for the catalog model come and go, so that it sleeps and wakes."""
        while not stop.is_set():
            self.catalog_on = not self.catalog_on
            self.s.note(f"catalog traffic {'on' if self.catalog_on else 'off'}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 10.0)

    # ------------------------------------------------------------- faults
    async def faults(self, http: httpx.AsyncClient, stop: asyncio.Event) -> None:
        s = self.s
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.rng.uniform(3.0, 8.0))
            if stop.is_set():
                return
            kind = self.opening[0] if self.opening else self.rng.choice(self.kinds)
            hold = self.rng.uniform(2.0, 6.0)
            victim_pick = self.rng.random()
            fault = await self._inject(http, kind, victim_pick)
            if fault is None:
                continue
            if self.opening and self.opening[0] == kind:
                self.opening.pop(0)
            s.report.faults.append(fault)
            await self._hold(http, fault, hold)
            await self._heal(fault)
            fault.end = time.monotonic()
            await s.converged(http, f"{fault.kind} {fault.target}", s.bound)
            await s.check_engines()
            await s.check_agreement(http, s.bound)
            await self._check_marks(http)
            await check_fencing(s, http)

    async def _inject(self, http: httpx.AsyncClient, kind: str, pick: float) -> Fault | None:
        s = self.s
        leader = await s.leader(http)
        if leader is None:
            return None
        followers = [n for n in s.up() if n != leader]
        now = time.monotonic()
        if kind in ("kill-leader", "stop-leader", "kill-follower", "stop-follower"):
            victim = leader if kind.endswith("leader") else followers[int(pick * len(followers))]
            proc = s.servers[victim].proc
            assert proc is not None
            s.down.add(victim)
            os.kill(proc.pid, signal.SIGKILL if kind.startswith("kill") else signal.SIGSTOP)
            s.note(f"FAULT {kind}: {victim}")
            return Fault(kind, victim, now)
        if kind == "kill-engine":
            engines = []
            for name in s.up():
                procs = await asyncio.to_thread(engine_processes, s.servers[name].data_dir)
                engines += [(name, p, iid) for p, iid in engine_roots(procs)]
            if not engines:
                return None
            name, engine, iid = engines[int(pick * len(engines))]
            with contextlib.suppress(psutil.Error):  # it may have ended since the listing
                engine.kill()
            s.note(f"FAULT kill-engine: {iid} on {name}")
            return Fault(kind, f"{name}/{iid}", now)
        if kind == "degrade-link":
            victim = NAMES[int(pick * len(NAMES))]
            loss, delay = 10 + int(pick * 1000) % 21, 50 + int(pick * 10000) % 151
            how = await asyncio.to_thread(s.fabric.degrade, NAMES.index(victim), loss, delay)
            s.note(f"FAULT degrade-link {victim}: {how}")
            return Fault(kind, victim, now)
        if kind == "clock-jump":
            # Within the cluster's signing window (30 s) or far past it, ahead or behind;
            # the opening one far ahead, then back: the pod is cut off (its signatures
            # stale to the others, theirs to it) and must rejoin once its clock is right.
            if "clock-jump" in self.opening:
                size = self.rng.choice((120, 3600))
            else:
                size = self.rng.choice((10, 25, 120, 3600)) * self.rng.choice((1, -1))
            victim = s.clock_pod
            if victim in s.down:
                return None
            seen = await asyncio.to_thread(s.clock.jump, s.url(victim), size)
            procs = await asyncio.to_thread(engine_processes, s.servers[victim].data_dir)
            faked = 0
            for engine_proc in procs:  # its engines inherit the preload: their clock jumps too
                with contextlib.suppress(psutil.Error):
                    faked += "faketime" in engine_proc.environ().get("LD_PRELOAD", "")
            s.note(
                f"FAULT clock-jump {victim}: wall clock {size:+d}s (Date header {seen:+.0f}s; "
                f"{faked} of its {len(procs)} engine processes under libfaketime)"
            )
            return Fault(kind, f"{victim} {size:+d}s", now)
        if kind == "disk-full":
            written = await asyncio.to_thread(s.disk.fill)
            s.note(f"FAULT disk-full {s.disk_pod}: filled ({written / 2**20:.1f} MiB)")
            return Fault(kind, s.disk_pod, now)
        if kind == "partition-2-3":
            s.fabric.partition()
            s.note("FAULT partition 2|3")
            return Fault(kind, "a,b|c,d,e", now)
        victim = NAMES[int(pick * len(NAMES))]
        s.fabric.isolate(NAMES.index(victim))
        s.isolated.add(victim)
        s.note(f"FAULT isolate {victim}")
        return Fault(kind, victim, now)

    async def _heal(self, fault: Fault) -> None:
        s = self.s
        if fault.kind.startswith("kill-") and fault.kind != "kill-engine":
            srv = s.servers[fault.target]
            assert srv.proc is not None
            srv.proc.wait(10)
            await asyncio.to_thread(srv.start, 90)
            s.down.discard(fault.target)
            s.note(f"HEAL {fault.target} restarted")
        elif fault.kind.startswith("stop-"):
            proc = s.servers[fault.target].proc
            assert proc is not None
            os.kill(proc.pid, signal.SIGCONT)
            s.down.discard(fault.target)
            s.note(f"HEAL {fault.target} continued")
        elif fault.kind == "partition-2-3":
            s.fabric.heal()
            s.note("HEAL partition")
        elif fault.kind == "isolate-one":
            s.fabric.rejoin(NAMES.index(fault.target))
            s.isolated.discard(fault.target)
            s.note(f"HEAL {fault.target} rejoined")
        elif fault.kind == "degrade-link":
            await asyncio.to_thread(s.fabric.restore, NAMES.index(fault.target))
            s.note(f"HEAL {fault.target} link restored")
        elif fault.kind == "clock-jump":
            seen = await asyncio.to_thread(s.clock.jump, s.url(s.clock_pod), 0)
            s.note(f"HEAL {s.clock_pod} wall clock back (Date header {seen:+.0f}s)")
        elif fault.kind == "disk-full":
            await asyncio.to_thread(s.disk.free)
            s.note(f"HEAL {s.disk_pod} disk freed")

    async def _hold(self, http: httpx.AsyncClient, fault: Fault, hold: float) -> None:
        """What happens while ``fault`` lasts (``hold`` s): writes for a full disk."""
        if fault.kind == "disk-full":
            await self._write_during(http, hold, f"disk of {self.s.disk_pod} full")
        else:
            await asyncio.sleep(hold)

    async def _write_during(self, http: httpx.AsyncClient, hold: float, why: str) -> None:
        """For ``hold`` s, write a catalog entry through the leader about every second:
        each one acknowledged must survive (``_check_marks``)."""
        end = time.monotonic() + hold
        while time.monotonic() < end:
            leader = await self.s.leader(http)
            if leader is not None:
                await self.write_mark(http, leader, why)
            await asyncio.sleep(1.0)

    async def write_mark(self, http: httpx.AsyncClient, via: str, why: str) -> None:
        """One catalog write sent to pod ``via``; kept to check if acknowledged."""
        s = self.s
        self._sent += 1
        key = f"soak-mark-{len(s.report.faults)}-{self._sent}"
        entry = {"modelPath": key, "engine": "sim", "extraArgs": SIM}
        try:
            r = await http.put(f"{s.url(via)}/api/v1/catalog/{key}", json=entry, timeout=10)
            code = r.json().get("code", "") if r.status_code >= 400 else ""
            answer = f"{r.status_code} {code}"
        except (httpx.HTTPError, ValueError) as exc:
            answer = type(exc).__name__
        answer = answer.strip()
        s.report.acknowledged[answer] = s.report.acknowledged.get(answer, 0) + 1
        s.note(f"WRITE {key} via {via} ({why}): {answer}")
        if answer == "200":
            self._marks.append(key)

    async def _check_marks(self, http: httpx.AsyncClient) -> None:
        """Every catalog write acknowledged during a full disk is in every pod's own copy
        of the catalog (they have converged), then is deleted (the catalog stays small)."""
        s = self.s
        if not self._marks:
            return
        for name in s.up():
            try:  # the pod's own copy (GET /api/v1/catalog on a follower is the leader's)
                r = await http.get(f"{s.url(name)}/api/cluster/control", timeout=5)
                docs = r.json()["documents"]
                have = set(next((d["body"] for d in docs if d["key"] == "catalog"), {}))
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                s.violate("acknowledged-write-kept", f"{name}: no control state to check")
                continue
            lost = [m for m in self._marks if m not in have]
            if lost:
                s.violate("acknowledged-write-kept", f"{name} lacks acknowledged {lost}")
        leader = await s.leader(http)
        if leader is None:
            return
        for key in list(self._marks):
            # Checked: no longer owed, whatever the delete answers (one that failed may
            # still have taken effect; an entry left behind only makes the catalog longer).
            self._marks.remove(key)
            try:
                r = await http.delete(f"{s.url(leader)}/api/v1/catalog/{key}", timeout=10)
                answer = str(r.status_code)
            except httpx.HTTPError as exc:
                answer = type(exc).__name__
            if answer not in ("200", "204", "404"):
                s.note(f"DELETE {key} via {leader}: {answer}")

    # ------------------------------------------------------------- admin
    async def admin(self, http: httpx.AsyncClient, stop: asyncio.Event) -> None:
        s = self.s
        b_replicas = 1
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.admin_rng.uniform(2.0, 5.0))
            if stop.is_set():
                return
            op = self.admin_rng.choice(ADMIN_OPS)
            pick = self.admin_rng.random()
            leader = await s.leader(http)
            if leader is None:
                self._count(op, "no leader")
                continue
            url = s.url(leader)
            try:
                if op == "apply":
                    b_replicas = 3 - b_replicas
                    put = await http.put(
                        f"{url}/api/cluster/presets/soak", json=s._preset(b_replicas), timeout=30
                    )
                    result = f"{await s._apply(http, url)} (put {put.status_code})"
                else:
                    result = await self._instance_op(http, url, op, pick)
            except httpx.HTTPError as exc:
                result = f"{type(exc).__name__}"
            s.note(f"ADMIN {op}: {result[:160]}")
            self._count(op, result.split(" ", 2)[0] if result else "?")

    def _count(self, op: str, result: str) -> None:
        counts = self.s.report.admin.setdefault(op, {})
        counts[result] = counts.get(result, 0) + 1

    async def _instance_op(self, http: httpx.AsyncClient, url: str, op: str, pick: float) -> str:
        resp = await http.get(f"{url}/api/v1/models", timeout=10)
        instances: list[dict[str, Any]] = resp.json() if resp.status_code == 200 else []

        def pick_of(status: str, *names: str) -> dict[str, Any] | None:
            found = [
                i for i in instances if i["status"] == status and i["servedModelName"] in names
            ]
            return found[int(pick * len(found))] if found else None

        if op == "load":
            body = {"modelPath": "soak-x", "engine": "sim", "extraArgs": SIM}
            r = await http.post(f"{url}/api/v1/models/load", json=body, timeout=30)
            return f"{r.status_code} soak-x"
        target = {
            "move": pick_of("active", "soak-a", "soak-b"),
            "sleep": pick_of("active", "soak-b"),
            "wake": pick_of("sleeping", "soak-b", CATALOG_MODEL),
            "unload": pick_of("active", "soak-a"),
            "unload-extra": pick_of("active", "soak-x"),
        }[op]
        if target is None:
            return "skipped (nothing to act on)"
        iid = target["id"]
        if op == "move":
            pods = [n for n in self.s.up() if n != target.get("podId")]
            body = {"instanceId": iid, "targetPodId": pods[int(pick * len(pods))]}
            r = await http.post(f"{url}/api/cluster/moves", json=body, timeout=30)
        elif op == "sleep":
            r = await http.post(f"{url}/api/v1/models/{iid}/sleep?level=1", timeout=60)
        elif op == "wake":
            r = await http.post(f"{url}/api/v1/models/{iid}/wake", timeout=60)
        else:
            r = await http.post(f"{url}/api/v1/models/{iid}/unload", timeout=60)
        return f"{r.status_code} {iid}"

    # ------------------------------------------------------------- sampling
    async def sampler(self, http: httpx.AsyncClient, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.s.sample(http)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)


def _excused(soak: Soak, o: Any) -> str | None:
    """Why a broken or hung request is allowed: a pod or an engine it may have been on was
    killed or stopped meanwhile. A network cut excuses nothing: a request forwarded across
    it ends with ``pod_unavailable`` once the failure detector gives the pod up."""
    for f in soak.report.faults:
        if f.kind in PROCESS_FAULTS and f.start <= o.ended and f.end + 1.0 >= o.started:
            return f.kind
    return None


async def run(root: Path, seed: int, duration: float, clients: int = 6) -> Report:
    """Open the cluster, run the soak for ``duration`` s, heal, check, close."""
    soak = Soak(root, seed, duration)
    print(f"soak: seed {seed}, {duration:g}s, 5 pods in network namespaces", flush=True)
    return await drive(soak, Chaos(soak), clients)


async def drive(soak: Soak, chaos: Chaos, clients: int) -> Report:
    """Open ``soak``'s cluster, run traffic, faults and admin operations for its
    duration, then heal, check every invariant once more and close (whatever happened).

    A harness error is a violation (``harness-runs-to-the-end``, with its traceback),
    not an exception: the report so far (its violations and timelines) is what a
    long run exists for, and the caller prints it; the loops still running are
    stopped and the cluster is closed either way."""
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    try:
        await asyncio.to_thread(soak.open)
        async with httpx.AsyncClient() as http:
            await soak.prepare(http)
            soak.t0 = time.monotonic()
            log = soak.report.traffic
            tasks = [
                asyncio.create_task(
                    run_traffic(
                        chaos.traffic_rng, clients, chaos.pick_entry, chaos.pick_model, stop, log
                    )
                ),
                asyncio.create_task(chaos.catalog_rhythm(stop)),
                asyncio.create_task(chaos.faults(http, stop)),
                asyncio.create_task(chaos.admin(http, stop)),
                asyncio.create_task(chaos.sampler(http, stop)),
            ]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(asyncio.gather(*tasks)), soak.duration)
            stop.set()
            await asyncio.gather(*tasks)
            await soak.converged(http, "the end", soak.bound)
            await soak.check_engines()
            await soak.check_agreement(http, soak.bound)
            await check_fencing(soak, http)
            _judge_requests(soak)
    except Exception:
        soak.violate("harness-runs-to-the-end", traceback.format_exc())
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.to_thread(soak.close)
    return soak.report


def _judge_requests(soak: Soak) -> None:
    excused: dict[str, int] = {}
    for o in soak.report.traffic.outcomes:
        if o.kind not in ("broken", "hang"):
            continue
        why = _excused(soak, o)
        if why is None:
            soak.violate(
                "every-request-answered",
                f"{o.kind} {o.model} stream={o.stream} via {o.entry} "
                f"at {o.started - soak.t0:.2f}-{o.ended - soak.t0:.2f}s: {o.detail}",
                o.started,
            )
        else:
            excused[why] = excused.get(why, 0) + 1
    soak.report.unavailable = {f"excused by {k}": v for k, v in excused.items()}


def summary(report: Report) -> str:
    t = report.traffic
    lines = [f"soak seed {report.seed}, {report.duration:g}s"]
    n = len(t.outcomes)
    lines.append(
        f"requests: {n} sent, {t.count('ok')} ok, {t.count('error')} clean errors, "
        f"{t.count('broken')} broken, {t.count('hang')} hung"
    )
    for kind in ("error", "broken", "hang"):
        if t.count(kind):
            lines.append(f"  {kind}: {t.by_detail(kind)}")
    if report.unavailable:
        lines.append(f"  broken/hung while a fault ran: {report.unavailable}")
    by_kind: dict[str, int] = {}
    for f in report.faults:
        by_kind[f.kind] = by_kind.get(f.kind, 0) + 1
    lines.append(f"faults: {len(report.faults)} {by_kind}")
    if report.acknowledged:
        lines.append(
            f"catalog writes during a full disk or a cut, by answer: {report.acknowledged}"
        )
    lines.append(f"admin operations: {report.admin}")
    lines.append(f"catalog model, instances seen entering a state: {report.transitions}")
    lines.append(
        f"stale-term orders sent from outside, by answer: {report.fenced} "
        f"(terms seen: {sorted(report.terms)})"
    )
    if report.converge:
        times = [c for _, c in report.converge]
        worst = max(report.converge, key=lambda c: c[1])
        lines.append(
            f"routing converged: median {statistics.median(times):.2f}s, "
            f"longest {worst[1]:.2f}s (after {worst[0]})"
        )
    gaps = _longest_unavailability(report)
    lines.append(f"longest run of failed requests per model (s): {gaps}")
    lines.append("controller RSS (MiB) per pod, start -> max -> end:")
    for name, curve in sorted(report.rss.items()):
        mib = [r / 2**20 for _, r in curve]
        steps = max(1, len(curve) // 8)
        points = " ".join(f"{t:.0f}s:{r / 2**20:.0f}" for t, r in curve[::steps])
        lines.append(f"  {name}: {mib[0]:.0f} -> {max(mib):.0f} -> {mib[-1]:.0f}  [{points}]")
    lines.append(f"violations: {len(report.violations)}")
    for v in report.violations:
        lines.append(f"  {v.name}: {str(v).splitlines()[0]}")
    return "\n".join(lines)


def _longest_unavailability(report: Report) -> dict[str, float]:
    """Per model, the longest time between the first and last of consecutive failures."""
    out: dict[str, float] = {}
    for model in sorted({o.model for o in report.traffic.outcomes}):
        seq = sorted(
            (o for o in report.traffic.outcomes if o.model == model), key=lambda o: o.started
        )
        start: float | None = None
        for o in seq:
            if o.kind == "ok":
                if start is not None:
                    out[model] = max(out.get(model, 0.0), o.started - start)
                start = None
            elif start is None:
                start = o.started
        out.setdefault(model, 0.0)
        out[model] = round(out[model], 2)
    return out
