"""The controller killed and restarted under a running real vLLM engine: it re-adopts it.

The folder's last module on purpose: it kills the shared server, starts it again and ends
with a graceful stop of it and its engine, so nothing may run on the server after it
(file order puts it after test_real_vllm.py and test_real_vllm_lora.py). The engine it
re-adopts is ``tiny-a`` as the earlier modules left it (a LoRA base holding adapters);
run alone, the module starts it on demand with a first request, as test_real_vllm.py does.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from testkit.servers import (
    ServerProcess,
    engine_processes,
    wait_for_status_event,
    wait_gone,
)
from tests.vllm.conftest import READY_TIMEOUT_SECONDS, STOP_GRACE_SECONDS, TIMINGS, timed
from tests.vllm.shared.conftest import (
    BASE,
    alive,
    ensure_base,
    instance_tmp,
    openai_client,
    tree,
)

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(480)]


@pytest.fixture(scope="module")
def tiny_a(shared_vllm_server: ServerProcess, tiny_model: Path) -> dict[str, Any]:
    """The active ``tiny-a`` instance: the one the earlier modules left, else one started
    by a request (the catalog's on-demand start)."""
    with shared_vllm_server.client() as api:
        ensure_base(api, tiny_model)

        def active() -> list[dict[str, Any]]:
            return [
                i
                for i in api.get("/api/v1/models").json()
                if i["servedModelName"] == BASE and i["status"] == "active"
            ]

        if not active():
            openai_client(shared_vllm_server, READY_TIMEOUT_SECONDS + 60).completions.create(
                model=BASE, prompt="Hello", max_tokens=1
            )
        (inst,) = active()
        data: dict[str, Any] = api.get(f"/api/v1/models/{inst['id']}").json()
    return data


def test_sigkill_of_the_server_then_restart_readopts_the_engine(
    shared_vllm_server: ServerProcess, tiny_a: dict[str, Any]
) -> None:
    pids = [p.pid for p in tree(tiny_a["processId"])]
    shared_vllm_server.stop(signal.SIGKILL)
    assert alive(pids) == pids  # the engine outlives its controller

    with timed("controller restart to re-adopted"):
        shared_vllm_server.start(timeout=60)
        with shared_vllm_server.client() as api:
            back = wait_for_status_event(api, tiny_a["id"], "active", timeout=30)
    assert back["processId"] == tiny_a["processId"]
    assert back["memoryMetrics"]["kvCacheTokens"] == 524_288  # re-read from the log file

    chat = openai_client(shared_vllm_server).chat.completions.create(
        model="tiny-a", messages=[{"role": "user", "content": "still there?"}], max_tokens=3
    )
    assert chat.model == "tiny-a"

    tmp = instance_tmp(shared_vllm_server, tiny_a["id"])
    started = time.monotonic()
    # uvicorn re-raises the signal after its graceful shutdown: -SIGTERM is a clean exit.
    code = shared_vllm_server.stop(signal.SIGTERM, timeout=STOP_GRACE_SECONDS + 15)
    assert code in (0, -signal.SIGTERM), shared_vllm_server.log()[-3000:]
    TIMINGS["graceful server stop with one engine"] = time.monotonic() - started
    assert wait_gone(pids, 2.0) == []
    assert engine_processes(shared_vllm_server.data_dir) == []
    assert not tmp.exists()
