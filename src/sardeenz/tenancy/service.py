"""The tenants of this node: config-file ones, API ones, and their stored budgets.

Owns the set of tenants (the config file's ``tenants:`` section, read-only here,
plus those added through ``/api/v1/tenants``, stored in SQLite), checks every
change against the whole set (spec.check_set: known keys, one tenant per key,
subject and group) before it is stored, and hands the result to the proxy's
``Admission``. It also keeps the budgets: the tokens counted in the current day
and month are loaded on start and written back every
``tenancy_flush_seconds`` and at shutdown, from a task it owns (never from a
request). A crash loses at most the last interval's count.

In a cluster the API tenants are the cluster's (``definitions``: the control
state's ``tenants`` document, cluster/tenant_sync.py, reloaded on every pod when it
changes) and the counters are shared (``counters``: cluster/tenant_shares.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from sardeenz.config import ConfigError, Settings
from sardeenz.errors import Conflict, NotFound, log_write_failure
from sardeenz.store.tenants import TenantRepository
from sardeenz.tasks import stop_task
from sardeenz.tenancy.admission import Admission
from sardeenz.tenancy.counters import CounterFactory, LocalCounters, period_bounds
from sardeenz.tenancy.spec import Tenant, TenantBody, TenantConflict, check_set, from_config

log = logging.getLogger(__name__)


def config_tenants(settings: Settings, key_ids: list[str]) -> list[Tenant]:
    """The config file's tenants, checked; ``ConfigError`` names the first problem."""
    try:
        tenants = from_config(settings.tenants)
        check_set(tenants, key_ids)
    except (ValueError, TenantConflict) as exc:
        raise ConfigError(f"SARDEENZ_TENANTS: {exc}") from None
    return tenants


class TenantDefinitions(Protocol):
    """Where the API's tenants are kept: this node's database, or the cluster's."""

    async def list_all(self) -> dict[str, dict[str, Any]]: ...

    async def put(self, name: str, body: dict[str, Any]) -> None: ...

    async def delete(self, name: str) -> bool: ...


class TenantService:
    def __init__(
        self,
        settings: Settings,
        admission: Admission,
        repository: TenantRepository,
        key_ids: list[str],
        *,
        definitions: TenantDefinitions | None = None,
        counters: Callable[[], CounterFactory] | None = None,
    ) -> None:
        self._admission = admission
        self._repo = repository
        self._definitions: TenantDefinitions = definitions or repository
        self._counters = counters
        self._key_ids = key_ids
        self._flush_every = settings.tenancy_flush_seconds
        self._config = {t.name: t for t in config_tenants(settings, key_ids)}
        self._stored: dict[str, Tenant] = {}
        self._task: asyncio.Task[None] | None = None
        self._writing = asyncio.Lock()
        """One put or delete at a time: each checks the whole set, then stores it. Held
        across the store's write, which in a cluster waits on the control state; that
        may meanwhile hand this service a copy from elsewhere (``reload``), so
        ``reload`` must never wait on it."""

    async def start(self) -> None:
        if self._counters is not None:
            self._admission.counters = self._counters()
        else:
            wall = time.time()
            periods = [period_bounds("day", wall)[0], period_bounds("month", wall)[0]]
            self._admission.counters = LocalCounters(await self._repo.usage(periods))
        self._stored = await self._read_stored()
        self._apply()
        if self._config or self._stored:
            log.info("tenants: %s", ", ".join(sorted([*self._config, *self._stored])))
        self._task = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _read_stored(self) -> dict[str, Tenant]:
        stored: dict[str, Tenant] = {}
        for name, body in (await self._definitions.list_all()).items():
            try:
                tenant = Tenant(name=name, source="api", **TenantBody.model_validate(body).__dict__)
                check_set([*self._config.values(), *stored.values(), tenant], self._key_ids)
            except (ValueError, TenantConflict) as exc:
                # Kept where it is: fixing the keys file brings it back on restart.
                log.error("tenant %r (stored) is not applied: %s", name, exc)
                continue
            stored[name] = tenant
        return stored

    async def reload(self) -> None:
        """The stored tenants changed elsewhere (another pod's write, in a cluster).

        Not under ``_writing`` (see there): a put in flight sets its own tenant when its
        write returns, on top of whatever this read."""
        self._stored = await self._read_stored()
        self._apply()

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None
        await self.flush()

    def _apply(self) -> None:
        self._admission.configure([*self._config.values(), *self._stored.values()])

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self._flush_every)
            try:
                await self.flush()
            except Exception as exc:  # the database may be busy; the next round writes it
                log_write_failure(log, exc, "storing tenant budgets failed, kept for next round")

    async def flush(self) -> None:
        """Write the budget counters that changed since the last flush."""
        rows = []
        taken = []
        for scope in self._admission.scopes():
            for budget in (scope.day, scope.month):
                if budget is not None and budget.dirty:
                    budget.dirty = False
                    taken.append(budget)
                    rows.append((scope.tenant, scope.name, budget.period_id, budget.used))
        try:
            await self._repo.save_usage(rows)
        except BaseException:
            # Not stored (a full disk, a busy database): the next round writes them,
            # even if no request changes them in between.
            for budget in taken:
                budget.dirty = True
            raise

    # ------------------------------------------------------------------ API
    def _view(self, tenant: Tenant) -> dict[str, Any]:
        use: dict[str, Any] = {}
        for scope in self._admission.scopes():
            if scope.tenant != tenant.name:
                continue
            use[scope.name] = {
                "concurrent_requests": scope.inflight,
                "tokens_today": scope.day.used if scope.day is not None else None,
                "tokens_this_month": scope.month.used if scope.month is not None else None,
            }
        return {**tenant.model_dump(), "usage": use}

    def all(self) -> list[dict[str, Any]]:
        tenants = sorted([*self._config.values(), *self._stored.values()], key=lambda t: t.name)
        return [self._view(t) for t in tenants]

    def get(self, name: str) -> dict[str, Any]:
        tenant = self._config.get(name) or self._stored.get(name)
        if tenant is None:
            raise NotFound(f"no tenant is named {name!r}", code="tenant_not_found")
        return self._view(tenant)

    async def put(self, name: str, body: TenantBody) -> dict[str, Any]:
        """Create or replace an API tenant; the whole set is checked first."""
        async with self._writing:
            if name in self._config:
                raise Conflict(
                    f"tenant {name!r} is defined in the config file; change it there",
                    code="tenant_from_config",
                )
            tenant = Tenant(name=name, source="api", **body.__dict__)
            others = [t for n, t in self._stored.items() if n != name]
            check_set([*self._config.values(), *others, tenant], self._key_ids)
            await self._definitions.put(name, body.model_dump(mode="json"))
            self._stored[name] = tenant
            self._apply()
        return self._view(tenant)

    async def delete(self, name: str) -> dict[str, Any]:
        async with self._writing:
            if name in self._config:
                raise Conflict(
                    f"tenant {name!r} is defined in the config file; remove it there",
                    code="tenant_from_config",
                )
            if name not in self._stored:
                raise NotFound(f"no tenant is named {name!r}", code="tenant_not_found")
            await self._definitions.delete(name)
            self._stored.pop(name, None)  # a reload meanwhile may have dropped it already
            self._apply()
        return {"deleted": name}
