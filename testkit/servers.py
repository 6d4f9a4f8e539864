"""Real `sardeenz serve` processes on free ports, their engines, and waiting on them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import httpx
import psutil
from openai import DefaultHttpxClient, OpenAI

from sardeenz.runtime.marker import ENV_DATA_DIR, ENV_INSTANCE_ID, data_dir_mark, instance_of
from sardeenz.tls import client_tls
from testkit import forkserver
from testkit.ports import free_port, free_port_range

HTTP = httpx.Client(
    timeout=5,
    verify=client_tls(),
    limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
)
"""The test process's client for one-off requests: ``HTTP.get(url)`` in place of
``httpx.get(url)``, with the same defaults (5 s timeout, no redirects).

``httpx.get`` opens a client for the one request, and with it loads the CA bundle
(about 20 ms of CPU, against 1-2 ms for the request itself): a cluster test's polls did
that dozens of times a second. No keep-alive: a pooled connection that the server
closes (its idle timeout, a killed pod) just as a request goes out would fail that
request, so each request opens its own connection, as ``httpx.get`` did; and no cap
on connections, so threads sending at once never wait on each other's.
"""


def openai_client(base_url: str, timeout: float) -> OpenAI:
    """The official client on ``base_url`` (``<server>/v1``), without retries, sharing
    the one TLS context (``sardeenz.tls.client_tls``): built in 0.2 ms of CPU instead of
    25 ms (the CA bundle, loaded by every ``OpenAI()`` of its own), for tests that build
    one per request."""
    return OpenAI(
        base_url=base_url,
        api_key="unused",
        timeout=timeout,
        max_retries=0,
        http_client=DefaultHttpxClient(verify=client_tls()),
    )


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
        exec_: bool | None = None,
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
            # Faster than the default (2 s) so that a test sees a health verdict soon, but
            # not much: every poll costs the server and the engine ~5 ms of CPU between
            # them, and a run keeps ~3,000 engine-seconds of sims alive (0.5 s: ~30 s of
            # the suite's CPU). Engine deaths are seen at once (pidfd), not by polling.
            "SARDEENZ_HEALTH_INTERVAL_SECONDS": "1",
            "SARDEENZ_STOP_GRACE_SECONDS": "5",
            **(extra_env or {}),
        }
        self.args = args or []
        self.prefix = prefix or []
        """Runs before the command, e.g. ``ip netns exec NS`` (testkit/netns.py)."""
        self.exec_ = forkserver.exec_by_default() if exec_ is None else exec_
        """Start the command line itself rather than a fork of this worker's fork server
        (testkit/forkserver.py); always so behind a ``prefix``."""
        self.proc: subprocess.Popen[bytes] | forkserver.ForkedServer | None = None

    def start(self, timeout: float = 30.0) -> ServerProcess:
        return self.spawn().wait_ready(timeout)

    def spawn(self) -> ServerProcess:
        """Start the process without waiting: several servers then start side by side
        (``Cluster.start``), each start being mostly the import of the app."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.exec_ and not self.prefix and forkserver.forkable(self.env):
            self.proc = forkserver.client().spawn(self.args, self.env, self.log_path)
            return self
        logf = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "sardeenz.cli", "serve", *self.args],
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        logf.close()
        return self

    def wait_ready(self, timeout: float = 30.0) -> ServerProcess:
        """Wait until ``/api/health/ready`` answers 200; if it never does, kill the server (and
        its engines) and raise with its log."""
        assert self.proc is not None, "spawn() first"
        deadline = time.monotonic() + timeout
        # One client for every poll: each new one (without the shared TLS context) loads the CA
        # bundle, about 20 ms of CPU; over a start's polls, a tenth of the start's CPU.
        with httpx.Client(timeout=1, verify=client_tls()) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited {self.proc.returncode}:\n{self.log()}")
                with contextlib.suppress(httpx.HTTPError):
                    if http.get(f"{self.url}/api/health/ready").status_code == 200:
                        return self
                time.sleep(0.1)
        log = self.log()
        # Not left behind: the caller never got a server to stop.
        self.stop(signal.SIGKILL)
        kill_engines(self.data_dir)
        raise RuntimeError(f"server {self.url} not ready (/api/health/ready) in {timeout}s:\n{log}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, verify=client_tls())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int | None:
        """Signal the server and reap it; SIGKILL after ``timeout``. The default outlasts
        a test server's exit budget (45 s, sardeenz.shutdown): a shutdown that hangs ends
        in the server's own stack dump and exit 1, in its log, not in this SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)


def start_first_then_rest(servers: list[ServerProcess], timeout: float) -> None:
    """Start the first server, then all the others at once.

    A start is mostly the app's import, so the others side by side take about as long
    as one. In a cluster the first pod is up before anyone can form a quorum, as when
    they were started one by one: the Bully election then gives it the lead, which
    tests rely on.
    """
    first, *rest = servers
    first.start(timeout)
    for srv in rest:
        srv.spawn()
    for srv in rest:
        srv.wait_ready(timeout)


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


def marked_process(data_dir: Path, instance_id: str) -> subprocess.Popen[bytes]:
    """An idle process carrying the mark of an engine of ``instance_id`` of the controller
    of ``data_dir`` (runtime/marker.py), in a session of its own; returned once it runs.

    ``Popen`` returns when the exec has begun, and for a moment after that the kernel
    can still show the child's environment empty (``/proc/PID/environ``: 1 start in 300
    here), so a mark read then is missing: under load, a restart test saw its engine as
    "gone". The child says it runs once its own code runs, after the exec is done.
    """
    env = {**os.environ, ENV_DATA_DIR: data_dir_mark(data_dir), ENV_INSTANCE_ID: instance_id}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    started = proc.stdout.readline()
    proc.stdout.close()
    if started != b"up\n":
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the marked process did not start (it printed {started!r})")
    return proc


def engine_processes(data_dir: Path) -> list[psutil.Process]:
    """Every live process started by the server of ``data_dir`` (by its env marker)."""
    # ``--demo`` keeps its data (and so its engines' marker) in ``<data_dir>/demo``.
    marks = (data_dir_mark(data_dir), data_dir_mark(data_dir / "demo"))
    return [p for p in psutil.process_iter() if any(instance_of(p, m) for m in marks)]


def engine_roots(procs: list[psutil.Process]) -> list[tuple[psutil.Process, str]]:
    """The engines among ``procs`` (one of ``engine_processes``' listings) whose parent is
    not itself among them, each with its instance id: an engine's EngineCore child is not
    a second engine. A process that ended since the listing (an engine killed or stopped
    meanwhile) is left out rather than raised: the listing is a snapshot of processes
    that may exit at any moment."""
    pids = {p.pid for p in procs}
    roots = []
    for proc in procs:
        iid = _instance_of(proc)
        try:
            parent = proc.ppid()
        except psutil.Error:
            continue
        if iid is not None and parent not in pids:
            roots.append((proc, iid))
    return roots


def _instance_of(proc: psutil.Process) -> str | None:
    """The instance id an engine process was started for (None once it has gone)."""
    try:
        return proc.environ().get("SARDEENZ_INSTANCE_ID")
    except psutil.Error:
        return None


def kill_engines(data_dir: Path) -> None:
    """SIGKILL every engine process of ``data_dir``'s server and wait until they are gone
    (a killed process lives on until the kernel schedules its exit: on a busy machine a
    check right after the kill would still find it). A zombie is dead: its parent, the
    server, is gone, and whoever inherited it reaps it when it gets to it (seconds, here),
    so waiting for its reaping would only wait on that."""
    procs = engine_processes(data_dir)
    for proc in procs:
        with contextlib.suppress(psutil.Error, OSError):
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            proc.kill()
    deadline = time.monotonic() + 10
    left = [p for p in procs if _running(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if _running(p)]
    pids = [p.pid for p in left]
    assert not pids, f"engine processes {pids} of {data_dir} still alive 10 s after SIGKILL"


def _running(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs: neither gone (nor its pid reused) nor a zombie."""
    with contextlib.suppress(psutil.Error):  # psutil.TimeoutExpired: it has not ended
        proc.wait(0)  # reaps it if it is this process's child (no one else would)
        return False
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


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


def wait_for_status_event(
    client: httpx.Client, instance_id: str, wanted: str | set[str], timeout: float
) -> dict[str, Any]:
    """``wait_for_status`` for waits of minutes on one node (a real vLLM start): woken by
    the server's own ``status`` events (``GET /api/v1/events``) instead of a poll.

    A poll every 0.1 s is ten requests a second through both processes for as long as the
    engine takes to start or fail (30 to 180 s on two cores, several waits at once): CPU
    taken from the engines being waited for. The server subscribes before it answers, so
    once the stream's headers are here no transition can be missed between the one
    ``GET`` that follows and the events. The stream's pings (every 15 s) wake the wait
    too, to check the deadline and read the instance once more, so a wait that fails
    ends up to 15 s after its timeout. Not for a cluster: a node's stream carries only
    its own instances' events.
    """
    wanted_set = {wanted} if isinstance(wanted, str) else wanted
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}

    def settled() -> bool:
        nonlocal last
        resp = client.get(f"/api/v1/models/{instance_id}")
        if resp.status_code == 200:
            last = resp.json()
        return bool(last) and last["status"] in wanted_set

    # A read timeout above the 15 s ping: a silent stream is a fault, not a long wait.
    stream_timeout = httpx.Timeout(10, read=30)
    with (
        httpx.Client(
            base_url=client.base_url,
            headers=client.headers,
            timeout=stream_timeout,
            verify=client_tls(),
        ) as events,
        events.stream("GET", "/api/v1/events") as stream,
    ):
        assert stream.status_code == 200, f"GET /api/v1/events: {stream.status_code}"
        if settled():
            return last
        kind = ""
        for line in stream.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
                continue
            woken = line.startswith(":") or (  # a ping, or this instance's transition
                kind == "status"
                and line.startswith("data:")
                and f'"instanceId":"{instance_id}"' in line
            )
            if woken and settled():
                return last
            if time.monotonic() > deadline:
                break
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
    try:
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.NoSuchProcess:  # it ended meanwhile: no descendants left to list
        return [pid]


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


