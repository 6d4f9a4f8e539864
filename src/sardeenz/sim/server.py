"""One simulated engine process, from start to exit: bind, load, serve, shut down.

The lifecycle is what the supervisor watches, so it copies vLLM's: the port is bound
at once but only listens when the "model" has loaded (connections are refused while
loading), SIGTERM/SIGINT stop loading or shut uvicorn down gracefully (exit 0), the
EngineCore child is terminated on the way out, and its lone death shuts the server
down with vLLM's error. Start-up failures (bad ``VLLM_SERVER_DEV_MODE``, port in use)
print vLLM's tracebacks and exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Awaitable
from types import FrameType
from typing import Final

import uvicorn

from sardeenz.sim.app import SimEngine
from sardeenz.sim.args import SimConfig, parse_args
from sardeenz.sim.enginecore import EngineCoreChild
from sardeenz.sim.loading import load, log_banner, log_init_failed
from sardeenz.sim.logwriter import VLLM_SRC, VllmLog
from sardeenz.sim.memory import plan_memory
from sardeenz.tasks import await_within

__all__ = ["SimServer", "main"]

_GRACEFUL_SHUTDOWN_SECONDS: Final = 5


class SimServer:
    """Start-up, serving and shutdown of one simulated engine process."""

    def __init__(self, cfg: SimConfig, log: VllmLog) -> None:
        self.cfg = cfg
        self.log = log
        self.plan = plan_memory(cfg.memory_gib, cfg.max_model_len)
        self.core = EngineCoreChild(self._core_exit_expected, self._on_core_death)
        self.engine: SimEngine | None = None
        self.stop_requested = False
        self.stopping = False
        self.core_died = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None

    # -- signals ------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM/SIGINT outside uvicorn: stop loading (uvicorn handles them while serving).

        Also absorbs the signal uvicorn re-raises after its graceful shutdown, so the
        process exits 0 instead of dying from that signal.
        """
        self.stop_requested = True
        if self._loop is not None and self._stop_event is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop_event.set)

    async def _wait_or_stop(self, seconds: float) -> bool:
        """Sleep ``seconds`` of loading; True when a stop was requested meanwhile."""
        assert self._stop_event is not None
        if self._stop_event.is_set():
            return True
        if seconds <= 0:
            return False
        try:
            await await_within(self._stop_event.wait(), seconds)
        except TimeoutError:
            return False
        return True

    # -- EngineCore -----------------------------------------------------------------

    def _shutdown_requested(self) -> bool:
        server = self.engine.server if self.engine is not None else None
        return self.stopping or self.stop_requested or (server is not None and server.should_exit)

    def _core_exit_expected(self) -> bool:
        return self._shutdown_requested() or self.core_died

    def _on_core_death(self) -> None:
        """The EngineCore died under us: like vLLM, report it and shut the server down."""
        self.core_died = True
        self.log.api(
            "core_client.py:564",
            "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
            "ERROR",
        )
        if self.engine is not None:
            self.engine.scheduler.dead = True
            if self.engine.server is not None:
                self.engine.server.should_exit = True
        if self._stop_event is not None:
            self._stop_event.set()

    async def _stop_child(self) -> None:
        """Mark the shutdown (so the EngineCore's exit is expected), then stop it."""
        self.stopping = True
        await self.core.stop()

    # -- start-up ---------------------------------------------------------------------

    def _bind(self) -> socket.socket:
        """Bind the port now but listen only when ready: clients get 'connection refused'."""
        infos = socket.getaddrinfo(
            self.cfg.host, self.cfg.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, kind, proto, _, addr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
        except OSError:
            sock.close()
            raise
        sock.set_inheritable(False)
        return sock

    def _dev_mode(self) -> bool:
        """``VLLM_SERVER_DEV_MODE`` parsed as vLLM does: an integer, anything else crashes."""
        return bool(int(os.environ.get("VLLM_SERVER_DEV_MODE", "0")))

    # -- main ---------------------------------------------------------------------

    async def run(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        log_banner(self.cfg, self.log)
        try:
            dev_mode = self._dev_mode()
        except ValueError as exc:
            self.log.api_traceback(
                [
                    (
                        f"{VLLM_SRC}/envs.py",
                        1040,
                        "<lambda>",
                        'bool(int(os.getenv("VLLM_SERVER_DEV_MODE", "0")))',
                    )
                ],
                f"ValueError: {exc}",
            )
            return 1
        try:
            sock = self._bind()
        except OSError as exc:
            self.log.api_traceback(
                [
                    (
                        f"{VLLM_SRC}/entrypoints/openai/api_server.py",
                        1790,
                        "create_server_socket",
                        "sock.bind(addr)",
                    )
                ],
                f"OSError: [Errno {exc.errno}] {exc.strerror}",
            )
            return 1
        try:
            return await self._run_bound(sock, dev_mode)
        finally:
            await self._stop_child()
            sock.close()

    async def _run_bound(self, sock: socket.socket, dev_mode: bool) -> int:
        cfg, log = self.cfg, self.log
        core_pid = self.core.start()
        log.set_core_pid(core_pid)
        outcome = await load(cfg, self.plan, log, self._wait_or_stop, lambda: self.core_died)
        if outcome == "failed" or self.core_died:
            self.stopping = True
            await self._stop_child()
            log_init_failed(log)
            return 1
        if outcome == "stopped":
            log.api("api_server.py:1920", "Shutting down before the engine was ready.")
            return 0
        engine = SimEngine(cfg, self.plan, log, dev_mode)
        engine.engine_core_pid = core_pid
        self.engine = engine
        if dev_mode:
            log.api(
                "api_server.py:1580",
                "SECURITY WARNING: Development endpoints are enabled! This should NOT be "
                "used in production!",
                "WARNING",
            )
        if cfg.enable_sleep_mode and not dev_mode:
            log.api(
                "api_server.py:1585",
                "--enable-sleep-mode without VLLM_SERVER_DEV_MODE=1: /sleep, /wake_up and "
                "/is_sleeping are not served.",
                "WARNING",
            )
        log.api("api_server.py:1634", "Supported_tasks: ['generate']")
        url_host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
        log.api("api_server.py:1912", f"Starting vLLM API server 0 on http://{url_host}:{cfg.port}")
        log.api("launcher.py:34", "Available routes are:")
        for path, methods in engine.routes.items():
            log.api("launcher.py:42", f"Route: {path}, Methods: {', '.join(sorted(methods))}")
        try:
            sock.listen(2048)
        except OSError as exc:
            self.log.api_traceback(
                [
                    (
                        f"{VLLM_SRC}/entrypoints/launcher.py",
                        80,
                        "serve_http",
                        "await server.serve(sockets=[sock])",
                    )
                ],
                f"OSError: [Errno {exc.errno}] {exc.strerror}",
            )
            return 1
        config = uvicorn.Config(
            engine,
            http="httptools",
            ws="none",
            lifespan="on",
            access_log=False,  # SimEngine writes the same lines, buffered (much cheaper)
            proxy_headers=False,
            timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
            # vLLM's knob, read the way vLLM reads it (envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE).
            timeout_keep_alive=int(os.environ.get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "5")),
            log_level="info",
        )
        server = uvicorn.Server(config)
        engine.server = server
        if self.stop_requested:
            server.should_exit = True
        await server.serve(sockets=[sock])
        log.api("launcher.py:101", "Shutting down FastAPI HTTP server.")
        return 1 if self.core_died else 0


def _run(coro: Awaitable[int]) -> int:
    """Run on uvloop (as vLLM and uvicorn[standard] do), plain asyncio as a fallback."""

    async def wrapper() -> int:
        return await coro

    try:
        import uvloop
    except ImportError:
        return asyncio.run(wrapper())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(wrapper())


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m sardeenz.sim`` and ``sardeenz sim-engine``."""
    try:
        cfg = parse_args(argv)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    log = VllmLog(sys.stdout, sys.stderr)
    return _run(SimServer(cfg, log).run())
