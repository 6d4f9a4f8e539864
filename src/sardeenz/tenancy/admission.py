"""Admission: may this tenant send this request now? The one call the proxy makes.

The proxy (express.py and forwarder.py) asks ``Admission.admit`` once per
``/v1`` inference request that carries an API key, after the model is known
and before anything is sent upstream. With no tenant for the key (or no
tenants at all) the answer is None, from one dict lookup. Otherwise every
limit of the tenant's scopes (its whole traffic, and the model's, if it has
limits for that model) is checked before any is charged, so a refusal costs
the tenant nothing; the answer is a ``Ticket`` (admitted) or a ``Rejection``
(429, with the limit that refused and the seconds to wait).

A ticket is settled once, when the request ends (``Ticket.settle``): the
request leaves the in-flight count, and the tokens charged up front (the
estimate: prompt bytes / 4 + ``max_tokens``) are replaced by the engine's
``usage`` from the tail of the response the relay already holds (a JSON body's,
or a stream's usage chunk). A response without usage keeps the estimate if it
succeeded and charges nothing if it failed. ``Ticket.cancel`` undoes an
admission whose request never went anywhere (the express path handing a
request back to the handler, which admits it again).

Nothing here awaits: admission runs on the event loop between two callbacks,
so the counters need no lock. The counters themselves are behind
counters.py's interface, where a cluster-wide implementation plugs in.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Final

from prometheus_client import Counter

from sardeenz.proxy.metrics import REGISTRY
from sardeenz.proxy.reqlog import usage_total
from sardeenz.tenancy.counters import CounterFactory, LocalCounters
from sardeenz.tenancy.meter import UsageMeter
from sardeenz.tenancy.plan import (
    ALL_MODELS,
    LIMIT_WORDS,
    ROLL_CHECK_SECONDS,
    Plan,
    Rejection,
    Scope,
)
from sardeenz.tenancy.spec import Limits, Tenant

__all__ = [
    "ALL_MODELS",
    "LIMIT_WORDS",
    "ROLL_CHECK_SECONDS",
    "Admission",
    "Rejection",
    "Ticket",
    "estimate_tokens",
    "refused",
]

_mono = time.monotonic
_wall = time.time
_new_ticket = object.__new__

SUBJECT_MEMBER: Final = "sub:"
GROUP_MEMBER: Final = "group:"
"""Prefixes of the members a bearer-token caller of ``/v1`` is admitted as (``admit``'s
``key_id``): a tenant's subjects and groups."""
BYTES_PER_TOKEN: Final = 4
"""The up-front estimate of a prompt's tokens: its request body's bytes / 4 (an upper
bound for English text in JSON; the engine's usage corrects it when the request ends)."""
REJECTED = Counter(
    "sardeenz_tenant_rejected_requests",
    "Requests refused (429) by a tenant's limit, by tenant and by the limit that refused",
    ["tenant", "reason"],
    registry=REGISTRY,
)


def refused(rejection: Rejection) -> None:
    """Count a refusal that was answered (the express path hands its refusals to the
    handler, which admits again: counting there would count them twice)."""
    REJECTED.labels(rejection.tenant, rejection.reason).inc()


