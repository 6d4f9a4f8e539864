"""A preset step whose instance is unloaded before it serves ends at once.

The step waits for its replica to be active (``SARDEENZ_PRESET_STEP_TIMEOUT_SECONDS``,
15 minutes by default). An operator who unloads that replica while it starts used to
leave the run waiting for an instance that was gone, and the run held the presets:
deleting or applying one answered 409 ``preset_apply_in_progress`` for those minutes.
The step now fails with ``instance_unloaded`` and the run ends.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx

from testkit.servers import ServerPool

SLOW = {
    "modelPath": "slow",
    "servedModelName": "slow",
    "engine": "sim",
    "extraArgs": ["--load-seconds", "60"],
}


def _apply(url: str, name: str, out: dict[str, Any]) -> None:
    """POST apply and read its event stream to the end: the steps' and ``done`` events."""
    steps: list[dict[str, Any]] = []
    with (
        httpx.Client(base_url=url, timeout=120) as c,
        c.stream("POST", f"/api/cluster/presets/{name}/apply") as resp,
    ):
        kind = ""
        for line in resp.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and kind in ("step", "done"):
                data = json.loads(line.split(":", 1)[1])
                if kind == "done":
                    out.update(done=data, steps=steps, at=time.monotonic())
                else:
                    steps.append(data)


def test_a_replica_unloaded_while_it_starts_ends_its_step(server_factory: ServerPool) -> None:
    node = server_factory(extra_env={"SARDEENZ_PRESET_RECONCILE_SECONDS": "3600"}).start()
    with node.client() as c:
        assert c.put("/api/cluster/presets/s", json={"models": [SLOW]}).status_code == 200
        out: dict[str, Any] = {}
        applying = threading.Thread(target=_apply, args=(node.url, "s", out))
        applying.start()
        deadline = time.monotonic() + 30
        while not (starting := [i for i in c.get("/api/v1/models").json()]):
            assert time.monotonic() < deadline, "the apply started no replica in 30 s"
            time.sleep(0.1)
        [inst] = starting
        assert inst["status"] == "starting", inst
        unloaded = c.post(f"/api/v1/models/{inst['id']}/unload")
        assert unloaded.status_code == 200, unloaded.text
        unloaded_at = time.monotonic()
        applying.join(30)
        assert not applying.is_alive(), "the apply still waits 30 s after its replica's unload"
        assert out["done"]["state"] == "failed", out
        [step] = [s for s in out["steps"] if s.get("state") == "failed"]
        assert step["code"] == "instance_unloaded", step
        print(f"\nthe step ended {out['at'] - unloaded_at:.1f}s after the unload")
        # The presets are free again: the preset can be deleted at once.
        gone = c.delete("/api/cluster/presets/s")
        assert gone.status_code == 200, gone.text
