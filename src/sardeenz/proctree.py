"""Process-tree helpers (psutil): identity, liveness and no-orphan termination.

An engine is started in its own session, so its PID is also its process group
id. vLLM's API server forks an EngineCore (and Workers) that hold the GPU
memory; killing only the parent orphans them. Everything here therefore works
on the whole group plus the psutil tree, and verifies that it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import psutil

from sardeenz.tasks import await_within


async def communicate_within(
    proc: asyncio.subprocess.Process, seconds: float
) -> tuple[bytes, bytes] | None:
    """``proc.communicate()`` bounded by ``seconds``; ``None`` when it ran out.

    On a timeout, and on the caller's cancellation (a request or a shutdown giving
    up), the child is killed and reaped before this returns or re-raises: a helper
    process that hangs must never outlive the call that started it.
    """
    try:
        return await await_within(proc.communicate(), seconds)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return None
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(proc.wait())
        raise


def create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def is_alive(pid: int, expected_create_time: float | None = None) -> bool:
    """True when ``pid`` runs and is the same process we started (PIDs get reused)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return not (
            expected_create_time is not None
            and abs(proc.create_time() - expected_create_time) > 0.5
        )
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants (empty when it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def group_members(pgid: int) -> list[psutil.Process]:
    """Live processes whose process group is ``pgid`` (orphans included)."""
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
    return members


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
    return out


def kill_all(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()


def wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Block up to ``timeout`` s for ``procs`` to end; return the survivors.

    Blocking: call it in a worker thread (``asyncio.to_thread``).
    """
    deadline = time.monotonic() + timeout
    remaining = alive(procs)
    while remaining and time.monotonic() < deadline:
        time.sleep(0.05)
        remaining = alive(remaining)
    return remaining


ORPHAN_GRACE_SECONDS = 3.0
"""How long an engine's processes may outlive its main process during a stop.

The main process (the group leader: vLLM's API server) exits only once its engine has
drained and shut down, so whatever is left after it has nothing more to do. vLLM 0.32's CPU
Worker, for one, spins for about 5 s after its EngineCore exits when draining
(``--shutdown-timeout`` > 0); waiting the whole grace period for it would make every unload
slow for no request's benefit.
"""


def _is_resource_tracker(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return "resource_tracker" in " ".join(proc.cmdline()[:4])
    return False


def wait_stopped(
    procs: list[psutil.Process], leader: psutil.Process | None, grace: float
) -> list[psutil.Process]:
    """Like ``wait_gone``, but once ``leader`` is gone the rest get ``ORPHAN_GRACE_SECONDS``.

    Blocking: call it in a worker thread.
    """
    deadline = time.monotonic() + grace
    remaining = alive(procs)
    while remaining and time.monotonic() < deadline:
        if leader is not None and leader not in remaining:
            deadline = min(deadline, time.monotonic() + ORPHAN_GRACE_SECONDS)
            leader = None
        time.sleep(0.05)
        remaining = alive(remaining)
    return remaining


def terminate_group(pgid: int, snapshot: list[psutil.Process], grace: float) -> list[int]:
    """SIGTERM the group, wait ``grace`` s, SIGKILL what is left; return PIDs still alive.

    ``snapshot`` is the tree taken before signalling, so children that left
    the group are still accounted for. Once the group leader has exited, the
    others get only ``ORPHAN_GRACE_SECONDS`` of the grace. Survivors are killed
    with multiprocessing's resource tracker last, so it can still unlink the
    shared memory the others leaked. Blocking: run in a worker thread.
    """
    members = {p.pid: p for p in [*snapshot, *group_members(pgid)]}
    procs = list(members.values())
    signal_group(pgid, signal.SIGTERM)
    for p in procs:  # a child that called setsid() is outside the group
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(p.pid) != pgid:
                p.terminate()
    survivors = wait_stopped(procs, members.get(pgid), grace)
    if survivors:
        workers = [p for p in survivors if not _is_resource_tracker(p)]
        kill_all(workers)
        wait_gone(workers, 5.0)
        survivors = wait_gone(survivors, 1.0)  # a tracker exits once its clients are gone
    if survivors:
        signal_group(pgid, signal.SIGKILL)
        kill_all(survivors)
        survivors = wait_gone(survivors, 5.0)
    # Orphans that joined the group after the snapshot (rare, but vLLM forks late).
    late = group_members(pgid)
    if late:
        kill_all(late)
        survivors = [*survivors, *wait_gone(late, 5.0)]
    return [p.pid for p in alive(survivors)]


async def wait_foreign_exit(pid: int, create_time: float | None) -> None:
    """Wait for a process that is not our child (adopted after a restart) to end.

    A pidfd becomes readable when the process exits, so no polling is needed;
    where pidfds are unavailable we fall back to checking every half second.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        pidfd = None
    if pidfd is not None:
        loop = asyncio.get_running_loop()
        gone: asyncio.Future[None] = loop.create_future()

        def on_exit() -> None:
            if not gone.done():
                gone.set_result(None)

        loop.add_reader(pidfd, on_exit)
        try:
            if is_alive(pid, create_time):
                await gone
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        return
    while True:
        if not await asyncio.to_thread(is_alive, pid, create_time):
            return
        await asyncio.sleep(0.5)


def find_engine_core_pid(pid: int | None) -> int | None:
    """The EngineCore child: by title (vLLM >= 0.11), else the first real child."""
    if pid is None:
        return None
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return None
    fallback = None
    for child in children:
        with contextlib.suppress(psutil.Error):
            title = child.name() + " " + " ".join(child.cmdline()[:2])
            if "EngineCor" in title:
                return child.pid
            if fallback is None and "resource_tracker" not in title:
                fallback = child.pid
    return fallback