def unload_all(srv: ServerProcess, timeout: float = 20.0, keep: Collection[str] = ()) -> None:
    """Unload every instance of ``srv`` (but those serving a name in ``keep``) and wait
    until their engines have ended.

    What a test sharing a server does last: the next one finds it as it found it (with
    ``keep`` empty: as empty as a new server, nothing listed, no engine running). ``keep``
    lets a module's standing models stay loaded for its other tests.
    """
    deadline = time.monotonic() + timeout

    def others(api: httpx.Client) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = api.get("/api/v1/models").json()
        return [i for i in listed if i["servedModelName"] not in keep]

    with srv.client() as api:
        kept = {i["id"] for i in api.get("/api/v1/models").json()} - {i["id"] for i in others(api)}
        for inst in others(api):
            resp = api.post(f"/api/v1/models/{inst['id']}/unload")
            # 404: it went by itself; 409 instance_stopping: an unload already under way
            assert resp.status_code in (200, 404, 409), resp.text
        left = others(api)
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = others(api)
        assert left == [], f"instances of {srv.url} still listed {timeout:g} s after unload: {left}"
    engines = [p.pid for p in engine_processes(srv.data_dir) if _instance_of(p) not in kept]
    alive = wait_gone(engines, timeout)
    assert alive == [], f"engines of {srv.url} still running {timeout:g} s after unload: {alive}"
