"""A flood of new connections, one request each: what tests and benchmarks measure RSS under.

Each connection sends ``GET path`` and closes once it has the answer. Two knobs make
the flood look like the one issue 23 item 5 reported: a share of the requests carry
a 60 KiB header (what a connection's graph then holds), and a share of the clients
read the whole answer and close with a reset (``SO_LINGER`` 0), as a client or a
proxy dropping its connections does. The resets are what uvicorn's protocol
mishandled (it kept each reset connection for its keep-alive timeout); how many
happen by chance with clean closes depends on timing, so they are sent on purpose.
"""

from __future__ import annotations

import socket
import struct
import threading

BIG_HEADER_BYTES = 60 * 1024
_LINGER_ZERO = struct.pack("ii", 1, 0)


def flood(
    host: str,
    port: int,
    connections: int,
    *,
    path: str = "/api/health/live",
    threads: int = 50,
    big_every: int = 4,
    reset_every: int = 3,
) -> int:
    """Open ``connections`` new connections from ``threads`` threads; how many got 200.

    Every ``big_every``-th request has a 60 KiB header, every ``reset_every``-th
    client reads the whole answer and resets the connection (0: none of either).
    """
    small = b"GET %s HTTP/1.1\r\nhost: t\r\nuser-agent: flood\r\n\r\n" % path.encode()
    big = b"GET %s HTTP/1.1\r\nhost: t\r\nx-big: %s\r\n\r\n" % (
        path.encode(),
        b"a" * BIG_HEADER_BYTES,
    )
    ok = [0] * threads

    def worker(index: int) -> None:
        for i in range(index, connections, threads):
            reset = bool(reset_every) and i % reset_every == 0
            with socket.create_connection((host, port), timeout=10) as sock:
                sock.sendall(big if big_every and i % big_every == 0 else small)
                answer = _read_answer(sock, whole=reset)
                ok[index] += answer.startswith(b"HTTP/1.1 200")
                if reset:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=300)
    return sum(ok)


def _read_answer(sock: socket.socket, *, whole: bool) -> bytes:
    """The answer's head, and with ``whole`` its body too (by its content-length)."""
    data = b""
    while True:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0 and (
            not whole or len(data) >= head_end + 4 + _content_length(data[:head_end])
        ):
            return data
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def _content_length(head: bytes) -> int:
    for line in head.lower().split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name == b"content-length":
            return int(value)
    return 0
