"""Sardeenz in Kubernetes mode with exactly what deploy/kubernetes grants it.

The ``kubernetes`` overlay is applied for real (with the operator's Secret) into a fresh
namespace of the Kubernetes tier's API server; the test plays the kubelet
(testkit/kube_pods.py): two Pod objects labelled ``app=sardeenz``, patched Ready with a podIP
on 127.0.0.x, and for them a ServiceAccount directory holding a TokenRequest token of the
manifests' own ``sardeenz`` ServiceAccount (no Role written by the test). Two real
``sardeenz serve`` run in Kubernetes mode with it (``SARDEENZ_KUBE_API_URL``, the
CLUSTER_SECRET of the Secret, simulated GPUs): the ``sardeenz-leader`` Lease is held by one
of them, both report that leader, no warning, and each other through the pod watch.

Then, for each verb of the manifests' Role, the Role is patched without it (and restored
after): the call that needs it is provoked (a follower's read, the leader's renewal, a
deleted Lease, a restarted container's list and watch of the pods and of the control
ConfigMaps, a catalog write that must create or update its ConfigMap), and the pods that
make it report a
warning naming that verb, the resource and the namespace, in ``/api/cluster/status`` and
once in the log, while every process stays up and Ready; with the Role restored the
warning goes and the cluster is whole again, with no restart.
"""

from __future__ import annotations

import base64
import copy
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sardeenz.cluster.membership.kube_api import GROUPS
from testkit.cluster import agreed_leader
from testkit.kube import KubeApiServer
from testkit.kube_pods import LEASE, KubePods
from tests.deploy.kubectl import Kubectl, can, deploy_to, put_role
from tests.deploy.manifests import KustomizeMissing, one

pytestmark = [pytest.mark.deploy, pytest.mark.slow]

CASES = (
    ("leases", "get"),
    ("leases", "create"),
    ("leases", "update"),
    ("pods", "list"),
    ("pods", "watch"),
    ("configmaps", "list"),
    ("configmaps", "watch"),
    ("configmaps", "create"),
    ("configmaps", "update"),
)
"""Every (resource, verb) of the manifests' Role (checked against it below)."""
SIM_GPUS = "NVIDIA L4:24GiB"
WARN_WITHIN = 20.0
"""RBAC propagation (an informer: under a second) plus the pods' backoff, on loaded cores."""
RECOVER_WITHIN = 40.0
"""The elector's and watch's backoff doubles while refused (up to 30 s): a few rounds."""


@dataclass
class Deployed:
    namespace: str
    role: dict[str, Any]
    pods: KubePods


@pytest.fixture(scope="module")
def deployed(
    kube: KubeApiServer, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployed]:
    root = tmp_path_factory.mktemp("deployed")
    try:
        namespace, objs = deploy_to(kube, "kubernetes", root, kubectl)
    except KustomizeMissing as exc:
        pytest.skip(str(exc))
    with kube.client() as admin:
        secret = admin.get(f"/api/v1/namespaces/{namespace}/secrets/sardeenz")
    assert secret.status_code == 200, secret.text
    cluster_secret = base64.b64decode(secret.json()["data"]["CLUSTER_SECRET"]).decode()
    pods = KubePods(
        kube,
        root,
        2,
        namespace=namespace,
        api_url=True,
        extra_env={"CLUSTER_SECRET": cluster_secret, "SARDEENZ_SIM_GPUS": SIM_GPUS},
    )
    try:
        yield Deployed(namespace, one(objs, "Role"), pods.start())
    finally:
        pods.close()


def token_subject(sa_dir: Path) -> str:
    """The ``sub`` claim of the ServiceAccount token the pods read."""
    payload = (sa_dir / "token").read_text().split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    sub: str = claims["sub"]
    return sub


def whole(pods: KubePods) -> dict[str, dict[str, Any]]:
    """Every pod: one agreed leader, every pod known and healthy (heartbeats signed with
    the Secret's CLUSTER_SECRET), no warning."""

    def ok(s: dict[str, dict[str, Any]]) -> bool:
        return agreed_leader(s) and all(
            not v["warnings"]
            and {p["id"] for p in v["pods"]} == set(pods.names)
            and all(p["state"] == "healthy" for p in v["pods"])
            for v in s.values()
        )

    try:
        return pods.wait(ok, RECOVER_WITHIN, "one leader, every pod known and healthy")
    except AssertionError as exc:
        seen = {n: pods.status(n) for n in pods.names}
        raise AssertionError(f"{exc}; statuses: {seen}") from None