class Ticket:
    """An admitted request's charge, settled (or cancelled) exactly once."""

    __slots__ = ("_key", "_meter", "_model", "_open", "_plan", "_prompt_estimate", "estimate")

    def __init__(
        self,
        plan: Plan,
        estimate: int,
        meter: UsageMeter | None = None,
        key: str = "",
        model: str = "",
        prompt_estimate: int = 0,
    ) -> None:
        self._plan = plan
        self.estimate = estimate
        self._open = True
        # (plain arguments, not a tuple unpacked: one is made per request)
        self._meter = meter
        self._key = key
        self._model = model
        self._prompt_estimate = prompt_estimate
        """The prompt's part of the estimate (the usage meter's)."""

    @property
    def tenant(self) -> str:
        return self._plan.tenant

    def settle(self, status: int, last: bytes, prev: bytes) -> None:
        """The request ended with ``status``; ``last``/``prev``: the response's tail."""
        if not self._open:
            return
        self._open = False
        plan = self._plan
        estimate = actual = self.estimate
        if plan.counts_tokens:
            used = usage_total(last, prev)
            if used is not None:
                actual = used
            elif status >= 400 and status != 499:
                actual = 0  # refused or failed upstream, and the engine reported nothing
            # else (a success without usage: a stream that did not ask for it; or the
            # client left, the engine having worked for it): the estimate stands
        now = _mono()
        if plan.stale:
            self._settle_live(estimate, actual, now)
        else:
            # Each counter's part, inline (a call per scope was a tenth of the cost): out
            # of the in-flight counts, the estimate given back for ``actual``, the budgets'
            # hold released and ``actual`` added.
            for scope in plan.scopes:
                scope.inflight -= 1
            if actual != estimate and plan.per_token:
                plan.rates.give(estimate - actual, now)
            budgets = plan.budgets
            if budgets and actual and now < plan.check_at:
                # no period ended (``check_at``): each budget's ``add`` is two stores
                for budget in budgets:
                    held = budget.held - estimate
                    budget.held = held if held > 0 else 0
                    budget.used += actual
                    budget.dirty = True
            else:
                for budget in budgets:
                    held = budget.held - estimate
                    budget.held = held if held > 0 else 0
                    if actual:
                        budget.add(actual, _wall())
        meter = self._meter
        if meter is not None:  # the tail is read by the meter's drain, off this path
            p_est, key, model = self._prompt_estimate, self._key, self._model
            c_est = estimate - p_est  # the last field, "": an admitted request (meter.ADMITTED)
            meter.note((_wall(), plan.tenant, key, model, status, p_est, c_est, last, prev, ""))

    def _settle_live(self, estimate: int, actual: int, now: float) -> None:
        """``settle`` for a ticket whose plan a ``configure`` replaced: against the
        counters its scopes hold now (never below 0: a budget added while this request
        was in flight holds nothing for it)."""
        wall = _wall()
        for scope in self._plan.scopes:
            scope.inflight -= 1
            if scope.tpm is not None and actual != estimate:
                scope.tpm.give(estimate - actual, now)
            for budget in (scope.day, scope.month):
                if budget is not None:
                    budget.held = max(0, budget.held - estimate)
                    if actual:
                        budget.add(actual, wall)

    def unmetered(self) -> None:
        """Not for the usage meter: a request another pod forwarded here is billed by
        the pod it entered (the request log's rule, proxy/remote.py ``entered_here``)."""
        self._meter = None

    def cancel(self) -> None:
        """Undo the admission: the request was not sent (it will be admitted again)."""
        if not self._open:
            return
        self._open = False
        now = _mono()
        for scope in self._plan.scopes:
            scope.cancel(self.estimate, now)


class _TenantScopes:
    __slots__ = ("all", "by_model", "name", "priority", "weight")

    def __init__(
        self,
        name: str,
        everything: Scope,
        by_model: dict[str, Scope],
        weight: int = 1,
        priority: str = "interactive",
    ) -> None:
        self.name = name
        self.weight = weight
        self.priority = priority
        self.all = Plan(name, (everything,))
        self.by_model = {m: Plan(name, (everything, s)) for m, s in by_model.items()}


