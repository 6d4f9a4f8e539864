"""kvcached limits on a real server: the segment's limit follows loads, sleeps and unloads.

A real `sardeenz serve` on simulated GPUs whose engines get kvcached's environment,
with the stand-in kvctl (tests/fake_kvctl.py) on its PATH and the segment file
kvcached would create: what is asserted is the limit written into that file, set
by the server through ``kvctl limit``.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

from testkit.servers import ServerPool, load_active, wait_for_status
from tests.fake_kvctl import fake_kvctl_env

GIB = 2**30
SEGMENT = "kvcached_vllm_GPU0"


def _limit(shm: Path) -> int:
    total, _, _ = struct.unpack("<qqq", (shm / SEGMENT).read_bytes())
    return int(total)


def _wait_limit(shm: Path, want: int, what: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if _limit(shm) == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"kvcached limit after {what}: {_limit(shm)} bytes, want {want}")


def test_segment_limit_is_the_gpus_kv_room_through_loads_sleeps_and_unloads(
    server_factory: ServerPool, tmp_path: Path
) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    # kvcached creates the segment when the first engine starts; 40 GiB: no limit yet
    (shm / SEGMENT).write_bytes(struct.pack("<qqq", 40 * GIB, GIB, 0))
    env = fake_kvctl_env(tmp_path / "bin", shm, tmp_path / "kvctl.log")
    srv = server_factory(args=["--sim-gpus", "NVIDIA A100:40GiB"], extra_env=env).start()
    with srv.client() as api:
        a = load_active(api, "kv-a", "--memory-gib", "6", enableSleepMode=True)
        assert a["kvcachedIpcName"] == SEGMENT
        _wait_limit(shm, 34 * GIB, "a 6 GiB model")  # 40 - 6; its 1 GiB in use is inside
        budget: dict[str, Any] = api.get("/api/v1/gpus").json()["budgets"][0]
        assert budget["kvCacheTotalBytes"] == 34 * GIB
        b = load_active(api, "kv-b", "--memory-gib", "10")
        _wait_limit(shm, 24 * GIB, "a second, 10 GiB model")
        # asleep, a keeps its baseline reserved (its wake must find its memory)
        api.post(f"/api/v1/models/{a['id']}/sleep").raise_for_status()
        wait_for_status(api, a["id"], "sleeping")
        assert _limit(shm) == 24 * GIB
        api.post(f"/api/v1/models/{b['id']}/unload").raise_for_status()
        _wait_limit(shm, 34 * GIB, "unloading the second model")
    calls = (tmp_path / "kvctl.log").read_text().splitlines()
    assert f"limit {SEGMENT} {34 * GIB}" in calls
    assert f"limit {SEGMENT} {24 * GIB}" in calls
    assert "kvcached limit of kvcached_vllm_GPU0: 24.0 GiB (was 34.0 GiB)" in srv.log()
