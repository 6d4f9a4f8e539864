"""One look at an engine's port: the kernel's listeners, by netlink against ``/proc``.

Before an instance becomes active, the runner checks who listens on its engine's
port several times (``sardeenz.runtime.identity``), each time asking the kernel for
its listening TCP sockets (``sardeenz.runtime.tcp_table``). This script measures one
such question both ways: through ``sock_diag`` netlink (what the runner uses) and
through ``/proc/net/tcp{,6}`` (the fallback, and the baseline), with ``--time-wait``
finished loopback connections left in ``TIME_WAIT`` as a busy node has them (every
connection a client closes first leaves one for a minute). Both answers must agree.

CPU per question is the process's CPU time (user + system: the kernel's formatting of
``/proc`` counts) over ``--rounds`` questions, best of three batches.

Usage: .venv/bin/python benchmarks/port_checks.py [--time-wait 5000] [--rounds 200]
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from sardeenz.runtime.tcp_table import (
    LISTEN,
    TIME_WAIT,
    TcpSocket,
    from_netlink,
    from_proc,
    state_mask,
)


def leave_time_wait(count: int) -> socket.socket:
    """Open and close ``count`` loopback connections, client side first: each leaves a
    ``TIME_WAIT`` socket behind. Returns the listener, still listening."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    port: int = listener.getsockname()[1]
    for _ in range(count):
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = listener.accept()
        client.close()
        server.close()
    return listener


def cpu_per_call(read: Callable[[], list[TcpSocket]], rounds: int) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for _ in range(rounds):
            read()
        best = min(best, (time.process_time() - started) / rounds)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--time-wait", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    listener = leave_time_wait(args.time_wait)
    port = listener.getsockname()[1]
    mask = state_mask({LISTEN})
    by_netlink = from_netlink(mask)
    by_proc = from_proc(mask)

    def key(s: TcpSocket) -> tuple[int, str, int, int]:
        return (s.port, s.address, s.state, s.inode)

    if sorted(by_netlink, key=key) != sorted(by_proc, key=key):
        raise SystemExit(f"the two readers disagree:\n{by_netlink}\n{by_proc}")
    if not any(s.port == port for s in by_netlink):
        raise SystemExit(f"the listener on {port} was not found")
    waiting = len(from_netlink(state_mask({TIME_WAIT})))
    proc_s = cpu_per_call(lambda: from_proc(mask), args.rounds)
    netlink_s = cpu_per_call(lambda: from_netlink(mask), args.rounds)
    print(f"TIME_WAIT sockets: {waiting}; listeners: {len(by_netlink)}")
    print(f"/proc/net/tcp{{,6}} (baseline): {proc_s * 1000:8.3f} ms CPU per question")
    print(f"sock_diag netlink:             {netlink_s * 1000:8.3f} ms CPU per question")
    print(f"ratio netlink / proc: {netlink_s / proc_s:.3f}")
    listener.close()


if __name__ == "__main__":
    main()
