"""``sardeenz serve`` processes forked from one that has already imported the server.

A test server's start is mostly its import: about 0.9 s of CPU for the app, FastAPI,
SQLAlchemy and pydantic's model building, paid again by each of the suite's ~250
servers, a fifth of the suite's CPU on a 2-core machine. Here one process per test
worker (the fork server) imports ``sardeenz serve``'s modules once; each server is
then a ``fork`` of it that runs ``python -m sardeenz.cli serve ARGS`` from the top
(``runpy``, argument parsing, settings from its own environment, its own
interpreter exit), in a session of its own, with its own environment, working
directory and log file. Only the module imports are shared, and those read no
environment (``tests/component/test_forkserver.py`` checks that the import leaves no
thread and no event loop behind, which would make forking unsafe, and that a fork
refuses a bad setting exactly as the command line does).

What a forked server is not: ``exec``'d. Its ``/proc/PID/cmdline`` names the fork
server, its parent is the fork server (which reaps it and reports how it ended), and
variables read when a process starts (``LD_PRELOAD``, ``PYTHON*``) are the fork
server's: a server given other values is exec'd (``forkable``), as is one behind a
``prefix`` (``ip netns exec``). ``ServerProcess(exec_=True)`` or
``SARDEENZ_TEST_EXEC_SERVERS=1`` (every server of a run) start the real command line
instead; the tests of the command itself (its exit codes, refusals, signals:
tests/security, tests/e2e) run it directly.

Protocol: JSON lines over the fork server's stdin and stdout. ``spawn`` answers the
child's pid; ``status`` answers its exit code once reaped (``None`` before). The
fork server reaps on SIGCHLD, so an ended server never lingers as a zombie.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRELOAD = (
    "runpy",
    "sardeenz.cli",
    "sardeenz.cli.server",
    "sardeenz.cli.listeners",
    "sardeenz.store.dirlock",
    "sardeenz.app",
    "aiosqlite",
    "uvloop",
    "certifi",
    "httpcore",
    "anyio.streams.tls",
    "anyio.streams.memory",
    "anyio.streams.stapled",
    "encodings.idna",
    "uvicorn.lifespan.on",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.websockets_sansio_impl",
    "uvicorn.loops.auto",
    # Imported by servers later, at first use: anyio's backend (by the first request
    # out), pynvml (GPU discovery), jwt (an OIDC issuer), the Kubernetes client (a pod
    # of Kubernetes mode: 0.5 s of CPU for each of the kube tier's pods).
    "anyio._backends._asyncio",
    "pynvml",
    "jwt",
    "aiohttp",
    "kubernetes_asyncio.client",
)
"""What ``sardeenz serve`` imports; a module missing here is imported by each server
itself, which costs time, never correctness."""

EXEC_ENV = "SARDEENZ_TEST_EXEC_SERVERS"

ANSWER_SECONDS = 60.0
"""How long a test waits for the fork server's answer to one request: a fork takes
milliseconds, the first request also the fork server's start and imports (about a
second; tens under heavy load). Past it the fork server is taken as wedged: it is
killed (the next request starts another) and the request fails, saying which."""


def exec_by_default() -> bool:
    return os.environ.get(EXEC_ENV, "") not in ("", "0")


def _read_at_exec(name: str) -> bool:
    """Variables that act when a process starts (the loader's, the interpreter's) or
    that shaped what the fork server built for its forks (the TLS contexts, ``_warm``):
    a fork has started already, so a server given other values than the fork server's
    must be exec'd (e.g. the soak's ``LD_PRELOAD`` of libfaketime)."""
    return name.startswith(("LD_", "PYTHON", "SSL_CERT_"))


def _warm() -> None:
    """Build what every server builds the same way at start, once for all forks: the
    controller's TLS contexts (``sardeenz.tls.client_tls``, loading the CA bundle costs
    ~24 ms of CPU each), read from ``SSL_CERT_FILE``/``SSL_CERT_DIR`` (``_read_at_exec``)."""
    from sardeenz.tls import client_tls

    for trust_env in (True, False):
        client_tls(trust_env)


def forkable(env: dict[str, str]) -> bool:
    """Whether a fork of this worker's fork server can run a server with ``env``."""
    started = client().env
    names = {n for n in (*env, *started) if _read_at_exec(n)}
    return all(env.get(n) == started.get(n) for n in names)


# ---- the client side (a test worker) ----------------------------------------------


