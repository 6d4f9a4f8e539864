"""Static-mode leader election and failure detection, as pure state machines.

No I/O and no clock of their own: every method takes ``now`` (monotonic
seconds of the caller), so the table-driven and property tests drive them
with a fake clock, and the asyncio driver (cluster/membership/driver.py) only moves
messages. docs/cluster.md has the protocol and the timing argument; in short:

* **Failure detector**: a pod is ``healthy`` while its last sign of life
  (a heartbeat it sent, or a reply to ours) is younger than ``suspect_after``,
  ``suspect`` until ``unavailable_after``, then ``unavailable``.
* **Bully with votes**: a pod stands for election only when it is the lowest
  pod id among the healthy pods of its view, no leader is live in its view,
  and it sees a quorum (``floor(n/2)+1`` of ``n = max(known, expected)``).
  It first asks whether a quorum *would* vote for it (pre-vote, no state
  changes anywhere); only then does it open a new term (``term + 1``). Each
  pod grants at most one vote per term (persisted by the driver), so two pods
  can never both win a term.
* **Leases**: a pod that acknowledges a leader (answers its heartbeat, or
  grants it a vote) promises not to vote for anyone else for ``D =
  unavailable_after`` seconds. The leader holds leadership only while a quorum
  acknowledged a heartbeat it *sent* less than ``E = suspect_after`` seconds
  ago (``E < D``). Any quorum that could elect a successor contains a pod
  bound by that promise, so the old leader's lease has run out on its own
  clock before a successor can win: there is never a moment with two leaders
  holding quorum, whatever the terms.
* **Fencing**: every leader act carries its term; a pod refuses anything
  with a term older than the newest it has seen, and terms never decrease.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class PeerState(StrEnum):
    HEALTHY = "healthy"
    SUSPECT = "suspect"
    UNAVAILABLE = "unavailable"


class Role(StrEnum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


def quorum(known: int, expected: int = 0) -> int:
    """``floor(n/2)+1`` of ``n = max(known, expected, 1)``: a strict majority."""
    return max(known, expected, 1) // 2 + 1


@dataclass(frozen=True, slots=True)
class Timing:
    suspect_after: float = 10.0
    """Healthy below this age; also the leader's lease ``E``."""
    unavailable_after: float = 15.0
    """Unavailable beyond this age; also a follower's no-vote promise ``D``."""
    candidacy_timeout: float = 2.0
    """A candidate that has not won within this long goes back to follower."""

    def __post_init__(self) -> None:
        if not 0 < self.suspect_after < self.unavailable_after:
            raise ValueError(
                "cluster timing: need 0 < suspect_after < unavailable_after "
                f"(got {self.suspect_after:g} and {self.unavailable_after:g})"
            )


class FailureDetector:
    """Age of the last sign of life of each peer -> healthy | suspect | unavailable."""

    def __init__(self, timing: Timing) -> None:
        self._timing = timing
        self._last: dict[str, float] = {}

    def heard(self, pod: str, now: float) -> None:
        if now > self._last.get(pod, float("-inf")):
            self._last[pod] = now

    def forget(self, pod: str) -> None:
        self._last.pop(pod, None)

    def last_heard(self, pod: str) -> float | None:
        return self._last.get(pod)

    def state(self, pod: str, now: float) -> PeerState:
        last = self._last.get(pod)
        if last is None:
            return PeerState.UNAVAILABLE
        age = now - last
        if age < self._timing.suspect_after:
            return PeerState.HEALTHY
        if age <= self._timing.unavailable_after:
            return PeerState.SUSPECT
        return PeerState.UNAVAILABLE

    def pods(self) -> list[str]:
        return sorted(self._last)

    def healthy(self, now: float) -> set[str]:
        return {p for p in self._last if self.state(p, now) is PeerState.HEALTHY}


