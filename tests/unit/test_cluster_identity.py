"""cluster/identity.py: mode detection, pod identity, CLUSTER_PEERS parsing, refusals."""

from __future__ import annotations

import socket

import pytest

from sardeenz.cluster.identity import (
    ClusterMode,
    PeerAddress,
    check_cluster_settings,
    detect_mode,
    identity_of,
    is_self,
    parse_peers,
)
from sardeenz.config import ConfigError, Settings

GOOD = "k" * 32


def settings(**kw: object) -> Settings:
    return Settings(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("peers", "env", "mode"),
    [
        ("", {}, ClusterMode.SINGLE),
        ("a:1", {}, ClusterMode.STATIC),
        ("", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, ClusterMode.KUBERNETES),
        ("a:1", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, ClusterMode.STATIC),
    ],
)
def test_mode(peers: str, env: dict[str, str], mode: ClusterMode) -> None:
    assert detect_mode(settings(cluster_peers=peers), env) is mode


def test_parse_peers() -> None:
    assert parse_peers(" a:1, [::1]:2 ,a:1,,10.0.0.3:3000") == [
        PeerAddress("a", 1),
        PeerAddress("::1", 2),
        PeerAddress("10.0.0.3", 3000),
    ]
    assert str(PeerAddress("::1", 2)) == "[::1]:2"
    for bad in ("nohost", "a:", "a:0", "a:x", ":5", "a:70000"):
        with pytest.raises(ConfigError, match="host:port"):
            parse_peers(bad)


def test_identity_defaults_and_overrides() -> None:
    me = identity_of(settings(host="127.0.0.2", port=3001))
    assert me.pod_id == f"{socket.gethostname()}:3001"
    assert me.address == PeerAddress("127.0.0.2", 3001)
    me = identity_of(
        settings(
            host="0.0.0.0",
            port=3000,
            pod_name="p-0",
            advertise_address="10.1.2.3",
            advertise_port=8080,
        )
    )
    assert me.pod_id == "p-0"
    assert me.address == PeerAddress("10.1.2.3", 8080)


def test_the_pod_finds_itself_in_the_shared_peer_list() -> None:
    s = settings(host="127.0.0.2", port=3001)
    me = identity_of(s)
    assert is_self(PeerAddress("127.0.0.2", 3001), me, s)
    assert not is_self(PeerAddress("127.0.0.3", 3001), me, s)
    s = settings(host="0.0.0.0", port=3000, advertise_address="10.0.0.5")
    assert is_self(PeerAddress("127.0.0.1", 3000), identity_of(s), s)
    assert is_self(PeerAddress("10.0.0.5", 3000), identity_of(s), s)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"cluster_peers": "a:1"}, "CLUSTER_SECRET is empty"),
        ({"cluster_peers": "a:1", "cluster_secret": "short"}, "CLUSTER_SECRET is 5 bytes"),
        (
            {"cluster_peers": "a:1", "cluster_secret": GOOD, "cluster_secret_previous": "x"},
            "CLUSTER_SECRET_PREVIOUS is 1 bytes",
        ),
        (
            {
                "cluster_peers": "a:1",
                "cluster_secret": GOOD,
                "cluster_suspect_after_seconds": 20,
            },
            "SUSPECT_AFTER",
        ),
        (
            {
                "cluster_peers": "a:1",
                "cluster_secret": GOOD,
                "cluster_heartbeat_interval_seconds": 6,
            },
            "HEARTBEAT_INTERVAL",
        ),
        ({"cluster_peers": "a", "cluster_secret": GOOD}, "host:port"),
    ],
)
def test_unworkable_cluster_settings_are_refused(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_cluster_settings(settings(**kw), {})


def test_single_node_needs_no_secret() -> None:
    check_cluster_settings(settings(), {})
