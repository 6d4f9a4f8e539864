"""HMAC-SHA256 signing of inter-pod requests (``/internal/*`` and forwarded ``/v1``).

The signature is the hex HMAC-SHA256 of
``METHOD\\nPATH\\nTIMESTAMP\\nTARGET\\nSOURCE\\nBODY`` under the cluster secret,
sent in ``X-Cluster-Signature``, with the timestamp in ``X-Cluster-Timestamp``, the
target in ``X-Cluster-Target`` and the source in ``X-Cluster-Source``. PATH is the
request target as sent (path plus ``?query`` if any), so a query cannot be changed
either. TIMESTAMP is Unix time in integer milliseconds. TARGET is the pod id of the
receiver, so a request captured on its way to one pod is refused by every other
(each pod keeps its own replay memory, so without it a request signed for pod-1
could be replayed to pod-2 inside the window); or ``*`` (:data:`ANY_TARGET`) for the
one request that cannot know whom it reaches, the ping of a configured address (the
caller decides which routes accept ``*``: cluster/transport/routes.py ``any_target``).
SOURCE is the sender's pod id: two pods sending the same request in the same
millisecond sign two different signatures (one signature per sender, so one is
never refused as the other's replay), and a captured request cannot be passed off
as another pod's (the receiver checks the sender headers it has against it:
``X-Sardeenz-Hop`` of a forwarded ``/v1`` request, cluster/forwarding.py).

**The previous format** (no SOURCE, no ``X-Cluster-Source``) is accepted only by a
verifier built with ``accept_unsourced`` (``SARDEENZ_CLUSTER_UNSOURCED_SIGNATURES``,
for a rolling upgrade from a version without it: docs/cluster.md). Such a pod's
``Signer`` (``unsourced=True``) also signs the previous way, in
``X-Cluster-Signature``, where a previous-version pod looks, and puts the new
signature in ``X-Cluster-Source-Signature``, which a pod of this version checks
first; both signatures of such a request are remembered, so stripping the new
headers does not make a replay of it pass as an unsourced request.

Verification, in order: the headers present and well formed; the target
this pod's id or ``*`` (else ``wrong_target``); the timestamp
within ``window`` seconds of our clock (either side: clocks differ a little);
the signature equal, in constant time, to the one computed with the current
secret or, during a rotation, the previous one; the signature not seen before
within the window (a replay of a captured request is refused even while its
timestamp is still fresh). Remembered signatures are forgotten once their
timestamp leaves the window, and at most ``max_remembered`` are kept: past
that the oldest go first (a flood that large is refused by the window check
of any replay older than the entries that remain).

Two requests of one signer never share a timestamp (``Signer`` makes its
timestamps strictly increasing), so two identical legitimate requests within
one millisecond do not look like a replay of each other. Strictly increasing
only across small steps: when the wall clock is stepped back by more than
``STEP_BACK_SECONDS`` (a clock that ran ahead being corrected), the signer
follows it; pinned to the highest timestamp it ever sent, it would sign from the
future, and be refused by every pod, for as long as the clock had been ahead.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from sardeenz.asgi import ascii_int

SIGNATURE_HEADER: Final = b"x-cluster-signature"
TIMESTAMP_HEADER: Final = b"x-cluster-timestamp"
TARGET_HEADER: Final = b"x-cluster-target"
SOURCE_HEADER: Final = b"x-cluster-source"
SOURCE_SIGNATURE_HEADER: Final = b"x-cluster-source-signature"
"""The signature with SOURCE when ``X-Cluster-Signature`` holds the unsourced one."""
ANY_TARGET: Final = "*"
"""Signed for whichever pod answers (only routes that allow it accept it)."""
MAX_TARGET_CHARS: Final = 253
REPLAY_WINDOW_SECONDS: Final = 30.0
STEP_BACK_SECONDS: Final = 1.0
"""A wall clock that goes back by more than this was stepped: the signer follows it."""
SIGNATURE_HEX_CHARS: Final = 64
"""Length of the hex HMAC-SHA256 in ``X-Cluster-Signature``."""
_HEX_DIGITS: Final = b"0123456789abcdef"
MIN_SECRET_BYTES: Final = 32
"""RFC 2104 / RFC 7518 3.2: an HMAC-SHA256 key at least as long as the hash output."""

Clock = Callable[[], float]


class ClusterAuthError(Exception):
    """A request that must not be trusted; ``code`` is stable, the message says why."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def signature(
    secret: bytes,
    method: str,
    path: str,
    timestamp: str,
    target: str,
    body: bytes,
    source: str | None = None,
) -> str:
    """The hex HMAC-SHA256 of ``METHOD\\nPATH\\nTIMESTAMP\\nTARGET\\nSOURCE\\nBODY``, or
    of the previous format ``METHOD\\nPATH\\nTIMESTAMP\\nTARGET\\nBODY`` without a
    ``source``."""
    head = f"{method.upper()}\n{path}\n{timestamp}\n{target}\n"
    if source is not None:
        head += f"{source}\n"
    mac = hmac.new(secret, head.encode(), hashlib.sha256)
    mac.update(body)
    return mac.hexdigest()


