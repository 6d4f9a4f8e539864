"""deploy/kubernetes: every overlay rendered, linted, and applied to a real kube-apiserver.

Offline (kustomize only): labels and selectors agree on ``app=sardeenz``, the probes point at
routes the app really serves, the pod gets its identity from the downward API and its
cluster secret from a Secret, the GPU request and the drain-long-enough termination grace are
there, the Role is namespaced and minimal, and the OpenShift overlay fits the restricted SCC.

Against the Kubernetes tier's real kube-apiserver 1.20 (tests/kube): each overlay is applied
with a server-side dry run (nothing created) and then for real, validated against the
server's OpenAPI schema (a typo is refused). The Route kind does not exist on a plain API
server, so the test registers a CustomResourceDefinition for ``route.openshift.io/v1`` with
the fields the overlay uses (schema written here from OpenShift's Route API) and applies the
whole OpenShift overlay, Route included. Then the manifests' own ServiceAccount gets a token
(TokenRequest) and is shown to be able to do exactly what its Role grants, and removing any
one verb from the Role turns that very call into a 403.
"""

from __future__ import annotations

import copy
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sardeenz.app import create_app
from sardeenz.cli.server import GRACEFUL_SECONDS
from sardeenz.cluster.identity import (
    ClusterMode,
    check_cluster_settings,
    detect_mode,
    identity_of,
    is_self,
    parse_peers,
)
from sardeenz.config import load_settings
from sardeenz.shutdown import exit_budget_seconds
from testkit.kube import KubeApiServer
from tests.deploy.kubectl import Kubectl, can, deploy_to, put_role
from tests.deploy.manifests import (
    APP_LABEL,
    KUBE_MODE_OVERLAYS,
    OVERLAYS,
    REPO,
    KustomizeMissing,
    objects,
    one,
    render,
)

pytestmark = pytest.mark.deploy

GRANTED: dict[tuple[str, str], set[str]] = {
    ("coordination.k8s.io", "leases"): {"get", "create", "update"},
    ("", "pods"): {"list", "watch"},
    ("", "configmaps"): {"list", "watch", "create", "update"},
}
"""What Sardeenz's Kubernetes mode does in its namespace: the leader Lease, peer pods and
the control state's ConfigMaps."""
AUTH_DELEGATION = {
    ("authentication.k8s.io", "tokenreviews", ("create",)),
    ("authorization.k8s.io", "subjectaccessreviews", ("create",)),
}
"""The OpenShift overlay's ClusterRole: the token and access reviews of its sign-in."""
ALL_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
UVICORN_SHUTDOWN_SECONDS = GRACEFUL_SECONDS
"""cli.py's ``timeout_graceful_shutdown``: before the engines are stopped."""
RBAC_PROPAGATION_SECONDS = 15.0


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    try:
        return request.param, objects(render(request.param))
    except KustomizeMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module", params=KUBE_MODE_OVERLAYS)
