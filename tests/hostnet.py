"""Keep tests that change the host's network apart from those it disturbs."""

from __future__ import annotations

import contextlib
import fcntl
import tempfile
from collections.abc import Iterator
from pathlib import Path

HOST_NETWORK_LOCK = Path(tempfile.gettempdir()) / "sardeenz-tests-host-network.lock"


@contextlib.contextmanager
def host_network(*, changes: bool) -> Iterator[None]:
    """Keep tests that change the host's network apart from those it disturbs.

    Chromium aborts page loads with ``ERR_NETWORK_CHANGED`` when an address or link of
    the host changes, which the partition test does (bridges, veths and an address in
    the root namespace). Browser modules hold this lock shared, the partition module
    exclusively, so with two xdist workers they never overlap.
    """
    with HOST_NETWORK_LOCK.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if changes else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
