"""kvcached: shared, elastic KV cache for single-GPU vLLM engines.

What the controller does with kvcached (0.1.5, see reference/vllm.md):

* sets ``ENABLE_KVCACHED=true``, ``KVCACHED_AUTOPATCH=1`` and one
  ``KVCACHED_IPC_NAME`` per GPU set (``kvcached_vllm_GPU0``; the seed's names)
  on engines it starts: only single-GPU engines, as in the seed;
* reads segment usage with ``kvctl list --json``, or straight from the
  24-byte segment file in ``/dev/shm`` when ``kvctl`` is not installed;
* deletes the segments it created when the server shuts down (the seed:
  "only when the server shuts down").

``kvctl`` is always run as an argv list with a timeout, never through a shell,
never without a subcommand (bare ``kvctl`` opens an interactive shell), with
stdin closed. Its exit status cannot be trusted: 0.1.5 exits 0 when a delete
or limit fails, so results are read from the text it prints.

Note on names: kvcached 0.1.5 does not reuse an existing segment file. When
``/dev/shm/<name>`` already exists (a second engine on the same GPU, or a
leftover) it picks ``<name>_vLLM_<pgid>`` (or ``_SGLang_``/``_proc_``, plus
``_<n>`` if that exists too). :class:`SegmentTracker` counts those as ours.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sardeenz.proctree import communicate_within

if TYPE_CHECKING:
    from sardeenz.config import Settings

log = logging.getLogger(__name__)

IPC_PREFIX = "kvcached_vllm"
SHM_DIR = Path("/dev/shm")
SEGMENT_FILE_SIZE = 24
"""Three little-endian int64: total_size, used_size, prealloc_size."""

NO_SEGMENTS_TEXT = "No active KVCached segments found."
_IPC_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,254}$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def ipc_name(gpu_ids: Iterable[int]) -> str:
    """The seed's segment name: ``kvcached_vllm_GPU0``, ``kvcached_vllm_GPU0_GPU1``.

    Indices are sorted and de-duplicated so the same GPU set always maps to
    the same segment, whatever order the request listed them in.
    """
    ids = sorted(set(gpu_ids))
    if not ids:
        raise ValueError("a kvcached segment needs at least one GPU")
    return IPC_PREFIX + "".join(f"_GPU{i}" for i in ids)


def kvcached_env(ipc: str) -> dict[str, str]:
    """Environment for an engine that uses kvcached with segment ``ipc``."""
    check_ipc_name(ipc)
    return {"ENABLE_KVCACHED": "true", "KVCACHED_AUTOPATCH": "1", "KVCACHED_IPC_NAME": ipc}


def should_enable(settings_enabled: bool, tensor_parallel_size: int, engine_is_gpu: bool) -> bool:
    """kvcached only for single-GPU engines on a GPU, and only if the operator allows it.

    The seed keeps tensor-parallel models off kvcached (``kvcachedEnabled:
    false``); CPU and simulated engines have no CUDA memory to share.
    """
    return settings_enabled and engine_is_gpu and tensor_parallel_size == 1


def check_ipc_name(ipc: str) -> str:
    """Refuse names that could escape ``/dev/shm`` or confuse kvctl's argv."""
    if not _IPC_NAME_RE.fullmatch(ipc):
        raise ValueError(f"not a kvcached IPC name: {ipc!r}")
    return ipc


# --- segment files ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Segment:
    """One kvcached segment as ``kvctl list`` reports it (limit = total_size)."""

    ipc: str
    limit_bytes: int
    used_bytes: int


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """The raw 24 bytes of ``/dev/shm/<ipc>``."""

    total_size: int
    used_size: int
    prealloc_size: int


def parse_segment_bytes(data: bytes) -> SegmentFile:
    """Decode a segment file's content (numpy int64 on x86-64/ARM64: little-endian)."""
    if len(data) < SEGMENT_FILE_SIZE:
        raise ValueError(f"a kvcached segment file has {SEGMENT_FILE_SIZE} bytes, got {len(data)}")
    total, used, prealloc = struct.unpack_from("<qqq", data)
    return SegmentFile(total, used, prealloc)


def read_segment_file(ipc: str, shm_dir: Path = SHM_DIR) -> SegmentFile | None:
    """Read ``<shm_dir>/<ipc>``; None if it does not exist.

    No lock is taken: kvcached writes the three fields under flock, but each
    is an aligned 8-byte value, and this is a monitoring view.
    """
    path = shm_dir / check_ipc_name(ipc)
    try:
        with path.open("rb") as f:
            return parse_segment_bytes(f.read(SEGMENT_FILE_SIZE))
    except FileNotFoundError:
        return None


