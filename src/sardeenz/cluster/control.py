"""The cluster's control state as the features see it, whichever backend keeps it.

Presets, the catalog's API entries and the moves in flight are each one
document (cluster/replicated.py's :class:`Document`: written whole, with the
term of the leader that wrote it and a revision). The features (presets,
catalog sync, moves) use only :class:`ControlState`; which backend is under
them is the mode's:

* static peers: cluster/control_state.py's majority-acknowledged register,
  replicated by the leader to every pod's SQLite;
* Kubernetes: cluster/control_kube.py, one ConfigMap per document in the API
  server (already a consensus store), watched by every pod.

In both, writes are the leader's (a follower answers 307 to it), and a leader
acts on the state only once it is :meth:`ControlState.ready`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from sardeenz.cluster.replicated import Document
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.server import Handler
from sardeenz.errors import Unavailable

Listener = Callable[[Any], Awaitable[None]]
Change = Callable[[Any], Awaitable[Any]]


class ControlState(Protocol):
    async def load(self) -> None:
        """Read this pod's last copies (before any feature reads a body)."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...

    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]: ...

    def subscribe(self, key: str, listener: Listener) -> None:
        """``listener(body)`` for every copy of ``key`` this pod takes from elsewhere."""

    def seed(self, key: str, initial: Callable[[], Awaitable[Any]]) -> None:
        """What a first leader writes for ``key`` when the cluster holds none."""

    def when_ready(self, action: Callable[[], Awaitable[None]]) -> None:
        """Run ``action`` each time this pod becomes a ready leader."""

    @property
    def replicated(self) -> bool:
        """False on a single node (nothing to replicate to, nor to resume)."""

    def body(self, key: str, default: Any = None) -> Any: ...

    def ready(self) -> bool:
        """A leader that holds the newest control state of its term."""

    def view(self) -> dict[str, Any]:
        """``GET /api/cluster/control``: this pod's copies."""

    def warnings(self) -> list[str]:
        """Problems an operator must fix (a corrupt document), for the cluster status."""

    async def update(self, key: str, change: Change) -> Document:
        """Write ``await change(current body)`` as the new copy of ``key``; returns once
        it is durable (a majority, or the API server)."""


def not_ready(is_leader: bool, where: str) -> Unavailable:
    """503 for a write this pod cannot take now; ``where``: what a new leader reads."""
    if not is_leader:
        return Unavailable(
            "this pod no longer leads the cluster; retry (the new leader takes the write)",
            code="no_leader",
        )
    return Unavailable(
        f"the leader has not yet read the control state from {where}; retry shortly",
        code="control_state_not_ready",
    )