def estimate_tokens(payload: dict[str, Any], body_bytes: int, default_completion: int) -> int:
    """Tokens charged when a request is admitted: prompt bytes / 4 + the completion cap."""
    cap = payload.get("max_completion_tokens")
    if cap is None:
        cap = payload.get("max_tokens")
    if type(cap) is not int or cap < 0:
        cap = default_completion
    return -(-body_bytes // BYTES_PER_TOKEN) + cap


class Admission:
    """The tenants' limits as the proxy asks them; see module doc."""

    def __init__(
        self,
        counters: CounterFactory | None = None,
        *,
        default_completion: int = 256,
        meter: UsageMeter | None = None,
    ) -> None:
        self.counters: CounterFactory = counters or LocalCounters()
        self.meter = meter
        """Where settled tickets and answered refusals are counted for billing
        (tenancy/meter.py); None: not counted."""
        self.default_completion = default_completion
        """Completion tokens assumed for a request that sets no ``max_tokens``."""
        self._by_key: dict[str, _TenantScopes] = {}
        self._by_subject: dict[str, str] = {}
        self._by_group: dict[str, str] = {}
        self._scopes: dict[tuple[str, str], Scope] = {}
        self.active = False
        """Some key has a tenant: a plain attribute, the one thing the proxy reads per
        request when there is none."""

    def scopes(self) -> Iterable[Scope]:
        return self._scopes.values()

    def configure(self, tenants: Iterable[Tenant]) -> None:
        """Apply a checked set of tenants (spec.check_set). Counters of scopes that stay
        keep their state: a changed limit does not forgive what was consumed."""
        wall, now = _wall(), _mono()
        by_key: dict[str, _TenantScopes] = {}
        by_subject: dict[str, str] = {}
        by_group: dict[str, str] = {}
        scopes: dict[tuple[str, str], Scope] = {}
        for tenant in tenants:

            def scope(name: str, limits: Limits, tenant: str = tenant.name) -> Scope:
                held = self._scopes.get((tenant, name)) or Scope(tenant, name)
                held.apply(limits, self.counters, wall, now)
                scopes[(tenant, name)] = held
                return held

            entry = _TenantScopes(
                tenant.name,
                scope(ALL_MODELS, tenant.limits),
                {m: scope(m, limits) for m, limits in tenant.models.items()},
                tenant.weight,
                tenant.priority,
            )
            for key in tenant.api_keys:
                by_key[key] = entry
            # Bearer-token callers of /v1 are admitted as these members (security/callers.py);
            # key ids cannot hold ':', so the names never meet a key's.
            for subject in tenant.subjects:
                by_key[SUBJECT_MEMBER + subject] = entry
            for group in tenant.groups:
                by_key[GROUP_MEMBER + group] = entry
            by_subject.update(dict.fromkeys(tenant.subjects, tenant.name))
            by_group.update(dict.fromkeys(tenant.groups, tenant.name))
        for old in self._by_key.values():  # (tickets of theirs settle against the scopes)
            old.all.stale = True
            for plan in old.by_model.values():
                plan.stale = True
        self._by_key, self._by_subject, self._by_group = by_key, by_subject, by_group
        self._scopes = scopes
        self.active = bool(by_key)

    def tenant_of_key(self, key_id: str) -> str | None:
        entry = self._by_key.get(key_id)
        return entry.name if entry is not None else None

    def share_of(self, key_id: str) -> tuple[str, int, str] | None:
        """The tenant of a key, its fair-queuing weight and priority class; None: no tenant.

        Asked only for a request that waits for a saturated model (proxy/fairgate.py)."""
        entry = self._by_key.get(key_id)
        return (entry.name, entry.weight, entry.priority) if entry is not None else None

    def tenant_of_principal(self, subject: str, groups: Iterable[str]) -> str | None:
        """The tenant a JWT caller belongs to: by subject first, else its first mapped group."""
        found = self._by_subject.get(subject)
        if found is None:
            found = next((self._by_group[g] for g in sorted(groups) if g in self._by_group), None)
        return found

    def member_of_principal(self, subject: str, groups: Iterable[str]) -> str | None:
        """The member a bearer-token caller is admitted as: ``sub:<subject>`` when a tenant
        lists its subject, else ``group:<g>`` for its first mapped group (sorted), else None."""
        if subject in self._by_subject:
            return SUBJECT_MEMBER + subject
        group = next((g for g in sorted(groups) if g in self._by_group), None)
        return GROUP_MEMBER + group if group is not None else None

    def admit(
        self, key_id: str, model: str, payload: dict[str, Any], body_bytes: int
    ) -> Ticket | Rejection | None:
        """None: no tenant for this key (nothing to count); else a ticket or a refusal."""
        entry = self._by_key.get(key_id)
        if entry is None:
            return None
        plan = entry.by_model.get(model, entry.all)
        # estimate_tokens, inline: the prompt's part is the meter's too
        cap = payload.get("max_completion_tokens")
        if cap is None:
            cap = payload.get("max_tokens")
        if type(cap) is not int or cap < 0:
            cap = self.default_completion
        prompt = -(-body_bytes // BYTES_PER_TOKEN)
        tokens = prompt + cap
        now = _mono()
        # Every limit is checked, and a refusal costs the tenant nothing: the requests in
        # flight first (no side effect), then the rates charged in order while they admit
        # (``Rates.charge``), then each budget checked and holding the tokens; one that
        # refuses sends the request to ``Plan.refused``, which undoes what was charged.
        if now >= plan.check_at:
            plan.roll(now, _wall())
        for scope in plan.gated:
            if scope.inflight >= scope.slots:  # type: ignore[operator]  # (an int: gated)
                return self._refused(plan.refused(tokens, now, _wall()), key_id, model)
        refused = plan.rates.charge(tokens, now)
        if refused is not None:
            return self._refused(plan.refused(tokens, now, _wall(), *refused), key_id, model)
        for budget in plan.budgets:
            held = budget.held
            if budget.used + held >= budget.limit:
                return self._refused(
                    plan.refused(tokens, now, _wall(), budget=budget), key_id, model
                )
            budget.held = held + tokens
        for scope in plan.scopes:
            scope.inflight += 1
        # ``Ticket(plan, tokens, self.meter, key_id, model, prompt)``, its stores inline:
        # a class's ``__init__`` is a Python call (measured: 150 ns of an admission's 2 us)
        ticket = _new_ticket(Ticket)
        ticket._plan = plan
        ticket.estimate = tokens
        ticket._open = True
        ticket._meter = self.meter
        ticket._key = key_id
        ticket._model = model
        ticket._prompt_estimate = prompt
        return ticket

    @staticmethod
    def _refused(rejection: Rejection, key_id: str, model: str) -> Rejection:
        # counted by whoever answers it (``refused``): once
        return rejection._replace(key=key_id, model=model)

    def metered(self, rejection: Rejection) -> None:
        """Count a refusal that is answered in the usage meter (Prometheus counts it in
        ``refused``, called by the answer)."""
        if self.meter is not None:
            self.meter.rejected(
                _wall(), rejection.tenant, rejection.key, rejection.model, rejection.reason
            )
