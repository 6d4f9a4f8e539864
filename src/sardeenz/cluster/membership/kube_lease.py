"""Kubernetes-mode leader election on the ``sardeenz-leader`` Lease, as a pure state machine.

No I/O and no clock of its own (every method takes ``now``, monotonic seconds
of the caller), so tests/unit/test_kube_lease.py drives it with a fake clock;
cluster/membership/kube_elector.py does the API calls it asks for. The rules (client-go's
leader election, with the same safety argument; docs/cluster.md has it in full):

* **Expiry is observed, not computed from the Lease's timestamps**: a pod
  takes the Lease when it has seen the *same* resourceVersion for
  ``leaseDurationSeconds`` on its own clock (or the holder is empty: released),
  so clocks need not agree between pods, only run at nearly the same rate.
* **Every write carries the resourceVersion it read** (an update, never a
  patch): a 409 Conflict means someone else wrote first; the pod re-reads.
* **The leader counts from when it SENT its last successful write** and steps
  down ``renew_deadline`` after it, by the clock alone (also while an API call
  hangs): any other pod saw that write no earlier than it was sent, so it
  cannot take the Lease before ``sent + duration``; ``renew_deadline <
  duration`` leaves the margin between the two.
* **Fencing term** = ``leaseTransitions + 1`` (0: no Lease seen yet), never
  decreasing: a takeover increments ``leaseTransitions``; a pod that creates
  the Lease (it was missing or deleted) starts at the newest term it has seen,
  so a recreated Lease does not go back in terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    duration: int = 15
    """``leaseDurationSeconds`` written into the Lease."""
    renew_deadline: float = 10.0
    renew_interval: float = 5.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.renew_interval < self.renew_deadline < self.duration:
            raise ValueError(
                "Kubernetes lease timing: need 0 < renew interval < renew deadline < lease "
                f"duration (got {self.renew_interval:g} < {self.renew_deadline:g} < "
                f"{self.duration})"
            )
        if not 0 < self.retry_period < self.renew_deadline:
            raise ValueError(
                "Kubernetes lease timing: the retry period must be below the renew deadline "
                f"(got {self.retry_period:g} and {self.renew_deadline:g})"
            )


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """What matters of a Lease object to the election."""

    holder: str | None
    """``holderIdentity``; None or empty: released (free to take at once)."""
    duration: int
    transitions: int
    version: str
    """``metadata.resourceVersion``: what a write must name."""

    @property
    def term(self) -> int:
        return self.transitions + 1


class Step(StrEnum):
    READ = "read"
    """GET the Lease."""
    CREATE = "create"
    """No Lease: create one held by this pod."""
    ACQUIRE = "acquire"
    """Update the Lease (with its resourceVersion) to hold it."""
    RENEW = "renew"
    """Update the Lease we hold (with its resourceVersion)."""


@dataclass(frozen=True, slots=True)
class Desired:
    """The spec a write asks for (the elector adds the wall-clock times)."""

    holder: str
    duration: int
    transitions: int
    version: str | None
    """resourceVersion to update; None: create."""
    takeover: bool
    """A new holder: ``acquireTime`` is set and ``leaseTransitions`` was incremented."""


@dataclass
class LeaseElection:
    """One pod's view of the Lease. Implements cluster/membership/leadership.py's ``Leadership``."""

    self_id: str
    timing: LeaseTiming
    term: int = 0
    size: int = 1
    record: LeaseRecord | None = None
    """The Lease as last read or written; None: unknown (read it) or missing."""
    missing: bool = False
    """The last read said 404: there is no Lease (create it)."""
    observed_at: float = float("-inf")
    """When ``record``'s resourceVersion was first seen here."""
    checked_at: float = float("-inf")
    """When the Lease was last read (whatever it said)."""
    renewed_at: float | None = None
    """As leader: when the last successful write was *sent*."""
    retry_at: float = float("-inf")
    """After a failed call: not before this."""

    # ------------------------------------------------------------- queries
    @property
    def quorum(self) -> int:
        """The Lease (etcd's own quorum) decides: no pod-level quorum in this mode."""
        return 1

    def is_leader(self, now: float) -> bool:
        return self.renewed_at is not None and now < self.renewed_at + self.timing.renew_deadline

    def deadline(self) -> float | None:
        """When this pod stops leading unless a renewal succeeds (None: not leading)."""
        return None if self.renewed_at is None else self.renewed_at + self.timing.renew_deadline

    def expires_at(self) -> float:
        """When the Lease as observed here may be taken (-inf: free now)."""
        r = self.record
        if r is None or not r.holder:
            return float("-inf")
        return self.observed_at + r.duration

    def current_leader(self, now: float) -> str | None:
        if self.is_leader(now):
            return self.self_id
        r = self.record
        if r is None or not r.holder or r.holder == self.self_id or r.term < self.term:
            return None  # (a newer term was seen elsewhere: this record is stale)
        return r.holder if now < self.expires_at() else None

    def plan(self, now: float) -> tuple[Step, float]:
        """The next call and how many seconds to wait before it."""
        wait = max(0.0, self.retry_at - now)
        r = self.record
        if r is None:
            return (Step.CREATE if self.missing else Step.READ), wait
        if self.is_leader(now):
            assert self.renewed_at is not None
            return Step.RENEW, max(wait, self.renewed_at + self.timing.renew_interval - now)
        expiry = self.expires_at()
        if r.holder == self.self_id or (now >= expiry and self.checked_at >= expiry):
            # Ours (a lapsed leadership, or this pod restarted under the same name), or
            # free: released, or seen unchanged for a whole lease duration up to a read
            # made at or after its expiry.
            return Step.ACQUIRE, wait
        # Held by another: read again a retry period after the last read, or at expiry.
        next_read = min(self.checked_at + self.timing.retry_period, expiry)
        return Step.READ, max(wait, next_read - now)

    def desired(self, step: Step) -> Desired:
        """The write for ``step`` (CREATE, ACQUIRE or RENEW)."""
        r = self.record
        if step is Step.CREATE or r is None:
            # leaseTransitions = term - 1: a new Lease opens the term after the newest seen.
            return Desired(self.self_id, self.timing.duration, self.term, None, True)
        takeover = r.holder != self.self_id
        transitions = r.transitions + 1 if takeover else r.transitions
        if transitions + 1 < self.term:  # a recreated Lease, behind a term seen elsewhere
            transitions, takeover = self.term, True
        return Desired(self.self_id, self.timing.duration, transitions, r.version, takeover)

    # ------------------------------------------------------------- changes
    def observe_term(self, term: int) -> bool:
        """A newer term seen anywhere: adopt it; a leader of an older term steps down."""
        if term <= self.term:
            return False
        self.term = term
        self.renewed_at = None
        return True

    def observed(self, record: LeaseRecord, now: float) -> None:
        """A read answered ``record``."""
        self.missing = False
        self.retry_at = float("-inf")
        self.checked_at = now
        if self.record is None or record.version != self.record.version:
            self.observed_at = now
        self.record = record
        self.observe_term(record.term)
        if record.holder != self.self_id:
            self.renewed_at = None  # someone else holds it: we do not, whatever our clock says

    def observed_missing(self, now: float) -> None:
        """A read answered 404: nobody holds a Lease; a leader stops at once (another pod
        may create one this very moment)."""
        self.record = None
        self.missing = True
        self.retry_at = float("-inf")
        self.renewed_at = None

    def written(self, record: LeaseRecord, sent_at: float, now: float) -> None:
        """A write (create, acquire, renew) sent at ``sent_at`` succeeded with ``record``."""
        self.missing = False
        self.retry_at = float("-inf")
        self.record = record
        self.observed_at = now
        self.observe_term(record.term)
        if record.holder == self.self_id and record.term >= self.term:
            self.renewed_at = sent_at

    def conflict(self, now: float) -> None:
        """A write was refused with 409 (Conflict, AlreadyExists): someone else wrote
        first. Read again at once; a leader whose renewal conflicts has lost the Lease."""
        self.record = None
        self.missing = False
        self.renewed_at = None
        self.retry_at = float("-inf")

    def failed(self, now: float, backoff: float) -> None:
        """A call failed (timeout, 5xx, 403): try again after ``backoff``. Leadership
        is untouched: the renew deadline ends it by the clock."""
        self.retry_at = now + backoff

    def released(self) -> None:
        """This pod gave the Lease up (shutdown): not leading from now on."""
        self.renewed_at = None

    def tick(self, now: float) -> None:
        if self.renewed_at is not None and not self.is_leader(now):
            self.renewed_at = None

    # ------------------------------------------------- Leadership: messages
    def accepts_order(self, term: int) -> bool:
        if term < self.term:
            return False
        self.observe_term(term)
        return True

    def on_heartbeat(self, sender: str, term: int, claims_leader: bool, now: float) -> bool:
        """Heartbeats only spread terms here: the Lease, not acknowledgements, makes leaders."""
        self.observe_term(term)
        return False

    def on_heartbeat_reply(self, peer: str, term: int, ack: bool, sent_at: float) -> None:
        self.observe_term(term)

    def would_vote(self, candidate: str, term: int, now: float) -> bool:
        return False  # no votes in Kubernetes mode: the Lease elects

    def on_vote_request(self, candidate: str, term: int, now: float) -> bool:
        return False
