"""Which engines this node can run: the vLLM install it found, and the simulated engine."""

from __future__ import annotations

from fastapi import APIRouter

from sardeenz.api.deps import ServicesDep
from sardeenz.domain import CamelModel
from sardeenz.engines.vllm_probe import VllmInstall
from sardeenz.security.policy import READONLY

router = APIRouter(prefix="/api/v1", tags=["engines"])


class VllmReport(CamelModel):
    python: str
    found: bool
    available: bool
    """A vLLM engine can start (false: vLLM loads are refused, `engine_unavailable`)."""
    version: str | None
    distribution: str | None
    cpu_build: bool
    device: str
    supports_sleep: bool
    drains_on_stop: bool
    """``--shutdown-timeout`` is passed: requests in flight finish on unload."""
    error: str | None
    description: str

    @classmethod
    def of(cls, install: VllmInstall) -> VllmReport:
        return cls(
            python=install.python,
            found=install.found,
            available=install.available,
            version=install.version,
            distribution=install.distribution,
            cpu_build=install.cpu_build,
            device=install.device,
            supports_sleep=install.supports_sleep,
            drains_on_stop=install.has_shutdown_timeout,
            error=install.error,
            description=install.describe(),
        )


class SimReport(CamelModel):
    available: bool = True
    description: str = "the simulated engine (sardeenz sim-engine): vLLM's API, no model"


class EnginesReport(CamelModel):
    vllm: VllmReport
    sim: SimReport
    default_engine: str
    """The engine a load without ``engine`` gets (``SARDEENZ_DEFAULT_ENGINE``; sim in a demo)."""


@router.get("/engines", response_model=EnginesReport, dependencies=[READONLY])
async def list_engines(services: ServicesDep, refresh: bool = False) -> EnginesReport:
    """The vLLM behind ``SARDEENZ_VLLM_PYTHON`` (version, CUDA or CPU build), and the sim engine.

    Answers what the next vLLM load would be launched with. The probe runs at
    start-up; a result that found no vLLM is checked again (at most every few
    seconds) by the next load or report, so installing vLLM needs no restart.
    ``refresh=true`` probes again now in any case (after upgrading vLLM).
    ``vllm.available`` false: loads with ``engine: vllm`` are refused with 409
    ``engine_unavailable``.
    """
    install = await services.engines.vllm_install(refresh)
    return EnginesReport(
        vllm=VllmReport.of(install),
        sim=SimReport(),
        default_engine=services.settings.effective_default_engine,
    )
