"""Applying deploy/kubernetes to the Kubernetes tier's API server, shared by the deploy
tier's modules (test_manifests.py lints and probes the manifests; test_kube_mode_rbac.py
runs Sardeenz with what they grant)."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testkit.kube import KubeApiServer
from tests.deploy.manifests import objects, render

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
"""``kubectl ARGS`` against the test's API server, as admin."""


def admin_kubectl(kube: KubeApiServer, kubectl_bin: str, workdir: Path) -> Kubectl:
    """``kubectl`` bound to ``kube`` as admin (its kubeconfig written into ``workdir``)."""
    config = kube.write_kubeconfig(workdir / "config")

    def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [kubectl_bin, "--kubeconfig", str(config), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return kubectl


def deploy_to(
    kube: KubeApiServer, overlay: str, tmp_path: Path, kubectl: Kubectl
) -> tuple[str, list[dict[str, Any]]]:
    """A fresh namespace with the overlay applied for real in it (and the operator's Secret)."""
    namespace = kube.create_namespace()
    rendered = render(overlay, namespace=namespace, workdir=tmp_path / "ns")
    secret = kubectl(
        "-n", namespace, "create", "secret", "generic", "sardeenz",
        f"--from-literal=CLUSTER_SECRET={secrets.token_hex(32)}",
        f"--from-literal=SARDEENZ_JWT_SECRET={secrets.token_hex(32)}",
    )  # fmt: skip
    assert secret.returncode == 0, secret.stderr
    applied = kubectl("apply", "-f", "-", stdin=rendered)
    assert applied.returncode == 0, applied.stderr
    return namespace, objects(rendered)


def put_role(kube: KubeApiServer, namespace: str, role: dict[str, Any]) -> None:
    """Replace the ``sardeenz`` Role (as admin) with ``role``'s rules."""
    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles/sardeenz"
    with kube.client() as admin:
        version = admin.get(path).json()["metadata"]["resourceVersion"]
        body = {**role, "metadata": {**role["metadata"], "resourceVersion": version}}
        resp = admin.put(path, json=body)
    assert resp.status_code == 200, resp.text


def can(
    kube: KubeApiServer, token: str, namespace: str, group: str, resource: str, verb: str
) -> bool:
    """The API server's own answer (SelfSubjectAccessReview) for this token."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "namespace": namespace, "group": group, "resource": resource, "verb": verb
            }
        },
    }  # fmt: skip
    with kube.client(token=token) as api:
        resp = api.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=review)
    assert resp.status_code == 201, resp.text
    allowed: bool = resp.json()["status"]["allowed"]
    return allowed
