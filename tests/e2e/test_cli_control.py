"""``sardeenz catalog``, ``presets`` and ``moves`` against a real server (one node, two
simulated GPUs, so a move between its GPUs runs for real)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from testkit.servers import ServerPool, ServerProcess, load_active
from tests.e2e.test_cli import cli
from tests.e2e.test_cli_compose import assert_words_whole, cli_tty


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


def test_catalog_presets_and_moves_tables_keep_words_whole_at_80_columns(
    node: ServerProcess, tmp_path: Path
) -> None:
    """Issue 25 item 5's rule for every table command: at 80 columns no word is cut
    across lines and ids stay whole; piped, every cell is there. Empty lists say so."""
    url = ["--url", node.url]
    assert "No memory profiles" in cli("profiles", "ls", *url).stdout
    assert "No benchmark runs" in cli("bench", "ls", *url).stdout
    entry = tmp_path / "wide.yaml"
    entry.write_text(
        "modelPath: meta-llama/Llama-3.1-8B-Instruct-with-a-long-path\n"
        "engine: sim\nextraArgs: [--memory-gib, '1']\n"
    )
    catalog_name = "llama-8b-instruct-with-a-rather-long-catalog-entry-name"
    assert cli("catalog", "put", catalog_name, str(entry), *url).returncode == 0
    preset = {
        "models": [
            {
                "modelPath": f"/models/{name}",
                "servedModelName": name,
                "engine": "sim",
                "replicas": 1,
                "extraArgs": ["--memory-gib", "1"],
            }
            for name in ("llama-8b-instruct-served-for-the-night", "qwen-7b")
        ]
    }
    source = tmp_path / "wide.json"
    source.write_text(json.dumps(preset))
    preset_name = "nightly-serving-mix-with-a-rather-long-name"
    assert cli("presets", "put", preset_name, str(source), *url).returncode == 0
    with node.client() as api:
        inst = load_active(api, "wide-move-model", gpuIds=[0])
    pod = json.loads(cli("cluster", "status", "--json", *url).stdout)["podId"]
    moved = cli("moves", "start", inst["id"], "--to", pod, "--gpu", "1", "--wait", *url, timeout=90)
    assert moved.returncode == 0, moved.stderr + moved.stdout
    move_id = json.loads(cli("moves", "ls", "--json", *url).stdout)[0]["id"]
    try:
        for command, whole in (
            (("catalog", "ls"), catalog_name),
            (("presets", "ls"), preset_name),
            (("presets", "plan", preset_name), "llama-8b-instruct-served-for-the-night"),
            (("moves", "ls"), move_id),
        ):
            piped = cli(*command, *url)
            assert piped.returncode == 0, piped.stderr
            table_piped = "\n".join(ln for ln in piped.stdout.splitlines() if "\t" in ln)
            assert table_piped, (command, piped.stdout)
            code, shown = cli_tty(*command, *url)
            assert code == 0, shown
            assert_words_whole(shown, table_piped)
            assert whole in shown, (command, shown)
        # Dates read as in every other table (and the dashboard): year first, to the minute.
        updated = cli("presets", "ls", *url).stdout.splitlines()[1].split("\t")[-1]
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", updated), updated
    finally:
        cli("presets", "rm", preset_name, *url)
        cli("catalog", "rm", catalog_name, *url)
        with node.client() as api:
            for listed in api.get("/api/v1/models").json():
                if listed["modelPath"] == "wide-move-model":
                    api.post(f"/api/v1/models/{listed['id']}/unload")
