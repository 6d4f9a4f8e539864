"""The soak's control-state-agrees judgement (testkit/soak.py ``unsettled_documents``):
copies that were caught mid-write settle, copies that stay apart do not."""

from __future__ import annotations

from testkit.soak import unsettled_documents

OLD, NEW, NEWER = (12, 107), (12, 108), (12, 109)


def _sample(
    a: tuple[int, int], b: tuple[int, int], c: tuple[int, int]
) -> dict[str, dict[str, tuple[int, int]]]:
    return {
        "pod-a": {"catalog": (12, 73), "moves": a},
        "pod-b": {"catalog": (12, 73), "moves": b},
        "pod-c": {"catalog": (12, 73), "moves": c},
    }


def test_copies_seen_equal_once_have_settled() -> None:
    assert unsettled_documents([_sample(OLD, OLD, NEW), _sample(NEW, NEW, NEW)]) == {}


def test_a_write_the_others_catch_up_with_settles_though_the_leader_writes_again() -> None:
    """run61 at 256.88 s: the leader (pod-c) a write ahead in every sample, as a move
    writes its document at each step; the others reach what it had at the start."""
    samples = [_sample(OLD, OLD, NEW), _sample(NEW, OLD, NEWER), _sample(NEWER, NEW, (12, 110))]
    assert unsettled_documents(samples) == {}


def test_a_single_sample_straddling_a_write_has_not_settled_yet() -> None:
    assert unsettled_documents([_sample(OLD, OLD, NEW)]) == {
        "moves": {"pod-a": OLD, "pod-b": OLD, "pod-c": NEW}
    }


def test_a_copy_that_stays_behind_is_apart() -> None:
    samples = [_sample(OLD, OLD, NEW), _sample(NEW, OLD, NEW), _sample(NEWER, OLD, NEWER)]
    assert unsettled_documents(samples) == {"moves": {"pod-a": NEWER, "pod-b": OLD, "pod-c": NEWER}}


def test_a_write_the_others_never_get_is_apart() -> None:
    """A pod that applied a write nobody else saw (its copy ahead for the whole bound)."""
    samples = [_sample(OLD, OLD, NEW)] * 20
    assert set(unsettled_documents(samples)) == {"moves"}


def test_a_copy_missing_a_document_is_apart() -> None:
    first = _sample(OLD, OLD, OLD)
    del first["pod-b"]["moves"]
    assert unsettled_documents([first, first]) == {
        "moves": {"pod-a": OLD, "pod-b": None, "pod-c": OLD}
    }


def test_the_api_servers_copy_is_one_to_reach() -> None:
    """Kubernetes mode adds the ConfigMaps as a copy: pods that agree with each other
    but not with the API server for the whole bound are apart."""
    sample = {**_sample(OLD, OLD, OLD), "(API server)": {"catalog": (12, 73), "moves": NEW}}
    assert set(unsettled_documents([sample] * 5)) == {"moves"}
