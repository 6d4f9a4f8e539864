"""kvcached: segment names, engine env, the kvctl wrapper and segment files.

kvctl needs CUDA, so these tests run a small stand-in ``kvctl`` that behaves
like kvcached 0.1.5's on a temporary directory instead of /dev/shm: same
output text, same exit-0-on-failure.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from sardeenz.config import Settings
from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from sardeenz.events import EventBus, RemovedEvent, StatusEvent
from sardeenz.gpu.kvcached import (
    Kvctl,
    KvctlError,
    Segment,
    SegmentFile,
    SegmentTracker,
    delete_succeeded,
    ipc_name,
    kvcached_env,
    parse_list_output,
    read_segment_file,
    scan_segment_files,
    should_enable,
)
from sardeenz.memory.kvlimits import Change, KvcachedLimits, changes, plan_limits, segment_gpus
from testkit.waiting import within
from tests.fake_kvctl import fake_kvctl_env

GiB = 2**30


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _write_segment(shm: Path, name: str, total: int, used: int, prealloc: int = 0) -> None:
    (shm / name).write_bytes(struct.pack("<qqq", total, used, prealloc))


@pytest.fixture
def shm(tmp_path: Path) -> Path:
    d = tmp_path / "shm"
    d.mkdir()
    return d


@pytest.fixture
def fake_kvctl(tmp_path: Path, shm: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kvctl on PATH; returns the file its invocations are logged to."""
    calls = tmp_path / "kvctl-calls.log"
    for name, value in fake_kvctl_env(tmp_path / "bin", shm, calls).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("FAKE_KVCTL_MODE", raising=False)
    return calls


# --- names and env ------------------------------------------------------------------


def test_ipc_names_match_the_seed() -> None:
    assert ipc_name([0]) == "kvcached_vllm_GPU0"
    assert ipc_name([1]) == "kvcached_vllm_GPU1"
    assert ipc_name([0, 1]) == "kvcached_vllm_GPU0_GPU1"
    assert ipc_name([1, 0]) == "kvcached_vllm_GPU0_GPU1"
    with pytest.raises(ValueError, match="at least one GPU"):
        ipc_name([])


def test_engine_env() -> None:
    assert kvcached_env("kvcached_vllm_GPU0") == {
        "ENABLE_KVCACHED": "true",
        "KVCACHED_AUTOPATCH": "1",
        "KVCACHED_IPC_NAME": "kvcached_vllm_GPU0",
    }
    with pytest.raises(ValueError, match="not a kvcached IPC name"):
        kvcached_env("../etc/passwd")


def test_kvcached_only_for_single_gpu_engines_when_enabled() -> None:
    assert should_enable(True, 1, True)
    assert not should_enable(True, 2, True)  # tensor parallel: never (seed)
    assert not should_enable(False, 1, True)  # operator turned it off
    assert not should_enable(True, 1, False)  # CPU or simulated engine


# --- output parsing -----------------------------------------------------------------


def test_parse_list_output() -> None:
    assert parse_list_output("No active KVCached segments found.\n") == []
    assert parse_list_output("[]\n") == []
    out = 'warning: something\n[\n  {"ipc": "a", "limit_bytes": 10, "used_bytes": 4}\n]\n'
    assert parse_list_output(out) == [Segment("a", 10, 4)]
    with pytest.raises(KvctlError):
        parse_list_output("IPC    Limit   Used\nkvcached_x  1.00 GB  0.00 B")
    with pytest.raises(KvctlError):
        parse_list_output('[{"ipc": "a"}]')


def test_delete_verdict_comes_from_the_text() -> None:
    assert delete_succeeded("x", "Deleted IPC 'x'.\n", "")
    assert not delete_succeeded("x", "", "IPC 'x' not found.\n")
    assert not delete_succeeded("x", "", "Error: IPC 'x' not found.\n")
    assert not delete_succeeded("x", "", "")
    assert delete_succeeded("x", "\x1b[32mDeleted IPC 'x'.\x1b[0m\n", "")


