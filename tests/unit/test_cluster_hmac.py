"""security/cluster_hmac.py: signing, the target and source pods, the 30 s window, replays,
rotation, the previous format during a rolling upgrade (pure, fake clock)."""

from __future__ import annotations

from typing import Any

import pytest

from sardeenz.security.cluster_hmac import (
    ANY_TARGET,
    ClusterAuthError,
    Signed,
    Signer,
    Verifier,
    signature,
)

SECRET = b"s" * 32
OLD = b"o" * 32
ME = "pod-b"
SENDER = "pod-a"


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
) -> Signed:
    h = signer.headers(method, path, body, target=target)
    assert h["X-Cluster-Target"] == target
    assert h["X-Cluster-Source"] == signer.source
    return Signed.of(lambda name: v.encode() if (v := _lower(h).get(name)) else None)


def _lower(headers: dict[str, str]) -> dict[bytes, str]:
    return {k.lower().encode(): v for k, v in headers.items()}


def signer_of(clock: Clock, secret: bytes = SECRET, source: str = SENDER, **kw: bool) -> Signer:
    return Signer(secret, clock, source=source, **kw)


def verifier_of(clock: Clock, *secrets: bytes, **kw: Any) -> Verifier:
    return Verifier(list(secrets) or [SECRET], me=ME, clock=clock, **kw)


def code_of(verifier: Verifier, method: str, path: str, sig: Signed, body: bytes) -> str:
    with pytest.raises(ClusterAuthError) as info:
        verifier.verify(method, path, sig, body)
    return info.value.code


def test_signature_is_hmac_sha256_over_method_path_timestamp_target_source_body() -> None:
    import hashlib
    import hmac

    head = b"GET\n/internal/ping\n123\npod-a\npod-b\nbody"
    want = hmac.new(SECRET, head, hashlib.sha256).hexdigest()
    assert signature(SECRET, "GET", "/internal/ping", "123", "pod-a", b"body", "pod-b") == want
    previous = hmac.new(SECRET, b"GET\n/internal/ping\n123\npod-a\nbody", hashlib.sha256)
    assert signature(SECRET, "GET", "/internal/ping", "123", "pod-a", b"body") == (
        previous.hexdigest()
    )


def test_valid_request_passes_once_then_is_a_replay() -> None:
    clock = Clock()
    signer, verifier = signer_of(clock), verifier_of(clock)
    sig = signed(signer)
    checked = verifier.verify("POST", "/internal/x", sig, b"{}")
    assert (checked.target, checked.source) == (ME, SENDER)
    clock.t += 10
    assert code_of(verifier, "POST", "/internal/x", sig, b"{}") == "replayed"
    clock.t += 25  # outside the window: refused as stale, and forgotten
    assert code_of(verifier, "POST", "/internal/x", sig, b"{}") == "stale_timestamp"
    assert verifier.remembered == 0


def test_two_pods_sending_the_same_request_in_the_same_millisecond_both_pass() -> None:
    """The replay memory is per receiver and keyed by signature: without the source in
    it, pod-a's and pod-c's identical requests (same path, body, target, millisecond)
    had one signature, and the second was refused as a replay of the first."""
    clock = Clock()
    verifier = verifier_of(clock)
    from_a = signed(signer_of(clock, source="pod-a"))
    from_c = signed(signer_of(clock, source="pod-c"))
    assert from_a.timestamp == from_c.timestamp
    assert verifier.verify("POST", "/internal/x", from_a, b"{}").source == "pod-a"
    assert verifier.verify("POST", "/internal/x", from_c, b"{}").source == "pod-c"


def test_a_request_cannot_be_passed_off_as_another_pods() -> None:
    clock = Clock()
    sig = signed(signer_of(clock, source="pod-a"))
    as_c = Signed(sig.timestamp, sig.signature, sig.target, b"pod-c")
    assert code_of(verifier_of(clock), "POST", "/internal/x", as_c, b"{}") == "bad_signature"
    for bad in (b"*", b"a\nb", b"x" * 254):
        odd = Signed(sig.timestamp, sig.signature, sig.target, bad)
        assert code_of(verifier_of(clock), "POST", "/internal/x", odd, b"{}") == "bad_source"
    with pytest.raises(ValueError, match="pod id"):
        signer_of(clock, source="*")


def test_a_request_signed_for_another_pod_is_refused_inside_the_window() -> None:
    """Issue 23 item 10: signed for pod-a, replayed to pod-b at once."""
    clock = Clock()
    sig = signed(signer_of(clock, source="pod-c"), target="pod-a")
    verifier = verifier_of(clock)
    assert code_of(verifier, "POST", "/internal/x", sig, b"{}") == "wrong_target"
    # claiming it was for pod-b does not match what was signed
    for_me = Signed(sig.timestamp, sig.signature, ME.encode(), sig.source)
    assert code_of(verifier, "POST", "/internal/x", for_me, b"{}") == "bad_signature"
    no_target = Signed(sig.timestamp, sig.signature, None, sig.source)
    assert code_of(verifier, "POST", "/internal/x", no_target, b"{}") == "unsigned"
    # the pod it was for takes it
    pod_a = Verifier([SECRET], me="pod-a", clock=clock)
    assert pod_a.verify("POST", "/internal/x", sig, b"{}").target == "pod-a"


def test_any_target_is_accepted_and_reported_as_such() -> None:
    clock = Clock()
    sig = signed(signer_of(clock), "GET", "/internal/ping", b"", ANY_TARGET)
    verifier = verifier_of(clock)
    assert verifier.verify("GET", "/internal/ping", sig, b"").target == ANY_TARGET