def test_runs_with_the_manifests_service_account(deployed: Deployed) -> None:
    pods = deployed.pods
    # The Role the manifests ship is exactly what the cases below take apart.
    rules = deployed.role["rules"]
    assert {(r["resources"][0], v) for r in rules for v in r["verbs"]} == set(CASES)
    # The token is the manifests' account's: the test wrote no Role or account of its own.
    assert token_subject(pods.service_account_dir) == (
        f"system:serviceaccount:{deployed.namespace}:sardeenz"
    )
    with pods.kube.client() as admin:
        roles = admin.get(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{deployed.namespace}/roles"
        ).json()["items"]
    assert [r["metadata"]["name"] for r in roles] == ["sardeenz"]

    t0 = time.monotonic()
    statuses = whole(pods)
    print(f"\nleader agreed, both pods known {time.monotonic() - t0:.2f}s after Ready")
    leader = next(iter(statuses.values()))["leader"]
    lease = pods.lease()
    assert lease is not None
    assert lease["holderIdentity"] == leader
    assert leader in pods.names
    for name, status in statuses.items():
        assert status["mode"] == "kubernetes"
        assert status["warnings"] == []
        assert status["leader"] == leader
        peers = {p["id"]: p for p in status["pods"]}
        assert set(peers) == set(pods.names)  # the other pod, from the pod watch
        (other,) = set(pods.names) - {name}
        assert peers[other]["address"] == f"{pods.hosts[other]}:{pods.port}"
        assert peers[other]["state"] == "healthy"


def without(role: dict[str, Any], resource: str, verb: str) -> dict[str, Any]:
    reduced = copy.deepcopy(role)
    rules = []
    for rule in reduced["rules"]:
        if rule["resources"] == [resource]:
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
        if rule["verbs"]:
            rules.append(rule)
    reduced["rules"] = rules
    return reduced


def refused(pods: KubePods, resource: str, verb: str, wanted: bool) -> None:
    """Until the authorizer (an informer of the Roles) applies the patch, bounded."""
    token = (pods.service_account_dir / "token").read_text()
    group = GROUPS[resource]
    deadline = time.monotonic() + WARN_WITHIN
    while can(pods.kube, token, pods.namespace, group, resource, verb) is wanted:
        assert time.monotonic() < deadline, (
            f"{verb} {resource} still {'allowed' if wanted else 'refused'}"
        )
        time.sleep(0.1)


def provoke(pods: KubePods, resource: str, verb: str, leader: str) -> set[str]:
    """Make the pods need ``verb`` on ``resource``; the pods that must then warn."""
    follower = next(n for n in pods.names if n != leader)
    if (resource, verb) == ("leases", "get"):
        return {follower}  # reads the Lease every retry period; the leader only renews
    if (resource, verb) == ("leases", "update"):
        return set(pods.names)  # the leader's renewal, then everyone's take-over of it
    if (resource, verb) == ("leases", "create"):
        with pods.kube.client() as admin:
            gone = admin.delete(
                f"/apis/coordination.k8s.io/v1/namespaces/{pods.namespace}/leases/{LEASE}"
            )
        assert gone.status_code == 200, gone.text
        return set(pods.names)
    if (resource, verb) in (("configmaps", "create"), ("configmaps", "update")):
        return {leader} if refused_write(pods, leader, verb) else set()
    # The pod and ConfigMap watches list once and then watch for minutes: a restarted
    # container shows what a pod starting under this Role gets.
    pods.restart(follower)
    if resource == "configmaps":  # a change it cannot see until the Role is fixed
        written = catalog_put(pods, leader, f"rbac-missed-{verb}")
        assert written.status_code == 200, written.text
    return {follower}


def converged(pods: KubePods) -> None:
    """Every pod's copy of the catalog is the API server's (read as admin)."""
    path = f"/api/v1/namespaces/{pods.namespace}/configmaps/sardeenz-control-catalog"
    with pods.kube.client() as admin:
        resp = admin.get(path)
    assert resp.status_code == 200, resp.text
    want = json.loads(resp.json()["data"]["body"])
    deadline = time.monotonic() + RECOVER_WITHIN
    copies: dict[str, Any] = {}
    while time.monotonic() < deadline:
        for name in pods.names:
            view = httpx.get(f"{pods.pods[name].url}/api/cluster/control", timeout=5).json()
            copies[name] = next(
                (d["body"] for d in view["documents"] if d["key"] == "catalog"), None
            )
        if all(copy == want for copy in copies.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"copies differ from the API server's {want}: {copies}")


def catalog_put(pods: KubePods, pod: str, name: str) -> httpx.Response:
    entry = {"modelPath": f"/models/{name}", "engine": "sim"}
    return httpx.put(f"{pods.pods[pod].url}/api/v1/catalog/{name}", json=entry, timeout=20)


