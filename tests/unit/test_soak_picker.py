"""The soak harness's view of engine processes (testkit/servers.py ``engine_roots``):
processes end between a listing and the next look at them (an engine killed by a fault,
stopped by a sleep, replaced by a move), and the harness must not crash on one."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import cast

import psutil
import pytest

from testkit.servers import engine_roots
from testkit.soak import Report, Soak, Violation
from testkit.soak_run import Chaos, drive
from testkit.waiting import within

# A stand-in engine: it starts a child (as vLLM's API server starts its EngineCore),
# prints the child's pid, then waits to be killed.
ENGINE = (
    "import subprocess, sys, time\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(c.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def _start(iid: str, code: str) -> subprocess.Popen[str]:
    env = {**os.environ, "SARDEENZ_INSTANCE_ID": iid}
    return subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    )


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        for child in psutil.Process(proc.pid).children() if proc.poll() is None else []:
            child.kill()
        proc.kill()
        proc.wait(timeout=10)


def test_an_engine_that_ended_after_the_listing_is_left_out(
    procs: list[subprocess.Popen[str]],
) -> None:
    engine = _start("inst-a", ENGINE)
    gone = _start("inst-b", "import time; time.sleep(60)")
    procs += [engine, gone]
    assert engine.stdout is not None
    core_pid = int(engine.stdout.readline())  # the child exists once its pid is printed
    listing = [psutil.Process(engine.pid), psutil.Process(core_pid), psutil.Process(gone.pid)]
    gone.kill()
    gone.wait(timeout=10)  # reaped: every psutil call on it now raises NoSuchProcess
    roots = engine_roots(listing)
    # The child is not a second engine; the reaped one is not an engine to pick.
    assert [(p.pid, iid) for p, iid in roots] == [(engine.pid, "inst-a")]


def test_a_listing_of_ended_processes_has_no_engine(procs: list[subprocess.Popen[str]]) -> None:
    gone = _start("inst-c", "pass")
    procs.append(gone)
    listing = [psutil.Process(gone.pid)]
    gone.wait(timeout=10)
    assert engine_roots(listing) == []


class _CrashingSoak:
    """What ``drive`` uses of a Soak, with no cluster: it records what was closed."""

    def __init__(self) -> None:
        self.report = Report(seed=1, duration=30.0)
        self.duration = 30.0
        self.t0 = 0.0
        self.closed = False

    def open(self) -> None:
        pass

    async def prepare(self, http: object) -> None:
        pass

    def violate(self, name: str, detail: str, at: float | None = None) -> None:
        self.report.violations.append(Violation(name, detail, ""))

    def close(self) -> None:
        self.closed = True


class _CrashingChaos:
    """Its fault loop raises what a vanished process raised in a 60-minute run; the
    other loops run until they are stopped."""

    def __init__(self) -> None:
        self.traffic_rng = random.Random(1)
        self.loops_ended = 0

    def pick_entry(self) -> tuple[str, str] | None:
        return None

    def pick_model(self) -> str:
        return "soak-a"

    async def _until(self, stop: asyncio.Event) -> None:
        try:
            await stop.wait()
        finally:
            self.loops_ended += 1

    async def catalog_rhythm(self, stop: asyncio.Event) -> None:
        await self._until(stop)

    async def faults(self, http: object, stop: asyncio.Event) -> None:
        await asyncio.sleep(0.05)
        raise psutil.NoSuchProcess(10926)

    async def admin(self, http: object, stop: asyncio.Event) -> None:
        await self._until(stop)

    async def sampler(self, http: object, stop: asyncio.Event) -> None:
        await self._until(stop)


def test_a_harness_crash_is_reported_and_the_cluster_closed() -> None:
    """The report so far comes back with the crash as a violation (the caller prints
    it), every loop is stopped and the cluster closed, long before the run's end."""
    soak, chaos = _CrashingSoak(), _CrashingChaos()
    report = asyncio.run(
        within(drive(cast(Soak, soak), cast(Chaos, chaos), 1), 20, "drive() ended by the crash")
    )
    assert report is soak.report
    assert [v.name for v in report.violations] == ["harness-runs-to-the-end"]
    assert "NoSuchProcess" in str(report.violations[0])
    assert soak.closed
    assert chaos.loops_ended == 3