def kube_mode_overlay(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    try:
        return request.param, objects(render(request.param))
    except KustomizeMissing as exc:
        pytest.skip(str(exc))


def pod_spec(objs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objs, "StatefulSet")["spec"]["template"]["spec"]
    return spec


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = pod_spec(objs)["containers"]
    assert len(containers) == 1
    c: dict[str, Any] = containers[0]
    return c


# --- offline lint -------------------------------------------------------------------------


def test_every_object_carries_the_app_label_and_selectors_use_it(
    overlay: tuple[str, list[dict[str, Any]]],
) -> None:
    _, objs = overlay
    for obj in objs:
        assert obj["metadata"]["labels"] == APP_LABEL, obj["kind"]
        if obj["kind"] in CLUSTER_SCOPED:  # the OpenShift overlay's review ClusterRole
            assert "namespace" not in obj["metadata"], obj["kind"]
        else:
            assert obj["metadata"]["namespace"] == "sardeenz", obj["kind"]
    sts = one(objs, "StatefulSet")
    assert sts["spec"]["selector"] == {"matchLabels": APP_LABEL}
    assert sts["spec"]["template"]["metadata"]["labels"] == APP_LABEL
    assert sts["spec"]["serviceName"] == "sardeenz-peers"
    for claim in sts["spec"]["volumeClaimTemplates"]:
        assert claim["metadata"]["labels"] == APP_LABEL
    services = [o for o in objs if o["kind"] == "Service"]
    assert {s["metadata"]["name"] for s in services} == {"sardeenz", "sardeenz-peers"}
    for svc in services:
        assert svc["spec"]["selector"] == APP_LABEL
    peers = one(objs, "Service", "sardeenz-peers")["spec"]
    assert peers["clusterIP"] == "None"
    assert peers["publishNotReadyAddresses"] is True


def test_probes_point_at_routes_the_app_serves(
    overlay: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    _, objs = overlay
    # The app's own OpenAPI document: the GET routes it really serves.
    document = create_app(load_settings(data_dir=tmp_path)).api.openapi()
    served = {path for path, ops in document["paths"].items() if "get" in ops}
    c = container(objs)
    port_names = {p["name"]: p["containerPort"] for p in c["ports"]}
    probes = {kind: c[kind] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["httpGet"]["path"] == "/api/health/live"
    assert probes["readinessProbe"]["httpGet"]["path"] == "/api/health/ready"
    for kind, probe in probes.items():
        assert probe["httpGet"]["path"] in served, kind
        assert probe["httpGet"]["port"] in port_names, kind
    # The image's default port (SARDEENZ_PORT=3000 in deploy/Containerfile).
    assert port_names["http"] == 3000
    for svc in (o for o in objs if o["kind"] == "Service"):
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in port_names


def test_pod_gets_identity_secrets_gpu_volume_and_drain_time(
    overlay: tuple[str, list[dict[str, Any]]],
) -> None:
    _, objs = overlay
    spec, c = pod_spec(objs), container(objs)
    env = {e["name"]: e for e in c["env"]}
    downward = {
        "POD_NAME": "metadata.name",
        "POD_IP": "status.podIP",
        "NAMESPACE": "metadata.namespace",
    }
    for name, field in downward.items():
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == field
    secret = env["CLUSTER_SECRET"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": "sardeenz", "key": "CLUSTER_SECRET"}
    previous = env["CLUSTER_SECRET_PREVIOUS"]["valueFrom"]["secretKeyRef"]
    assert previous["optional"] is True
    assert "value" not in env["SARDEENZ_JWT_SECRET"]
    gpus = c["resources"]["requests"]["nvidia.com/gpu"]
    assert gpus == c["resources"]["limits"]["nvidia.com/gpu"]  # extended resources: equal
    assert int(gpus) >= 1
    assert spec["serviceAccountName"] == "sardeenz"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    claims = one(objs, "StatefulSet")["spec"]["volumeClaimTemplates"]
    assert [cl["metadata"]["name"] for cl in claims] == ["data"]
    assert mounts["data"] == "/data"
    # SIGTERM -> uvicorn's graceful window, then every engine's stop grace (vLLM drains for
    # 3/4 of it); Sardeenz's own bound on its exit comes before the kubelet's SIGKILL.
    stop_grace = float(env["SARDEENZ_STOP_GRACE_SECONDS"]["value"])
    needed = exit_budget_seconds(stop_grace, UVICORN_SHUTDOWN_SECONDS)
    assert spec["terminationGracePeriodSeconds"] > needed


def test_rbac_is_namespaced_and_exactly_what_kubernetes_mode_uses(
    kube_mode_overlay: tuple[str, list[dict[str, Any]]],
) -> None:
    name, objs = kube_mode_overlay
    kinds = {o["kind"] for o in objs}
    if name == "openshift":
        # Token and access reviews are cluster-scoped: a ClusterRole, of exactly those.
        cluster_role = one(objs, "ClusterRole")
        assert {
            (rule["apiGroups"][0], rule["resources"][0], tuple(rule["verbs"]))
            for rule in cluster_role["rules"]
        } == AUTH_DELEGATION
        crb = one(objs, "ClusterRoleBinding")
        assert crb["roleRef"]["name"] == cluster_role["metadata"]["name"]
        assert crb["subjects"] == [
            {"kind": "ServiceAccount", "name": "sardeenz", "namespace": "sardeenz"}
        ]
        env = {e["name"]: e for e in container(objs)["env"]}
        assert env["SARDEENZ_TOKEN_REVIEW"]["value"] == "true"
        with pytest.MonkeyPatch.context() as mp:  # read as the pod reads it: from its env
            mp.setenv(
                "SARDEENZ_TOKEN_REVIEW_ROLE_ACCESS",
                env["SARDEENZ_TOKEN_REVIEW_ROLE_ACCESS"]["value"],
            )
            settings = load_settings()
        assert set(settings.token_review_role_access) == {"admin", "admin-readonly"}
    else:
        assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    rules = one(objs, "Role")["rules"]
    granted = {
        (group, resource): set(rule["verbs"])
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert granted == GRANTED
    assert all(not rule.get("resourceNames") for rule in rules)
    binding = one(objs, "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "sardeenz",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sardeenz", "namespace": "sardeenz"}
    ]


def test_image_is_the_documented_one() -> None:
    try:
        images = {name: container(objects(render(name)))["image"] for name in OVERLAYS}
    except KustomizeMissing as exc:
        pytest.skip(str(exc))
    assert len(set(images.values())) == 1, images
    image = images["kubernetes"]
    assert image.endswith(":gpu")
    assert image in (REPO / "docs" / "deploy.md").read_text()
    containerfile = (REPO / "deploy" / "Containerfile").read_text()
    # The GPU image is the default target: the last stage of the file.
    stages = [line.split()[-1] for line in containerfile.splitlines() if line.startswith("FROM ")]
    assert stages[-1] == "gpu"
    assert "USER 10001" in containerfile


def test_kubernetes_overlay_runs_as_the_image_user() -> None:
    try:
        objs = objects(render("kubernetes"))
    except KustomizeMissing as exc:
        pytest.skip(str(exc))
    ctx = pod_spec(objs)["securityContext"]
    assert ctx["runAsNonRoot"] is True
    assert ctx["runAsUser"] == 10001  # USER 10001 in deploy/Containerfile
    assert ctx["fsGroup"] == ctx["runAsGroup"] == 10001


def test_openshift_overlay_fits_the_restricted_scc_and_routes_to_the_service() -> None:
    try:
        objs = objects(render("openshift"))
    except KustomizeMissing as exc:
        pytest.skip(str(exc))
    spec, c = pod_spec(objs), container(objs)
    pod_ctx, ctr_ctx = spec["securityContext"], c["securityContext"]
    # restricted-v2 assigns UID, GID and fsGroup from the namespace's range: fixing any of
    # them would be refused (or force a custom SCC).
    for field in ("runAsUser", "runAsGroup", "fsGroup", "supplementalGroups"):
        assert field not in pod_ctx, field
        assert field not in ctr_ctx, field
    assert pod_ctx["runAsNonRoot"] is True
    assert pod_ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    assert ctr_ctx["allowPrivilegeEscalation"] is False
    assert ctr_ctx["capabilities"] == {"drop": ["ALL"]}
    assert not ctr_ctx.get("privileged")
    assert "hostPath" not in str(spec.get("volumes"))
    route = one(objs, "Route")
    assert route["spec"]["to"] == {"kind": "Service", "name": "sardeenz", "weight": 100}
    svc_ports = {p["name"] for p in one(objs, "Service", "sardeenz")["spec"]["ports"]}
    assert route["spec"]["port"]["targetPort"] in svc_ports
    assert route["spec"]["tls"]["termination"] == "edge"


def expand(env: list[dict[str, Any]], fields: dict[str, str]) -> dict[str, str]:
    """A container's environment as the kubelet makes it: downward-API fields filled in and
    ``$(VAR)`` replaced from variables defined earlier in the list (later ones stay as is)."""
    out: dict[str, str] = {}
    for item in env:
        if "valueFrom" in item:
            ref = item["valueFrom"].get("fieldRef")
            if ref:
                out[item["name"]] = fields[ref["fieldPath"]]
            continue
        value = item["value"]
        for name, known in out.items():
            value = value.replace(f"$({name})", known)
        out[item["name"]] = value
    return out


def test_static_peers_overlay_forms_a_cluster_without_the_kubernetes_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No Role, no token; every pod of the StatefulSet finds itself exactly once in the one
    CLUSTER_PEERS list, runs static (not Kubernetes) mode inside a pod, and the list, the
    replica count and the quorum's expected pods agree."""
    try:
        objs = objects(render("static-peers"))
    except KustomizeMissing as exc:
        pytest.skip(str(exc))
    kinds = {o["kind"] for o in objs}
    assert not kinds & {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    assert one(objs, "ServiceAccount")["automountServiceAccountToken"] is False
    sts = one(objs, "StatefulSet")
    replicas = sts["spec"]["replicas"]
    assert replicas >= 3
    ids = set()
    for ordinal in range(replicas):
        pod = f"sardeenz-{ordinal}"
        env = expand(
            container(objs)["env"],
            {"metadata.name": pod, "status.podIP": f"10.0.0.{ordinal + 1}",
             "metadata.namespace": "sardeenz"},
        )  # fmt: skip
        secret_refs = [e["name"] for e in container(objs)["env"] if "secretKeyRef" in str(e)]
        for name in secret_refs:  # what the operator's Secret holds (docs/deploy.md)
            env[name] = secrets.token_hex(32)
        env.update(SARDEENZ_HOST="0.0.0.0", SARDEENZ_PORT="3000")  # the image's ENV
        env["KUBERNETES_SERVICE_HOST"] = "10.96.0.1"  # what the kubelet adds to every pod
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        settings = load_settings()
        assert detect_mode(settings) is ClusterMode.STATIC
        check_cluster_settings(settings)
        me = identity_of(settings)
        assert me.pod_id == pod
        peers = parse_peers(settings.cluster_peers)
        assert len(peers) == replicas == settings.cluster_expected_pods
        assert [p for p in peers if is_self(p, me, settings)] == [me.address]
        ids.add(me.address)
    assert len(ids) == replicas


# --- against a real kube-apiserver ----------------------------------------------------------

ROUTE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "routes.route.openshift.io"},
    "spec": {
        "group": "route.openshift.io",
        "scope": "Namespaced",
        "names": {"plural": "routes", "singular": "route", "kind": "Route"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "required": ["spec"],
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["to"],
                                "properties": {
                                    "host": {"type": "string"},
                                    "path": {"type": "string"},
                                    "to": {
                                        "type": "object",
                                        "required": ["kind", "name"],
                                        "properties": {
                                            "kind": {"type": "string", "enum": ["Service"]},
                                            "name": {"type": "string", "minLength": 1},
                                            "weight": {
                                                "type": "integer",
                                                "minimum": 0,
                                                "maximum": 256,
                                            },
                                        },
                                    },
                                    "port": {
                                        "type": "object",
                                        "required": ["targetPort"],
                                        "properties": {
                                            "targetPort": {"x-kubernetes-int-or-string": True}
                                        },
                                    },
                                    "tls": {
                                        "type": "object",
                                        "required": ["termination"],
                                        "properties": {
                                            "termination": {
                                                "type": "string",
                                                "enum": ["edge", "passthrough", "reencrypt"],
                                            },
                                            "insecureEdgeTerminationPolicy": {
                                                "type": "string",
                                                "enum": ["Allow", "None", "Redirect", ""],
                                            },
                                        },
                                    },
                                    "wildcardPolicy": {
                                        "type": "string",
                                        "enum": ["None", "Subdomain"],
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def cluster(kubectl: Kubectl) -> Kubectl:
    """``kubectl`` bound to the real API server as admin, with the Route kind registered
    (cluster-scoped; it goes with the module's API server)."""
    created = kubectl("apply", "-f", "-", stdin=yaml.safe_dump(ROUTE_CRD))
    assert created.returncode == 0, created.stderr
    ready = kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/routes.route.openshift.io"
    )
    assert ready.returncode == 0, ready.stderr
    return kubectl


def api_path(obj: dict[str, Any], namespace: str) -> str:
    group_version = obj["apiVersion"]
    prefix = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    plural = {
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "StatefulSet": "statefulsets",
        "Service": "services",
        "ServiceAccount": "serviceaccounts",
        "Route": "routes",
    }
    if obj["kind"] in CLUSTER_SCOPED:
        return f"{prefix}/{CLUSTER_SCOPED[obj['kind']]}/{obj['metadata']['name']}"
    return f"{prefix}/namespaces/{namespace}/{plural[obj['kind']]}/{obj['metadata']['name']}"


CLUSTER_SCOPED = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}


@pytest.mark.parametrize("name", OVERLAYS)
def test_overlay_applies_dry_run_then_for_real(
    name: str,
    kube: KubeApiServer,
    cluster: Kubectl,
    tmp_path: Path,
) -> None:
    namespace = kube.create_namespace()
    rendered = render(name, namespace=namespace, workdir=tmp_path / "ns")
    objs = objects(rendered)
    namespaced = [o for o in objs if o["kind"] not in CLUSTER_SCOPED]
    assert {o["metadata"]["namespace"] for o in namespaced} == {namespace}
    for binding in (o for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"][0]["namespace"] == namespace
    # Client-side validation against the server's OpenAPI schema, then the server's own
    # admission and validation, with nothing stored.
    dry = cluster("apply", "--dry-run=server", "--validate=true", "-f", "-", stdin=rendered)
    assert dry.returncode == 0, dry.stderr
    with kube.client() as api:
        for obj in objs:
            assert api.get(api_path(obj, namespace)).status_code == 404, obj["kind"]
    real = cluster("apply", "--validate=true", "-f", "-", stdin=rendered)
    assert real.returncode == 0, real.stderr
    with kube.client() as api:
        for obj in objs:
            got = api.get(api_path(obj, namespace))
            assert got.status_code == 200, (obj["kind"], got.text)
            assert got.json()["metadata"]["labels"] == APP_LABEL
    # Applying again changes nothing that matters (an upgrade with unchanged manifests):
    # the StatefulSet's spec generation stays, so no rolling restart. (kubectl may still
    # print "configured": it replaces volumeClaimTemplates, a list with no merge key, whose
    # live copy carries server defaults.)
    sts_path = api_path(one(objs, "StatefulSet"), namespace)
    with kube.client() as api:
        generation = api.get(sts_path).json()["metadata"]["generation"]
    again = cluster("apply", "-f", "-", stdin=rendered)
    assert again.returncode == 0, again.stderr
    with kube.client() as api:
        assert api.get(sts_path).json()["metadata"]["generation"] == generation


def test_schema_validation_refuses_typos(
    kube: KubeApiServer, cluster: Kubectl, tmp_path: Path
) -> None:
    """The validation above is real: a misspelt field or a bad Route value is refused."""
    namespace = kube.create_namespace()
    objs = objects(render("openshift", namespace=namespace, workdir=tmp_path / "ns"))
    sts = copy.deepcopy(one(objs, "StatefulSet"))
    ctr = sts["spec"]["template"]["spec"]["containers"][0]
    ctr["livenessProbes"] = ctr.pop("livenessProbe")
    bad = cluster(
        "apply", "--dry-run=server", "--validate=true", "-f", "-", stdin=yaml.safe_dump(sts)
    )
    assert bad.returncode != 0
    assert "livenessProbes" in bad.stderr
    route = copy.deepcopy(one(objs, "Route"))
    route["spec"]["tls"]["termination"] = "edgy"
    bad = cluster("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(route))
    assert bad.returncode != 0
    assert "termination" in bad.stderr


# --- RBAC: the ServiceAccount's own token ------------------------------------------------------


class Probe:
    """One real API call per (resource, verb) the Role grants, as the ServiceAccount."""

    def __init__(self, kube: KubeApiServer, namespace: str, token: str) -> None:
        self.kube, self.namespace, self.token = kube, namespace, token
        self.leases = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.pods = f"/api/v1/namespaces/{namespace}/pods"
        self.configmaps = f"/api/v1/namespaces/{namespace}/configmaps"

    def status(self, resource: str, verb: str) -> int:
        with self.kube.client(token=self.token) as api:
            if resource == "leases":
                return self._lease(api, verb)
            if resource == "configmaps":
                return self._configmap(api, verb)
            return self._pod(api, verb)

    def _configmap(self, api: httpx.Client, verb: str) -> int:
        if verb in ("list", "watch"):
            return self._watchable(api, self.configmaps, "sardeenz.io/control=document", verb)
        if verb == "create":
            body = {"metadata": {"name": f"probe-{secrets.token_hex(3)}"}, "data": {}}
            return api.post(self.configmaps, json=body).status_code
        assert verb == "update"
        name = "sardeenz-control-presets"
        with self.kube.client() as admin:
            current = admin.get(f"{self.configmaps}/{name}")
            if current.status_code == 404:
                current = admin.post(self.configmaps, json={"metadata": {"name": name}})
        body = current.json()
        body["data"] = {"probe": secrets.token_hex(2)}
        return api.put(f"{self.configmaps}/{name}", json=body).status_code

    @staticmethod
    def _watchable(api: httpx.Client, path: str, selector: str, verb: str) -> int:
        if verb == "list":
            return api.get(path, params={"labelSelector": selector}).status_code
        params = {"labelSelector": selector, "watch": "true", "timeoutSeconds": "1"}
        with api.stream("GET", path, params=params) as resp:
            return resp.status_code

    def _lease(self, api: httpx.Client, verb: str) -> int:
        if verb == "get":
            return api.get(f"{self.leases}/sardeenz-leader").status_code
        if verb == "create":
            name = f"probe-{secrets.token_hex(3)}"
            return api.post(self.leases, json=lease(name)).status_code
        assert verb == "update"
        with self.kube.client() as admin:
            current = admin.get(f"{self.leases}/sardeenz-leader").json()
        current["spec"]["holderIdentity"] = f"sardeenz-{secrets.token_hex(2)}"
        return api.put(f"{self.leases}/sardeenz-leader", json=current).status_code

    def _pod(self, api: httpx.Client, verb: str) -> int:
        assert verb in ("list", "watch")
        return self._watchable(api, self.pods, "app=sardeenz", verb)


def lease(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": "sardeenz-0", "leaseDurationSeconds": 15},
    }


@pytest.fixture
def deployed(
    kube: KubeApiServer, cluster: Kubectl, tmp_path: Path
) -> tuple[str, list[dict[str, Any]], Probe]:
    """The kubernetes overlay applied in a fresh namespace, with the Lease and a peer pod
    in it (made as admin), and a Probe holding the manifests' ServiceAccount token."""
    namespace, objs = deploy_to(kube, "kubernetes", tmp_path, cluster)
    with kube.client() as admin:
        leases = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        made = admin.post(leases, json=lease("sardeenz-leader"))
        assert made.status_code == 201, made.text
        pod = {
            "metadata": {"name": "sardeenz-0", "labels": APP_LABEL},
            "spec": {"containers": [{"name": "sardeenz", "image": "sardeenz"}]},
        }
        made = admin.post(f"/api/v1/namespaces/{namespace}/pods", json=pod)
        assert made.status_code == 201, made.text
    token = kube.service_account_token(namespace, "sardeenz")
    return namespace, objs, Probe(kube, namespace, token)


def test_service_account_can_do_exactly_what_the_role_grants(
    kube: KubeApiServer, deployed: tuple[str, list[dict[str, Any]], Probe]
) -> None:
    namespace, _, probe = deployed
    for (_, resource), verbs in GRANTED.items():
        for verb in sorted(verbs):
            assert probe.status(resource, verb) in (200, 201), (resource, verb)
    others = {("", "secrets"), ("", "services"), ("apps", "statefulsets")}
    for group, resource in [*GRANTED, *others]:
        for verb in ALL_VERBS:
            expected = verb in GRANTED.get((group, resource), set())
            assert can(kube, probe.token, namespace, group, resource, verb) is expected, (
                resource, verb,
            )  # fmt: skip
    # Nothing outside its own namespace.
    elsewhere = kube.create_namespace()
    for (group, resource), verbs in GRANTED.items():
        for verb in verbs:
            assert not can(kube, probe.token, elsewhere, group, resource, verb)


def wait_status(probe: Probe, resource: str, verb: str, wanted: Callable[[int], bool]) -> int:
    """RBAC changes reach the authorizer through an informer: poll, bounded."""
    deadline = time.monotonic() + RBAC_PROPAGATION_SECONDS
    while True:
        status = probe.status(resource, verb)
        if wanted(status) or time.monotonic() > deadline:
            return status
        time.sleep(0.2)


def test_removing_any_one_verb_makes_that_call_403(
    kube: KubeApiServer, deployed: tuple[str, list[dict[str, Any]], Probe]
) -> None:
    namespace, objs, probe = deployed
    role = one(objs, "Role")
    for index, rule in enumerate(role["rules"]):
        resource = rule["resources"][0]
        for verb in rule["verbs"]:
            reduced = copy.deepcopy(role)
            kept = [v for v in rule["verbs"] if v != verb]
            if kept:
                reduced["rules"][index]["verbs"] = kept
            else:
                del reduced["rules"][index]
            put_role(kube, namespace, reduced)
            denied = wait_status(probe, resource, verb, lambda s: s == 403)
            assert denied == 403, (resource, verb, denied)
            # Only that verb: the others of the rule still work.
            for other in kept:
                assert probe.status(resource, other) in (200, 201), (resource, verb, other)
            put_role(kube, namespace, role)
            restored = wait_status(probe, resource, verb, lambda s: s in (200, 201))
            assert restored in (200, 201), (resource, verb, restored)


# --- RBAC: the OpenShift overlay's ClusterRole (sign-in) -----------------------------------


def review_status(kube: KubeApiServer, token: str, resource: str) -> int:
    """One real review as the ServiceAccount: a TokenReview (of its own token) or a
    SubjectAccessReview (may it get pods), as Sardeenz's sign-in makes them."""
    if resource == "tokenreviews":
        path = "/apis/authentication.k8s.io/v1/tokenreviews"
        body: dict[str, Any] = {"kind": "TokenReview", "spec": {"token": token}}
    else:
        path = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        attributes = {"namespace": "default", "verb": "get", "resource": "pods"}
        body = {
            "kind": "SubjectAccessReview",
            "spec": {"user": "someone", "resourceAttributes": attributes},
        }
    body["apiVersion"] = path.split("/")[2] + "/v1"
    with kube.client(token=token) as api:
        return api.post(path, json=body).status_code


def test_removing_either_review_rule_of_the_openshift_overlay_makes_that_review_403(
    kube: KubeApiServer, cluster: Kubectl, tmp_path: Path
) -> None:
    namespace, objs = deploy_to(kube, "openshift", tmp_path, cluster)
    role = one(objs, "ClusterRole")
    path = f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role['metadata']['name']}"
    token = kube.service_account_token(namespace, "sardeenz")

    def put(rules: list[dict[str, Any]]) -> None:
        with kube.client() as admin:
            live = admin.get(path).json()
            live["rules"] = rules
            assert admin.put(path, json=live).status_code == 200

    def wait(resource: str, wanted: int) -> int:
        deadline = time.monotonic() + RBAC_PROPAGATION_SECONDS
        while (status := review_status(kube, token, resource)) != wanted:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        return status

    try:
        for resource in ("tokenreviews", "subjectaccessreviews"):
            assert review_status(kube, token, resource) == 201, resource
        for rule in role["rules"]:
            (resource,) = rule["resources"]
            (other,) = {"tokenreviews", "subjectaccessreviews"} - {resource}
            put([r for r in role["rules"] if r is not rule])
            assert wait(resource, 403) == 403, resource
            assert review_status(kube, token, other) == 201, (resource, other)  # only that one
            put(role["rules"])
            assert wait(resource, 201) == 201, resource
    finally:
        with kube.client() as admin:  # cluster-scoped: nothing of this test may stay
            admin.delete(path)
            admin.delete(
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/"
                + one(objs, "ClusterRoleBinding")["metadata"]["name"]
            )
