"""Test support: real `sardeenz serve` processes on free ports, and helpers."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ephemeral_ports() -> range:
    """The kernel's range for port-0 binds (``ip_local_port_range``)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def free_port_range(size: int) -> int:
    """A base port with ``size`` free ports after it (best effort, randomised).

    Chosen below the ephemeral range: vLLM picks its internal ports (torch.distributed,
    ZMQ) by binding port 0, and one of those landing in an engine port range made a
    real-vLLM start fail with ``Address already in use``.
    """
    top = min(_ephemeral_ports().start, 60000) - size
    for _ in range(200):
        base = random.randrange(20000, top)
        ok = True
        for p in range(base, base + size):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free port range")


class ServerProcess:
    """A real `sardeenz serve` in its own session, logging to a file."""

    def __init__(
        self,
        data_dir: Path,
        *,
        extra_env: dict[str, str] | None = None,
        args: list[str] | None = None,
        port_range: int = 20,
        host: str = "127.0.0.1",
        port: int | None = None,
        prefix: list[str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.host = host
        self.port = port or free_port()
        self.base_port = free_port_range(port_range)
        self.url = f"http://{host}:{self.port}"
        self.log_path = data_dir / "server.log"
        self.env = {
            **os.environ,
            "SARDEENZ_DATA_DIR": str(data_dir),
            "SARDEENZ_HOST": host,
            "SARDEENZ_PORT": str(self.port),
            "VLLM_BASE_PORT": str(self.base_port),
            "SARDEENZ_PORT_RANGE_SIZE": str(port_range),
            "SARDEENZ_HEALTH_INTERVAL_SECONDS": "0.5",
            "SARDEENZ_STOP_GRACE_SECONDS": "5",
            **(extra_env or {}),
        }
        self.args = args or []
        self.prefix = prefix or []
        """Runs before the command, e.g. ``ip netns exec NS`` (tests/cluster/netns.py)."""
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> ServerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        logf = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "sardeenz.cli", "serve", *self.args],
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        logf.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/api/health/ready", timeout=1).status_code == 200:
                    return self
            time.sleep(0.1)
        raise RuntimeError(f"server not ready in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)


class ServerPool:
    """Servers started on demand under one directory; ``close()`` kills them and their engines.

    The fixtures of every scope use it: a test's own servers (``server_factory``)
    and the one a whole module shares (``module_server_factory``).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.servers: list[ServerProcess] = []

    def __call__(self, **kw: Any) -> ServerProcess:
        srv = ServerProcess(kw.pop("data_dir", self.root / f"node{len(self.servers)}"), **kw)
        self.servers.append(srv)
        return srv

    def close(self) -> None:
        for srv in self.servers:
            srv.stop(signal.SIGKILL)
            kill_engines(srv.data_dir)


def engine_processes(data_dir: Path) -> list[psutil.Process]:
    """Every live process started by the server of ``data_dir`` (by its env marker)."""
    # ``--demo`` keeps its data (and so its engines' marker) in ``<data_dir>/demo``.
    ours = {str(data_dir.resolve()), str(data_dir.resolve() / "demo")}
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("SARDEENZ_DATA_DIR") in ours and proc.environ().get(
                "SARDEENZ_INSTANCE_ID"
            ):
                found.append(proc)
    return found


def kill_engines(data_dir: Path) -> None:
    for proc in engine_processes(data_dir):
        with contextlib.suppress(psutil.Error, OSError):
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            proc.kill()


def wait_for_status(
    client: httpx.Client, instance_id: str, wanted: str | set[str], timeout: float = 60.0
) -> dict[str, Any]:
    wanted_set = {wanted} if isinstance(wanted, str) else wanted
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        resp = client.get(f"/api/v1/models/{instance_id}")
        if resp.status_code == 200:
            last = resp.json()
            if last["status"] in wanted_set:
                return last
        time.sleep(0.1)
    raise AssertionError(f"instance {instance_id} not {wanted_set} in {timeout}s: {last}")


def sim_load(client: httpx.Client, name: str, *extra: str, **body: Any) -> dict[str, Any]:
    payload = {
        "modelPath": name,
        "engine": "sim",
        "extraArgs": ["--load-seconds", "0.3", *extra],
        **body,
    }
    resp = client.post("/api/v1/models/load", json=payload)
    assert resp.status_code == 202, resp.text
    data: dict[str, Any] = resp.json()
    return data


def load_active(
    client: httpx.Client, name: str, *extra: str, timeout: float = 60.0, **body: Any
) -> dict[str, Any]:
    """Load a sim model and wait until it is active: the instance as it is then."""
    return wait_for_status(client, sim_load(client, name, *extra, **body)["id"], "active", timeout)


def tree_pids(pid: int) -> list[int]:
    """``pid`` and every descendant (an engine's API server and its EngineCore)."""
    proc = psutil.Process(pid)
    return [proc.pid, *(c.pid for c in proc.children(recursive=True))]


def not_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: list[int], timeout: float = 5.0) -> list[int]:
    """Wait for ``pids`` to end (zombies count as ended); the ones still alive."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p) and not_zombie(p)]
        time.sleep(0.05)
    return alive


class Sim:
    """One simulated engine process in its own session (killed as a group)."""

    def __init__(
        self, model: str, *, ttft_ms: float = 5, itl_ms: float = 2, extra: Sequence[str] = ()
    ) -> None:
        self.model = model
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sardeenz.sim",
                "--model",
                model,
                "--port",
                str(self.port),
                "--load-seconds",
                "0",
                "--ttft-ms",
                str(ttft_ms),
                "--itl-ms",
                str(itl_ms),
                "--disable-uvicorn-access-log",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 30) -> Sim:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sim engine exited with {self.proc.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            time.sleep(0.1)
        raise RuntimeError("sim engine not ready")

    def aborts(self) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        for line in text.splitlines():
            if line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' in line:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


async def read_request(reader: asyncio.StreamReader) -> None:
    """Read one HTTP/1.1 request with a Content-Length body (for fake engines)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)


HOST_NETWORK_LOCK = Path(tempfile.gettempdir()) / "sardeenz-tests-host-network.lock"


@contextlib.contextmanager
def host_network(*, changes: bool) -> Iterator[None]:
    """Keep tests that change the host's network apart from those it disturbs.

    Chromium aborts page loads with ``ERR_NETWORK_CHANGED`` when an address or link of
    the host changes, which the partition test does (bridges, veths and an address in
    the root namespace). Browser modules hold this lock shared, the partition module
    exclusively, so with two xdist workers they never overlap.
    """
    with HOST_NETWORK_LOCK.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if changes else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
