"""The one small interface every engine kind implements.

The supervisor knows nothing about vLLM or the simulated engine: it asks an
adapter for a command line (an argv list, never a shell string) and an
environment, spawns it, and feeds the engine's log lines to the shared vLLM
log parser (the simulated engine writes vLLM-format lines on purpose).

Everything else that differs between engine kinds is a hook here, so neither
the supervisor nor the memory ledger branches on the kind:

* ``validate_args``: which ``extraArgs`` a user may pass;
* ``default_footprint_bytes``: the GPU memory an engine takes when the load
  gives no ``gpuMemoryLimit`` and the engine's own flags say it (the
  simulated engine's ``--memory-gib``), None to let placement decide;
* ``target``: where an engine of this kind runs on this node (vLLM asks its
  install: CUDA or its CPU build; the simulated engine uses simulated GPUs),
  learned through the controller's ``InstallProbe``;
* ``start_refusal``: why an instance cannot start at all, found without starting
  it (vLLM: an absolute model path that does not exist), checked before the spawn;
* ``sleep_refusal`` / ``sleep`` / ``wake`` / ``is_sleeping``: sleep mode;
* ``held_after_sleep``: what the engine holds after a sleep or a wake-up
  when no driver can tell (the simulated engine says it on ``/sim/state``);
  None when the GPU driver shows it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sardeenz.config import Settings
from sardeenz.domain import EngineKind, ModelInstance
from sardeenz.engines.vllm_probe import VllmInstall
from sardeenz.errors import SardeenzError

if TYPE_CHECKING:
    import httpx

MAX_TMPDIR_CHARS = 70
"""Longest engine TMPDIR: vLLM puts ZMQ sockets at ``$TMPDIR/<36-char uuid>``, and a Unix
socket path holds at most 107 bytes."""


def engine_tmp_dir(instance_dir: str | Path, instance_id: str) -> Path:
    """The private TMPDIR of one engine: ``<instance_dir>/tmp``, or a short path in the system
    temp dir when that would be too long for vLLM's socket paths.

    vLLM leaves ``vllm_dist_<uuid>`` files and ZMQ sockets in ``tempfile.gettempdir()`` on
    every start; giving each engine its own TMPDIR lets the supervisor remove all of it when
    the instance is gone. Pure: the supervisor calls it at spawn and again at clean-up.
    """
    preferred = Path(instance_dir) / "tmp"
    if len(str(preferred)) <= MAX_TMPDIR_CHARS:
        return preferred
    return Path(tempfile.gettempdir()) / f"sardeenz-{instance_id}"


@dataclass(frozen=True, slots=True)
class LaunchContext:
    """What the supervisor decided before spawning: where, and with which GPUs."""

    host: str
    port: int
    gpu_ids: list[int]
    gpu_memory_utilization: float | None
    kvcached_ipc_name: str | None
    instance_dir: str
    settings: Settings
    tmp_dir: str | None = None
    """The engine's own TMPDIR (``engine_tmp_dir``), created by the supervisor; None: inherit."""
    vllm: VllmInstall | None = None
    """What ``SARDEENZ_VLLM_PYTHON`` holds (vLLM loads only); None: unknown, assume CUDA."""


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]
    """Variables set on top of the controller's own environment."""
    warnings: list[str] = field(default_factory=list)


EngineCall = Callable[[str, str], Awaitable["httpx.Response"]]
"""``runner.engine_call``: one HTTP request (method, path) to the instance's engine."""


class InstallProbe(Protocol):
    """What the controller learned about the engine installs it can launch (once per
    controller: ``sardeenz.engines.vllm_probe.VllmProbe``)."""

    async def get(self) -> VllmInstall: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class EngineTarget:
    """Where a new engine of one kind runs on this node, decided before placement."""

    device: str | None
    """``ModelInstance.engine_device``: ``cuda``/``cpu`` for vLLM, None for the sim."""
    uses_gpus: bool
    """False: the engine runs on host memory (no GPU placement, host RAM is checked)."""
    no_sleep_reason: str | None = None
    """Set when the engine cannot sleep here: why (the load's warning)."""
    own_tmpdir: bool = False
    """The engine gets a private TMPDIR, removed with the instance (vLLM)."""
    install: VllmInstall | None = None
    """For ``LaunchContext.vllm``."""
    refusal: SardeenzError | None = None
    """Set when no engine of this kind can start here (vLLM not installed): the load is
    refused with it once the request itself is known to be valid, before anything starts."""


class EngineAdapter(Protocol):
    kind: EngineKind
    simulated: bool

    def build_launch(self, instance: ModelInstance, ctx: LaunchContext) -> LaunchSpec: ...

    def validate_args(self, extra_args: list[str]) -> list[str]:
        """The user's ``extraArgs`` checked (a new list); ``ValueError`` with the reason."""
        ...

    def default_footprint_bytes(self, extra_args: list[str]) -> int | None: ...

    async def target(self, installs: InstallProbe) -> EngineTarget: ...

    def start_refusal(self, instance: ModelInstance) -> str | None:
        """Why this instance cannot start, known before spawning it (None: spawn it).

        May touch the filesystem: the runner calls it off the event loop."""
        ...

    def sleep_refusal(self, instance: ModelInstance) -> str | None:
        """Why this instance can never sleep (None: ask the engine)."""
        ...

    async def sleep(self, call: EngineCall, level: int) -> httpx.Response: ...

    async def wake(self, call: EngineCall) -> httpx.Response: ...

    async def is_sleeping(self, call: EngineCall) -> httpx.Response: ...

    async def held_after_sleep(self, call: EngineCall) -> int | None:
        """Bytes per GPU the engine holds now, when only the engine can tell."""
        ...


class VllmSleepApi:
    """vLLM's sleep endpoints (``VLLM_SERVER_DEV_MODE=1``), which the sim serves too."""

    async def sleep(self, call: EngineCall, level: int) -> httpx.Response:
        return await call("POST", f"/sleep?level={level}")

    async def wake(self, call: EngineCall) -> httpx.Response:
        return await call("POST", "/wake_up")

    async def is_sleeping(self, call: EngineCall) -> httpx.Response:
        return await call("GET", "/is_sleeping")
