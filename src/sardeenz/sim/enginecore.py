"""The ``VLLM::EngineCore`` child process of the simulated engine, and the watch on it.

vLLM's API server runs the model in a child process named ``VLLM::EngineCore``; the
supervisor finds it by that title, must stop the whole process group (a SIGKILLed
server orphans its EngineCore), and treats a lone EngineCore death as an engine
failure. The simulated engine starts a real, idle child with the same name so that
all of that is exercised without a GPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Final

__all__ = ["ENGINE_CORE_TITLE", "EngineCoreChild", "spawn_engine_core"]

ENGINE_CORE_TITLE: Final = "VLLM::EngineCore"
"""What vLLM names its engine process; Linux keeps 15 bytes: ``VLLM::EngineCor``."""

_CHILD_STOP_SECONDS: Final = 2.0
_CHILD_EXIT_GRACE_SECONDS: Final = 0.3

_ENGINE_CORE_CODE: Final = f"""
import ctypes, signal
try:
    ctypes.CDLL(None, use_errno=True).prctl(15, b{ENGINE_CORE_TITLE[:15]!r}, 0, 0, 0)
except Exception:
    pass
signal.signal(signal.SIGINT, signal.SIG_DFL)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
while True:
    signal.pause()
"""
"""The EngineCore child: names itself like vLLM's (PR_SET_NAME) and idles until signalled.

It deliberately does not watch its parent: a SIGKILLed vLLM server orphans its
EngineCore too, and the supervisor must clean up by process group.
"""


def spawn_engine_core() -> subprocess.Popen[bytes]:
    """Start the idle EngineCore child (isolated, no site import: it starts in ~20 ms)."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _ENGINE_CORE_CODE],
        stdin=subprocess.DEVNULL,
        close_fds=True,
    )


class EngineCoreChild:
    """The EngineCore child of one server: started, watched for exit, stopped.

    ``expected()`` says whether an exit now is part of a shutdown (or was already
    reported); otherwise ``on_death()`` is called, once the grace period has told a
    process-group stop apart from a lone EngineCore death.
    """

    def __init__(self, expected: Callable[[], bool], on_death: Callable[[], None]) -> None:
        self._expected = expected
        self._on_death = on_death
        self.proc: subprocess.Popen[bytes] | None = None
        self._pidfd: int | None = None
        self._waiter: asyncio.Task[None] | None = None

    def start(self) -> int:
        """Spawn the child and watch it from the running loop; returns its pid."""
        child = self.proc = spawn_engine_core()
        loop = asyncio.get_running_loop()
        try:
            self._pidfd = os.pidfd_open(child.pid)
            loop.add_reader(self._pidfd, self._on_exit)
        except (AttributeError, OSError):  # no pidfd (old kernel): a thread waits instead
            self._pidfd = None
            self._waiter = loop.create_task(self._wait(child))
        return child.pid

    async def _wait(self, child: subprocess.Popen[bytes]) -> None:
        await asyncio.to_thread(child.wait)
        self._on_exit()

    def _unwatch(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def _on_exit(self) -> None:
        """The EngineCore exited: decide a moment later whether that was expected.

        A SIGTERM/SIGINT to the process group (how the supervisor stops engines, and
        what Ctrl-C does) reaches the EngineCore and this process at the same time, and
        the child may exit before our own signal handler has run: waiting a little
        tells a group stop apart from a lone EngineCore death.
        """
        self._unwatch()
        if self._expected():
            return
        asyncio.get_running_loop().call_later(_CHILD_EXIT_GRACE_SECONDS, self._confirm_death)

    def _confirm_death(self) -> None:
        if not self._expected():
            self._on_death()

    async def stop(self) -> None:
        """Terminate the EngineCore (graceful shutdown), SIGKILL after a grace period."""
        self._unwatch()
        child = self.proc
        if child is None or child.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            child.terminate()
        try:
            await asyncio.to_thread(child.wait, _CHILD_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await asyncio.to_thread(child.wait)
