"""Load requests whose names would forge log lines or pass for engine flags (issue 18).

A real ``sardeenz serve`` with simulated engines: every refusal is a 400 with a stable code
before anything is admitted or spawned, and the controller's own log (its stderr) never
holds a line that user input started, whichever field carried it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.servers import ServerProcess, engine_processes, kill_engines, wait_for_status

FORGED = "CRITICAL forged"
# Every character str.splitlines breaks on, and those a terminal acts on, but "\n".
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("load-inputs")
    srv = ServerProcess(data_dir).start()
    yield srv
    srv.stop()
    kill_engines(data_dir)


@pytest.fixture(scope="module")
def api(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def _load(api: httpx.Client, **fields: Any) -> httpx.Response:
    body = {"modelPath": "m", "engine": "sim", "extraArgs": ["--load-seconds", "0.2"], **fields}
    return api.post("/api/v1/models/load", json=body)


# (field, value, code): each control-character family in each name, and flag-like names.
REFUSED: list[tuple[str, Any, str]] = [
    ("modelPath", f"a\n{FORGED}", "invalid_model_path"),
    ("modelPath", f"a\r{FORGED}", "invalid_model_path"),
    ("modelPath", "a\x1b[31mred", "invalid_model_path"),
    ("modelPath", f"a\u2028{FORGED}", "invalid_model_path"),
    ("modelPath", f"a\u2029{FORGED}", "invalid_model_path"),
    ("modelPath", f"a\x85{FORGED}", "invalid_model_path"),
    ("modelPath", "a\x7fb", "invalid_model_path"),
    ("modelPath", "a\tb", "invalid_model_path"),
    ("modelPath", "a\x00b", "invalid_model_path"),
    ("modelPath", "--port=9999", "invalid_model_path"),
    ("modelPath", "-h", "invalid_model_path"),
    ("modelPath", "  --help", "invalid_model_path"),  # the engine gets it stripped
    ("servedModelName", f"x\n{FORGED}", "invalid_served_model_name"),
    ("servedModelName", "x\x1b[2K", "invalid_served_model_name"),
    ("servedModelName", f"x\u2028{FORGED}", "invalid_served_model_name"),
    ("servedModelName", "--host=0.0.0.0", "invalid_served_model_name"),
    ("servedModelName", "-h", "invalid_served_model_name"),
    ("displayName", f"x\r\n{FORGED}", "invalid_display_name"),
    ("displayName", "\x1b]0;pwned\x07", "invalid_display_name"),
    ("displayName", f"x\x9b{FORGED}", "invalid_display_name"),
    ("extraArgs", ["--x", f"a\u2028{FORGED}"], "invalid_extra_args"),
    ("extraArgs", ["--x", "\x1b[1G" + FORGED], "invalid_extra_args"),
    ("extraArgs", ["--x", f"a\x0c{FORGED}"], "invalid_extra_args"),
]


@pytest.mark.parametrize(("field", "value", "code"), REFUSED, ids=lambda v: repr(v)[:40])
def test_unsafe_or_flag_like_names_are_refused_up_front(
    api: httpx.Client, field: str, value: Any, code: str
) -> None:
    resp = _load(api, **{field: value})
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert body["code"] == code
    assert field in body["detail"]
    assert RAW_CONTROL.search(body["detail"]) is None  # the message names it escaped


def test_refused_loads_left_nothing_behind(server: ServerProcess, api: httpx.Client) -> None:
    for field, value, _ in REFUSED:
        _load(api, **{field: value})
    assert api.get("/api/v1/models").json() == []
    assert engine_processes(server.data_dir) == []


def test_ordinary_names_still_load(api: httpx.Client) -> None:
    resp = _load(
        api,
        modelPath="org/model-v1.5 (tuned)",
        servedModelName="model-1",
        displayName="Modèle « test » 1.5B",
        extraArgs=["--load-seconds", "0.2", "--max-model-len", "1024"],
    )
    assert resp.status_code == 202, resp.text
    inst = wait_for_status(api, resp.json()["id"], "active", 30)
    assert inst["displayName"] == "Modèle « test » 1.5B"
    assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code == 200


def test_the_controller_log_holds_no_forged_line(server: ServerProcess, api: httpx.Client) -> None:
    """Whatever field carries it, user text never starts a line of the controller's log."""
    accepted = []
    for field, value, _ in REFUSED:
        resp = _load(api, **{field: value})
        if resp.status_code == 202:
            accepted.append(resp.json()["id"])
    # (Only before the fix:) let those engines start or fail, and the controller log it.
    deadline = time.monotonic() + 15
    while accepted and time.monotonic() < deadline:
        states = {i["id"]: i["status"] for i in api.get("/api/v1/models").json()}
        if all(states.get(i) in ("active", "failed") for i in accepted):
            break
        time.sleep(0.2)
    time.sleep(0.5)
    text = server.log()
    forged = [line for line in text.splitlines() if line.lstrip().startswith(FORGED)]
    assert forged == []
    assert RAW_CONTROL.findall(text) == []


# --- GPU ids are JSON integers, never booleans or strings ---------------------------------

NOT_GPU_IDS = [[False], [True], [0, True], ["0"], [0.0]]


@pytest.mark.parametrize("gpu_ids", NOT_GPU_IDS, ids=repr)
@pytest.mark.parametrize("path", ["/api/memory/profiles/check", "/api/v1/models/load"])
def test_gpu_ids_must_be_integers(api: httpx.Client, path: str, gpu_ids: list[Any]) -> None:
    resp = api.post(path, json={"modelPath": "m", "gpuIds": gpu_ids})
    assert resp.status_code == 422, resp.text
    body = resp.json()
    assert body["code"] == "validation_error"
    assert all(e["field"].startswith("gpuIds") for e in body["errors"]), body


def test_profile_gpu_index_must_be_an_integer(api: httpx.Client) -> None:
    resp = api.post("/api/memory/profiles", json={"instanceId": "x", "gpuIndex": True})
    assert resp.status_code == 422, resp.text
    assert resp.json()["code"] == "validation_error"


def test_integer_gpu_ids_are_still_accepted(api: httpx.Client) -> None:
    # Validated, then judged: this node has no GPU 0, which the fit check says in its own terms.
    resp = api.post("/api/memory/profiles/check", json={"modelPath": "m", "gpuIds": [0]})
    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == "unknown_gpu"


def test_the_schema_still_says_integer(api: httpx.Client) -> None:
    schemas = api.get("/openapi.json").json()["components"]["schemas"]
    for model, field in [("FitRequest", "gpuIds"), ("LoadRequest", "gpuIds")]:
        (array,) = [s for s in schemas[model]["properties"][field]["anyOf"] if s["type"] == "array"]
        assert array["items"] == {"type": "integer", "minimum": 0, "maximum": 1023}
    (index,) = [
        s
        for s in schemas["ProfileCreate"]["properties"]["gpuIndex"]["anyOf"]
        if s["type"] == "integer"
    ]
    assert (index["minimum"], index["maximum"]) == (0, 1023)
