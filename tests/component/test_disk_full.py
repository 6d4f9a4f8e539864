"""A node whose data dir's filesystem fills up: it keeps serving, refuses writes clearly.

A real ``sardeenz serve`` keeps its data dir (SQLite database, engine logs) on a
small tmpfs mounted for this module; the test fills it with a file of zeros and
then drives the official OpenAI client and admin writes (a catalog PUT, a tenant
PUT, a load) at it, with the request log's retention and the usage flusher on:

* ``/v1`` keeps answering for the model already running (the request log and
  usage writes that fail behind it must not touch the requests);
* an admin write that cannot be stored answers 507 with code
  ``insufficient_storage`` (never a bare 500), and no call hangs;
* the process stays up; once the file is removed the same writes succeed, and
  after a restart every write answered 200 (before, during or after) is there.

Mounting needs root: without it (or without tmpfs) the module is skipped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from testkit.servers import (
    ServerProcess,
    kill_engines,
    load_active,
    sim_load,
    tree_pids,
    wait_for_status,
    wait_gone,
)

SIZE = "12m"
MODEL = "org/diskfull-chat"


def _mount_tmpfs(where: Path) -> str | None:
    """Mount a tmpfs of ``SIZE`` at ``where``; the reason it could not be, else None."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    if shutil.which("mount") is None:
        return "no mount(8) on this machine"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return None if done.returncode == 0 else f"cannot mount a tmpfs: {done.stderr.strip()}"


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    where = tmp_path_factory.mktemp("smalldisk")
    reason = _mount_tmpfs(where)
    if reason is not None:
        pytest.skip(reason)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], timeout=30, check=False)


