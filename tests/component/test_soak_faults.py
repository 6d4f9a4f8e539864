"""The soak's fault tools do what they claim (testkit/netns.py, testkit/soak_faults.py).

* ``Fabric.degrade``: what one pod sends on its data link is lost in part, what it
  receives is not (the fault is asymmetric), and ``restore`` ends it; counted with
  UDP datagrams between two namespaces (no retransmission to hide a loss).
* ``SkewedClock``: a process under it (and its child) sees its wall clock jump while
  its monotonic clock and ``time.sleep`` carry on as without it (libfaketime 0.9.10
  alone makes that sleep fail with EINVAL).
* ``SmallDisk``: filled, a write fails with ENOSPC; freed, it succeeds again.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testkit import netns
from testkit.soak_faults import SkewedClock, SmallDisk, clock_unavailable

UDP_PROBE = """
import socket, sys, time
mode, host, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if mode == "recv":
    s.bind((host, 9999)); s.settimeout(3.0); got = 0
    print("ready", flush=True)
    try:
        while got < n:
            s.recv(64); got += 1
    except TimeoutError:
        pass
    print(got)
else:
    for _ in range(n):
        s.sendto(b"x", (host, 9999)); time.sleep(0.002)
"""


def _delivered(fabric: netns.Fabric, sender: int, receiver: int, n: int = 300) -> int:
    """Datagrams of ``n`` sent from pod ``sender`` that pod ``receiver`` got. The receiver
    ends at the ``n``-th (a whole delivery is known at once) or after 3 s without one
    (the end of a lossy delivery: netem's delay, or the rate limit's queue, is far less)."""
    recv = subprocess.Popen(
        [*fabric.prefix(receiver), sys.executable, "-c", UDP_PROBE, "recv", "0.0.0.0", str(n)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert recv.stdout is not None
        assert recv.stdout.readline().strip() == "ready"
        host = fabric.data_ip(receiver)
        subprocess.run(
            [*fabric.prefix(sender), sys.executable, "-c", UDP_PROBE, "send", host, str(n)],
            check=True,
            timeout=60,
        )
        out, _ = recv.communicate(timeout=30)
        return int(out.strip())
    finally:
        recv.kill()
        recv.wait(10)


@pytest.mark.skipif(not netns.available(), reason="needs root and iproute2 (ip netns)")
def test_a_degraded_link_loses_what_the_pod_sends_not_what_it_receives() -> None:
    fabric = netns.Fabric(2, 0).open()
    try:
        assert _delivered(fabric, 0, 1) == 300
        how = fabric.degrade(0, 30, 50)
        sent = _delivered(fabric, 0, 1)
        received = _delivered(fabric, 1, 0)
        fabric.restore(0)
        after = _delivered(fabric, 0, 1)
    finally:
        fabric.close()
    print(f"\n{how}: 0->1 {sent}/300, 1->0 {received}/300, restored {after}/300")
    assert 120 <= sent <= 270, f"{how}: {sent} of 300 delivered at 30 % loss"
    assert received == 300
    assert after == 300


CLOCK_PROBE = """
import json, subprocess, sys, time
wall, mono = time.time(), time.monotonic()
open(sys.argv[1], "w").write("ready")
while time.time() - wall < 60 and time.monotonic() - mono < 5:
    time.sleep(0.05)
slept = time.monotonic(); time.sleep(0.2); slept = time.monotonic() - slept
child = float(subprocess.run([sys.executable, "-c", "import time; print(time.time())"],
              capture_output=True, text=True, check=True).stdout)
print(json.dumps({"jumped": time.time() - wall, "mono": time.monotonic() - mono,
                  "slept": slept, "child": child - time.time()}))
"""


@pytest.mark.skipif(clock_unavailable() is not None, reason=f"{clock_unavailable()}")
def test_a_skewed_clock_moves_the_wall_clock_only(tmp_path: Path) -> None:
    clock = SkewedClock(tmp_path)
    ready = tmp_path / "ready"
    env = {"PATH": "/usr/bin:/bin", **clock.env()}
    proc = subprocess.Popen(
        [sys.executable, "-c", CLOCK_PROBE, str(ready)], env=env, stdout=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert ready.exists(), "the probe did not start"
        clock.set(3600)  # no server here to read a Date header from (as jump does)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait(10)
    got = json.loads(out)
    print(f"\n{got}")
    assert got["jumped"] >= 3600  # the wall clock jumped (within libfaketime's 1 s cache)
    assert got["mono"] < 5  # ... the monotonic clock did not
    assert 0.19 <= got["slept"] < 1.0  # time.sleep sleeps (0.9.10 alone: EINVAL)
    assert abs(got["child"]) < 5  # the child inherits the offset (same clock as the parent)


def test_a_small_disk_fills_and_frees(tmp_path: Path) -> None:
    disk = SmallDisk(tmp_path / "disk", size="4m")
    try:
        disk.mount()
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    try:
        assert disk.fill() > 3 << 20
        with pytest.raises(OSError, match="No space left") as full:
            (disk.where / "more").write_bytes(b"x" * 8192)
        assert full.value.errno == errno.ENOSPC
        disk.free()
        (disk.where / "more").write_bytes(b"x" * 8192)
    finally:
        disk.unmount()
