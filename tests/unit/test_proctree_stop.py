"""Stopping a process group whose leader exits but a child lingers (vLLM's CPU Worker does).

Real processes: a leader that exits on SIGTERM and a child that ignores it, in their own
session like an engine.
"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from sardeenz.runtime import proctree

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