@dataclass
class Election:
    """One pod's view of the election. See the module docstring."""

    self_id: str
    timing: Timing
    term: int = 0
    voted_for: str | None = None
    """Whom this pod voted for in ``term`` (persisted with ``term`` by the driver)."""
    role: Role = Role.FOLLOWER
    leader: str | None = None
    """The leader of ``term`` as far as this pod knows (itself when leading)."""
    no_vote_until: float = float("-inf")
    """This pod promised a leader (or a candidate it voted for) not to vote for
    anyone else before this time."""
    size: int = 1
    """``max(known pods, CLUSTER_EXPECTED_PODS)``: the quorum's base."""
    acks: dict[str, float] = field(default_factory=dict)
    """As candidate or leader: peer -> send time of the newest message of ours
    (vote request or heartbeat) that it acknowledged in ``term``."""
    candidate_since: float = 0.0
    bound_to: str | None = None
    """Whom the promise in ``no_vote_until`` was made to."""

    # ------------------------------------------------------------- queries
    @property
    def quorum(self) -> int:
        return quorum(self.size)

    def acked_since(self, since: float) -> int:
        """Pods (this one included) that acknowledged a message we sent after ``since``."""
        return 1 + sum(1 for sent in self.acks.values() if sent > since)

    def is_leader(self, now: float) -> bool:
        """Leader with a live lease: a quorum acked a message sent less than E ago."""
        if self.role is not Role.LEADER:
            return False
        return self.acked_since(now - self.timing.suspect_after) >= self.quorum

    def current_leader(self, now: float) -> str | None:
        """The leader this pod believes in now, or None (also while one is being elected)."""
        if self.role is Role.LEADER:
            return self.self_id if self.is_leader(now) else None
        if self.leader is not None and now < self.no_vote_until:
            return self.leader
        return None

    def should_stand(self, now: float, healthy_peers: set[str]) -> bool:
        """Bully: lowest healthy id, no live leader in view, and a quorum in view."""
        if self.role is not Role.FOLLOWER or now < self.no_vote_until:
            return False
        if any(p < self.self_id for p in healthy_peers):
            return False
        return 1 + len(healthy_peers - {self.self_id}) >= self.quorum

    # ------------------------------------------------------------- changes
    def observe_term(self, term: int) -> bool:
        """A newer term seen anywhere: adopt it and stop leading. True if it was newer."""
        if term <= self.term:
            return False
        self.term = term
        self.voted_for = None
        self.role = Role.FOLLOWER
        self.leader = None
        self.acks = {}
        return True

    def tick(self, now: float) -> None:
        """Step down when the lease has run out; give up a candidacy that took too long."""
        if self.role is Role.LEADER and not self.is_leader(now):
            self.role = Role.FOLLOWER
            self.leader = None
            self.acks = {}
        elif (
            self.role is Role.CANDIDATE
            and now - self.candidate_since > self.timing.candidacy_timeout
        ):
            self.role = Role.FOLLOWER
            self.acks = {}

    def start_election(self, now: float) -> int:
        """Stand in a new term (voting for ourselves); returns the term to ask votes for."""
        self.term += 1
        self.voted_for = self.self_id
        self.role = Role.CANDIDATE
        self.leader = None
        self.acks = {}
        self.candidate_since = now
        if self.quorum <= 1:  # a cluster of one (expected size 1): ours is the only vote
            self.role = Role.LEADER
            self.leader = self.self_id
        return self.term

    def would_vote(self, candidate: str, term: int, now: float) -> bool:
        """Pre-vote: would ``candidate`` get our vote in ``term``? Changes nothing.

        A pod asks this of the others before it opens a term. Without it, a
        pod that reconnects after a partition (and so sees a quorum before it
        hears the leader) would open a term nobody grants, and the higher term,
        carried by its heartbeats, would depose a leader that holds its quorum.
        """
        if self.is_leader(now):
            return False
        if now < self.no_vote_until and self.bound_to != candidate:
            return False
        return term > self.term or (term == self.term and self.voted_for in (None, candidate))

    def on_vote_request(self, candidate: str, term: int, now: float) -> bool:
        """Grant or refuse ``candidate`` a vote for ``term``.

        Refused without adopting the term while this pod is bound to another
        pod (a live leader it acknowledged, or a candidate it voted for): a pod
        that cannot see the leader must not depose it by raising everyone's
        term (the Raft "pre-vote" concern), and the promise is what makes the
        leader's lease safe.
        """
        if term < self.term or self.is_leader(now):
            return False
        if now < self.no_vote_until and self.bound_to != candidate:
            return False
        self.observe_term(term)
        if self.voted_for not in (None, candidate):
            return False
        self.voted_for = candidate
        self._bind(candidate, now)
        return True

    def on_vote_reply(self, peer: str, term: int, granted: bool, sent_at: float) -> bool:
        """A vote came back; True when it made this pod the leader."""
        if self.observe_term(term) or self.role is not Role.CANDIDATE or term != self.term:
            return False
        if granted:
            self.acks[peer] = max(sent_at, self.acks.get(peer, sent_at))
            if len(self.acks) + 1 >= self.quorum:
                self.role = Role.LEADER
                self.leader = self.self_id
                return True
        return False

    def on_heartbeat(self, sender: str, term: int, claims_leader: bool, now: float) -> bool:
        """A peer's heartbeat; returns whether we acknowledge it as our leader.

        A leader of a newer term has already won a quorum, so acknowledging it
        breaks no promise made in an older term (promises bind *votes*).
        """
        if term < self.term:
            return False
        newer = self.observe_term(term)
        if not claims_leader or sender == self.self_id or self.role is Role.LEADER:
            return False  # a rival leader in our own term cannot exist (one vote per term)
        if not newer and self.voted_for not in (None, sender):
            return False
        self.role = Role.FOLLOWER
        self.leader = sender
        self._bind(sender, now)
        return True

    def _bind(self, pod: str, now: float) -> None:
        """Promise ``pod`` not to vote for anyone else for ``D`` seconds."""
        until = now + self.timing.unavailable_after
        if self.bound_to == pod:
            self.no_vote_until = max(self.no_vote_until, until)
        else:
            self.bound_to = pod
            self.no_vote_until = until

    def on_heartbeat_reply(self, peer: str, term: int, ack: bool, sent_at: float) -> None:
        """A reply to a heartbeat we sent at ``sent_at``: an ack extends our lease."""
        if self.observe_term(term):
            return
        if ack and self.role is Role.LEADER and term == self.term:
            self.acks[peer] = max(sent_at, self.acks.get(peer, sent_at))

    def accepts_order(self, term: int) -> bool:
        """Fencing: a leader order is refused if its term is older than ours."""
        if term < self.term:
            return False
        self.observe_term(term)
        return True