def _valid_target(target: str) -> bool:
    """A pod id or ``*``: one line (a newline would let target and body trade bytes)."""
    return 0 < len(target) <= MAX_TARGET_CHARS and target.isprintable() and target.isascii()


class Signer:
    """Signs outgoing requests of pod ``source`` with the current secret.

    ``unsourced``: also sign the previous way, for pods of the previous version
    (module docstring).
    """

    def __init__(
        self,
        secret: bytes,
        clock: Clock = time.time,
        *,
        source: str,
        unsourced: bool = False,
    ) -> None:
        if not secret:
            raise ValueError("a cluster secret is required")
        if not _valid_target(source) or source == ANY_TARGET:
            raise ValueError(f"not a pod id to sign as: {source!r}")
        self._secret = secret
        self._clock = clock
        self._last_ms = 0
        self.source = source
        self._unsourced = unsourced

    def timestamp(self) -> str:
        now_ms = int(self._clock() * 1000)
        if self._last_ms - STEP_BACK_SECONDS * 1000 < now_ms <= self._last_ms:
            now_ms = self._last_ms + 1
        self._last_ms = now_ms
        return str(now_ms)

    def headers(self, method: str, path: str, body: bytes, *, target: str) -> dict[str, str]:
        """The headers to send ``method path`` with ``body`` to pod ``target``."""
        if not _valid_target(target):
            raise ValueError(f"not a pod id to sign for: {target!r}")
        ts = self.timestamp()
        sig = signature(self._secret, method, path, ts, target, body, self.source)
        out = {"X-Cluster-Timestamp": ts, "X-Cluster-Target": target}
        out["X-Cluster-Source"] = self.source
        if self._unsourced:
            out["X-Cluster-Signature"] = signature(self._secret, method, path, ts, target, body)
            out["X-Cluster-Source-Signature"] = sig
        else:
            out["X-Cluster-Signature"] = sig
        return out

    def header_block(self, method: str, path: str, body: bytes, *, target: str) -> bytes:
        """The same headers as raw ``name: value\\r\\n`` lines (the proxy's wire form)."""
        headers = self.headers(method, path, body, target=target)
        return b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items())


@dataclass(frozen=True, slots=True)
class Signed:
    """The signature's headers of one request, as received (any may be missing)."""

    timestamp: bytes | str | None
    signature: bytes | str | None
    target: bytes | str | None
    source: bytes | str | None = None
    source_signature: bytes | str | None = None

    @classmethod
    def of(cls, get: Callable[[bytes], bytes | None]) -> Signed:
        """From a header lookup (``lambda name: header(headers, name)``)."""
        return cls(
            get(TIMESTAMP_HEADER),
            get(SIGNATURE_HEADER),
            get(TARGET_HEADER),
            get(SOURCE_HEADER),
            get(SOURCE_SIGNATURE_HEADER),
        )


@dataclass(frozen=True, slots=True)
class Checked:
    """What ``check_headers`` found well formed, fresh and new."""

    timestamp: str
    sent: float
    signature: bytes
    """The signature to check: with SOURCE when ``source`` is set."""
    target: str
    source: str | None
    """The sender's pod id; None for a request signed the previous way."""
    also: bytes | None
    """The unsourced signature a dual-signed request carries too (remembered with it)."""