def fill(disk: Path) -> Path:
    """Write zeros to ``disk`` until it refuses one more byte; the file written."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as out:
        for chunk in (1 << 20, 1 << 12, 1):
            with contextlib.suppress(OSError):
                # Bounded: the tmpfs holds at most SIZE bytes.
                for _ in range(64 << 20):
                    out.write(b"\0" * chunk)
    with pytest.raises(OSError, match="No space left on device") as full:
        (disk / "probe").write_bytes(b"\0" * 4096)
    assert full.value.errno == errno.ENOSPC
    return filler


def _server(disk: Path, logs: Path) -> ServerProcess:
    srv = ServerProcess(
        disk / "data",
        extra_env={
            "SARDEENZ_REQUEST_LOG_RETENTION": "true",
            "SARDEENZ_USAGE_FLUSH_SECONDS": "0.2",
            "SARDEENZ_TENANCY_FLUSH_SECONDS": "0.2",
        },
    )
    # The log stays readable (and complete) off the full disk.
    srv.log_path = logs / "server.log"
    return srv


def _chat(srv: ServerProcess) -> str:
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0, timeout=30)
    out = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    return out.choices[0].message.content or ""


def _put_entry(api: httpx.Client, name: str) -> httpx.Response:
    # A sizeable entry: each one needs new pages in the database.
    body = {"modelPath": "org/" + name, "engine": "sim", "extraArgs": ["--x", "y" * 2000]}
    return api.put(f"/api/v1/catalog/{name}", json=body)


def test_a_full_disk_refuses_writes_clearly_serves_on_and_loses_nothing(
    small_disk: Path, tmp_path: Path
) -> None:
    srv = _server(small_disk, tmp_path).start()
    try:
        with srv.client() as api:
            load_active(api, MODEL, "--ttft-ms", "1", "--itl-ms", "1")
            second = load_active(api, "org/diskfull-second")
            assert _put_entry(api, "before").status_code == 200
            tenant = api.put("/api/v1/tenants/before", json={"subjects": ["alice"]})
            assert tenant.status_code == 200, tenant.text
            assert _chat(srv)
            chats = 1

            # Still loading when the disk fills: it must become active all the same.
            third = sim_load(api, "org/diskfull-third", "--load-seconds", "1.5")
            filler = fill(small_disk)
            stored: list[str] = []
            refused: list[httpx.Response] = []
            # The WAL may take a few commits in pages it already has: write until one
            # is refused (bounded; each entry needs its own pages).
            for i in range(200):
                resp = _put_entry(api, f"full-{i}")
                assert resp.status_code in (200, 507), resp.text
                if resp.status_code == 507:
                    refused.append(resp)
                    break
                stored.append(f"full-{i}")
            assert refused, "no catalog write was refused on a full disk"
            assert refused[0].json()["code"] == "insufficient_storage", refused[0].text
            refused_path = f"/api/v1/catalog/full-{len(stored)}"
            # Refused means not there, not even in memory until the next restart.
            missing = api.get(refused_path)
            assert missing.status_code == 404, missing.text

            # Every other admin write answers the same way (or is stored: never a 500).
            tenant = api.put("/api/v1/tenants/during", json={"subjects": ["bob"]})
            assert tenant.status_code in (200, 507), tenant.text
            if tenant.status_code == 507:
                assert tenant.json()["code"] == "insufficient_storage"
                assert api.get("/api/v1/tenants/during").status_code == 404
            # An unload stops the engine even when its record cannot be updated.
            engines = tree_pids(second["processId"])
            unload = api.post(f"/api/v1/models/{second['id']}/unload")
            assert unload.status_code == 200, unload.text
            assert api.get(f"/api/v1/models/{second['id']}").status_code == 404
            assert wait_gone(engines) == [], "the unloaded engine still runs"
            load = api.post(
                "/api/v1/models/load",
                json={"modelPath": "org/during", "engine": "sim", "extraArgs": []},
            )
            assert load.status_code in (202, 507), load.text
            listed = {i["modelPath"] for i in api.get("/api/v1/models").json()}
            if load.status_code == 507:
                assert load.json()["code"] == "insufficient_storage"
                # Refused means refused: nothing listed, nothing running for it.
                assert "org/during" not in listed, listed
            else:
                assert "org/during" in listed

            assert wait_for_status(api, third["id"], "active")["status"] == "active"
            # A catalog model started on demand by a request cannot be recorded.
            demand = api.post(
                "/v1/chat/completions",
                json={"model": "before", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert demand.status_code == 503, demand.text
            assert demand.json()["error"]["code"] == "model_start_failed", demand.text
            assert "data directory is full" in demand.json()["error"]["message"]
            # /v1 serves on; the request log and usage writes behind it fail.
            for _ in range(20):
                assert _chat(srv)
                chats += 1
            assert api.get("/api/v1/requests", params={"limit": 5}).status_code == 200
            assert api.get("/api/health/ready").status_code == 200
            assert srv.proc is not None
            assert srv.proc.poll() is None, srv.log()

            filler.unlink()
            for name in ("after-1", "after-2"):
                resp = _put_entry(api, name)
                assert resp.status_code == 200, resp.text
                stored.append(name)
            tenant = api.put("/api/v1/tenants/after", json={"subjects": ["carol"]})
            assert tenant.status_code == 200, tenant.text
            assert _chat(srv)
            chats += 1
        # A clean stop (uvicorn re-raises the SIGTERM it handled once it has shut down).
        assert srv.stop(signal.SIGTERM) in (0, -signal.SIGTERM), srv.log()
        kill_engines(srv.data_dir)

        again = _server(small_disk, tmp_path).start()
        try:
            with again.client() as api:
                for name in ("before", *stored):
                    got = api.get(f"/api/v1/catalog/{name}")
                    assert got.status_code == 200, f"{name} lost: {got.text}"
                for name in ("before", "after"):
                    assert api.get(f"/api/v1/tenants/{name}").status_code == 200, name
                # The unload answered 200 on the full disk stays done: no record comes back.
                assert api.get("/api/v1/models").json() == []
                audit = api.get("/api/audit", params={"limit": 500}).json()
                paths = {e["path"] for e in audit}
                assert "/api/v1/catalog/after-2" in paths
                # Held while the disk was full, written once it had room.
                refusal = [e for e in audit if e["path"] == refused_path]
                assert [(e["status"], e["code"]) for e in refusal] == [
                    (507, "insufficient_storage")
                ], audit
                assert f"/api/v1/models/{second['id']}/unload" in paths
                # The request log kept what it could not write while the disk was full.
                logged = api.get("/api/v1/requests", params={"model": MODEL, "limit": 100})
                assert logged.status_code == 200, logged.text
                assert len(logged.json()) == chats, logged.text
        finally:
            again.stop(signal.SIGKILL)
            kill_engines(again.data_dir)
    finally:
        srv.stop(signal.SIGKILL)
        kill_engines(srv.data_dir)
