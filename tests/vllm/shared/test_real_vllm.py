"""Real vLLM (the CPU build) under a real `sardeenz serve`: no mocks, no simulated engine.

The folder's server and two real instances are shared by the module, because each real
instance costs ~30 s of two cores and ~1.9 GB: ``tiny-a``, a catalog model started by its
first request (the on-demand start, checked by the first test, then the instance most
tests use; a LoRA base, so test_real_vllm_lora.py's adapters run on this same engine
afterwards), and ``tiny-b`` (sleep mode requested), loaded through the API at the same
time and unloaded by the last test. Tests run in file order. The controller's crash and
restart is test_real_vllm_restart.py, the folder's last module; the failed starts are in
../test_real_vllm_starts.py, with a server of their own, so they run beside this folder on
another worker. Teardown kills every process of the data dir even when a test fails
(``testkit.servers.kill_engines``).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from openai.types.chat import ChatCompletion

from testkit.servers import ServerProcess, wait_gone
from tests.vllm.conftest import (
    READY_TIMEOUT_SECONDS,
    STOP_GRACE_SECONDS,
    TIMINGS,
    load_until_active,
    timed,
)
from tests.vllm.shared.conftest import (
    alive,
    base_entry,
    describe,
    instance_tmp,
    openai_client,
    tree,
)

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(480)]


@dataclass
class Started:
    """What the module's fixture saw while it started both instances."""

    state_before: str
    """``tiny-a``'s catalog state in ``/v1/models`` before its first request."""
    first_chat: ChatCompletion
    """The answer to that first request (it waited for the engine's start)."""
    listed_after: list[str]
    """The statuses of ``tiny-a``'s instances listed right after that answer."""
    instances: dict[str, dict[str, Any]]
    """Served name -> the instance once active."""


def first_request(server: ServerProcess) -> ChatCompletion:
    """The first chat request to the catalog model ``tiny-a``: it starts the real engine."""
    client = openai_client(server, timeout=READY_TIMEOUT_SECONDS + 60)
    with timed("first request to an unloaded catalog model (real vLLM start)"):
        return client.chat.completions.create(
            model="tiny-a",
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=4,
            extra_body={"min_tokens": 4, "ignore_eos": True},
        )


@pytest.fixture(scope="module")
def started(shared_vllm_server: ServerProcess, tiny_model: Path) -> Started:
    """``tiny-a`` started on demand by its first request and ``tiny-b`` loaded through the
    API, at the same time: a vLLM start is mostly single-threaded imports, so two starts on
    two cores take about as long as one."""
    with shared_vllm_server.client() as api:
        resp = api.put("/api/v1/catalog/tiny-a", json=base_entry(tiny_model))
        assert resp.status_code == 200, resp.text
        assert resp.json()["state"] == "unloaded"
        listed = {m.id: m for m in openai_client(shared_vllm_server).models.list().data}
        state_before = (listed["tiny-a"].model_extra or {})["state"]
        with ThreadPoolExecutor(1) as pool:
            chat = pool.submit(first_request, shared_vllm_server)
            loaded = load_until_active(api, tiny_model, {"tiny-b": {"enableSleepMode": True}})
            first_chat = chat.result()
        insts = [i for i in api.get("/api/v1/models").json() if i["servedModelName"] == "tiny-a"]
        listed_after = [i["status"] for i in insts]
        assert insts, "tiny-a answered but no instance of it is listed"
        tiny_a = api.get(f"/api/v1/models/{insts[0]['id']}").json()
    return Started(state_before, first_chat, listed_after, {"tiny-a": tiny_a, **loaded})


@pytest.fixture(scope="module")
def pair(started: Started) -> dict[str, dict[str, Any]]:
    return started.instances


@pytest.fixture(scope="module")
def tiny_a(started: Started) -> dict[str, Any]:
    return started.instances["tiny-a"]


# --- load on first request, load --------------------------------------------------------


def test_first_request_to_a_catalog_model_starts_the_real_engine(
    shared_vllm_server: ServerProcess, started: Started
) -> None:
    assert started.state_before == "unloaded"
    chat = started.first_chat
    assert chat.model == "tiny-a"
    assert chat.usage is not None
    assert chat.usage.completion_tokens == 4
    assert started.listed_after == ["active"]
    with shared_vllm_server.client() as api:
        assert api.get("/api/v1/catalog/tiny-a").json()["state"] == "active"


def test_load_reaches_active_with_what_the_cpu_log_reports(
    shared_vllm_server: ServerProcess, tiny_a: dict[str, Any]
) -> None:
    assert tiny_a["status"] == "active"
    assert tiny_a["engineDevice"] == "cpu"
    assert tiny_a["simulated"] is False
    assert tiny_a["gpuIds"] == []
    assert tiny_a["gpuMemoryUtilization"] is None
    assert tiny_a["kvcachedEnabled"] is False

    m = tiny_a["memoryMetrics"]
    # 1 GiB of float32 KV for 2 layers x 4 heads x 32 dims: 2 KiB per token.
    assert m["kvCacheAvailableGiB"] == 1.0
    assert m["kvCacheTokens"] == 524_288
    assert m["maxModelLen"] == 512
    assert m["maxConcurrency"] == 1024.0
    assert m["kvCachePerRequestMiB"] == 1.0
    assert m["engineInitSeconds"] > 0
    assert m["weightsLoadSeconds"] is not None
    assert m["cudaGraphMemoryGiB"] is None  # no graph capture on CPU

    procs = tree(tiny_a["processId"])
    names = {p.pid: describe(p) for p in procs}
    assert tiny_a["engineCorePid"] in names, names
    assert "VLLM::EngineCore" in names[tiny_a["engineCorePid"]]
    assert any("VLLM::Worker" in n for n in names.values()), names
    assert any("resource_tracker" in n for n in names.values()), names

    api_server = psutil.Process(tiny_a["processId"])
    env = api_server.environ()
    tmp = instance_tmp(shared_vllm_server, tiny_a["id"])
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["TMPDIR"] == str(tmp)
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_CACHE_ROOT"] == str(shared_vllm_server.data_dir / "cache" / "vllm")
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert "ENABLE_KVCACHED" not in env
    argv = api_server.cmdline()
    assert "--gpu-memory-utilization" not in argv
    assert "--enable-sleep-mode" not in argv
    drain = argv[argv.index("--shutdown-timeout") + 1]
    assert drain == str(int(STOP_GRACE_SECONDS * 0.75))
    # vLLM's rendezvous file went to the instance's own TMPDIR, not /tmp.
    assert any(p.name.startswith("vllm_dist_") for p in tmp.iterdir())


