"""A vLLM probe (or a kvctl call) whose caller gives up leaves no process behind.

Real processes: a "python" that hangs, the way an interpreter importing a broken CUDA
install can. The probe's own timeout is long, so only the cancellation can end it.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import psutil
import pytest

from sardeenz.engines.vllm_probe import probe_vllm
from sardeenz.gpu.kvcached import Kvctl, KvctlError
from sardeenz.proctree import communicate_within

HANG = "#!/bin/sh\nexec sleep 60\n"


def _hanging_program(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text(HANG)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


async def _started_child() -> psutil.Process:
    me = psutil.Process(os.getpid())
    for _ in range(500):
        children = [c for c in me.children() if c.name() == "sleep"]
        if children:
            return children[0]
        await asyncio.sleep(0.02)
    raise AssertionError("the hanging child did not start within 10 s")


async def test_a_cancelled_probe_kills_and_reaps_its_subprocess(tmp_path: Path) -> None:
    python = _hanging_program(tmp_path, "python")
    task = asyncio.create_task(probe_vllm(str(python), wait_seconds=300))
    child = await _started_child()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:  # pragma: no cover - the assertion below names the failure
        raise AssertionError("the probe swallowed its cancellation")
    assert not child.is_running(), "the probe's subprocess outlived the cancelled probe"


async def test_a_probe_that_times_out_says_so_and_leaves_nothing(tmp_path: Path) -> None:
    python = _hanging_program(tmp_path, "python")
    install = await probe_vllm(str(python), wait_seconds=0.5)
    assert "did not answer within 0.5 s" in install.describe()
    assert not [c for c in psutil.Process().children() if c.name() == "sleep"]


async def test_a_kvctl_call_that_times_out_is_an_error_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    _hanging_program(tmp_path, "kvctl")
    kvctl = Kvctl(search_dirs=[str(tmp_path)], timeout=0.5)
    with pytest.raises(KvctlError, match=r"timed out after 0\.5 s"):
        await kvctl.list_segments()
    assert not [c for c in psutil.Process().children() if c.name() == "sleep"]


async def test_communicate_within_returns_the_output_of_a_quick_child() -> None:
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", "echo out; echo err >&2", stdout=-1, stderr=-1
    )
    assert await communicate_within(proc, 10) == (b"out\n", b"err\n")
