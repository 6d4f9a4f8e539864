"""Real vLLM starts that fail: each ends `failed` with the root cause, and leaves nothing.

Apart from tests/vllm/shared/ (whose modules share one server and its running engines,
and end with a controller restart) so that the two run side by side on two xdist
workers: each vLLM start costs 30-90 s on a 2-core machine, and one unit holding all of
them was the longest of the suite. This module has a `sardeenz serve` of its own
(``vllm_server`` is module-scoped).
"""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest

from testkit.servers import ServerProcess, engine_processes, wait_for_status_event
from tests.vllm.conftest import load_vllm, timed

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(480)]


def describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.name()} {' '.join(proc.cmdline()[:6])}"
    except psutil.Error:
        return "?"


# --- failures parsed from the real engine's output (and one found before it) ---------------


def test_failures_end_failed_with_the_root_cause(
    vllm_server: ServerProcess, tiny_model: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-model"
    empty = tmp_path / "empty"
    empty.mkdir()
    truncated = tmp_path / "truncated"
    shutil.copytree(tiny_model, truncated)
    weights = truncated / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)  # a download cut short

    cases: dict[str, tuple[Path, list[str], list[str]]] = {
        # name: (model, extra args, what the message must say)
        # Refused before spawning (VllmAdapter.start_refusal): no vLLM import for it.
        "missing": (missing, [], [str(missing)]),
        "empty": (empty, [], ["Invalid repository ID or local directory", str(empty)]),
        "truncated": (truncated, [], ["SafetensorError", "incomplete metadata"]),
        "badflag": (tiny_model, ["--no-such-flag"], ["unrecognized arguments: --no-such-flag"]),
    }
    with vllm_server.client() as api, timed("four failing loads, concurrently"):
        insts = {
            name: load_vllm(api, model, f"fail-{name}", extra=extra)
            for name, (model, extra, _) in cases.items()
        }

        def settle(name: str) -> dict[str, Any]:
            return wait_for_status_event(api, insts[name]["id"], {"failed", "active"}, timeout=180)

        with ThreadPoolExecutor(len(insts)) as pool:
            results = dict(zip(insts, pool.map(settle, insts), strict=True))

        for name, (_, _, needles) in cases.items():
            got = results[name]
            assert got["status"] == "failed", (name, got)
            message = got["errorMessage"]
            for needle in needles:
                assert needle in message, (name, message)
            assert "Engine core initialization failed" not in message, (name, message)
            assert "pid=" not in message, (name, message)

        failed_ids = {i["id"] for i in insts.values()}

        def leftovers() -> list[str]:
            return [
                describe(p)
                for p in engine_processes(vllm_server.data_dir)
                if p.environ().get("SARDEENZ_INSTANCE_ID") in failed_ids
            ]

        # The server publishes `failed` first (routing drops the engine at once), then
        # kills what is left of it (runtime/runner.py's fail(): a failed vLLM start's
        # resource tracker gets up to a second to exit by itself, then SIGKILL).
        deadline = time.monotonic() + 10
        while (left := leftovers()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == [], f"processes of failed engines still running 10 s after failed: {left}"
        for inst in insts.values():
            assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code == 200
