"""Engine port allocation.

The supervisor must own ports: vLLM 0.10-0.22 bind with SO_REUSEPORT, so a
second engine on a taken port may start WITHOUT error and silently share its
traffic. We therefore never hand out a port that a live instance holds, and
we probe each candidate with a real bind first.
"""

from __future__ import annotations

import socket

from sardeenz.errors import Conflict


class PortRangeExhausted(Conflict):
    code = "port_range_exhausted"


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR so a port in TIME_WAIT from a previous engine counts as
        # free: uvicorn (and so vLLM) sets it too and will bind it fine.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


class PortAllocator:
    def __init__(self, ports: range, host: str = "127.0.0.1") -> None:
        self._ports = ports
        self._host = host
        self._taken: set[int] = set()

    def reserve(self, port: int) -> None:
        """Mark a port as held (an adopted engine keeps its port)."""
        self._taken.add(port)

    def release(self, port: int) -> None:
        self._taken.discard(port)

    def allocate(self) -> int:
        for port in self._ports:
            if port not in self._taken and port_is_free(self._host, port):
                self._taken.add(port)
                return port
        raise PortRangeExhausted(
            f"no free engine port in {self._ports.start}-{self._ports.stop - 1}: "
            f"{len(self._taken)} held by instances; unload one or widen "
            "SARDEENZ_PORT_RANGE_SIZE / VLLM_BASE_PORT",
            range_start=self._ports.start,
            range_end=self._ports.stop - 1,
        )

    @property
    def taken(self) -> frozenset[int]:
        return frozenset(self._taken)
