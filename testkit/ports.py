"""Free loopback ports for the processes tests and benchmarks start."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ephemeral_ports() -> range:
    """The kernel's range for port-0 binds (``ip_local_port_range``)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def free_port_range(size: int) -> int:
    """A base port with ``size`` free ports after it (best effort, randomised).

    Chosen below the ephemeral range: vLLM picks its internal ports (torch.distributed,
    ZMQ) by binding port 0, and one of those landing in an engine port range made a
    real-vLLM start fail with ``Address already in use``.
    """
    top = min(_ephemeral_ports().start, 60000) - size
    for _ in range(200):
        base = random.randrange(20000, top)
        ok = True
        for p in range(base, base + size):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free port range")
