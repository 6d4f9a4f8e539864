"""What is stored for later is checked as the load checks it, and printed safely (issue 23).

A catalog entry and a preset are loads deferred: ``PUT`` accepted control characters in
``modelPath``, names, aliases and ``warmupPrompt``, and ``-h`` or ``--port=9999`` as a
model path or alias (the engine reads those as its own flags), which a load refuses at
once. A profile name with ESC/BEL was stored and ``sardeenz profiles ls`` printed it raw,
driving the terminal of whoever listed profiles. Each is refused with the field named;
text stored before the check is printed escaped.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from testkit.servers import ServerProcess, kill_engines

ESCAPES = "\x1b]0;pwned\x07\x1b[2J"
"""Sets the terminal's title (OSC ... BEL), then clears the screen."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("stored-inputs")
    srv = ServerProcess(data_dir).start()
    yield srv
    srv.stop()
    kill_engines(data_dir)


@pytest.fixture(scope="module")
def api(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


ENTRY = {"modelPath": "m", "engine": "sim", "sleepLevel": 1, "warmup": True}

# (what the entry changes, the field its refusal names)
BAD_ENTRIES: list[tuple[dict[str, Any], str]] = [
    ({"modelPath": "a\x1b[31mred"}, "modelPath contains a control character (\\x1b)"),
    ({"modelPath": "a\nCRITICAL forged"}, "modelPath contains a control character (\\x0a)"),
    ({"modelPath": "-h"}, "modelPath must not start with '-'"),
    ({"modelPath": "--port=9999"}, "modelPath must not start with '-'"),
    ({"aliases": ["x\x07"]}, "aliases: 'x\\x07' contains a control character (\\x07)"),
    ({"aliases": ["-h"]}, "aliases: '-h' must not start with '-'"),
    ({"aliases": ["--port=9999"]}, "aliases: '--port=9999' must not start with '-'"),
    ({"warmupPrompt": f"hi{ESCAPES}"}, "warmupPrompt contains a control character (\\x1b)"),
    ({"engine": "external", "url": "http://127.0.0.1:9/v1", "modelPath": "-h"}, "modelPath"),
]


@pytest.mark.parametrize(("change", "named"), BAD_ENTRIES, ids=lambda v: repr(v)[:40])
def test_a_catalog_entry_is_checked_as_its_load(
    api: httpx.Client, change: dict[str, Any], named: str
) -> None:
    body = {**ENTRY, **change}
    if body["engine"] == "external":
        body = {k: v for k, v in body.items() if k not in ("sleepLevel", "warmup")}
    resp = api.put("/api/v1/catalog/stored-entry", json=body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == "invalid_catalog_entry"
    assert named in resp.json()["detail"]
    assert api.get("/api/v1/catalog/stored-entry").status_code == 404  # nothing stored


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("-h", "invalid_catalog_entry"),
        ("--port=9999", "invalid_catalog_entry"),
        ("x\x1b[2Jy", "invalid_path"),  # a control character in any path, before routing
    ],
)
def test_a_catalog_entry_name_is_checked_as_a_served_name(
    api: httpx.Client, name: str, code: str
) -> None:
    resp = api.put(f"/api/v1/catalog/{quote(name)}", json={"modelPath": "m", "engine": "sim"})
    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == code
    assert api.get("/api/v1/catalog").json() == []


def test_a_prompt_keeps_its_line_breaks(api: httpx.Client) -> None:
    body = {**ENTRY, "warmupPrompt": "Line one\n\tline two\r\n", "aliases": ["stored-ok-alias"]}
    resp = api.put("/api/v1/catalog/stored-ok", json=body)
    assert resp.status_code == 200, resp.text
    assert api.delete("/api/v1/catalog/stored-ok").status_code == 200


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ({"modelPath": "a\x1b[31m"}, "models[0].modelPath contains a control character"),
        ({"modelPath": "-h"}, "models[0].modelPath must not start with '-'"),
        ({"servedModelName": "s\x07"}, "models[0].servedModelName contains a control character"),
        ({"servedModelName": "--port=9999"}, "models[0].servedModelName must not start"),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_a_preset_is_checked_as_its_loads(
    api: httpx.Client, model: dict[str, Any], named: str
) -> None:
    body = {"models": [{"modelPath": "m", "servedModelName": "s", "engine": "sim", **model}]}
    resp = api.put("/api/cluster/presets/stored-preset", json=body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["code"] == "validation_error"
    assert named in str(resp.json()["detail"])
    assert api.get("/api/cluster/presets/stored-preset").status_code == 404


PROFILE = {"modelPath": "m", "maxTokens": 1024, "weightsMemoryGib": 1, "kvCacheAvailableGib": 1}


@pytest.mark.parametrize("field", ["profileName", "modelPath", "gpuName", "comments"])
def test_a_profile_field_with_a_terminal_control_is_refused(api: httpx.Client, field: str) -> None:
    resp = api.post("/api/memory/profiles", json={**PROFILE, field: f"evil{ESCAPES}"})
    assert resp.status_code == 422, resp.text
    assert field in str(resp.json()["detail"])
    assert "control character" in str(resp.json()["detail"])


def _store_profile_as_before(data_dir: Path, name: str) -> None:
    """A profile stored before names were checked (or by a peer that did not check)."""
    with sqlite3.connect(data_dir / "sardeenz.db", timeout=30) as conn:
        conn.execute(
            "INSERT INTO memory_profiles (id, profile_name, model_path, max_tokens, "
            "total_gpu_memory_gib, weights_memory_gib, cuda_graphs_gib, overhead_memory_gib, "
            "kv_cache_available_gib, gpu_name, created_at) "
            "VALUES (?, ?, ?, 1024, 2, 1, 0, 0, 1, ?, '2026-01-01 00:00:00.000000')",
            (str(uuid.uuid4()), name, f"path{ESCAPES}", f"gpu{ESCAPES}"),
        )


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_profiles_ls_never_prints_stored_terminal_controls(
    server: ServerProcess, api: httpx.Client, terminal: bool
) -> None:
    name = f"stored{ESCAPES}{terminal}"
    _store_profile_as_before(server.data_dir, name)
    assert any(p["profileName"] == name for p in api.get("/api/memory/profiles").json())
    env = {**os.environ, "TTY_COMPATIBLE": "1" if terminal else "0", "COLUMNS": "400"}
    done = subprocess.run(
        [sys.executable, "-m", "sardeenz.cli", "profiles", "ls", "--url", server.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "\x07" not in done.stdout
    assert "\x1b]" not in done.stdout
    assert "\x1b[2J" not in done.stdout
    assert "stored\\x1b]0;pwned\\x07\\x1b[2J" in done.stdout  # shown, escaped
