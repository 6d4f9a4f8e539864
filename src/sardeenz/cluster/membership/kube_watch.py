"""List, then watch: the loop every Kubernetes watch of Sardeenz runs (the pods of
discovery, the control state's ConfigMaps).

List (the whole state, and the resourceVersion it is at), then watch from that
version, resuming each watch from the last version seen (bookmarks included).
A 410 Gone (the version left the API server's window) means list again at
once; any other failure is retried after a backoff (the retry period doubling
up to 30 s), resuming from where it was. A 403 becomes an RBAC warning
(kube_api.py), which goes when the same call is allowed again.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

from sardeenz.cluster.membership.kube_api import KubeApi, describe, status_code

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 30.0
WATCH_SECONDS = (240, 360)
"""Each watch asks the server to end it within this range (spread, as client-go does)."""


def watch_seconds() -> int:
    return random.randint(*WATCH_SECONDS)


async def list_then_watch(
    api: KubeApi,
    resource: str,
    relist: Callable[[], Awaitable[str]],
    watch: Callable[[str], Awaitable[str]],
    retry: float,
) -> None:
    """Run until cancelled: ``relist()`` returns the version to watch from, ``watch(v)``
    the last version seen when the server ended the watch."""
    failures = 0
    version: str | None = None  # None: list (again)
    while True:
        verb = "list" if version is None else "watch"
        try:
            version = await (relist() if version is None else watch(version))
            failures = 0
            continue
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            status = status_code(exc)
            if status == 410:
                log.info("Kubernetes: %s watch expired (410 Gone): listing again", resource)
                version = None
                continue
            if status == 403:
                api.forbidden(verb, resource, exc)
            else:
                log.warning("Kubernetes: %s %s failed: %s", resource, verb, describe(exc))
        failures += 1
        delay = min(MAX_BACKOFF_SECONDS, retry * 2 ** (failures - 1))
        await asyncio.sleep(delay * (0.8 + 0.4 * random.random()))
