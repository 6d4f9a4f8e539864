"""A fabric whose run was killed is swept by the next one; a live one is left alone.

Real namespaces, links, nftables and processes (testkit/netns_sweep.py): a child process
opens a fabric, publishes a port (an nftables table in this namespace) and starts a
process inside one of its namespaces, then is SIGKILLed, as Ctrl-C on `make pytest`
leaves a soak or a partition test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from testkit import netns
from testkit.netns_sweep import sweep_stale
from testkit.waiting import wait_until

pytestmark = pytest.mark.skipif(not netns.available(), reason="needs root and iproute2 (ip netns)")

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import json, subprocess, sys
from testkit import netns
f = netns.Fabric(1, 1).open()
f.publish(9)
sleeper = subprocess.Popen([*f.prefix(0), "sleep", "300"], start_new_session=True)
print(json.dumps({"tag": f.tag, "namespaces": f.namespaces, "sleeper": sleeper.pid}), flush=True)
sys.stdin.read()
"""


def names() -> str:
    """What ``ip`` and ``nft`` list on this machine: links, namespaces, tables."""
    listings = (["ip", "-o", "link", "show"], ["ip", "netns", "list"], ["nft", "list", "tables"])
    return "".join(
        subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout for cmd in listings
    )


def test_a_killed_runs_fabric_is_swept_and_a_live_one_is_kept() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'src'}"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        left = json.loads(child.stdout.readline())
    finally:  # killed, never closed: what Ctrl-C leaves
        child.kill()
        child.wait(timeout=30)
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()
    sleeper = psutil.Process(left["sleeper"])
    stale = left["tag"]
    before = names()
    assert f"szM{stale}" in before
    assert f"szhost{stale}" in before

    live = netns.Fabric(1, 1).open()  # its open() sweeps what the killed run left
    try:
        now = names()
        gone = [*left["namespaces"], f"szM{stale}", f"szcL{stale}", f"szhost{stale}"]
        assert [n for n in gone if n in now] == [], "the next fabric's open() swept nothing"
        wait_until(lambda: not sleeper.is_running() or sleeper.status() == psutil.STATUS_ZOMBIE,
                   "the process left in the killed fabric's namespace to end", 10)  # fmt: skip
        assert sweep_stale() == [], "a live fabric was taken for stale"
        now = names()
        kept = [*live.namespaces, f"szM{live.tag}", f"szcL{live.tag}"]
        assert [n for n in kept if n not in now] == []
    finally:
        live.close()
