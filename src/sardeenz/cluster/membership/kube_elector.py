"""Kubernetes-mode election: the task that makes the Lease calls kube_lease.py plans.

Reads the ``sardeenz-leader`` Lease (followers every retry period, or right
when it would expire), creates it when missing, takes it over (update with the
resourceVersion read, ``leaseTransitions + 1``) when it is free or expired, and
renews it while leading; at shutdown the leader releases it (empty holder), so
another pod takes over within a retry period instead of a lease duration.

Every call has the API timeout; a failure is retried after a backoff (the
retry period while leading, so a renewal is retried before the deadline;
doubling up to 30 s otherwise); a 409 means re-read at once; a 403 becomes
the RBAC warning of cluster/membership/kube_api.py (an update refused while the Lease is
gone is the API server's create-on-update check: the warning is then create's).
Leadership itself ends by the clock (kube_lease.py), never by waiting for a call.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from sardeenz.cluster.membership.kube_api import LEASE_NAME, KubeApi, describe, status_code
from sardeenz.cluster.membership.kube_lease import Desired, LeaseElection, LeaseRecord, Step
from sardeenz.tasks import await_within

if TYPE_CHECKING:
    from sardeenz.cluster.membership.service import Membership

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 30.0
VERB = {Step.READ: "get", Step.CREATE: "create", Step.ACQUIRE: "update", Step.RENEW: "update"}


def lease_record(lease: Any) -> LeaseRecord:
    """A ``V1Lease`` as the state machine sees it."""
    spec = lease.spec
    return LeaseRecord(
        holder=spec.holder_identity or None if spec is not None else None,
        duration=int(spec.lease_duration_seconds or 0) if spec is not None else 0,
        transitions=int(spec.lease_transitions or 0) if spec is not None else 0,
        version=str(lease.metadata.resource_version),
    )


class LeaseElector:
    def __init__(self, membership: Membership, api: KubeApi, state: LeaseElection) -> None:
        self._m = membership
        self._api = api
        self._st = state
        self._failures = 0
        self._acquired: dt.datetime | None = None
        """``acquireTime`` of the Lease as last seen (a replace must carry it on)."""

    async def run(self) -> None:
        m, st = self._m, self._st
        while True:
            try:
                step, wait = st.plan(m.now())
                if wait > 0:
                    # Never sleep past a retry period: a term seen meanwhile can change the plan.
                    await asyncio.sleep(min(wait, st.timing.retry_period))
                    continue
                await self._do(step)
                m.note_leadership()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad round must not end the election
                log.exception("Kubernetes lease round failed")
                st.failed(m.now(), st.timing.retry_period)

    async def _do(self, step: Step) -> None:
        m, st, api = self._m, self._st, self._api
        sent = m.now()
        desired = st.desired(step) if step is not Step.READ else None
        try:
            if desired is None:
                lease = await api.read_lease()
            elif step is Step.CREATE:
                lease = await api.create_lease(self._body(desired))
            else:
                lease = await api.replace_lease(self._body(desired))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            update = step in (Step.ACQUIRE, Step.RENEW)
            if update and status_code(exc) == 403 and await self._lease_gone():
                st.observed_missing(m.now())  # next: CREATE, whose own 403 is create's
                return
            self._failed(step, exc)
            return
        self._failures = 0
        api.allowed(VERB[step], "leases")
        if step is not Step.CREATE:
            api.not_needed("create", "leases", "the Lease exists")
        self._acquired = lease.spec.acquire_time if lease.spec is not None else None
        record = lease_record(lease)
        if desired is None:
            st.observed(record, m.now())
            if st.plan(m.now())[0] is Step.READ:
                # Held by a live leader: no write to make now, so a refused take-over of
                # before (a Role fixed since, or another pod won) is no problem any more.
                api.not_needed("update", "leases", f"the Lease is held by {record.holder}")
            return
        st.written(record, sent, m.now())
        if desired.takeover:
            log.warning(
                "cluster: took the Lease %s/%s (leaseTransitions %d, term %d)",
                api.namespace,
                LEASE_NAME,
                record.transitions,
                record.term,
            )

    async def _lease_gone(self) -> bool:
        """After a 403 on an update: is the Lease missing? The API server turns an update
        of a missing Lease into a create and checks the *create* permission, so the 403
        then means a Role without ``create``, not without ``update``."""
        try:
            await self._api.read_lease()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if status_code(exc) == 404:
                self._api.allowed("get", "leases")
                return True
        return False

    def _failed(self, step: Step, exc: BaseException) -> None:
        m, st, api = self._m, self._st, self._api
        now = m.now()
        status = status_code(exc)
        if status == 404:  # no Lease (a read), or deleted under an update
            if step is Step.READ:
                api.allowed("get", "leases")
            st.observed_missing(now)
            return
        if status == 409:  # someone else wrote first: read again
            log.info("cluster: Lease %s refused with 409 (someone else wrote): re-reading", step)
            st.conflict(now)
            return
        if status == 403:
            api.forbidden(VERB[step], "leases", exc)
        else:
            log.warning("cluster: Lease %s failed: %s", step, describe(exc))
        self._failures += 1
        if st.is_leader(now):
            backoff = st.timing.retry_period  # retry before the deadline
        else:
            backoff = min(MAX_BACKOFF_SECONDS, st.timing.retry_period * 2 ** (self._failures - 1))
        st.failed(now, backoff)

    def _body(self, d: Desired) -> Any:
        from kubernetes_asyncio import client

        now = dt.datetime.now(dt.UTC)
        return client.V1Lease(
            api_version="coordination.k8s.io/v1",
            kind="Lease",
            metadata=client.V1ObjectMeta(name=LEASE_NAME, resource_version=d.version),
            spec=client.V1LeaseSpec(
                holder_identity=d.holder,
                lease_duration_seconds=d.duration,
                lease_transitions=d.transitions,
                acquire_time=now if d.takeover or self._acquired is None else self._acquired,
                renew_time=now,
            ),
        )

    async def release(self) -> None:
        """At shutdown: stop leading, then hand the Lease back (empty holder), bounded."""
        m, st = self._m, self._st
        if not st.is_leader(m.now()) or st.record is None:
            return
        desired = st.desired(Step.RENEW)
        st.released()
        m.note_leadership()
        body = self._body(Desired("", 1, desired.transitions, desired.version, False))
        try:
            await await_within(self._api.replace_lease(body), self._api.timeout)
            log.info("cluster: released the Lease")
        except Exception as exc:  # the Lease then expires by itself
            log.warning("cluster: could not release the Lease: %s", describe(exc))
