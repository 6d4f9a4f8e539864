"""Kubernetes mode's pure parts: mode choice, pod identity, settings checks, pod addresses."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from sardeenz.cluster.identity import (
    ClusterMode,
    PeerAddress,
    check_cluster_settings,
    detect_mode,
    identity_of,
)
from sardeenz.cluster.membership.kube_api import RbacProblem, _read_config, api_url
from sardeenz.cluster.membership.kube_discovery import pod_address
from sardeenz.config import ConfigError, Settings

K8S = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
SECRET = "k" * 32


def settings(**kw: object) -> Settings:
    return Settings(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("forced", "peers", "env", "mode"),
    [
        ("single", "", K8S, ClusterMode.SINGLE),
        ("kubernetes", "", {}, ClusterMode.KUBERNETES),
        ("static", "a:1", K8S, ClusterMode.STATIC),
        ("auto", "", K8S, ClusterMode.KUBERNETES),
    ],
)
def test_cluster_mode_setting_forces_a_mode(
    forced: str, peers: str, env: dict[str, str], mode: ClusterMode
) -> None:
    assert detect_mode(settings(cluster_mode=forced, cluster_peers=peers), env) is mode


def test_pod_id_on_kubernetes_is_the_pod_name_or_the_hostname() -> None:
    s = settings(port=3000)
    assert identity_of(s, ClusterMode.KUBERNETES).pod_id == socket.gethostname()
    assert identity_of(s).pod_id == f"{socket.gethostname()}:3000"
    named = settings(port=3000, pod_name="sardeenz-1", advertise_address="10.1.2.3")
    me = identity_of(named, ClusterMode.KUBERNETES)
    assert me.pod_id == "sardeenz-1"
    assert me.address == PeerAddress("10.1.2.3", 3000)


def test_kubernetes_mode_refuses_what_cannot_work() -> None:
    with pytest.raises(ConfigError, match=r"CLUSTER_SECRET is empty.*SARDEENZ_CLUSTER_MODE=single"):
        check_cluster_settings(settings(), K8S)
    with pytest.raises(ConfigError, match=r"KUBERNETES_SERVICE_HOST.*SARDEENZ_KUBE_API_URL"):
        check_cluster_settings(settings(cluster_mode="kubernetes", cluster_secret=SECRET), {})
    with pytest.raises(ConfigError, match="renew deadline < lease duration"):
        check_cluster_settings(settings(cluster_secret=SECRET, kube_renew_deadline_seconds=20), K8S)
    with pytest.raises(ConfigError, match="needs CLUSTER_PEERS"):
        check_cluster_settings(settings(cluster_mode="static", cluster_secret=SECRET), {})
    check_cluster_settings(settings(cluster_secret=SECRET), K8S)
    check_cluster_settings(settings(cluster_mode="single"), K8S)  # no secret, no API needed


def test_api_url_from_the_pod_env_or_the_setting() -> None:
    assert api_url(settings(), K8S) == "https://10.0.0.1:6443"
    assert api_url(settings(), {"KUBERNETES_SERVICE_HOST": "fd00::1"}) == "https://[fd00::1]:443"
    assert api_url(settings(kube_api_url="https://api:1/"), K8S) == "https://api:1"
    assert api_url(settings(), {}) is None


def test_service_account_dir_gives_token_ca_and_namespace(tmp_path: Path) -> None:
    (tmp_path / "namespace").write_text("team-a\n")
    (tmp_path / "ca.crt").write_text("x")
    config = _read_config(settings(kube_service_account_dir=tmp_path), "https://k")
    assert config.namespace == "team-a"
    assert config.token_file == tmp_path / "token"
    assert config.ca_file == tmp_path / "ca.crt"
    # NAMESPACE wins over the file; no ca.crt: the system's CAs.
    (tmp_path / "ca.crt").unlink()
    config = _read_config(settings(kube_service_account_dir=tmp_path, namespace="b"), "https://k")
    assert (config.namespace, config.ca_file) == ("b", None)
    # Neither: the default.
    assert _read_config(settings(kube_service_account_dir=tmp_path / "no"), "u").namespace == (
        "sardeenz"
    )


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "sardeenz-0", "labels": {"app": "sardeenz"}},
        "spec": {"containers": [{"name": "s", "ports": [{"name": "http", "containerPort": 3000}]}]},
        "status": status,
    }


READY = [{"type": "Ready", "status": "True"}]


def test_only_ready_pods_with_an_ip_count() -> None:
    assert pod_address(pod(podIP="10.1.0.5", conditions=READY), 9) == PeerAddress("10.1.0.5", 3000)
    assert pod_address(pod(conditions=READY), 9) is None  # no IP yet
    assert pod_address(pod(podIP="10.1.0.5"), 9) is None  # not Ready
    not_ready = [{"type": "Ready", "status": "False"}]
    assert pod_address(pod(podIP="10.1.0.5", conditions=not_ready), 9) is None
    deleting = pod(podIP="10.1.0.5", conditions=READY)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert pod_address(deleting, 9) is None


def test_port_from_annotation_then_http_port_then_ours() -> None:
    p = pod(podIP="10.1.0.5", conditions=READY)
    p["metadata"]["annotations"] = {"sardeenz.io/port": "3100"}
    assert pod_address(p, 9) == PeerAddress("10.1.0.5", 3100)
    p["metadata"]["annotations"] = {"sardeenz.io/port": "nope"}
    assert pod_address(p, 9) == PeerAddress("10.1.0.5", 3000)
    p["spec"]["containers"][0]["ports"] = []
    assert pod_address(p, 9) == PeerAddress("10.1.0.5", 9)


def test_rbac_problem_names_verb_resource_namespace_and_role() -> None:
    text = str(RbacProblem("update", "leases", "ns1", 'User "x" cannot update'))
    assert 'User "x" cannot update (403)' in text
    assert "update leases in namespace 'ns1'" in text
    assert 'apiGroups ["coordination.k8s.io"] resources ["leases"] verbs ["update"]' in text
    assert "Role" in text
