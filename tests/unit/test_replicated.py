"""cluster/replicated.py: the register's rules (majority, adoption, fencing) as properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sardeenz.cluster.replicated import (
    Document,
    Verdict,
    acknowledged,
    decide,
    newest,
    quorum,
    successor,
)

docs = st.builds(
    Document,
    key=st.just("presets"),
    term=st.integers(0, 20),
    revision=st.integers(0, 50),
    body=st.integers(),
)


def test_quorum_is_the_elections_majority() -> None:
    assert [quorum(n) for n in range(1, 8)] == [1, 2, 2, 3, 3, 4, 4]
    assert quorum(0) == 1


@given(st.integers(1, 64))
def test_two_majorities_always_share_a_pod(size: int) -> None:
    # Why adoption finds every acknowledged write: the writer's majority and the
    # reader's majority cannot be disjoint.
    assert 2 * quorum(size) > size
    assert acknowledged(quorum(size), size)
    assert not acknowledged(quorum(size) - 1, size)


@given(st.lists(st.one_of(st.none(), docs), max_size=9))
def test_adoption_takes_the_highest_term_then_revision(copies: list[Document | None]) -> None:
    best = newest(copies)
    present = [d for d in copies if d is not None]
    if not present:
        assert best is None
        return
    assert best is not None
    assert best in present
    assert all(best.version >= d.version for d in present)


def test_a_newer_term_beats_a_higher_revision_of_an_older_one() -> None:
    # A deposed leader's unacknowledged write (term 1, r9) left on a minority loses to
    # what the new leader re-wrote under its term.
    lost = Document("catalog", 1, 9, "unacked")
    rewritten = successor(Document("catalog", 1, 4, "acked"), "catalog", 2, "acked")
    assert rewritten == Document("catalog", 2, 5, "acked")
    assert newest([lost, rewritten]) == rewritten


@given(docs, docs, st.integers(0, 20))
def test_a_pod_refuses_a_write_older_than_the_term_it_has_seen(
    held: Document, incoming: Document, seen: int
) -> None:
    verdict = decide(held, incoming, seen)
    if incoming.term < seen:
        assert verdict is Verdict.STALE_TERM
    elif incoming.version > held.version:
        assert verdict is Verdict.STORE
    else:
        assert verdict is Verdict.KEEP


@given(st.lists(docs, min_size=1, max_size=20), st.integers(0, 20))
def test_a_pod_only_ever_moves_forward(offers: list[Document], seen: int) -> None:
    held: Document | None = None
    for doc in offers:
        if decide(held, doc, seen) is Verdict.STORE:
            assert held is None or doc.version > held.version
            held = doc
    best = newest(d for d in offers if d.term >= seen)
    if best is None:
        assert held is None
    else:  # the newest fresh copy, or one of the same version offered first
        assert held is not None
        assert held.version == best.version


def test_the_first_write_of_a_key_is_revision_one() -> None:
    assert successor(None, "moves", 3, []) == Document("moves", 3, 1, [])


def test_a_document_from_json_refuses_unknown_keys_and_bad_numbers() -> None:
    import pytest

    assert Document.from_json({"key": "moves", "term": 1, "revision": 2, "body": []}).revision == 2
    with pytest.raises(ValueError, match="unknown document key"):
        Document.from_json({"key": "other", "term": 1, "revision": 1})
    for bad in ({"key": "moves", "term": -1, "revision": 1}, {"key": "moves", "term": "1"}):
        with pytest.raises(ValueError, match="integers"):
            Document.from_json({"revision": 1, **bad})