def test_openai_client_through_the_proxy(
    shared_vllm_server: ServerProcess, tiny_a: dict[str, Any]
) -> None:
    client = openai_client(shared_vllm_server)
    chat = client.chat.completions.create(
        model="tiny-a",
        messages=[{"role": "user", "content": "Hello, how are you?"}],
        max_tokens=8,
        extra_body={"min_tokens": 8, "ignore_eos": True},
    )
    assert chat.model == "tiny-a"
    assert isinstance(chat.choices[0].message.content, str)
    assert chat.usage is not None
    assert chat.usage.completion_tokens == 8

    chunks = list(
        client.completions.create(
            model="tiny-a",
            prompt="The quick brown fox",
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"min_tokens": 6, "ignore_eos": True},
        )
    )
    # An event stream, not one reply: text chunks, then the usage chunk vLLM sends
    # last with no choices. How many text chunks is vLLM's choice (a busy engine
    # puts every ready token in one), so tokens are counted by the usage chunk.
    *texts, last = chunks
    assert texts, "the stream held no text chunk before the usage chunk"
    assert all(c.object == "text_completion" for c in chunks)
    assert all(c.choices and c.usage is None for c in texts)
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == 6
    assert "".join(c.choices[0].text for c in texts)
    assert texts[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in texts[:-1])

    models = {m.id: m for m in client.models.list().data}
    assert "tiny-a" in models
    assert (models["tiny-a"].model_extra or {}).get("max_model_len") == 512


def test_sleep_on_the_cpu_build_is_refused_at_once(
    shared_vllm_server: ServerProcess, tiny_a: dict[str, Any]
) -> None:
    with shared_vllm_server.client() as api:
        started = time.monotonic()
        resp = api.post(f"/api/v1/models/{tiny_a['id']}/sleep", params={"level": 1})
        assert time.monotonic() - started < 2
        assert resp.status_code == 409, resp.text
        assert resp.json()["code"] == "sleep_unsupported"
        assert "CPU build" in resp.json()["detail"]
        assert api.get(f"/api/v1/models/{tiny_a['id']}").json()["status"] == "active"


def test_engines_report_names_the_cpu_build(shared_vllm_server: ServerProcess) -> None:
    with shared_vllm_server.client() as api:
        resp = api.get("/api/v1/engines")
    assert resp.status_code == 200, resp.text
    vllm = resp.json()["vllm"]
    assert vllm["found"] is True
    assert vllm["distribution"] == "vllm-cpu"
    assert vllm["version"] == "0.32.0"
    assert vllm["cpuBuild"] is True
    assert vllm["device"] == "cpu"
    assert vllm["supportsSleep"] is False
    assert vllm["drainsOnStop"] is True
    assert vllm["error"] is None


# --- two side by side, then unload ---------------------------------------------------------


def test_two_instances_side_by_side_then_unload_leaves_nothing(
    shared_vllm_server: ServerProcess, pair: dict[str, dict[str, Any]]
) -> None:
    tiny_a, b = pair["tiny-a"], pair["tiny-b"]
    with shared_vllm_server.client() as api:
        assert b["status"] == "active"
        assert b["sleepModeEnabled"] is False  # the CPU build has none: dropped, with a warning
        assert any("sleep mode" in w for w in b["warnings"])
        assert b["port"] != tiny_a["port"]

        client = openai_client(shared_vllm_server)
        for name in ("tiny-a", "tiny-b", "tiny-a", "tiny-b"):
            # Each engine knows only its own name: a misrouted request would be a 404.
            done = client.completions.create(model=name, prompt="Hello", max_tokens=2)
            assert done.model == name

        procs = tree(b["processId"])
        pids = [p.pid for p in procs]
        assert len(pids) >= 4, [describe(p) for p in procs]  # server, tracker, core, worker
        tmp = instance_tmp(shared_vllm_server, b["id"])
        assert tmp.is_dir()

        started = time.monotonic()
        resp = api.post(f"/api/v1/models/{b['id']}/unload")
        unload_s = time.monotonic() - started
        TIMINGS["unload tiny-b (idle)"] = unload_s
        assert resp.status_code == 200, resp.text
        assert unload_s < STOP_GRACE_SECONDS
        assert wait_gone(pids, 2.0) == [], [describe(psutil.Process(p)) for p in alive(pids)]
        deadline = time.monotonic() + 5
        while tmp.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not tmp.exists(), f"{tmp} still there 5 s after the unload"
        assert api.get(f"/api/v1/models/{b['id']}").status_code == 404
        # tiny-a is untouched.
        assert client.completions.create(model="tiny-a", prompt="Hi", max_tokens=2).model == (
            "tiny-a"
        )
