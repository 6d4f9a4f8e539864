"""``sardeenz serve`` and the process-level commands: sim-engine, version.

Settings (pydantic), the cluster checks and the server itself are imported when
``serve`` runs, not when the CLI starts: every operator command (``models ls``,
``version``) would otherwise pay their import time (tests/unit/test_cli_imports.py).
"""

from __future__ import annotations

import gc
import ipaddress
import json
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console

from sardeenz.exitcodes import (
    EXIT_ADDRESS_IN_USE,
    EXIT_CONFIG,
    EXIT_DATA_DIR_IN_USE,
    EXIT_STARTUP_FAILED,
    EXIT_STORAGE,
)
from sardeenz.safetext import escape_unsafe

if TYPE_CHECKING:
    from pydantic import ValidationError

    from sardeenz.config import ConfigError, Settings

if TYPE_CHECKING:
    from types import FrameType

    from sardeenz.gateway import Gateway
    from sardeenz.store.dirlock import DataDirLock

__all__ = ["config_error_line", "demo_settings", "refuse", "serve", "sim_engine", "version"]

DEMO_SUBDIR = "demo"
err = Console(stderr=True, markup=False, emoji=False, highlight=False, soft_wrap=True)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 3000).")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Where the database and engine logs live.")
    ] = None,
    sim_gpus: Annotated[
        str | None,
        typer.Option(help="Simulated GPUs, e.g. 'NVIDIA L4:24GiB,Tesla T4:16GiB'."),
    ] = None,
    demo: Annotated[
        bool | None,
        typer.Option(
            "--demo",
            help="Simulated GPUs, the simulated engine, demo models; data in DATA_DIR/demo.",
        ),
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="YAML file of settings.")] = None,
    insecure: Annotated[
        bool | None,
        typer.Option("--insecure", help="Allow a non-loopback bind without authentication."),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option(help="Controller log level: debug, info, warning, error.")
    ] = None,
) -> None:
    """Run the Sardeenz server on this node."""
    # No garbage collection while the server's modules load: the import allocates a
    # few hundred thousand objects and next to no garbage, yet the collector would walk
    # them some 300 times (a fifth of the import's CPU). They are frozen once the app is
    # built (``_started_collecting``), so later collections skip them too.
    gc.disable()
    try:
        settings, gateway, listeners, lock = _prepare(
            config, host, port, data_dir, sim_gpus, demo, insecure, log_level
        )
    except BaseException:
        gc.enable()  # a refusal: whoever called (a test's CliRunner) keeps collecting
        raise
    _started_collecting()
    try:
        _run_server(settings, gateway, listeners)
    finally:
        lock.release()


def _prepare(
    config: Path | None,
    host: str | None,
    port: int | None,
    data_dir: Path | None,
    sim_gpus: str | None,
    demo: bool | None,
    insecure: bool | None,
    log_level: str | None,
) -> tuple[Settings, Gateway, list[socket.socket], DataDirLock]:
    """Settings, checks, the data dir's lock, the listeners and the app: all of ``serve``
    before it runs (each refusal exits here, having touched nothing it should not)."""
    from pydantic import ValidationError

    from sardeenz.config import ConfigError, load_settings

    try:
        settings = load_settings(
            config,
            host=host,
            port=port,
            data_dir=data_dir,
            sim_gpus=sim_gpus,
            demo=demo,
            insecure=insecure,
            log_level=log_level,
        )
        _check_settings(settings)
    except (ConfigError, ValidationError) as exc:
        refuse(f"invalid configuration: {config_error_line(exc)}", EXIT_CONFIG)
    if settings.demo:
        settings = demo_settings(settings)
    if not _is_loopback(settings.host) and not settings.auth_enabled and not settings.insecure:
        refuse(
            f"refusing to bind {settings.host}: no authentication is configured. Set "
            "SARDEENZ_JWT_SECRET, SARDEENZ_JWT_JWKS_URL, SARDEENZ_OIDC_ISSUER or "
            "SARDEENZ_TOKEN_REVIEW, bind "
            "127.0.0.1, or pass --insecure to accept the risk",
            EXIT_CONFIG,
        )
    _configure_logging(settings)
    # The data dir's lock before anything reads it (database, engines to re-adopt), then
    # the port, then the disk checks (whose write test may checkpoint the WAL): each
    # refusal has touched nothing.
    from sardeenz.cli.listeners import AddressUnavailable, bind_listeners
    from sardeenz.store.dirlock import DataDirInUse, DataDirLock
    from sardeenz.store.preflight import StorageError, preflight

    try:
        lock = DataDirLock.acquire(settings.data_dir)
    except DataDirInUse as exc:
        refuse(str(exc), EXIT_DATA_DIR_IN_USE)
    except StorageError as exc:
        refuse(str(exc), EXIT_STORAGE)
    try:
        listeners = bind_listeners(settings.host, settings.port)
    except AddressUnavailable as exc:
        refuse(str(exc), EXIT_ADDRESS_IN_USE)
    try:
        warnings = preflight(settings.data_dir, settings.effective_database_url)
    except StorageError as exc:
        refuse(str(exc), EXIT_STORAGE)
    _log_start(settings, warnings, listeners)
    from sardeenz.app import create_app

    try:
        gateway = create_app(settings)
    except ConfigError as exc:  # a setting only its service can check (a keys file, ...)
        for sock in listeners:
            sock.close()
        refuse(f"invalid configuration: {exc}", EXIT_CONFIG)
    return settings, gateway, listeners, lock