def scan_segment_files(shm_dir: Path = SHM_DIR) -> list[Segment]:
    """All kvcached segments in ``shm_dir``, found the way kvctl finds them.

    kvctl's heuristic: a 24-byte file whose total_size is positive.
    """
    found: list[Segment] = []
    try:
        entries = sorted(shm_dir.iterdir())
    except FileNotFoundError:
        return found
    for path in entries:
        if not _IPC_NAME_RE.fullmatch(path.name):
            continue
        try:
            if not path.is_file() or path.stat().st_size != SEGMENT_FILE_SIZE:
                continue
            seg = read_segment_file(path.name, shm_dir)
        except (OSError, ValueError):
            continue
        if seg is not None and seg.total_size > 0:
            found.append(Segment(path.name, seg.total_size, seg.used_size))
    return found


def remove_segment_file(ipc: str, shm_dir: Path = SHM_DIR) -> bool:
    """What ``kvctl delete`` does on Linux (POSIX shm lives in /dev/shm)."""
    try:
        (shm_dir / check_ipc_name(ipc)).unlink()
    except FileNotFoundError:
        return False
    return True


# --- kvctl --------------------------------------------------------------------------


class KvctlError(RuntimeError):
    """kvctl could not be run, timed out, or printed something unusable."""


def parse_list_output(stdout: str) -> list[Segment]:
    """Parse ``kvctl list --json`` (or the plain 'No active ...' text).

    Tolerates lines printed before the JSON array (warnings on stdout).
    """
    text = _ANSI_RE.sub("", stdout).strip()
    if not text or NO_SEGMENTS_TEXT in text:
        return []
    start = text.find("[")
    if start < 0:
        raise KvctlError(f"kvctl list printed no JSON: {text[:200]!r}")
    try:
        data: Any = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise KvctlError(f"kvctl list printed invalid JSON: {exc}") from exc
    if not isinstance(data, list):
        raise KvctlError("kvctl list --json did not print a list")
    segments: list[Segment] = []
    for item in data:
        try:
            segments.append(
                Segment(str(item["ipc"]), int(item["limit_bytes"]), int(item["used_bytes"]))
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise KvctlError(f"unexpected kvctl list entry {item!r}") from exc
    return segments


def delete_succeeded(ipc: str, stdout: str, stderr: str) -> bool:
    """Read ``kvctl delete``'s verdict from its text, not its exit status.

    0.1.5 prints ``Deleted IPC '<ipc>'.`` on success and ``IPC '<ipc>' not
    found.`` (``Error: ...`` in some builds) on stderr on failure, exiting 0
    either way.
    """
    out = _ANSI_RE.sub("", stdout)
    err = _ANSI_RE.sub("", stderr)
    if f"IPC '{ipc}' not found" in out + err:
        return False
    return f"Deleted IPC '{ipc}'" in out


class Kvctl:
    """Async wrapper around the ``kvctl`` command of kvcached.

    Found at the configured path, else on PATH, else next to the vLLM
    interpreter (kvcached is installed into vLLM's venv, which is usually not
    on the controller's PATH). Without kvctl, listing falls back to reading
    the segment files and deleting to unlinking them, which is what kvctl
    0.1.5 itself does.
    """

    def __init__(
        self,
        executable: str | os.PathLike[str] | None = None,
        *,
        search_dirs: Sequence[str | os.PathLike[str]] = (),
        timeout: float = 15.0,
        shm_dir: Path = SHM_DIR,
    ) -> None:
        self._executable = None if executable is None else str(executable)
        self._search_dirs = [str(d) for d in search_dirs]
        self.timeout = timeout
        self.shm_dir = shm_dir

    @classmethod
    def for_settings(cls, settings: Settings, **kwargs: Any) -> Kvctl:
        """kvctl from PATH or from the bin directory of ``settings.vllm_python``."""
        return cls(search_dirs=[str(Path(settings.vllm_python).parent)], **kwargs)

    def path(self) -> str | None:
        """The kvctl executable to run, None if there is none."""
        if self._executable is not None:
            p = Path(self._executable)
            return str(p) if p.is_file() and os.access(p, os.X_OK) else None
        found = shutil.which("kvctl")
        if found:
            return found
        for d in self._search_dirs:
            found = shutil.which("kvctl", path=d)
            if found:
                return found
        return None

    def available(self) -> bool:
        return self.path() is not None

    async def _run(self, *args: str) -> tuple[int, str, str]:
        exe = self.path()
        if exe is None:
            raise KvctlError("kvctl not found")
        env = {**os.environ, "NO_COLOR": "1"}
        try:
            proc = await asyncio.create_subprocess_exec(
                exe,
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
        except OSError as exc:
            raise KvctlError(f"cannot run {exe}: {exc}") from exc
        answer = await communicate_within(proc, self.timeout)
        if answer is None:
            raise KvctlError(f"kvctl {' '.join(args)} timed out after {self.timeout:g} s")
        out, err = answer
        return (
            proc.returncode if proc.returncode is not None else -1,
            out.decode(errors="replace"),
            err.decode(errors="replace"),
        )

    async def list_segments(self) -> list[Segment]:
        """All segments with their limit and usage (fallback: /dev/shm files)."""
        if not self.available():
            return await asyncio.to_thread(scan_segment_files, self.shm_dir)
        rc, out, err = await self._run("list", "--json")
        if rc != 0:
            raise KvctlError(f"kvctl list failed ({rc}): {err.strip()[:500]}")
        return parse_list_output(out)

    async def delete(self, ipc: str) -> bool:
        """Delete a segment; True only if kvctl says it did (False: not found)."""
        check_ipc_name(ipc)
        if not self.available():
            return await asyncio.to_thread(remove_segment_file, ipc, self.shm_dir)
        _, out, err = await self._run("delete", ipc)
        ok = delete_succeeded(ipc, out, err)
        if not ok:
            log.info("kvctl delete %s: %s", ipc, (err or out).strip()[:300] or "no output")
        return ok

    async def set_limit(self, ipc: str, limit_bytes: int) -> bool:
        """``kvctl limit <ipc> <bytes>``; True only if kvctl reports the update.

        0.1.5 prints ``Updated kv cache limit for <ipc> ...`` on success and
        ``Error: IPC '<ipc>' not found.`` (exit 0) when there is no segment.
        Needs kvctl (no file fallback: kvcached writes limits under a lock).
        """
        check_ipc_name(ipc)
        if limit_bytes <= 0:
            raise ValueError("a kvcached limit must be positive")
        if not self.available():
            raise KvctlError("kvctl not found")
        _, out, err = await self._run("limit", ipc, str(int(limit_bytes)))
        ok = f"Updated kv cache limit for {ipc}" in _ANSI_RE.sub("", out)
        if not ok:
            log.info("kvctl limit %s: %s", ipc, (err or out).strip()[:300] or "no output")
        return ok


class SegmentTracker:
    """The segment names this node handed to its engines, for shutdown cleanup.

    In memory: after a controller restart, record the names of re-adopted
    kvcached instances again (``ipc_name(instance.gpu_ids)``).
    """

    def __init__(self) -> None:
        self._names: set[str] = set()

    def record(self, ipc: str) -> None:
        self._names.add(check_ipc_name(ipc))

    def forget(self, ipc: str) -> None:
        self._names.discard(ipc)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._names)

    def owns(self, segment_name: str) -> bool:
        """A recorded name, or the variant kvcached derives when it is taken."""
        if segment_name in self._names:
            return True
        return any(
            re.fullmatch(rf"{re.escape(n)}_(?:vLLM|SGLang|proc)_\d+(?:_\d+)?", segment_name)
            for n in self._names
        )

    async def cleanup(self, kvctl: Kvctl) -> list[str]:
        """Delete every segment this node owns; returns the names deleted.

        Call after all engines have stopped. Never raises: a failed cleanup
        leaves segments behind, which is logged, not fatal for shutdown.
        """
        targets = set(self._names)
        try:
            targets |= {s.ipc for s in await kvctl.list_segments() if self.owns(s.ipc)}
        except KvctlError as exc:
            log.warning("cannot list kvcached segments for cleanup: %s", exc)
        deleted: list[str] = []
        for name in sorted(targets):
            try:
                if await kvctl.delete(name):
                    deleted.append(name)
            except (KvctlError, ValueError) as exc:
                log.warning("cannot delete kvcached segment %s: %s", name, exc)
        self._names.clear()
        if deleted:
            log.info("deleted kvcached segment(s): %s", ", ".join(deleted))
        return deleted