class Verifier:
    """Checks signed requests; remembers recent signatures to refuse replays.

    ``secrets``: the current secret first, then the previous one during a
    rotation. ``me``: this pod's id, the only target it accepts (besides ``*``).
    ``accept_unsourced``: also accept requests signed the previous way (no source),
    during a rolling upgrade. Not thread-safe: one per event loop.
    """

    def __init__(
        self,
        secrets: Iterable[bytes],
        *,
        me: str,
        window: float = REPLAY_WINDOW_SECONDS,
        clock: Clock = time.time,
        max_remembered: int = 200_000,
        accept_unsourced: bool = False,
    ) -> None:
        self._secrets = [s for s in secrets if s]
        if not self._secrets:
            raise ValueError("a cluster secret is required")
        self._me = me
        self._window = window
        self._clock = clock
        self._max = max_remembered
        self._unsourced = accept_unsourced
        self._seen: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    @property
    def remembered(self) -> int:
        return len(self._seen)

    def verify(self, method: str, path: str, signed: Signed, body: bytes) -> Checked:
        """Raise ``ClusterAuthError`` unless the request is authentic, fresh, new and for
        this pod; what was checked (its target: this pod's id or ``*``; its source)."""
        checked = self.check_headers(signed)
        ts, target, source = checked.timestamp, checked.target, checked.source
        for secret in self._secrets:
            expected = signature(secret, method, path, ts, target, body, source).encode()
            if hmac.compare_digest(expected, checked.signature):
                break
        else:
            raise ClusterAuthError("bad cluster signature", "bad_signature")
        for sig in (checked.signature, checked.also):
            if sig is not None:
                self._remember(sig.decode(), checked.sent)
        return checked

    def _remember(self, key: str, sent: float) -> None:
        if key in self._seen:
            raise ClusterAuthError("replayed request (signature already seen)", "replayed")
        self._seen[key] = sent
        heapq.heappush(self._heap, (sent, key))
        while len(self._seen) > self._max:
            _, old = heapq.heappop(self._heap)
            self._seen.pop(old, None)

    def check_headers(self, signed: Signed) -> Checked:
        """What can be checked before the body is read: the headers there and well
        formed, the target this pod, the timestamp within the window, the signature not
        seen.

        The receiving side calls this first, so an unsigned, misdirected, stale or
        replayed request is refused without its body being read (the signature covers
        the body).
        """
        if not signed.timestamp or not signed.signature or not signed.target:
            raise ClusterAuthError(
                "missing X-Cluster-Signature, X-Cluster-Timestamp or X-Cluster-Target", "unsigned"
            )
        ts_text = _text(signed.timestamp)
        for_pod = _text(signed.target)
        if not _valid_target(for_pod):
            raise ClusterAuthError("X-Cluster-Target is not a pod id", "bad_target")
        if for_pod not in (self._me, ANY_TARGET):
            raise ClusterAuthError(
                f"signed for {for_pod}, not for this pod ({self._me})", "wrong_target"
            )
        millis = ascii_int(ts_text) if len(ts_text) <= 16 else None
        if millis is None:  # ``isdigit`` alone let '²' through to a crashing ``int()``
            raise ClusterAuthError("X-Cluster-Timestamp is not Unix milliseconds", "bad_timestamp")
        source = _text(signed.source) if signed.source else None
        if source is None:
            if not self._unsourced:
                raise ClusterAuthError(
                    "missing X-Cluster-Source (a pod of a version that does not sign its "
                    "own id; see SARDEENZ_CLUSTER_UNSOURCED_SIGNATURES)",
                    "unsourced",
                )
            given, also = _hex(signed.signature), None
        elif not _valid_target(source) or source == ANY_TARGET:
            raise ClusterAuthError("X-Cluster-Source is not a pod id", "bad_source")
        elif signed.source_signature:
            given, also = _hex(signed.source_signature), _hex(signed.signature)
        else:
            given, also = _hex(signed.signature), None
        now = self._clock()
        self._forget(now)
        sent = millis / 1000.0
        if abs(now - sent) > self._window:
            raise ClusterAuthError(
                f"X-Cluster-Timestamp is {now - sent:+.1f} s off (window {self._window:g} s)",
                "stale_timestamp",
            )
        if any(sig is not None and sig.decode() in self._seen for sig in (given, also)):
            raise ClusterAuthError("replayed request (signature already seen)", "replayed")
        return Checked(ts_text, sent, given, for_pod, source, also)

    def _forget(self, now: float) -> None:
        """Drop signatures whose timestamp has left the window: they fail that check now."""
        heap, seen = self._heap, self._seen
        horizon = now - self._window
        while heap and heap[0][0] < horizon:
            _, key = heapq.heappop(heap)
            seen.pop(key, None)


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _hex(value: bytes | str) -> bytes:
    """A hex HMAC-SHA256 as sent, lowercased; ``bad_signature`` if it is not one."""
    given = _text(value).strip().lower().encode("latin-1", "replace")
    if len(given) != SIGNATURE_HEX_CHARS or given.strip(_HEX_DIGITS):
        raise ClusterAuthError("X-Cluster-Signature is not a hex HMAC-SHA256", "bad_signature")
    return given