def refused_write(pods: KubePods, leader: str, verb: str) -> bool:
    """A catalog write that needs ``verb`` on its ConfigMap: refused with a clear 503."""
    path = f"/api/v1/namespaces/{pods.namespace}/configmaps/sardeenz-control-catalog"
    with pods.kube.client() as admin:
        exists = admin.get(path).status_code == 200
        if verb == "create" and exists:
            assert admin.delete(path).status_code == 200
    if verb == "update" and not exists:
        created = catalog_put(pods, leader, "rbac-first")  # creating is still allowed
        assert created.status_code == 200, created.text
    resp = catalog_put(pods, leader, f"rbac-{verb}")
    assert resp.status_code == 503, resp.text
    assert resp.json()["code"] == "kube_forbidden", resp.text
    assert f"to {verb} configmaps" in resp.json()["detail"], resp.text
    return True


@pytest.mark.parametrize(("resource", "verb"), CASES, ids=[f"{r}-{v}" for r, v in CASES])
def test_a_role_without_one_verb_is_a_clear_error_not_a_crash(
    deployed: Deployed, resource: str, verb: str
) -> None:
    pods, namespace = deployed.pods, deployed.namespace
    leader = next(iter(whole(pods).values()))["leader"]
    logs = {name: len(pod.log()) for name, pod in pods.pods.items()}
    put_role(pods.kube, namespace, without(deployed.role, resource, verb))
    t0 = time.monotonic()
    try:
        refused(pods, resource, verb, True)
        warners = provoke(pods, resource, verb, leader)
        try:
            statuses = pods.wait(
                lambda s: all(s[n]["warnings"] for n in warners if n in s),
                WARN_WITHIN,
                f"a warning for {verb} {resource}",
            )
        except AssertionError as exc:
            tails = {n: pods.pods[n].log()[logs[n] :][-3000:] for n in warners}
            raise AssertionError(f"{exc}; logs: {tails}") from None
        took = time.monotonic() - t0
        print(f"\nRole without {verb} {resource}: warned by {sorted(warners)} in {took:.2f}s")
        for name, status in statuses.items():
            # Only this verb is missing, so no warning names anything else.
            for text in status["warnings"]:
                assert f"to {verb} {resource} in namespace" in text, (name, text)
        for name in warners:
            (text,) = statuses[name]["warnings"]
            print(f"  {name}: {text}")
            assert f'resources ["{resource}"]' in text
            assert f'verbs ["{verb}"]' in text
            assert f"to {verb} {resource} in namespace {namespace!r}" in text
            assert "Role" in text
            assert "403" in text
            log = pods.pods[name].log()[logs[name] :]
            lines = [ln for ln in log.splitlines() if "Kubernetes RBAC" in ln and "403" in ln]
            assert lines, log[-2000:]
            assert all(f"to {verb} {resource} in namespace {namespace!r}" in ln for ln in lines)
            assert len(lines) <= 2, lines  # once (not once per retry)
        if resource == "pods":
            # What it costs: without list a starting pod knows no peer; with list but no
            # watch it has the peers of its start-up list and sees no change after.
            (restarted,) = warners
            known = {p["id"] for p in statuses[restarted]["pods"]}
            assert known == ({restarted} if verb == "list" else set(pods.names)), known
        if resource == "leases" and verb != "get":
            pods.wait(
                lambda s: all(v["leader"] is None for v in s.values()),
                WARN_WITHIN,
                "no leader without the Lease",
            )
        # No crash loop: every process is up and Ready, nothing went unhandled.
        for name, pod in pods.pods.items():
            assert pod.proc is not None
            assert pod.proc.poll() is None, name
            ready = httpx.get(f"{pod.url}/api/health/ready", timeout=5)
            assert ready.status_code == 200, (name, ready.text)
            assert "Traceback" not in pod.log()[logs[name] :], name
    finally:
        put_role(pods.kube, namespace, deployed.role)
    refused(pods, resource, verb, False)
    if resource == "configmaps" and verb in ("create", "update"):
        # A refused write is the operator's to retry (its 503 said so); it clears the warning.
        again = catalog_put(pods, leader, f"rbac-{verb}")
        assert again.status_code == 200, again.text
    t0 = time.monotonic()
    statuses = whole(pods)
    print(f"  Role restored: whole again in {time.monotonic() - t0:.2f}s, no restart")
    lease = pods.lease()
    assert lease is not None
    assert lease["holderIdentity"] == next(iter(statuses.values()))["leader"]
    if resource == "configmaps":
        converged(pods)  # what a pod missed while refused, it has once the Role is fixed