@pytest.mark.parametrize("target", ["", "a\nb", "pod\x1b[31m", "é", "x" * 254])
def test_a_target_that_is_not_one_line_of_a_pod_id_is_refused(target: str) -> None:
    clock = Clock()
    with pytest.raises(ValueError, match="pod id"):
        signer_of(clock).headers("GET", "/p", b"", target=target)
    code = code_of(verifier_of(clock), "GET", "/p", Signed("1", "ab", target, SENDER), b"")
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
    sig = signed(signer_of(clock))
    assert code_of(verifier_of(clock), method, path, sig, body) == code


def test_missing_malformed_and_future_timestamps() -> None:
    clock = Clock()
    verifier = verifier_of(clock)
    assert code_of(verifier, "GET", "/p", Signed(None, "ab", ME, SENDER), b"") == "unsigned"
    hex64 = "a" * 64
    assert code_of(verifier, "GET", "/p", Signed("12x", hex64, ME, SENDER), b"") == (
        "bad_timestamp"
    )
    future = str(int((clock.t + 31) * 1000))
    sig = signature(SECRET, "GET", "/p", future, ME, b"", SENDER)
    assert code_of(verifier, "GET", "/p", Signed(future, sig, ME, SENDER), b"") == (
        "stale_timestamp"
    )


def test_wrong_secret_refused() -> None:
    clock = Clock()
    sig = signed(signer_of(clock, b"w" * 32))
    assert code_of(verifier_of(clock), "POST", "/internal/x", sig, b"{}") == "bad_signature"


def test_rotation_accepts_old_and_new_then_only_new() -> None:
    clock = Clock()
    during = verifier_of(clock, SECRET, OLD)
    for secret in (SECRET, OLD):
        during.verify("POST", "/internal/x", signed(signer_of(clock, secret)), b"{}")
    after = verifier_of(clock)
    sig = signed(signer_of(clock, OLD))
    assert code_of(after, "POST", "/internal/x", sig, b"{}") == "bad_signature"


def test_same_request_twice_in_one_millisecond_is_not_a_replay() -> None:
    clock = Clock()
    signer, verifier = signer_of(clock), verifier_of(clock)
    for _ in range(3):
        verifier.verify("POST", "/internal/x", signed(signer), b"{}")


def _ms(sig: Signed) -> int:
    assert sig.timestamp is not None
    return int(sig.timestamp)


def test_a_signer_whose_clock_was_ahead_signs_fresh_once_corrected() -> None:
    """The soak's clock jump (a pod's wall clock an hour ahead, then set right): its
    signer must not keep signing from the hour ahead, refused by every pod as stale."""
    clock, peer = Clock(), Clock()
    signer, verifier = signer_of(clock), verifier_of(peer)
    clock.t += 3600
    ahead = signed(signer)
    clock.t -= 3600
    now = signed(signer)
    assert _ms(now) < _ms(ahead)
    assert verifier.verify("POST", "/internal/x", now, b"{}").target == ME
    clock.t -= 0.0005  # a step back under a millisecond: still strictly increasing
    assert _ms(signed(signer)) == _ms(now) + 1


def test_memory_is_bounded() -> None:
    clock = Clock()
    signer, verifier = signer_of(clock), verifier_of(clock, max_remembered=50)
    for _ in range(200):
        verifier.verify("POST", "/internal/x", signed(signer), b"{}")
    assert verifier.remembered == 50
    clock.t += 31
    verifier.verify("POST", "/internal/x", signed(signer), b"{}")
    assert verifier.remembered == 1


def test_the_previous_format_only_during_a_rolling_upgrade() -> None:
    """A pod of the previous version signs without a source: refused by default
    (``unsourced``), accepted by a verifier in the transition."""
    clock = Clock()
    ts = signer_of(clock).timestamp()
    old = Signed(ts, signature(SECRET, "POST", "/internal/x", ts, ME, b"{}"), ME)
    assert code_of(verifier_of(clock), "POST", "/internal/x", old, b"{}") == "unsourced"
    upgrading = Verifier([SECRET], me=ME, clock=clock, accept_unsourced=True)
    checked = upgrading.verify("POST", "/internal/x", old, b"{}")
    assert (checked.target, checked.source) == (ME, None)
    assert code_of(upgrading, "POST", "/internal/x", old, b"{}") == "replayed"


def test_a_pod_in_the_transition_signs_so_that_both_versions_accept() -> None:
    clock = Clock()
    dual = signer_of(clock, unsourced=True)
    h = dual.headers("POST", "/internal/x", b"{}", target=ME)
    ts = h["X-Cluster-Timestamp"]
    # What a previous-version pod checks: X-Cluster-Signature without a source.
    assert h["X-Cluster-Signature"] == signature(SECRET, "POST", "/internal/x", ts, ME, b"{}")
    assert h["X-Cluster-Source-Signature"] == signature(
        SECRET, "POST", "/internal/x", ts, ME, b"{}", SENDER
    )
    sig = signed(dual)
    for verifier in (verifier_of(clock), verifier_of(clock, accept_unsourced=True)):
        assert verifier.verify("POST", "/internal/x", sig, b"{}").source == SENDER
    # Stripped of its source, a captured one is still a replay of the same request.
    upgrading = Verifier([SECRET], me=ME, clock=clock, accept_unsourced=True)
    both = signed(dual)
    upgrading.verify("POST", "/internal/x", both, b"{}")
    stripped = Signed(both.timestamp, both.signature, both.target)
    assert code_of(upgrading, "POST", "/internal/x", stripped, b"{}") == "replayed"
