"""Memory profiles and fit checks through the real server, on simulated GPUs."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from sardeenz import cli
from testkit.servers import ServerProcess, sim_load, wait_for_status

GIB = 2**30
SEED_FIELDS = {
    "id",
    "profileName",
    "modelPath",
    "maxTokens",
    "totalGpuMemoryGib",
    "weightsMemoryGib",
    "cudaGraphsGib",
    "overheadMemoryGib",
    "kvCacheAvailableGib",
    "kvCachePerRequestMib",
    "gpuName",
    "gpuTotalMemoryGib",
    "comments",
    "createdBy",
    "createdAt",
    "updatedAt",
}


def _model_dir(root: Path, name: str, weight_bytes: int) -> Path:
    """A model directory with a config and a header-only safetensors file."""
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "vocab_size": 128256,
                "max_position_embeddings": 8192,
                "torch_dtype": "bfloat16",
            }
        )
    )
    elems = weight_bytes // 2
    header = json.dumps(
        {"w": {"dtype": "BF16", "shape": [elems], "data_offsets": [0, 2 * elems]}}
    ).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return d


def _code(resp: httpx.Response) -> tuple[int, str]:
    return resp.status_code, resp.json()["code"]


def test_profiles_lookup_and_fit_check(server_factory: Any, tmp_path: Path) -> None:
    srv: ServerProcess = server_factory(args=["--sim-gpus", "NVIDIA L4:24GiB,Tesla T4:16GiB"])
    srv.start()
    with srv.client() as api:
        inst = sim_load(api, "prof", "--memory-gib", "6")
        slow = sim_load(api, "slow", "--memory-gib", "1", "--load-seconds", "30")
        active = wait_for_status(api, inst["id"], "active")
        assert active["gpuIds"] == [0]

        resp = api.post(
            "/api/memory/profiles",
            json={"instanceId": inst["id"], "comments": "first", "createdBy": "ops"},
        )
        assert resp.status_code == 201, resp.text
        p = resp.json()
        assert set(p) == SEED_FIELDS
        assert p["modelPath"] == "prof"
        assert p["maxTokens"] == 4096
        assert p["gpuName"] == "NVIDIA L4"
        assert p["gpuTotalMemoryGib"] == 24.0
        assert p["weightsMemoryGib"] == 3.6  # the sim logs 60 % of --memory-gib as weights
        assert p["cudaGraphsGib"] == 0.18
        assert abs(p["totalGpuMemoryGib"] - 6.0) < 0.01
        parts = p["weightsMemoryGib"] + p["cudaGraphsGib"] + p["kvCacheAvailableGib"]
        assert abs(p["totalGpuMemoryGib"] - parts - p["overheadMemoryGib"]) < 1e-3
        assert p["kvCachePerRequestMib"] > 0
        assert (p["comments"], p["createdBy"]) == ("first", "ops")

        assert api.get(f"/api/memory/profiles/{p['id']}").json() == p
        assert [x["id"] for x in api.get("/api/memory/profiles").json()] == [p["id"]]
        found = api.get(
            "/api/memory/profiles/lookup",
            params={"model_path": "prof", "max_tokens": 4096, "gpu_name": "NVIDIA L4"},
        )
        assert found.json()["id"] == p["id"]
        any_gpu = api.get(
            "/api/memory/profiles/lookup", params={"model_path": "prof", "max_tokens": 4096}
        )
        assert any_gpu.json()["id"] == p["id"]

        # The check uses the profile and answers per GPU, now that 6 GiB are taken on GPU0.
        verdict = api.post("/api/memory/profiles/check", json={"modelPath": "prof"}).json()
        assert verdict["source"] == "profile"
        assert verdict["profileId"] == p["id"]
        assert verdict["fits"] is True
        assert [g["index"] for g in verdict["gpus"]] == [0, 1]
        g0, g1 = verdict["gpus"]
        assert g0["availableBytes"] == 24 * GIB - 6 * GIB - 1 * GIB - 2 * 10**9  # slow holds 1
        assert g1["availableBytes"] == 16 * GIB - 2 * 10**9
        assert verdict["chosenGpuIds"] == [0]
        too_big = api.post(
            "/api/memory/profiles/check", json={"modelPath": "prof", "gpuMemoryLimit": 20}
        ).json()
        assert too_big["fits"] is False
        assert "does not fit" in too_big["reason"]

        # No profile: the estimate from the directory decides.
        small = _model_dir(tmp_path, "small", 4 * 10**9)
        big = _model_dir(tmp_path, "big", 40 * 10**9)
        est = api.post("/api/memory/profiles/check", json={"modelPath": str(small)}).json()
        assert (est["source"], est["fits"]) == ("estimate", True)
        assert est["breakdown"]["weightsBytes"] == 4 * 10**9
        assert est["breakdown"]["kvCacheBytes"] == 8192 * 128 * 1024
        no = api.post("/api/memory/profiles/check", json={"modelPath": str(big)}).json()
        assert (no["source"], no["fits"]) == ("estimate", False)
        assert all(g["fits"] is False for g in no["gpus"])
        unknown = api.post("/api/memory/profiles/check", json={"modelPath": "hub/model"}).json()
        assert (unknown["source"], unknown["fits"]) == ("unknown", None)

        # Bad input.
        assert _code(api.post("/api/memory/profiles", json={"instanceId": "nope"})) == (
            404,
            "instance_not_found",
        )
        assert _code(api.post("/api/memory/profiles", json={"modelPath": "never-loaded"})) == (
            404,
            "model_not_loaded",
        )
        assert _code(api.post("/api/memory/profiles", json={"instanceId": slow["id"]})) == (
            409,
            "memory_metrics_unavailable",
        )
        assert _code(
            api.post("/api/memory/profiles", json={"modelPath": "x", "weightsMemoryGib": 1})
        ) == (400, "incomplete_profile")
        assert _code(api.post("/api/memory/profiles", json={})) == (400, "incomplete_profile")
        assert _code(api.post("/api/memory/profiles", json={"weightsMemoryGib": -1})) == (
            422,
            "validation_error",
        )
        assert _code(api.post("/api/memory/profiles", json={"bogus": 1})) == (
            422,
            "validation_error",
        )
        assert _code(api.get("/api/memory/profiles/lookup", params={"model_path": "prof"})) == (
            422,
            "validation_error",
        )
        assert _code(api.get("/api/memory/profiles/lookup", params={"max_tokens": 5})) == (
            422,
            "validation_error",
        )
        assert _code(
            api.get("/api/memory/profiles/lookup", params={"model_path": "x", "max_tokens": 1})
        ) == (404, "profile_not_found")
        assert _code(api.post("/api/memory/profiles/check", json={})) == (422, "validation_error")
        assert _code(
            api.post("/api/memory/profiles/check", json={"modelPath": "prof", "gpuIds": [9]})
        ) == (400, "unknown_gpu")
        assert _code(api.get("/api/memory/profiles/nope")) == (404, "profile_not_found")

        # Explicit figures are stored as given.
        explicit = api.post(
            "/api/memory/profiles",
            json={
                "modelPath": "/models/x",
                "maxTokens": 8192,
                "weightsMemoryGib": 14.96,
                "kvCacheAvailableGib": 4.0,
                "cudaGraphsGib": 0.5,
                "gpuName": "NVIDIA A100",
            },
        )
        assert explicit.status_code == 201, explicit.text
        assert explicit.json()["totalGpuMemoryGib"] == 19.46

        runner = CliRunner()
        listed = runner.invoke(cli.app, ["profiles", "ls", "--url", srv.url, "--json"])
        assert listed.exit_code == 0, listed.output
        assert {x["modelPath"] for x in json.loads(listed.stdout)} == {"prof", "/models/x"}
        check = runner.invoke(cli.app, ["profiles", "check", str(big), "--url", srv.url])
        assert check.exit_code == 1, check.output
        assert "does not fit" in check.output
        fits = runner.invoke(cli.app, ["profiles", "check", "prof", "--url", srv.url, "--json"])
        assert fits.exit_code == 0, fits.output
        assert json.loads(fits.stdout)["source"] == "profile"

        assert api.delete(f"/api/memory/profiles/{p['id']}").status_code == 204
        assert _code(api.delete(f"/api/memory/profiles/{p['id']}")) == (404, "profile_not_found")


def test_load_is_refused_when_the_estimate_does_not_fit_unless_forced(
    server_factory: Any, tmp_path: Path
) -> None:
    srv: ServerProcess = server_factory(args=["--sim-gpus", "NVIDIA L4:24GiB"]).start()
    too_big = _model_dir(tmp_path, "too-big", 40 * GIB)
    with srv.client() as api:
        body = {"modelPath": str(too_big), "engine": "sim", "extraArgs": ["--memory-gib", "2"]}
        refused = api.post("/api/v1/models/load", json=body)
        assert refused.status_code == 409, refused.text
        assert refused.json()["code"] == "model_does_not_fit"
        assert api.get("/api/v1/models").json() == []
        forced = api.post("/api/v1/models/load", json={**body, "force": True})
        assert forced.status_code == 202, forced.text
        wait_for_status(api, forced.json()["id"], "active")