class ForkedServer:
    """What the tests use of ``subprocess.Popen`` for a server forked by the fork server."""

    def __init__(self, client: ForkServerClient, pid: int, args: list[str]) -> None:
        self._client = client
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._pidfd: int | None = None
        with contextlib.suppress(OSError):  # ended and reaped already: poll() tells
            self._pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._client.status(self.pid)
            if self.returncode is not None and self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = 0.5 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            if self._pidfd is not None:
                # Readable once the process has ended; the fork server reaps it right after.
                ready, _, _ = select.select([self._pidfd], [], [], min(left, 0.5))
                if ready:
                    time.sleep(0.005)
            else:
                time.sleep(min(left, 0.01))
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return  # as Popen: never signal a pid that may have been reused
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


@dataclass
class ForkServerClient:
    """One fork server of this worker: started on first use, stopped at exit."""

    proc: subprocess.Popen[bytes] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    """The fork server's environment (it starts with this worker's, as it was at first use)."""

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "testkit.forkserver"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    cwd=Path(__file__).resolve().parent.parent,
                    env=self.env,
                )
            assert self.proc.stdin is not None
            assert self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            # One request, one line: nothing is ever left in the reader's buffer, so
            # the pipe itself says when the answer is there.
            ready, _, _ = select.select([self.proc.stdout], [], [], ANSWER_SECONDS)
            if not ready:
                self.proc.kill()
                self.proc.wait(5)
                raise RuntimeError(
                    f"the fork server did not answer {request['op']} within "
                    f"{ANSWER_SECONDS:g} s: killed (the next request starts another)"
                )
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server ended ({self.proc.poll()}) during {request['op']}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"fork server: {reply['error']}")
        return reply

    def spawn(self, args: list[str], env: dict[str, str], log_path: Path) -> ForkedServer:
        reply = self._call(
            {"op": "spawn", "args": args, "env": env, "log": str(log_path), "cwd": os.getcwd()}
        )
        return ForkedServer(self, int(reply["pid"]), ["sardeenz", *args])

    def status(self, pid: int) -> int | None:
        code = self._call({"op": "status", "pid": pid})["code"]
        return None if code is None else int(code)

    def close(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                assert self.proc.stdin is not None
                self.proc.stdin.close()  # end of input: the fork server exits
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)


_clients: dict[int, ForkServerClient] = {}


def _network_namespace() -> int:
    """The calling thread's network namespace (the browser tier's worker enters one of
    its own): a fork server started in one namespace forks servers into it, where a
    test in another could never reach them."""
    return os.stat("/proc/thread-self/ns/net").st_ino


def client() -> ForkServerClient:
    """The fork server of this worker in the calling thread's network namespace."""
    if not _clients:
        atexit.register(close)
    return _clients.setdefault(_network_namespace(), ForkServerClient())


def close() -> None:
    """Stop this worker's fork servers (their servers run on: their owners stop them)."""
    for each in _clients.values():
        each.close()


# ---- the fork server ----------------------------------------------------------------


@dataclass
class _Child:
    args: list[str]
    env: dict[str, str]
    log: str
    cwd: str


def _serve_requests() -> _Child | None:
    """Answer requests until stdin ends (returns None) or in a forked child (returns
    what the child is to run)."""
    ended: dict[int, int] = {}
    children: set[int] = set()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    replies = os.fdopen(1, "wb", buffering=0, closefd=False)
    pending = b""

    def reap() -> None:
        for pid in list(children):
            with contextlib.suppress(ChildProcessError):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    children.discard(pid)
                    ended[pid] = os.waitstatus_to_exitcode(status)

    while True:
        ready, _, _ = select.select([0, wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
            reap()
        if 0 not in ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return None
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            if request["op"] == "spawn":
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake_r)
                    os.close(wake_w)
                    return _Child(request["args"], request["env"], request["log"], request["cwd"])
                children.add(pid)
                reply: dict[str, Any] = {"pid": pid}
            elif request["op"] == "status":
                reap()
                reply = {"code": ended.get(int(request["pid"]))}
            else:
                reply = {"error": f"unknown op {request['op']!r}"}
            replies.write(json.dumps(reply).encode() + b"\n")


def _become(child: _Child) -> None:
    """Turn this fresh fork into ``python -m sardeenz.cli serve ARGS``, as exec would
    have: a session of its own, stdin from /dev/null, stdout and stderr to the log,
    the environment and working directory asked for."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(child.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    os.environ.clear()
    os.environ.update(child.env)
    os.chdir(child.cwd)
    sys.argv = ["sardeenz", "serve", *child.args]


def main() -> None:
    import gc
    import importlib

    gc.disable()  # as ``serve`` does while it imports
    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # e.g. httptools not installed
            importlib.import_module(name)
    _warm()
    gc.collect()
    gc.freeze()  # the forks' collections skip what the fork server imported
    gc.enable()
    sys.stdout.flush()
    child = _serve_requests()
    if child is None:
        return
    _become(child)
    import runpy

    runpy.run_module("sardeenz.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
