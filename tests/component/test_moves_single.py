"""Moves on a single node (no cluster): the same API, between the GPUs of this pod."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from testkit.servers import ServerPool, ServerProcess, load_active


@pytest.fixture(scope="module")
def node(module_server_factory: ServerPool) -> ServerProcess:
    env = {"SARDEENZ_SIM_GPUS": "NVIDIA L4:24GiB,NVIDIA L4:24GiB"}
    return module_server_factory(extra_env=env).start()


def _follow(c: httpx.Client, move_id: str, within: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        move: dict[str, Any] = c.get(f"/api/cluster/moves/{move_id}").json()
        if move["state"] in ("done", "failed"):
            return move
        time.sleep(0.1)
    raise AssertionError(f"move not finished: {move}")


def test_move_to_the_other_gpu_of_this_node(node: ServerProcess) -> None:
    with node.client() as c:
        me = c.get("/api/cluster/status").json()["podId"]
        src = load_active(c, "single-move", gpuIds=[0])
        assert src["gpuIds"] == [0]

        def refused(status: int, code: str, **body: Any) -> None:
            resp = c.post("/api/cluster/moves", json=body)
            assert resp.status_code == status, resp.text
            assert resp.json()["code"] == code

        refused(400, "move_to_itself", instanceId=src["id"], targetPodId=me)
        refused(400, "move_to_itself", instanceId=src["id"], targetPodId=me, gpuIds=[0])
        refused(404, "pod_not_found", instanceId=src["id"], targetPodId=f"{me}-other")
        refused(400, "unknown_gpu", instanceId=src["id"], targetPodId=me, gpuIds=[2])
        assert c.get("/api/cluster/moves").json() == []

        resp = c.post(
            "/api/cluster/moves", json={"instanceId": src["id"], "targetPodId": me, "gpuIds": [1]}
        )
        assert resp.status_code == 202, resp.text
        moved = _follow(c, resp.json()["id"])
        assert moved["state"] == "done", moved
        assert moved["sourcePodId"] == moved["targetPodId"] == me
        instances = c.get("/api/v1/models").json()
        assert [(i["id"], i["gpuIds"], i["status"]) for i in instances] == [
            (moved["targetInstanceId"], [1], "active")
        ]
        chat = c.post(
            "/v1/chat/completions",
            json={"model": "single-move", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert chat.status_code == 200, chat.text
