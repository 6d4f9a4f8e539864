"""The one small interface every engine kind implements.

The supervisor knows nothing about vLLM or the simulated engine: it asks an
adapter for a command line (an argv list, never a shell string) and an
environment, spawns it, and feeds the engine's log lines to the shared vLLM
log parser (the simulated engine writes vLLM-format lines on purpose).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from sardeenz.config import Settings
from sardeenz.domain import EngineKind, ModelInstance


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
