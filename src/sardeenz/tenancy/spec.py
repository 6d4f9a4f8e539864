"""What a tenant is, as an operator writes it: who belongs to it and which limits it has.

A tenant is a name, the inference API keys that act for it (the ids of
security/auth.py ``ApiKey``), the JWT subjects and groups mapped to it, limits
that hold for all its traffic together, and optionally limits per model (served
name) that hold in addition. One schema for the config file's ``tenants:``
section and the admin API's bodies, so both refuse the same inputs with the same
words: a limit is a whole number from 1 to its maximum (zero, negative, huge,
fractional and non-numeric values are refused, never clamped), and a key or a
subject belongs to one tenant at most (``TenantConflict``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints, ValidationError

from sardeenz.errors import SardeenzError

NAME_PATTERN: Final = r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$"
"""A tenant's name: lowercase letters, digits and ``._-``, at most 64, as in a metric label."""

MAX_REQUESTS: Final = 10**7
"""Requests per minute or in flight: more than any node serves (a typo, not a limit)."""
MAX_TOKENS: Final = 10**12
"""Tokens per minute, day or month: far above any GPU's throughput."""
MAX_WEIGHT: Final = 1000
"""A tenant's fair-queuing weight: a ratio of 1000 to 1 between two tenants is already
one turn in a thousand."""

KeyId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._@-]{1,64}$")]
Subject = Annotated[str, StringConstraints(min_length=1, max_length=256)]
RequestCount = Annotated[StrictInt, Field(ge=1, le=MAX_REQUESTS)]
TokenCount = Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)]


class Limits(BaseModel):
    """The limits of one scope (a tenant's whole traffic, or its traffic to one model).

    Absent (null): no limit of that kind. Each is a whole number from 1; to stop a
    tenant, take its keys away.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_minute: RequestCount | None = Field(
        None, description="requests admitted per minute (a token bucket of this size)"
    )
    tokens_per_minute: TokenCount | None = Field(
        None,
        description="prompt + completion tokens per minute: estimated when admitted "
        "(prompt bytes / 4 + max_tokens), corrected from the engine's usage after",
    )
    concurrent_requests: RequestCount | None = Field(
        None, description="requests in flight at once (waiting for a model included)"
    )
    tokens_per_day: TokenCount | None = Field(
        None, description="prompt + completion tokens per UTC day (stored: survives restarts)"
    )
    tokens_per_month: TokenCount | None = Field(
        None, description="prompt + completion tokens per UTC calendar month (stored)"
    )

    @property
    def empty(self) -> bool:
        return all(v is None for v in self.model_dump().values())


class TenantBody(BaseModel):
    """A tenant as the API takes it (``PUT /api/v1/tenants/{name}``) and the config file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api_keys: list[KeyId] = Field(
        default_factory=list, max_length=1000, description="ids of inference API keys"
    )
    subjects: list[Subject] = Field(
        default_factory=list, max_length=1000, description="JWT subjects mapped to the tenant"
    )
    groups: list[Subject] = Field(
        default_factory=list, max_length=1000, description="JWT groups mapped to the tenant"
    )
    limits: Limits = Field(default_factory=Limits, description="for all its traffic together")
    models: dict[Annotated[str, StringConstraints(min_length=1, max_length=512)], Limits] = Field(
        default_factory=dict,
        max_length=1000,
        description="served model name -> limits that hold for that model in addition",
    )
    weight: Annotated[StrictInt, Field(ge=1, le=MAX_WEIGHT)] = Field(
        1,
        description="share of a saturated model's turns against other tenants' "
        "(weighted fair queuing; a caller of no tenant weighs 1)",
    )
    priority: Literal["interactive", "batch"] = Field(
        "interactive",
        description="priority class of its requests (and the highest one the "
        "X-Sardeenz-Priority header may ask for): interactive goes before batch",
    )


class Tenant(TenantBody):
    """A stored tenant: its body, its name and where it was defined."""

    name: str
    source: str = Field(description="'config' (the config file; read-only here) or 'api'")


class TenantConflict(SardeenzError):
    """422: the tenants, taken together, are not a valid set (stable ``code`` says why)."""

    status = 422
    code = "tenant_conflict"


def check_set(tenants: Iterable[Tenant], known_keys: Iterable[str]) -> None:
    """Raise ``TenantConflict`` unless every key is known and every key, subject and
    group belongs to one tenant at most."""
    known = set(known_keys)
    owners: dict[tuple[str, str], str] = {}
    for tenant in tenants:
        for key in tenant.api_keys:
            if key not in known:
                raise TenantConflict(
                    f"tenant {tenant.name!r}: no inference API key has the id {key!r} "
                    "(SARDEENZ_API_KEYS_FILE or SARDEENZ_API_KEYS)",
                    code="unknown_api_key",
                )
        for kind, values in (
            ("API key", tenant.api_keys),
            ("subject", tenant.subjects),
            ("group", tenant.groups),
        ):
            if len(set(values)) != len(values):
                raise TenantConflict(
                    f"tenant {tenant.name!r} lists a {kind} twice", code="duplicate_member"
                )
            for value in values:
                other = owners.setdefault((kind, value), tenant.name)
                if other != tenant.name:
                    raise TenantConflict(
                        f"the {kind} {value!r} is in two tenants ({other!r} and "
                        f"{tenant.name!r}); a caller belongs to one tenant",
                        code=f"{kind.replace('API ', '')}_in_two_tenants",
                    )


def from_config(section: Mapping[str, Any]) -> list[Tenant]:
    """The config file's ``tenants:`` section; ValueError naming the tenant on a bad one."""
    tenants = []
    for name, body in section.items():
        if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
            raise ValueError(f"tenant name {name!r}: lowercase letters, digits and ._- (<= 64)")
        try:
            parsed = TenantBody.model_validate(body if body is not None else {})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise ValueError(f"tenant {name!r}: {where}: {first['msg']}") from None
        tenants.append(Tenant(name=name, source="config", **parsed.model_dump()))
    return tenants
