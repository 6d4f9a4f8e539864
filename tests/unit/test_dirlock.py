"""One controller per data dir: the lock, its refusal, and what it leaves to the kernel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sardeenz.store.dirlock import LOCK_NAME, DataDirInUse, DataDirLock


def test_a_held_data_dir_is_refused_naming_the_holder(tmp_path: Path) -> None:
    first = DataDirLock.acquire(tmp_path / "node")  # made if missing
    try:
        assert (tmp_path / "node" / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        with pytest.raises(DataDirInUse) as refused:
            DataDirLock.acquire(tmp_path / "node")
        assert refused.value.holder == os.getpid()
        assert f"in use by another sardeenz serve (pid {os.getpid()})" in str(refused.value)
    finally:
        first.release()
    DataDirLock.acquire(tmp_path / "node").release()  # free again once released


def test_a_child_process_does_not_inherit_the_lock(tmp_path: Path) -> None:
    # Engines outlive a crashed controller: had one inherited the lock, it would keep
    # every later controller out of the data dir. Spawned keeping every inheritable fd.
    lock = DataDirLock.acquire(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        close_fds=False,
    )
    try:
        assert child.stdout is not None
        # Exec'd: until then a forked child holds every descriptor, close-on-exec or not.
        assert child.stdout.readline() == b"up\n"
        lock.release()  # the controller dies; the engine lives on
        DataDirLock.acquire(tmp_path).release()
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