# --- kvctl, run for real (stand-in executable) ---------------------------------------


async def test_kvctl_list_json(fake_kvctl: Path, shm: Path) -> None:
    _write_segment(shm, "kvcached_vllm_GPU0", 20 * GiB, 3 * GiB)
    _write_segment(shm, "kvcached_vllm_GPU1", 10 * GiB, 0)
    (shm / "not-a-segment").write_bytes(b"x" * 100)
    kvctl = Kvctl()
    assert kvctl.available()
    assert await kvctl.list_segments() == [
        Segment("kvcached_vllm_GPU0", 20 * GiB, 3 * GiB),
        Segment("kvcached_vllm_GPU1", 10 * GiB, 0),
    ]
    assert _lines(fake_kvctl) == ["list --json"]


async def test_kvctl_list_no_active_text(fake_kvctl: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_KVCTL_MODE", "text")
    assert await Kvctl().list_segments() == []


async def test_kvctl_delete_success_and_exit_zero_failure(
    fake_kvctl: Path, shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_segment(shm, "kvcached_vllm_GPU0", GiB, 0)
    kvctl = Kvctl()
    assert await kvctl.delete("kvcached_vllm_GPU0") is True
    assert not (shm / "kvcached_vllm_GPU0").exists()
    assert await kvctl.delete("kvcached_vllm_GPU0") is False  # exit 0, "not found"
    monkeypatch.setenv("FAKE_KVCTL_MODE", "error-prefix")
    assert await kvctl.delete("kvcached_vllm_GPU9") is False  # "Error: IPC ... not found."
    with pytest.raises(ValueError, match="not a kvcached IPC name"):
        await kvctl.delete("--help")
    assert _lines(fake_kvctl) == [
        "delete kvcached_vllm_GPU0",
        "delete kvcached_vllm_GPU0",
        "delete kvcached_vllm_GPU9",
    ]


async def test_kvctl_limit(fake_kvctl: Path, shm: Path) -> None:
    _write_segment(shm, "kvcached_vllm_GPU0", 8 * GiB, GiB, 5)
    kvctl = Kvctl()
    assert await kvctl.set_limit("kvcached_vllm_GPU0", 4 * GiB) is True
    assert read_segment_file("kvcached_vllm_GPU0", shm) == SegmentFile(4 * GiB, GiB, 5)
    assert await kvctl.set_limit("kvcached_vllm_GPU5", GiB) is False  # exit 0, "Error: ..."
    assert _lines(fake_kvctl) == [
        f"limit kvcached_vllm_GPU0 {4 * GiB}",
        f"limit kvcached_vllm_GPU5 {GiB}",
    ]


async def test_kvctl_failures_raise(fake_kvctl: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_KVCTL_MODE", "crash")
    with pytest.raises(KvctlError, match="failed"):
        await Kvctl().list_segments()
    monkeypatch.setenv("FAKE_KVCTL_MODE", "hang")
    with pytest.raises(KvctlError, match="timed out"):
        await Kvctl(timeout=0.5).list_segments()


def test_kvctl_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert not Kvctl().available()
    assert not Kvctl(tmp_path / "missing").available()
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    exe = venv_bin / "kvctl"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    # kvcached lives in vLLM's venv: found next to the configured interpreter.
    kvctl = Kvctl.for_settings(Settings(vllm_python=str(venv_bin / "python")))
    assert kvctl.path() == str(exe)
    assert Kvctl(exe).path() == str(exe)


# --- segment files and cleanup -------------------------------------------------------


def test_segment_file_reader(shm: Path) -> None:
    _write_segment(shm, "kvcached_vllm_GPU0", 20 * GiB, 5 * GiB, 2 * GiB)
    assert read_segment_file("kvcached_vllm_GPU0", shm) == SegmentFile(20 * GiB, 5 * GiB, 2 * GiB)
    assert read_segment_file("kvcached_vllm_GPU7", shm) is None
    _write_segment(shm, "zero_limit", 0, 0)
    (shm / "short").write_bytes(b"\x01" * 8)
    assert scan_segment_files(shm) == [Segment("kvcached_vllm_GPU0", 20 * GiB, 5 * GiB)]
    assert scan_segment_files(shm / "nope") == []
    with pytest.raises(ValueError, match="not a kvcached IPC name"):
        read_segment_file("../../etc/passwd", shm)


async def test_without_kvctl_falls_back_to_segment_files(tmp_path: Path, shm: Path) -> None:
    _write_segment(shm, "kvcached_vllm_GPU0", 8 * GiB, GiB)
    kvctl = Kvctl(tmp_path / "no-kvctl", shm_dir=shm)
    assert not kvctl.available()
    assert await kvctl.list_segments() == [Segment("kvcached_vllm_GPU0", 8 * GiB, GiB)]
    assert await kvctl.delete("kvcached_vllm_GPU0") is True
    assert await kvctl.delete("kvcached_vllm_GPU0") is False
    assert await kvctl.list_segments() == []


def _populate(shm: Path) -> None:
    for name in (
        "kvcached_vllm_GPU0",
        "kvcached_vllm_GPU0_vLLM_4242",  # kvcached's own name when GPU0's was taken
        "kvcached_vllm_GPU0_GPU1",  # a TP segment we did not record
        "kvcached_vllm_GPU1",
        "someone_elses_segment",
    ):
        _write_segment(shm, name, GiB, 0)


async def test_tracker_cleanup_with_kvctl(fake_kvctl: Path, shm: Path) -> None:
    _populate(shm)
    tracker = SegmentTracker()
    tracker.record("kvcached_vllm_GPU0")
    tracker.record("kvcached_vllm_GPU3")  # recorded, never created: harmless
    deleted = await tracker.cleanup(Kvctl())
    assert deleted == ["kvcached_vllm_GPU0", "kvcached_vllm_GPU0_vLLM_4242"]
    assert _names(shm) == [
        "kvcached_vllm_GPU0_GPU1",
        "kvcached_vllm_GPU1",
        "someone_elses_segment",
    ]
    assert tracker.names == frozenset()


async def test_tracker_cleanup_without_kvctl(tmp_path: Path, shm: Path) -> None:
    _populate(shm)
    tracker = SegmentTracker()
    tracker.record("kvcached_vllm_GPU1")
    deleted = await tracker.cleanup(Kvctl(tmp_path / "no-kvctl", shm_dir=shm))
    assert deleted == ["kvcached_vllm_GPU1"]
    assert len(_names(shm)) == 4


async def test_tracker_cleanup_survives_a_broken_kvctl(
    fake_kvctl: Path, shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_KVCTL_MODE", "crash")
    tracker = SegmentTracker()
    tracker.record("kvcached_vllm_GPU0")
    assert await tracker.cleanup(Kvctl()) == []


# --- limits from the KV room (memory/kvlimits.py) -----------------------------------


def test_segment_gpus_reads_the_names_kvcached_picks() -> None:
    assert segment_gpus("kvcached_vllm_GPU0") == [0]
    assert segment_gpus("kvcached_vllm_GPU0_GPU1") == [0, 1]
    assert segment_gpus("kvcached_vllm_GPU3_vLLM_4242") == [3]
    assert segment_gpus("kvcached_vllm_GPU3_proc_17_2") == [3]
    assert segment_gpus("someone_else") is None
    assert segment_gpus("kvcached_vllm_GPU0_evil") is None


def test_limits_share_the_free_room_and_never_cut_below_use() -> None:
    segs = [
        Segment("kvcached_vllm_GPU0", 20 * GiB, 6 * GiB),
        Segment("kvcached_vllm_GPU0_vLLM_9", 20 * GiB, 2 * GiB),
        Segment("kvcached_vllm_GPU1", 20 * GiB, 0),
    ]
    limits = plan_limits({0: 12 * GiB, 1: 5 * GiB}, segs)
    # GPU0: 12 GiB of room, 8 used, 4 free: 2 GiB more each.
    assert limits == {
        "kvcached_vllm_GPU0": 8 * GiB,
        "kvcached_vllm_GPU0_vLLM_9": 4 * GiB,
        "kvcached_vllm_GPU1": 5 * GiB,
    }
    assert sum(v for k, v in limits.items() if k.startswith("kvcached_vllm_GPU0")) == 12 * GiB
    # More in use than the room (a load next to them): nobody grows, nobody is cut.
    over = plan_limits({0: 4 * GiB}, segs[:2])
    assert over == {"kvcached_vllm_GPU0": 6 * GiB, "kvcached_vllm_GPU0_vLLM_9": 2 * GiB}
    # No room and no use: the smallest limit kvctl takes.
    assert plan_limits({1: 0}, segs[2:]) == {"kvcached_vllm_GPU1": 1}
    # A GPU the budget does not know (gone from the inventory) is left alone.
    assert plan_limits({}, segs) == {}


def test_changes_skip_limits_within_the_slack() -> None:
    segs = [Segment("a", 10 * GiB, 0), Segment("b", 10 * GiB, 0)]
    desired = {"a": 10 * GiB + 2**20, "b": 4 * GiB, "c": GiB}
    assert changes(desired, segs) == [Change("b", 4 * GiB, 10 * GiB)]


async def test_limits_follow_status_events(fake_kvctl: Path, shm: Path) -> None:
    """A load or unload changes the room: the segment's limit follows, through kvctl."""
    _write_segment(shm, "kvcached_vllm_GPU0", 22 * GiB, GiB)
    tracker = SegmentTracker()
    tracker.record("kvcached_vllm_GPU0")
    room = {0: 10 * GiB}

    async def room_now() -> dict[int, int]:
        return dict(room)

    bus = EventBus()
    limits = KvcachedLimits(bus, Kvctl(shm_dir=shm), tracker, room_now)
    assert [c.limit_bytes for c in await limits.reconcile()] == [10 * GiB]
    assert read_segment_file("kvcached_vllm_GPU0", shm) == SegmentFile(10 * GiB, GiB, 0)
    assert await limits.reconcile() == []  # level-triggered: nothing to do twice

    limits.start()
    try:
        room[0] = 4 * GiB  # another model loaded on GPU 0
        inst = ModelInstance(
            id="i-1",
            model_path="m",
            served_model_name="m",
            display_name="m",
            engine=EngineKind.SIM,
            status=InstanceStatus.ACTIVE,
            port=20000,
        )
        bus.publish(StatusEvent(inst, InstanceStatus.STARTING))
        await _until(
            lambda: read_segment_file("kvcached_vllm_GPU0", shm) == SegmentFile(4 * GiB, GiB, 0)
        )
        bus.publish(RemovedEvent(inst))
        room[0] = 10 * GiB
        bus.publish(RemovedEvent(inst))
        await _until(
            lambda: read_segment_file("kvcached_vllm_GPU0", shm) == SegmentFile(10 * GiB, GiB, 0)
        )
    finally:
        await limits.stop()
    assert _lines(fake_kvctl).count(f"limit kvcached_vllm_GPU0 {4 * GiB}") == 1


async def test_limits_without_kvctl_do_nothing(tmp_path: Path, shm: Path) -> None:
    _write_segment(shm, "kvcached_vllm_GPU0", 22 * GiB, GiB)
    tracker = SegmentTracker()
    tracker.record("kvcached_vllm_GPU0")

    async def room() -> dict[int, int]:
        return {0: GiB}

    limits = KvcachedLimits(EventBus(), Kvctl(tmp_path / "no-kvctl", shm_dir=shm), tracker, room)
    assert await limits.reconcile() == []
    assert read_segment_file("kvcached_vllm_GPU0", shm) == SegmentFile(22 * GiB, GiB, 0)


async def _until(check: Callable[[], bool]) -> None:
    async def followed() -> None:
        while not check():  # noqa: ASYNC110 - kvctl, another process, writes the file
            await asyncio.sleep(0.02)

    await within(followed(), 10, "the kvcached limit followed in the segment file")
