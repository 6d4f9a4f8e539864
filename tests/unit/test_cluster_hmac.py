"""security/cluster_hmac.py: signing, the 30 s window, replays, rotation (pure, fake clock)."""

from __future__ import annotations

import pytest

from sardeenz.security.cluster_hmac import ClusterAuthError, Signer, Verifier, signature

SECRET = b"s" * 32
OLD = b"o" * 32


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def signed(
    signer: Signer, method: str = "POST", path: str = "/internal/x", body: bytes = b"{}"
) -> tuple[str, str]:
    h = signer.headers(method, path, body)
    return h["X-Cluster-Timestamp"], h["X-Cluster-Signature"]


def code_of(verifier: Verifier, *args: object) -> str:
    with pytest.raises(ClusterAuthError) as info:
        verifier.verify(*args)  # type: ignore[arg-type]
    return info.value.code


def test_signature_is_hmac_sha256_over_method_path_timestamp_body() -> None:
    import hashlib
    import hmac

    want = hmac.new(SECRET, b"GET\n/internal/ping\n123\nbody", hashlib.sha256).hexdigest()
    assert signature(SECRET, "GET", "/internal/ping", "123", b"body") == want


def test_valid_request_passes_once_then_is_a_replay() -> None:
    clock = Clock()
    signer, verifier = Signer(SECRET, clock), Verifier([SECRET], clock=clock)
    ts, sig = signed(signer)
    verifier.verify("POST", "/internal/x", ts, sig, b"{}")
    clock.t += 10
    assert code_of(verifier, "POST", "/internal/x", ts, sig, b"{}") == "replayed"
    clock.t += 25  # outside the window: refused as stale, and forgotten
    assert code_of(verifier, "POST", "/internal/x", ts, sig, b"{}") == "stale_timestamp"
    assert verifier.remembered == 0


@pytest.mark.parametrize(
    ("method", "path", "body", "code"),
    [
        ("POST", "/internal/x", b"{ }", "bad_signature"),  # tampered body
        ("POST", "/internal/y", b"{}", "bad_signature"),  # other path
        ("GET", "/internal/x", b"{}", "bad_signature"),  # other method
    ],
)
def test_any_change_breaks_the_signature(method: str, path: str, body: bytes, code: str) -> None:
    clock = Clock()
    ts, sig = signed(Signer(SECRET, clock))
    assert code_of(Verifier([SECRET], clock=clock), method, path, ts, sig, body) == code


def test_missing_malformed_and_future_timestamps() -> None:
    clock = Clock()
    verifier = Verifier([SECRET], clock=clock)
    assert code_of(verifier, "GET", "/p", None, "ab", b"") == "unsigned"
    assert code_of(verifier, "GET", "/p", "12x", "ab", b"") == "bad_timestamp"
    future = str(int((clock.t + 31) * 1000))
    sig = signature(SECRET, "GET", "/p", future, b"")
    assert code_of(verifier, "GET", "/p", future, sig, b"") == "stale_timestamp"


def test_wrong_secret_refused() -> None:
    clock = Clock()
    ts, sig = signed(Signer(b"w" * 32, clock))
    assert code_of(Verifier([SECRET], clock=clock), "POST", "/internal/x", ts, sig, b"{}") == (
        "bad_signature"
    )


def test_rotation_accepts_old_and_new_then_only_new() -> None:
    clock = Clock()
    during = Verifier([SECRET, OLD], clock=clock)
    for secret in (SECRET, OLD):
        ts, sig = signed(Signer(secret, clock))
        during.verify("POST", "/internal/x", ts, sig, b"{}")
    after = Verifier([SECRET], clock=clock)
    ts, sig = signed(Signer(OLD, clock))
    assert code_of(after, "POST", "/internal/x", ts, sig, b"{}") == "bad_signature"


def test_same_request_twice_in_one_millisecond_is_not_a_replay() -> None:
    clock = Clock()
    signer, verifier = Signer(SECRET, clock), Verifier([SECRET], clock=clock)
    for _ in range(3):
        ts, sig = signed(signer)
        verifier.verify("POST", "/internal/x", ts, sig, b"{}")


def test_memory_is_bounded() -> None:
    clock = Clock()
    signer, verifier = Signer(SECRET, clock), Verifier([SECRET], clock=clock, max_remembered=50)
    for _ in range(200):
        ts, sig = signed(signer)
        verifier.verify("POST", "/internal/x", ts, sig, b"{}")
    assert verifier.remembered == 50
    clock.t += 31
    ts, sig = signed(signer)
    verifier.verify("POST", "/internal/x", ts, sig, b"{}")
    assert verifier.remembered == 1
