"""The soak's faults that are not a signal or a cable: one pod's wall clock jumps, one
pod's data dir fills up (testkit/soak.py draws them; docs/testing.md, "The soak").

* ``SkewedClock``: Debian's libfaketime preloaded into one pod (and so into the engines
  it starts, which inherit its environment), reading its offset from a file the
  harness rewrites: the pod's wall clock (``time.time``, ``datetime.now``, the Date
  header) moves, its monotonic clock does not (``FAKETIME_DONT_FAKE_MONOTONIC``).
  ``testkit/faketime_sleep.c`` is preloaded before it to keep ``time.sleep`` working
  (libfaketime 0.9.10 breaks absolute monotonic sleeps when the offset is not zero).
  ``make soak-deps`` installs libfaketime (apt).
* ``SmallDisk``: a tmpfs of a few MiB mounted as one pod's data dir, filled with zeros
  to ENOSPC and freed again.
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
SLEEP_SHIM_SOURCE = Path(__file__).with_name("faketime_sleep.c")
CACHE = Path.home() / ".cache" / "sardeenz"


def clock_unavailable() -> str | None:
    """Why clock jumps cannot be injected here (None: they can)."""
    if not FAKETIME_LIB.exists():
        return f"no {FAKETIME_LIB} (make soak-deps installs Debian's libfaketime)"
    if shutil.which("cc") is None:
        return "no C compiler (cc) for testkit/faketime_sleep.c"
    return None


def _sleep_shim() -> Path:
    """testkit/faketime_sleep.c built once per content into the cache."""
    source = SLEEP_SHIM_SOURCE.read_bytes()
    out = CACHE / f"faketime-sleep-{hashlib.sha256(source).hexdigest()[:12]}.so"
    if not out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-O2", "-o", str(tmp), str(SLEEP_SHIM_SOURCE)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        tmp.replace(out)
    return out


class SkewedClock:
    """The wall-clock offset of one pod's processes, set by rewriting a file."""

    def __init__(self, where: Path) -> None:
        where.mkdir(parents=True, exist_ok=True)
        self.file = where / "faketime-offset"
        self.offset = 0.0
        self.set(0)

    def env(self) -> dict[str, str]:
        """The environment that puts the pod (and its engines) on this clock."""
        return {
            "LD_PRELOAD": f"{_sleep_shim()} {FAKETIME_LIB}",
            "FAKETIME_TIMESTAMP_FILE": str(self.file),
            # Read again at most every second: a jump takes effect within 1 s, and the
            # file is not read on every clock call (the pod reads its clock a lot).
            "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def set(self, seconds: int) -> None:
        """Write the offset (taken up by the pod within a second; ``jump`` waits for it)."""
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(f"{seconds:+d}\n")
        tmp.replace(self.file)  # libfaketime never reads half a line

    def jump(self, url: str, seconds: int, within: float = 10.0) -> float:
        """Set the offset to ``seconds`` and wait until the pod at ``url`` shows it in
        its Date header; the offset it showed (a pod that does not answer: raises)."""
        self.set(seconds)
        self.offset = seconds
        deadline = time.monotonic() + within
        seen = float("nan")
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, TypeError, ValueError):
                resp = httpx.get(f"{url}/api/health/live", timeout=2)
                seen = email.utils.parsedate_to_datetime(resp.headers["date"]).timestamp()
                seen -= time.time()
                if abs(seen - seconds) <= 2.5:  # the header has whole seconds
                    return seen
            time.sleep(0.2)
        raise AssertionError(f"{url}: wall clock not at {seconds:+d}s in {within}s ({seen:+.1f})")


class SmallDisk:
    """A tmpfs of ``size`` mounted at ``where`` (a pod's data dir): filled and freed."""

    def __init__(self, where: Path, size: str = "48m") -> None:
        self.where = where
        self.size = size
        self.mounted = False

    def mount(self) -> SmallDisk:
        self.where.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(self.where)],
            check=True,
            capture_output=True,
            timeout=30,
        )
        self.mounted = True
        return self

    def fill(self) -> int:
        """Write zeros until the tmpfs refuses one more byte; the bytes written."""
        written = 0
        with (self.where / "soak-filler").open("wb", buffering=0) as out:
            for chunk in (1 << 20, 1 << 12, 1):
                with contextlib.suppress(OSError):
                    for _ in range(1 << 16):  # bounded: the tmpfs is at most a few MiB
                        written += out.write(b"\0" * chunk)
        try:
            (self.where / "soak-probe").write_bytes(b"\0" * 4096)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        else:
            raise AssertionError(f"{self.where} still takes writes after the fill")
        return written

    def free(self) -> None:
        for name in ("soak-filler", "soak-probe"):
            (self.where / name).unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.where)], timeout=30, check=False)
            self.mounted = False
