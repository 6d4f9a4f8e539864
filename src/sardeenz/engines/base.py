"""The one small interface every engine kind implements.

The supervisor knows nothing about vLLM or the simulated engine: it asks an
adapter for a command line (an argv list, never a shell string) and an
environment, spawns it, and feeds the engine's log lines to the shared vLLM
log parser (the simulated engine writes vLLM-format lines on purpose).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sardeenz.config import Settings
from sardeenz.domain import EngineKind, ModelInstance
from sardeenz.engines.vllm_probe import VllmInstall

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


class EngineAdapter(Protocol):
    kind: EngineKind
    simulated: bool

    def build_launch(self, instance: ModelInstance, ctx: LaunchContext) -> LaunchSpec: ...
