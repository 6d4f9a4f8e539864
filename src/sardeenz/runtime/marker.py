"""The mark every engine process carries, and finding engines by it.

Every engine is spawned with two environment variables, ``SARDEENZ_DATA_DIR`` (the
controller's data dir, resolved) and ``SARDEENZ_INSTANCE_ID``, and its children inherit
them. That mark, not a PID, is what says "this process is the engine of that instance of
this controller": a PID is recycled, and a PID checked by its start time is only as good
as the wall clock, since psutil reports a start time as boot time plus ticks, and the
boot time (``btime`` in /proc/stat, whole seconds) moves when the wall clock is stepped (a
virtual machine resumed from a snapshot, an NTP step). A kill that trusted the start time
alone skipped an engine whose time had shifted, and the controller then forgot an engine
that still ran (issue 28). Blocking (walks /proc): call these in a worker thread.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

ENV_INSTANCE_ID = "SARDEENZ_INSTANCE_ID"
ENV_DATA_DIR = "SARDEENZ_DATA_DIR"


def data_dir_mark(data_dir: Path) -> str:
    """The value of ``SARDEENZ_DATA_DIR`` in the engines of ``data_dir``."""
    return str(data_dir.resolve())


def instance_of(proc: psutil.Process, mark: str) -> str | None:
    """The instance ``proc`` is an engine process of, for the controller of ``mark``
    (None: not one of its engines, a zombie, or gone)."""
    with contextlib.suppress(psutil.Error, OSError):
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        env = proc.environ()
        if env.get(ENV_DATA_DIR) == mark:
            return env.get(ENV_INSTANCE_ID) or None
    return None


def carries(pid: int, data_dir: Path, instance_id: str) -> bool:
    """Whether ``pid`` runs and is an engine process of ``instance_id`` (by its mark)."""
    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        return False
    return instance_of(proc, data_dir_mark(data_dir)) == instance_id


def engine_groups(data_dir: Path) -> dict[str, set[int]]:
    """Instance id -> process groups of the live engine processes of ``data_dir``.

    Groups, not PIDs: an engine's main process may be dead with its EngineCore orphaned
    in the group. Never this process's own group.
    """
    mark = data_dir_mark(data_dir)
    own = os.getpgid(0)
    groups: dict[str, set[int]] = {}
    for proc in psutil.process_iter():
        iid = instance_of(proc, mark)
        if iid is None:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            pgid = os.getpgid(proc.pid)
            if pgid != own:
                groups.setdefault(iid, set()).add(pgid)
    return groups


def instance_groups(data_dir: Path, instance_id: str) -> list[int]:
    """Process groups of the live engine processes of ``instance_id``."""
    return sorted(engine_groups(data_dir).get(instance_id, set()))
