"""Request bodies read before their sender is verified: one budget for all of them.

Why: a cluster-signed request (``/internal/*``, a ``/v1`` request another pod
forwarded) can only be verified once its body is read, since the signature covers
the body. The headers are checked first (security/cluster_hmac.py
``Verifier.check_headers``: present, well formed, fresh, not seen), but a caller
without the secret can still send a plausible timestamp and 64 random hex digits.
Each such body is bounded by its path's limit; this bounds them all together, so
fifty connections of 8 MiB each cannot make the controller hold 400 MiB (measured
before this budget). Every other path authenticates from the headers before any
body byte is read (gateway.py, proxy/fastlane.py).

What: ``UnverifiedBodies.read`` counts the bytes of a body as they arrive against
the node-wide budget (``SARDEENZ_UNVERIFIED_BODY_BYTES``); a body that would go
past it is refused (503 ``unverified_bodies_full``, with ``Retry-After``) and the
bytes read so far are dropped. The bytes count until ``verify`` has run on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

from sardeenz.asgi import Receive

DEFAULT_LIMIT: Final = 32 * 2**20
"""``SARDEENZ_UNVERIFIED_BODY_BYTES``'s default."""
T = TypeVar("T")


class BodyRefused(Exception):
    """The body was not (completely) read; ``status``/``code`` say why."""

    def __init__(self, status: int, detail: str, code: str) -> None:
        super().__init__(detail)
        self.status, self.detail, self.code = status, detail, code


class UnverifiedBodies:
    """The node-wide count of body bytes held before verification; one per process."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    async def read(
        self, receive: Receive, limit: int, verify: Callable[[bytes], T]
    ) -> tuple[bytes, T]:
        """The whole body (at most ``limit`` bytes) and what ``verify(body)`` returned.

        Raises ``BodyRefused`` (413 over ``limit``, 503 over the budget, 499 when the
        client went away) or whatever ``verify`` raises.
        """
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise BodyRefused(499, "client went away", "client_closed")
                data: bytes = message.get("body", b"")
                if data:
                    if size + len(data) > limit:
                        raise BodyRefused(
                            413, f"body larger than {limit} bytes", "payload_too_large"
                        )
                    if self.held + len(data) > self.limit:
                        raise BodyRefused(
                            503,
                            "too many unverified request bodies at once "
                            f"(SARDEENZ_UNVERIFIED_BODY_BYTES={self.limit})",
                            "unverified_bodies_full",
                        )
                    self.held += len(data)
                    size += len(data)
                    chunks.append(data)
                if not message.get("more_body", False):
                    break
            body = b"".join(chunks)
            chunks.clear()
            return body, verify(body)
        finally:
            self.held -= size
