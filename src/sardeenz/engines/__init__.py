"""Engine kinds behind one interface (``EngineAdapter``), looked up by ``EngineKind``.

Adapters are imported on first use, not here: importing one engine module (the log
parser, say) should not pay for the controller's settings machinery. The simulated
engine program itself is :mod:`sardeenz.sim` and imports nothing from this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pydantic alone costs ~0.5 s of import
    from sardeenz.domain import EngineKind
    from sardeenz.engines.base import EngineAdapter

__all__ = ["get_adapter"]

_adapters: dict[EngineKind, EngineAdapter] = {}


def get_adapter(kind: EngineKind) -> EngineAdapter:
    """The adapter for ``kind``; one shared, stateless instance per kind."""
    from sardeenz.domain import EngineKind

    adapter = _adapters.get(kind)
    if adapter is not None:
        return adapter
    if kind == EngineKind.VLLM:
        from sardeenz.engines.vllm import VllmAdapter

        adapter = VllmAdapter()
    elif kind == EngineKind.SIM:
        from sardeenz.engines.sim_adapter import SimAdapter

        adapter = SimAdapter()
    else:
        raise ValueError(f"unknown engine kind: {kind!r}")
    _adapters[kind] = adapter
    return adapter
