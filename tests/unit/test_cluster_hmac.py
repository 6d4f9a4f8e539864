"""security/cluster_hmac.py: signing, the target pod, the 30 s window, replays, rotation
(pure, fake clock)."""

from __future__ import annotations

import pytest

from sardeenz.security.cluster_hmac import (
    ANY_TARGET,
    ClusterAuthError,
    Signer,
    Verifier,
    signature,
)

SECRET = b"s" * 32
OLD = b"o" * 32
ME = "pod-b"


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def signed(
    signer: Signer,
    method: str = "POST",
    path: str = "/internal/x",
    body: bytes = b"{}",
    target: str = ME,
) -> tuple[str, str]:
    h = signer.headers(method, path, body, target=target)
    assert h["X-Cluster-Target"] == target
    return h["X-Cluster-Timestamp"], h["X-Cluster-Signature"]


def verifier_of(clock: Clock, *secrets: bytes, **kw: int) -> Verifier:
    return Verifier(list(secrets) or [SECRET], me=ME, clock=clock, **kw)


def code_of(verifier: Verifier, *args: object) -> str:
    with pytest.raises(ClusterAuthError) as info:
        verifier.verify(*args)  # type: ignore[arg-type]
    return info.value.code


def test_signature_is_hmac_sha256_over_method_path_timestamp_target_body() -> None:
    import hashlib
    import hmac

    want = hmac.new(SECRET, b"GET\n/internal/ping\n123\npod-a\nbody", hashlib.sha256).hexdigest()
    assert signature(SECRET, "GET", "/internal/ping", "123", "pod-a", b"body") == want


def test_valid_request_passes_once_then_is_a_replay() -> None:
    clock = Clock()
    signer, verifier = Signer(SECRET, clock), verifier_of(clock)
    ts, sig = signed(signer)
    assert verifier.verify("POST", "/internal/x", ts, sig, b"{}", ME) == ME
    clock.t += 10
    assert code_of(verifier, "POST", "/internal/x", ts, sig, b"{}", ME) == "replayed"
    clock.t += 25  # outside the window: refused as stale, and forgotten
    assert code_of(verifier, "POST", "/internal/x", ts, sig, b"{}", ME) == "stale_timestamp"
    assert verifier.remembered == 0


def test_a_request_signed_for_another_pod_is_refused_inside_the_window() -> None:
    """Issue 23 item 10: signed for pod-a, replayed to pod-b at once."""
    clock = Clock()
    ts, sig = signed(Signer(SECRET, clock), target="pod-a")
    verifier = verifier_of(clock)
    assert code_of(verifier, "POST", "/internal/x", ts, sig, b"{}", "pod-a") == "wrong_target"
    # claiming it was for pod-b does not match what was signed
    assert code_of(verifier, "POST", "/internal/x", ts, sig, b"{}", ME) == "bad_signature"
    assert code_of(verifier, "POST", "/internal/x", ts, sig, b"{}", None) == "unsigned"
    # the pod it was for takes it
    pod_a = Verifier([SECRET], me="pod-a", clock=clock)
    assert pod_a.verify("POST", "/internal/x", ts, sig, b"{}", "pod-a") == "pod-a"


def test_any_target_is_accepted_and_reported_as_such() -> None:
    clock = Clock()
    ts, sig = signed(Signer(SECRET, clock), "GET", "/internal/ping", b"", ANY_TARGET)
    verifier = verifier_of(clock)
    assert verifier.verify("GET", "/internal/ping", ts, sig, b"", ANY_TARGET) == ANY_TARGET


@pytest.mark.parametrize("target", ["", "a\nb", "pod\x1b[31m", "é", "x" * 254])
def test_a_target_that_is_not_one_line_of_a_pod_id_is_refused(target: str) -> None:
    clock = Clock()
    with pytest.raises(ValueError, match="pod id"):
        Signer(SECRET, clock).headers("GET", "/p", b"", target=target)
    code = code_of(verifier_of(clock), "GET", "/p", "1", "ab", b"", target)
    assert code == ("unsigned" if not target else "bad_target")


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
    assert code_of(verifier_of(clock), method, path, ts, sig, body, ME) == code


def test_missing_malformed_and_future_timestamps() -> None:
    clock = Clock()
    verifier = verifier_of(clock)
    assert code_of(verifier, "GET", "/p", None, "ab", b"", ME) == "unsigned"
    assert code_of(verifier, "GET", "/p", "12x", "ab", b"", ME) == "bad_timestamp"
    future = str(int((clock.t + 31) * 1000))
    sig = signature(SECRET, "GET", "/p", future, ME, b"")
    assert code_of(verifier, "GET", "/p", future, sig, b"", ME) == "stale_timestamp"


def test_wrong_secret_refused() -> None:
    clock = Clock()
    ts, sig = signed(Signer(b"w" * 32, clock))
    assert code_of(verifier_of(clock), "POST", "/internal/x", ts, sig, b"{}", ME) == (
        "bad_signature"
    )


def test_rotation_accepts_old_and_new_then_only_new() -> None:
    clock = Clock()
    during = verifier_of(clock, SECRET, OLD)
    for secret in (SECRET, OLD):
        ts, sig = signed(Signer(secret, clock))
        during.verify("POST", "/internal/x", ts, sig, b"{}", ME)
    after = verifier_of(clock)
    ts, sig = signed(Signer(OLD, clock))
    assert code_of(after, "POST", "/internal/x", ts, sig, b"{}", ME) == "bad_signature"


def test_same_request_twice_in_one_millisecond_is_not_a_replay() -> None:
    clock = Clock()
    signer, verifier = Signer(SECRET, clock), verifier_of(clock)
    for _ in range(3):
        ts, sig = signed(signer)
        verifier.verify("POST", "/internal/x", ts, sig, b"{}", ME)


def test_a_signer_whose_clock_was_ahead_signs_fresh_once_corrected() -> None:
    """The soak's clock jump (a pod's wall clock an hour ahead, then set right): its
    signer must not keep signing from the hour ahead, refused by every pod as stale."""
    clock, peer = Clock(), Clock()
    signer, verifier = Signer(SECRET, clock), verifier_of(peer)
    clock.t += 3600
    ahead, _ = signed(signer)
    clock.t -= 3600
    ts, sig = signed(signer)
    assert int(ts) < int(ahead)
    assert verifier.verify("POST", "/internal/x", ts, sig, b"{}", ME) == ME
    clock.t -= 0.0005  # a step back under a millisecond: still strictly increasing
    assert int(signed(signer)[0]) == int(ts) + 1


def test_memory_is_bounded() -> None:
    clock = Clock()
    signer, verifier = Signer(SECRET, clock), verifier_of(clock, max_remembered=50)
    for _ in range(200):
        ts, sig = signed(signer)
        verifier.verify("POST", "/internal/x", ts, sig, b"{}", ME)
    assert verifier.remembered == 50
    clock.t += 31
    ts, sig = signed(signer)
    verifier.verify("POST", "/internal/x", ts, sig, b"{}", ME)
    assert verifier.remembered == 1
