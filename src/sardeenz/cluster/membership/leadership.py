"""What the rest of a pod asks of the election, whichever mode elects.

Static mode elects with heartbeat votes (cluster/membership/election.py ``Election``),
Kubernetes mode with a Lease (cluster/membership/kube_lease.py ``LeaseElection``). The
Membership, the ``/internal`` handlers and the heartbeat driver only use
this interface: who leads now, the fencing term, and what to do with the term
and leader claims that heartbeats and orders carry. The Bully-only steps
(standing, pre-votes, vote replies) stay on ``Election`` and run in static mode
only.
"""

from __future__ import annotations

from typing import Protocol


class Leadership(Protocol):
    term: int
    """Fencing term: the newest seen anywhere; never decreases."""
    size: int
    """Pods known (membership keeps it current)."""

    @property
    def quorum(self) -> int: ...

    def is_leader(self, now: float) -> bool: ...

    def current_leader(self, now: float) -> str | None: ...

    def tick(self, now: float) -> None:
        """Step down when leadership has run out (by the clock alone)."""

    def observe_term(self, term: int) -> bool: ...

    def accepts_order(self, term: int) -> bool:
        """Fencing: False for an order older than the newest term seen."""

    def on_heartbeat(self, sender: str, term: int, claims_leader: bool, now: float) -> bool:
        """A peer's heartbeat; True acknowledges it as leader (static mode's lease)."""

    def on_heartbeat_reply(self, peer: str, term: int, ack: bool, sent_at: float) -> None: ...

    def would_vote(self, candidate: str, term: int, now: float) -> bool: ...

    def on_vote_request(self, candidate: str, term: int, now: float) -> bool: ...
