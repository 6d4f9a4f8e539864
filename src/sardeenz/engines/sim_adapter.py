"""The simulated engine: ``python -m sardeenz.sim`` from the controller's own Python.

It takes vLLM's flag names and gets vLLM's environment so the supervisor, the tests and the
demo exercise the same launch path as a real engine; only the program differs. What the
controller must know about it beyond vLLM: it holds ``--memory-gib`` of simulated GPU memory
(its default footprint), and after a sleep or a wake-up it says on ``/sim/state`` what it
holds, since no driver shows simulated memory.
"""

from __future__ import annotations

import sys

import httpx

from sardeenz.domain import EngineKind, ModelInstance
from sardeenz.engines.base import (
    EngineCall,
    EngineTarget,
    InstallProbe,
    LaunchContext,
    LaunchSpec,
    VllmSleepApi,
)
from sardeenz.engines.vllm import budget_overrides, engine_env, format_fraction, validate_extra_args

SIM_DEFAULT_MEMORY_GIB = 4.0  # the simulated engine's own default for --memory-gib


def sim_footprint_bytes(extra_args: list[str]) -> int:
    """The simulated GPU memory an engine with these args will hold (its --memory-gib).

    The last occurrence wins, as in argparse; an unparsable value falls back to
    the default (the engine itself will then refuse to start and say why).
    """
    gib = SIM_DEFAULT_MEMORY_GIB
    for i, arg in enumerate(extra_args):
        value: str | None = None
        if arg == "--memory-gib" and i + 1 < len(extra_args):
            value = extra_args[i + 1]
        elif arg.startswith("--memory-gib="):
            value = arg.split("=", 1)[1]
        if value is not None:
            try:
                gib = float(value)
            except ValueError:
                gib = SIM_DEFAULT_MEMORY_GIB
    return max(0, int(gib * 2**30))


class SimAdapter(VllmSleepApi):
    """Launches the built-in simulated engine (labelled simulated wherever users see it)."""

    kind: EngineKind = EngineKind.SIM
    simulated: bool = True

    def validate_args(self, extra_args: list[str]) -> list[str]:
        return validate_extra_args(extra_args)

    def default_footprint_bytes(self, extra_args: list[str]) -> int | None:
        return sim_footprint_bytes(extra_args)

    async def target(self, installs: InstallProbe) -> EngineTarget:
        return EngineTarget(device=None, uses_gpus=True)

    def start_refusal(self, instance: ModelInstance) -> str | None:
        return None  # any model path: the simulated engine reads no weights

    def sleep_refusal(self, instance: ModelInstance) -> str | None:
        return None

    async def held_after_sleep(self, call: EngineCall) -> int | None:
        resp: httpx.Response = await call("GET", "/sim/state")
        if resp.status_code != 200:
            return None
        return int(float(resp.json()["memory_gib"]) * 2**30)

    def build_launch(self, instance: ModelInstance, ctx: LaunchContext) -> LaunchSpec:
        extra = validate_extra_args(instance.extra_args)
        argv = [
            sys.executable,
            "-m",
            "sardeenz.sim",
            "--model",
            instance.model_path,
            "--host",
            ctx.host,
            "--port",
            str(ctx.port),
            "--served-model-name",
            instance.served_model_name,
        ]
        if instance.sleep_mode_enabled:
            argv.append("--enable-sleep-mode")
        if ctx.gpu_memory_utilization is not None:
            argv += ["--gpu-memory-utilization", format_fraction(ctx.gpu_memory_utilization)]
        # e.g. --ttft-ms 40 --load-seconds 2 --memory-gib 6
        argv += extra
        return LaunchSpec(
            argv=argv, env=engine_env(instance, ctx), warnings=budget_overrides(extra)
        )
