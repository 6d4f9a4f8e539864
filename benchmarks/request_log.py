"""What the request log (proxy/reqlog.py) costs per request, in-process.

    .venv/bin/python benchmarks/request_log.py

The proxy-wide numbers (benchmarks/proxy_overhead.py) move by a few us between
runs on a shared machine, more than the log costs, so this measures the log
alone: the same loop of per-request allocations with and without the log's
``note`` (the hot path's one call) and ``drain`` (the flusher's batch work: the
usage read from the response tail, the counters, the ring), against a live
heap of a server's size so that the garbage collector's share is counted too.
"""

from __future__ import annotations

import argparse
import time

from sardeenz.proxy.reqlog import RequestLog

BODY = (
    b'{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":'
    b'[{"index":0,"message":{"role":"assistant","content":"hello world"},"finish_reason":'
    b'"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}}'
)


class _Exchange:
    """Stands for the per-request objects the relay makes and drops."""

    __slots__ = ("body", "headers", "state")

    def __init__(self) -> None:
        self.headers = [(b"host", b"x"), (b"content-type", b"application/json")]
        self.state: dict[str, bytes] = {}
        self.body = BODY


def run(with_log: bool, n: int, batch: int) -> float:
    log = RequestLog(1000, pod="bench")
    note = log.note
    now = time.time
    t0 = time.process_time()
    for i in range(n):
        ex = _Exchange()
        ex.state["x"] = ex.body
        if with_log:
            note((now(), "m", None, "inst", None, 200, 0.001, 0.0, False, "key", ex.body, b""))
            if i % batch == 0:
                log.drain()
    log.drain()
    return (time.process_time() - t0) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=12_000, help="requests per drain")
    parser.add_argument("--heap", type=int, default=300_000, help="live objects kept")
    args = parser.parse_args()
    heap = [{"k": [i, str(i)]} for i in range(args.heap)]  # noqa: F841 (kept alive)
    base = min(run(False, args.requests, args.batch) for _ in range(3))
    logged = min(run(True, args.requests, args.batch) for _ in range(3))
    print(f"per request: {base:.2f} us without the log, {logged:.2f} us with it")
    print(f"the request log adds {logged - base:.2f} us of CPU per request")


if __name__ == "__main__":
    main()
