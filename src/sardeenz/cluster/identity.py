"""Which cluster mode this node runs in, who it is, and whether its settings can work.

Pure functions of the settings and the environment, so ``sardeenz serve``
can refuse a cluster it cannot run (one line, exit 2) before anything starts,
and tests can call them directly.

Modes (seed): ``CLUSTER_PEERS`` -> static peers (wherever the node runs),
else ``KUBERNETES_SERVICE_HOST`` -> Kubernetes (cluster/membership/kube.py), else a
single node. ``SARDEENZ_CLUSTER_MODE`` forces one (``single`` keeps a pod on
Kubernetes out of any cluster, with no RBAC needed).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from sardeenz.asgi import ascii_int
from sardeenz.config import BLANK_SECRET, ConfigError, Settings, is_blank_secret
from sardeenz.security.cluster_hmac import MIN_SECRET_BYTES


class ClusterMode(StrEnum):
    SINGLE = "single"
    STATIC = "static"
    KUBERNETES = "kubernetes"


@dataclass(frozen=True, slots=True)
class PeerAddress:
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Identity:
    """This pod: its id (``POD_NAME`` or ``hostname:port``) and advertised address."""

    pod_id: str
    address: PeerAddress


def parse_peers(text: str) -> list[PeerAddress]:
    """``CLUSTER_PEERS``: ``host:port,host:port`` (``[v6]:port`` for IPv6), duplicates dropped."""
    out: list[PeerAddress] = []
    for raw in (p.strip() for p in text.split(",")):
        if not raw:
            continue
        if raw.startswith("["):
            host, sep, port = raw[1:].partition("]:")
        else:
            host, sep, port = raw.rpartition(":")
        number = ascii_int(port)
        if not sep or not host or number is None or not 0 < number < 65536:
            raise ConfigError(f"CLUSTER_PEERS entry {raw!r} must look like host:port")
        peer = PeerAddress(host, number)
        if peer not in out:
            out.append(peer)
    return out


def detect_mode(settings: Settings, environ: Mapping[str, str] | None = None) -> ClusterMode:
    """The mode the environment asks for (see the module docstring)."""
    env = os.environ if environ is None else environ
    if settings.cluster_mode != "auto":
        return ClusterMode(settings.cluster_mode)
    if settings.cluster_peers.strip():
        return ClusterMode.STATIC
    if env.get("KUBERNETES_SERVICE_HOST"):
        return ClusterMode.KUBERNETES
    return ClusterMode.SINGLE


def _bind_all(host: str) -> bool:
    return host in ("", "0.0.0.0", "::", "[::]")


def identity_of(settings: Settings, mode: ClusterMode = ClusterMode.STATIC) -> Identity:
    """Pod id ``POD_NAME``, else ``hostname:port`` (on Kubernetes: the hostname, which
    is the pod's name, so discovery recognises this pod among the ones it lists)."""
    host = settings.advertise_address or (
        socket.gethostname() if _bind_all(settings.host) else settings.host
    )
    port = settings.advertise_port or settings.port
    fallback = socket.gethostname()
    if mode is not ClusterMode.KUBERNETES:
        fallback = f"{fallback}:{settings.port}"
    pod_id = settings.pod_name or fallback
    return Identity(pod_id=pod_id, address=PeerAddress(host.strip("[]"), port))


def is_self(peer: PeerAddress, me: Identity, settings: Settings) -> bool:
    """Does ``peer`` name this pod? (Every pod may get the same ``CLUSTER_PEERS``.)"""
    if peer == me.address:
        return True
    if peer.port != settings.port:
        return False
    if _bind_all(settings.host):
        try:
            return ipaddress.ip_address(peer.host).is_loopback
        except ValueError:
            return peer.host in ("localhost", socket.gethostname())
    return peer.host == settings.host


def check_cluster_settings(settings: Settings, environ: Mapping[str, str] | None = None) -> None:
    """Raise ``ConfigError`` (one line) when a cluster is asked for that cannot run."""
    mode = detect_mode(settings, environ)
    if mode is ClusterMode.SINGLE:
        return
    if mode is ClusterMode.STATIC:
        if not settings.cluster_peers.strip():
            raise ConfigError("SARDEENZ_CLUSTER_MODE=static needs CLUSTER_PEERS")
        parse_peers(settings.cluster_peers)
        why = "CLUSTER_PEERS is set"
    else:
        from sardeenz.cluster.membership.kube_api import (
            check_kube_settings,  # no client import here
        )

        check_kube_settings(settings, environ)
        why = "Kubernetes cluster mode (KUBERNETES_SERVICE_HOST is set)"
    secret = settings.cluster_secret.get_secret_value().encode()
    if not secret:
        alone = "" if mode is ClusterMode.STATIC else " (or SARDEENZ_CLUSTER_MODE=single)"
        raise ConfigError(
            f"{why} but CLUSTER_SECRET is empty: pods authenticate each other "
            f"with it; generate one with 'openssl rand -hex 32' and give every pod the same{alone}"
        )
    for name, value in (
        ("CLUSTER_SECRET", secret),
        ("CLUSTER_SECRET_PREVIOUS", settings.cluster_secret_previous.get_secret_value().encode()),
    ):
        if is_blank_secret(value.decode("utf-8", "replace")):
            raise ConfigError(f"{name} is {BLANK_SECRET}")
        if value and len(value) < MIN_SECRET_BYTES:
            raise ConfigError(
                f"{name} is {len(value)} bytes: at least {MIN_SECRET_BYTES} are needed "
                "(generate one with 'openssl rand -hex 32')"
            )
    if not (settings.cluster_suspect_after_seconds < settings.cluster_unavailable_after_seconds):
        raise ConfigError(
            "SARDEENZ_CLUSTER_SUSPECT_AFTER_SECONDS must be below "
            "SARDEENZ_CLUSTER_UNAVAILABLE_AFTER_SECONDS"
        )
    if settings.cluster_heartbeat_interval_seconds * 2 >= settings.cluster_suspect_after_seconds:
        raise ConfigError(
            "SARDEENZ_CLUSTER_HEARTBEAT_INTERVAL_SECONDS must be under half of "
            "SARDEENZ_CLUSTER_SUSPECT_AFTER_SECONDS (a leader renews its lease with heartbeats)"
        )
