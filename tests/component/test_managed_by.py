"""``managedBy`` on the admin API's instances, over a real server with a catalog."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import openai
import pytest

from testkit.servers import ServerPool, ServerProcess

CONFIG = """
catalog:
  chat:
    modelPath: org/chat
    engine: sim
    extraArgs: [--load-seconds, "0.2"]
"""


@pytest.fixture
def srv(server_factory: ServerPool, tmp_path: Path) -> ServerProcess:
    config = tmp_path / "sardeenz.yaml"
    config.write_text(CONFIG)
    return server_factory(args=["--config", str(config)]).start()


def test_catalog_instance_is_marked_and_hand_loaded_one_is_not(srv: ServerProcess) -> None:
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=60)
    client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    with srv.client() as c:
        loaded = c.post(
            "/api/v1/models/load",
            json={"modelPath": "org/mine", "engine": "sim", "servedModelName": "mine"},
        )
        assert loaded.status_code == 202, loaded.text
        listed = {i["servedModelName"]: i for i in c.get("/api/v1/models").json()}
        assert listed["chat"]["managedBy"] == {"kind": "catalog", "name": "chat"}
        assert listed["mine"]["managedBy"] is None
        one = c.get(f"/api/v1/models/{listed['chat']['id']}").json()
        assert one["managedBy"] == {"kind": "catalog", "name": "chat"}
        mine = c.get(f"/api/v1/models/{listed['mine']['id']}").json()
        assert mine["managedBy"] is None
        piped = subprocess.run(
            [sys.executable, "-m", "sardeenz.cli", "models", "ls", "--url", srv.url],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.splitlines()
        header = piped[0].split("\t")
        assert "MANAGED" in header
        managed = {
            r.split("\t")[header.index("NAME")]: r.split("\t")[header.index("MANAGED")]
            for r in piped[1:]
        }
        assert managed == {"chat": "catalog", "mine": "-"}