def _check_settings(settings: Settings) -> None:
    """What the settings cannot say of themselves, checked before anything starts (or
    logs): the cluster settings together, the API keys file, the port-claim dir. The
    services check them again when they are built; here a bad one is one line."""
    from sardeenz.cluster.identity import check_cluster_settings
    from sardeenz.runtime.ports import prepare_lock_dir
    from sardeenz.security.auth import ApiKeys

    check_cluster_settings(settings)
    ApiKeys.from_settings(settings)
    prepare_lock_dir(settings.port_lock_dir, must_own=settings.runtime_dir is None)


def refuse(line: str, code: int) -> NoReturn:
    """Stop the start with one line on stderr: no markup, no emoji codes (``a:b:c`` is no
    ``:b:`` emoji), control characters escaped, never wrapped."""
    err.print(f"sardeenz: {escape_unsafe(line)}", style="red")
    raise typer.Exit(code)


def _log_start(settings: Settings, warnings: list[str], listeners: list[socket.socket]) -> None:
    log = logging.getLogger("sardeenz")
    for warning in warnings:
        log.warning("%s", warning)
    if settings.demo:
        gpus = ", ".join(g.name for g in settings.effective_sim_gpus)
        log.warning(
            "DEMO MODE: simulated GPUs (%s) and the simulated engine; no real model runs here; "
            "data in %s",
            gpus,
            settings.data_dir,
        )
    elif settings.effective_sim_gpus:
        log.warning("simulated GPUs in use: %s", settings.sim_gpus)
    if settings.auth_enabled:
        log.info("admin API authentication: on (roles claim %r)", settings.jwt_roles_claim)
    elif not _is_loopback(settings.host):
        log.warning("binding %s with NO authentication (--insecure)", settings.host)
    else:
        log.warning(
            "no authentication configured: bound to %s only; every local caller is admin",
            settings.host,
        )
    for sock in listeners:  # uvicorn says nothing of sockets it is given
        address, port = sock.getsockname()[:2]
        log.info("listening on http://%s:%d", f"[{address}]" if ":" in address else address, port)


def demo_settings(settings: Settings) -> Settings:
    """The demo's own data under ``<data_dir>/demo``: its database, logs and runs.

    Simulated profiles, benchmark runs and audit entries must never mix with a real
    node's, and a demo started on a node's data dir must not re-adopt its instances.
    An explicit ``DATABASE_URL`` is the operator's choice and kept as given.
    """
    return settings.model_copy(update={"data_dir": settings.data_dir / DEMO_SUBDIR})


def config_error_line(exc: ConfigError | ValidationError) -> str:
    """One line per start-up: which setting is wrong and why, without pydantic's banner."""
    from sardeenz.config import ConfigError

    if isinstance(exc, ConfigError):
        return str(exc)
    parts = []
    for e in exc.errors():
        where = ".".join(str(p) for p in e.get("loc", ())) or "settings"
        message = str(e.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def _started_collecting() -> None:
    """Garbage collection on again, for what the running server allocates.

    What the start loaded (modules, classes, the app) lives as long as the process:
    ``gc.freeze`` moves it out of the collector's view instead of having every full
    collection walk it again.
    """
    gc.freeze()
    gc.enable()


def _configure_logging(settings: Settings) -> None:
    """One record per line (``logsetup``): user text in a message cannot forge a record."""
    from sardeenz.logsetup import configure_logging

    configure_logging(settings.log_level, settings.log_format)


GRACEFUL_SECONDS = 5
"""How long uvicorn lets open requests finish after an exit is asked for."""


def _run_server(settings: Settings, gateway: Gateway, listeners: list[socket.socket]) -> None:
    import uvicorn

    from sardeenz.shutdown import arm_exit_watchdog, exit_budget_seconds

    class _Server(uvicorn.Server):
        """uvicorn's server, whose exit (SIGTERM, SIGINT) always ends (sardeenz.shutdown)."""

        def __init__(self, config: uvicorn.Config, budget: float) -> None:
            super().__init__(config)
            self._budget = budget
            self._armed = False

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if not self._armed:
                self._armed = True
                arm_exit_watchdog(self._budget)
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        gateway,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        # /v1 connections take the fast lane; everything else is uvicorn's.
        http=gateway.http_protocol(settings),
        log_level=settings.log_level,
        access_log=False,
        # Engines and clients keep connections warm across quiet spells; uvicorn's
        # 5 s default made a burst after a pause pay one TCP handshake per request.
        timeout_keep_alive=75,
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
        log_config=None,
    )
    server = _Server(config, exit_budget_seconds(settings.stop_grace_seconds, GRACEFUL_SECONDS))
    try:
        server.run(sockets=listeners)
    except SystemExit:
        if server.started:
            raise
        # uvicorn exits 3 when the application's start-up fails; 3 is the storage code
        # here, and this is no foreseen refusal: the traceback is in the log above.
        refuse("start-up failed; the cause is logged above", EXIT_STARTUP_FAILED)
    except KeyboardInterrupt:
        pass


def sim_engine(ctx: typer.Context) -> None:
    """The simulated engine: a vLLM-compatible server for demos and tests (see --help)."""
    from sardeenz.sim.server import main as sim_main

    raise typer.Exit(sim_main(list(ctx.args)))


def version(
    as_json: Annotated[bool, typer.Option("--json", help='Print {"version": ...}.')] = False,
) -> None:
    """Print the version."""
    from sardeenz import __version__

    print(json.dumps({"version": __version__}) if as_json else __version__)
