"""Draining an instance's requests before it sleeps or stops.

Why: a sleep used to answer at once and leave every stream in flight frozen
(the engine paused them, nothing woke it), and an unload ended streams the way
an engine crash does. Now both first take the instance out of routing, then
wait for the requests in flight, and only then touch the engine:

* **sleep**: the instance is held as ``sleeping`` in the routing table (new
  requests wait, and wake it once it is asleep), the requests in flight get
  ``sleep_drain_seconds`` to finish; if some are left the sleep is refused
  with 409 ``requests_in_flight`` (the hold is lifted, held requests go
  through), unless ``force``: then they are cut, each client getting an error
  with code ``model_sleeping``. Only then is the engine asked to sleep. This
  is vLLM's ``/sleep?mode=wait`` with a deadline, done where the requests are
  visible (the proxy), so that a sleep never waits forever on a client.
* **unload**: the instance is held as ``stopping`` (not routable: new requests
  go to another instance or get the usual 503), the requests in flight get the
  stop grace to finish, those left are cut with ``model_unloaded``, and any
  request that fails from then on (the engine closing its connections on
  SIGTERM) gets that code too, not ``engine_failed``.

The supervisor knows the traffic only through ``Traffic`` (the proxy's
``ProxyTraffic``, wired in app.py); without a proxy (unit tests) it is
``NoTraffic``: nothing in flight, nothing to hold.
"""

from __future__ import annotations

from typing import Protocol

from sardeenz.domain import InstanceStatus, ModelInstance
from sardeenz.errors import Conflict

MODEL_SLEEPING = "model_sleeping"
MODEL_UNLOADED = "model_unloaded"


class RequestsInFlight(Conflict):
    code = "requests_in_flight"


class Traffic(Protocol):
    """What the supervisor may do to the requests of an instance."""

    def hold(self, instance_id: str, status: InstanceStatus) -> None:
        """Route the instance as ``status`` (not routable) until ``release``."""

    def release(self, instance: ModelInstance) -> None:
        """End the hold; route by the instance's current state."""

    def in_flight(self, instance_id: str) -> int: ...

    async def drain(self, instance_id: str, timeout: float) -> int:  # noqa: ASYNC109
        """Wait up to ``timeout`` s for no request in flight; returns how many are left."""

    def ending(self, instance_id: str, code: str) -> None:
        """Requests of the instance that fail from now on end with ``code``."""

    def cut(self, instance_id: str, code: str) -> int:
        """End the requests in flight with ``code``; returns how many."""

    def forget(self, instance_id: str) -> None:
        """The instance is gone."""


class NoTraffic:
    """No proxy in this process: nothing is ever in flight."""

    def hold(self, instance_id: str, status: InstanceStatus) -> None:
        return None

    def release(self, instance: ModelInstance) -> None:
        return None

    def in_flight(self, instance_id: str) -> int:
        return 0

    async def drain(self, instance_id: str, timeout: float) -> int:  # noqa: ASYNC109
        return 0

    def ending(self, instance_id: str, code: str) -> None:
        return None

    def cut(self, instance_id: str, code: str) -> int:
        return 0

    def forget(self, instance_id: str) -> None:
        return None


async def drain_for_sleep(
    traffic: Traffic,
    instance_id: str,
    timeout: float,  # noqa: ASYNC109
    force: bool,
) -> int:
    """Wait for the requests in flight (the caller holds the instance); returns how many
    were cut. Raises ``RequestsInFlight`` when some are left and ``force`` is not set."""
    left = await traffic.drain(instance_id, timeout)
    if not left:
        return 0
    if not force:
        raise RequestsInFlight(
            f"instance {instance_id} still has {left} request(s) in flight after "
            f"{timeout:g} s (SARDEENZ_SLEEP_DRAIN_SECONDS); retry later, or sleep it with "
            "force=true to cut them (their clients get an error with code model_sleeping)",
            inFlight=left,
        )
    return traffic.cut(instance_id, MODEL_SLEEPING)


async def drain_for_unload(
    traffic: Traffic,
    instance_id: str,
    timeout: float,  # noqa: ASYNC109
) -> int:
    """Unroute was done by the caller: wait up to ``timeout`` s, then cut what is left."""
    traffic.ending(instance_id, MODEL_UNLOADED)
    left = await traffic.drain(instance_id, timeout)
    if not left:
        return 0
    return traffic.cut(instance_id, MODEL_UNLOADED)
