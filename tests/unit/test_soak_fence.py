"""The soak's stale-term probe (testkit/soak_fence.py): which term it sends."""

from __future__ import annotations

from testkit.soak_fence import older_term


def test_the_newest_observed_term_older_than_the_pods_is_sent() -> None:
    assert older_term({1, 2, 4, 7}, 7) == 4


def test_without_an_older_observed_term_the_one_below_is_sent() -> None:
    assert older_term({5}, 5) == 4
    assert older_term(set(), 1) == 0


def test_a_pod_at_term_zero_has_nothing_older() -> None:
    assert older_term({0}, 0) is None


def test_terms_newer_than_the_pods_are_never_sent() -> None:
    """A pod behind the others (just healed) still gets an older term than its own."""
    assert older_term({3, 6, 9}, 6) == 3
