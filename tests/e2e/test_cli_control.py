"""``sardeenz catalog``, ``presets`` and ``moves`` against a real server (one node, two
simulated GPUs, so a move between its GPUs runs for real)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.servers import ServerPool, ServerProcess, load_active
from tests.e2e.test_cli import cli


@pytest.fixture(scope="module")
def node(module_server_factory: ServerPool) -> ServerProcess:
    env = {"SARDEENZ_SIM_GPUS": "NVIDIA L4:24GiB,NVIDIA L4:24GiB"}
    return module_server_factory(extra_env=env).start()


def test_catalog_put_ls_show_rm(node: ServerProcess, tmp_path: Path) -> None:
    url = ["--url", node.url]
    entry = tmp_path / "entry.yaml"
    entry.write_text("modelPath: /models/c1\nengine: sim\nextraArgs: [--memory-gib, '1']\n")
    put = cli("catalog", "put", "c1", str(entry), *url)
    assert put.returncode == 0, put.stderr
    assert "/models/c1" in put.stdout
    listed = json.loads(cli("catalog", "ls", "--json", *url).stdout)
    assert [e["name"] for e in listed] == ["c1"]
    shown = json.loads(cli("catalog", "show", "c1", *url).stdout)
    assert shown["entry"]["modelPath"] == "/models/c1"
    bad = tmp_path / "bad.yaml"
    bad.write_text("modelPath: ''\n")
    refused = cli("catalog", "put", "c2", str(bad), *url)
    assert refused.returncode == 1
    assert "error 4" in refused.stderr
    assert cli("catalog", "rm", "c1", *url).returncode == 0
    assert "No catalog entries" in cli("catalog", "ls", *url).stdout


def test_presets_put_plan_apply_rm(node: ServerProcess, tmp_path: Path) -> None:
    url = ["--url", node.url]
    preset = {
        "models": [
            {"modelPath": "/models/p1", "servedModelName": "p1", "engine": "sim", "replicas": 1}
        ]
    }
    source = tmp_path / "preset.json"
    source.write_text(json.dumps(preset))
    put = cli("presets", "put", "one", str(source), *url)
    assert put.returncode == 0, put.stderr
    assert "p1 x1" in put.stdout
    plan = cli("presets", "plan", "one", *url)
    assert plan.returncode == 0, plan.stderr
    assert "load" in plan.stdout
    assert "p1" in plan.stdout
    applied = cli("presets", "apply", "one", *url, timeout=120)
    assert applied.returncode == 0, applied.stderr
    assert "preset one: done (0 failed)" in applied.stdout
    assert "load (done)" in applied.stdout
    listed = json.loads(cli("presets", "ls", "--json", *url).stdout)
    assert [(p["name"], p["applied"]) for p in listed] == [("one", True)]
    assert "nothing to do" in cli("presets", "plan", "one", *url).stdout
    assert cli("presets", "rm", "one", *url).returncode == 0
    assert "No presets" in cli("presets", "ls", *url).stdout


def test_moves_start_wait_ls(node: ServerProcess) -> None:
    url = ["--url", node.url]
    with node.client() as api:
        inst = load_active(api, "mv", gpuIds=[0])
    pod = json.loads(cli("cluster", "status", "--json", *url).stdout)["podId"]
    moved = cli("moves", "start", inst["id"], "--to", pod, "--gpu", "1", "--wait", *url, timeout=90)
    assert moved.returncode == 0, moved.stderr + moved.stdout
    assert "done" in moved.stdout
    listed = json.loads(cli("moves", "ls", "--json", *url).stdout)
    assert listed[0]["instanceId"] == inst["id"]
    assert listed[0]["state"] == "done"
    same = cli("moves", "start", listed[0]["targetInstanceId"], "--to", pod, "--gpu", "1", *url)
    assert same.returncode == 1
    assert "move_to_itself" in same.stderr
