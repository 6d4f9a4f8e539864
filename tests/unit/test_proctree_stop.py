"""Stopping a process group whose leader exits but a child lingers (vLLM's CPU Worker does).

Real processes: a leader that exits on SIGTERM and a child that ignores it, in their own
session like an engine.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from sardeenz import proctree
from sardeenz.config import Settings
from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from sardeenz.events import EventBus
from sardeenz.runtime.runner import InstanceRunner
from testkit.servers import marked_process

LEADER = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import signal, time\\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    "print('ready', flush=True)\\n"
    "time.sleep(120)"], stdout=subprocess.PIPE)
child.stdout.readline()
print(child.pid, flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
time.sleep(120)
"""


def test_a_child_outliving_its_leader_gets_only_the_orphan_grace() -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert leader.stdout is not None
        child_pid = int(leader.stdout.readline())
        snapshot = proctree.tree(leader.pid)
        assert {p.pid for p in snapshot} == {leader.pid, child_pid}
        started = time.monotonic()
        survivors = proctree.terminate_group(leader.pid, snapshot, grace=30.0)
        took = time.monotonic() - started
        assert survivors == []
        assert took < proctree.ORPHAN_GRACE_SECONDS + 3  # not the 30 s grace
        assert took >= proctree.ORPHAN_GRACE_SECONDS - 0.5  # the child did get its chance
        assert not proctree.is_alive(child_pid)
    finally:
        for proc in proctree.tree(leader.pid):
            proc.kill()
        leader.kill()
        leader.wait(5)


def test_a_group_that_stops_promptly_is_not_held_up() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    started = time.monotonic()
    assert proctree.terminate_group(proc.pid, [psutil.Process(proc.pid)], grace=30.0) == []
    assert time.monotonic() - started < 2
    proc.wait(5)


def test_a_pid_reused_by_another_process_group_is_never_signalled(tmp_path: Path) -> None:
    # After a controller restart the recorded engine PID may belong to a newcomer that
    # leads its own group (any daemon started with setsid does): stopping "our" engine
    # must not signal that group.
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        inst = ModelInstance(
            id="gone",
            model_path="m",
            served_model_name="m",
            display_name="m",
            engine=EngineKind.SIM,
            status=InstanceStatus.STOPPING,
            port=1,
            process_id=stranger.pid,
        )

        async def persist(_: InstanceRunner) -> None:
            return None

        async def stop_the_recorded_engine() -> list[int]:
            async with httpx.AsyncClient() as http:
                settings = Settings(data_dir=tmp_path)
                runner = InstanceRunner(inst, settings, EventBus(), persist, http)
                started = proctree.create_time(stranger.pid)
                assert started is not None
                runner.create_time = started - 100  # our engine started earlier: not this one
                return await runner.kill_tree(grace=1.0)

        assert asyncio.run(stop_the_recorded_engine()) == []
        time.sleep(0.2)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def _stop_with_runner(
    data_dir: Path, instance_id: str, pid: int | None, create_time: float | None
) -> list[int]:
    inst = ModelInstance(
        id=instance_id,
        model_path="m",
        served_model_name="m",
        display_name="m",
        engine=EngineKind.SIM,
        status=InstanceStatus.STOPPING,
        port=1,
        process_id=pid,
    )

    async def persist(_: InstanceRunner) -> None:
        return None

    async def stop() -> list[int]:
        async with httpx.AsyncClient() as http:
            runner = InstanceRunner(inst, Settings(data_dir=data_dir), EventBus(), persist, http)
            runner.create_time = create_time
            return await runner.kill_tree(grace=1.0)

    return asyncio.run(stop())


def test_an_engine_whose_start_time_moved_with_the_wall_clock_is_still_stopped(
    tmp_path: Path,
) -> None:
    # psutil's start time is boot time + ticks, and the boot time moves when the wall
    # clock is stepped: the recorded time is then off by a second or more. The kill used
    # to take the engine for a newcomer at its PID, skip it, and the unload then forgot
    # an engine that ran on (issue 28). Its mark says it is ours.
    engine = marked_process(tmp_path, "stepped")
    try:
        started = proctree.create_time(engine.pid)
        assert started is not None
        assert _stop_with_runner(tmp_path, "stepped", engine.pid, started - 1.0) == []
        assert engine.wait(5) is not None
    finally:
        engine.kill()
        engine.wait()


def test_a_stop_ends_every_process_carrying_the_instance_mark(tmp_path: Path) -> None:
    # The runner never learnt this PID (an engine spawned while its unload ran): the
    # mark finds it; an engine of another instance of the same data dir is left alone.
    engine = marked_process(tmp_path, "unrecorded")
    other = marked_process(tmp_path, "someone-else")
    try:
        assert _stop_with_runner(tmp_path, "unrecorded", None, None) == []
        assert engine.wait(5) is not None
        assert other.poll() is None
    finally:
        for proc in (engine, other):
            proc.kill()
            proc.wait()
