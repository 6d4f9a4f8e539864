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
