"""The catalog API over a real server: YAML entries, API entries, precedence, errors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testkit.servers import ServerPool, ServerProcess

CONFIG = """
catalog:
  chat:
    modelPath: org/chat
    engine: sim
    aliases: [gpt-small]
    extraArgs: [--load-seconds, "0.2"]
    sleepLevel: 1
    idleSleepSeconds: 30
  warm:
    modelPath: org/warm
    engine: sim
    extraArgs: [--load-seconds, "0.2"]
    preload: true
    pinned: true
  broken:
    modelPath: org/broken
    engine: sim
    gpuMemoryLimit: -3
"""


@pytest.fixture(scope="module")
def srv(
    module_server_factory: ServerPool, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    config: Path = tmp_path_factory.mktemp("catalog") / "sardeenz.yaml"
    config.write_text(CONFIG)
    return module_server_factory(args=["--config", str(config)]).start()


def test_yaml_entries_are_listed_and_a_bad_one_carries_its_error(srv: ServerProcess) -> None:
    with srv.client() as c:
        items = {i["name"]: i for i in c.get("/api/v1/catalog").json()}
    assert items["chat"]["source"] == "config"
    assert items["chat"]["state"] == "unloaded"
    assert items["chat"]["entry"]["aliases"] == ["gpt-small"]
    assert items["chat"]["entry"]["sleepLevel"] == 1
    assert items["broken"]["state"] == "invalid"
    assert items["broken"]["entry"] is None
    assert "catalog entry 'broken'" in items["broken"]["error"]
    assert "gpu_memory_limit" in items["broken"]["error"]
    assert "catalog entry 'broken'" in srv.log()


def test_a_preload_entry_starts_with_the_server(srv: ServerProcess) -> None:
    deadline = time.monotonic() + 30
    with srv.client() as c:
        while c.get("/api/v1/catalog/warm").json()["state"] != "active":
            assert time.monotonic() < deadline, c.get("/api/v1/catalog/warm").json()
            time.sleep(0.1)
        (inst,) = [i for i in c.get("/api/v1/models").json() if i["servedModelName"] == "warm"]
        assert c.get("/api/v1/catalog/warm").json()["instanceIds"] == [inst["id"]]


def test_put_get_delete_an_api_entry(srv: ServerProcess) -> None:
    with srv.client() as c:
        body = {"modelPath": "org/extra", "engine": "sim", "idleUnloadSeconds": 5}
        put = c.put("/api/v1/catalog/org/extra-1", json=body)
        assert put.status_code == 200, put.text
        assert put.json()["source"] == "api"
        got = c.get("/api/v1/catalog/org/extra-1").json()
        assert got["entry"]["modelPath"] == "org/extra"
        assert got["entry"]["idleUnloadSeconds"] == 5
        assert c.delete("/api/v1/catalog/org/extra-1").status_code == 200
        missing = c.get("/api/v1/catalog/org/extra-1")
        assert missing.status_code == 404
        assert missing.json()["code"] == "catalog_entry_not_found"


def test_an_entry_that_would_not_load_is_refused_with_the_field(srv: ServerProcess) -> None:
    with srv.client() as c:
        resp = c.put("/api/v1/catalog/x", json={"modelPath": "m", "extraArgs": ["--port", "9"]})
        assert resp.status_code == 400
        assert resp.json()["code"] == "invalid_catalog_entry"
        assert "extraArgs" in resp.json()["detail"]
        taken = c.put("/api/v1/catalog/y", json={"modelPath": "m", "aliases": ["gpt-small"]})
        assert taken.status_code == 409
        assert taken.json()["code"] == "catalog_name_taken"
        bad_type = c.put("/api/v1/catalog/z", json={"modelPath": "m", "sleepLevel": 7})
        assert bad_type.status_code == 422


def test_api_overrides_yaml_and_yaml_comes_back_after_delete(srv: ServerProcess) -> None:
    with srv.client() as c:
        refused = c.delete("/api/v1/catalog/chat")
        assert refused.status_code == 409
        assert refused.json()["code"] == "catalog_entry_readonly"
        over = c.put("/api/v1/catalog/chat", json={"modelPath": "org/chat-v2", "engine": "sim"})
        assert over.status_code == 200, over.text
        assert over.json()["overridesConfig"] is True
        assert c.get("/api/v1/catalog/chat").json()["entry"]["modelPath"] == "org/chat-v2"
        assert c.delete("/api/v1/catalog/chat").status_code == 200
        back = c.get("/api/v1/catalog/chat").json()
        assert back["source"] == "config"
        assert back["entry"]["modelPath"] == "org/chat"


def test_api_entries_survive_a_restart(server_factory: ServerPool) -> None:
    srv = server_factory().start()
    with srv.client() as c:
        assert c.put("/api/v1/catalog/kept", json={"modelPath": "m"}).status_code == 200
    srv.stop()
    srv.start()
    with srv.client() as c:
        assert c.get("/api/v1/catalog/kept").json()["entry"]["modelPath"] == "m"
