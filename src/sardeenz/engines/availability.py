"""Which engines this node can run: the vLLM install it would launch, and the check
a load makes, for what would load later (a catalog entry added through the API)."""

from __future__ import annotations

from sardeenz.domain import EngineKind
from sardeenz.engines import get_adapter
from sardeenz.engines.vllm_probe import VllmInstall, VllmProbe


class EngineAvailability:
    def __init__(self, vllm_probe: VllmProbe) -> None:
        self._vllm_probe = vllm_probe

    async def vllm_install(self, refresh: bool = False) -> VllmInstall:
        """The vLLM install this node would launch (see ``VllmProbe`` for when it is
        re-probed)."""
        return await self._vllm_probe.get(refresh)

    async def require(self, engine: object) -> None:
        """Raise ``engine_unavailable`` (409) when ``engine``, named explicitly, cannot run here.

        The same check a load makes (the adapter's ``target``), for what would load later:
        a catalog entry added through the API. An entry that names no engine takes the
        default when it starts (which may change by then), so it is not checked now.
        """
        if isinstance(engine, EngineKind):
            refusal = (await get_adapter(engine).target(self._vllm_probe)).refusal
            if refusal is not None:
                raise refusal
