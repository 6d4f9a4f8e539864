"""The Kubernetes semantics Sardeenz relies on, pinned against a real kube-apiserver 1.20.

Leader election needs the Lease's optimistic concurrency (a second create is refused, a
replace with a stale resourceVersion is a 409 Conflict); discovery needs a label-selected
pod watch that reports the status a kubelet patches in; the deploy RBAC must be enough for
both and nothing more. Everything goes through ``kubernetes_asyncio``, the client Sardeenz
uses, so a client/server mismatch shows up here first.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException

from testkit.kube import KUBECTL_ENV, SARDEENZ_RULES, KubeApiServer
from testkit.waiting import within

pytestmark = pytest.mark.kube

LEASE = "sardeenz-leader"


def api_client(kube: KubeApiServer, token: str) -> client.ApiClient:
    cfg = client.Configuration(
        host=kube.url,
        api_key={"BearerToken": token},
        api_key_prefix={"BearerToken": "Bearer"},
    )
    cfg.ssl_ca_cert = str(kube.ca_path)
    return client.ApiClient(configuration=cfg)


@pytest.fixture
async def admin(kube: KubeApiServer) -> AsyncIterator[client.ApiClient]:
    async with api_client(kube, kube.admin_token) as api:
        yield api


def reason(exc: ApiException) -> str:
    """The Status object's machine-readable reason (AlreadyExists, Conflict, Forbidden...)."""
    body: dict[str, Any] = json.loads(exc.body or b"{}")
    return str(body.get("reason"))


def lease_body(holder: str) -> client.V1Lease:
    now = dt.datetime.now(dt.UTC)
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name=LEASE),
        spec=client.V1LeaseSpec(
            holder_identity=holder,
            lease_duration_seconds=15,
            acquire_time=now,
            renew_time=now,
            lease_transitions=0,
        ),
    )


def pod_body(name: str, app: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": app}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="sardeenz", image="sardeenz")]),
    )


async def test_server_is_the_built_version(admin: client.ApiClient) -> None:
    info = await client.VersionApi(admin).get_code()
    assert info.git_version == "v1.20.2"


async def test_lease_optimistic_concurrency(kube: KubeApiServer, admin: client.ApiClient) -> None:
    ns = kube.create_namespace()
    leases = client.CoordinationV1Api(admin)
    created = await leases.create_namespaced_lease(ns, lease_body("pod-a"))
    assert created.spec.holder_identity == "pod-a"

    with pytest.raises(ApiException) as second:
        await leases.create_namespaced_lease(ns, lease_body("pod-b"))
    assert (second.value.status, reason(second.value)) == (409, "AlreadyExists")

    read = await leases.read_namespaced_lease(LEASE, ns)
    read_version = read.metadata.resource_version
    read.spec.holder_identity = "pod-b"
    read.spec.lease_transitions = 1
    replaced = await leases.replace_namespaced_lease(LEASE, ns, read)
    assert replaced.spec.holder_identity == "pod-b"
    assert replaced.metadata.resource_version != read_version

    # A contender that read before pod-b's write must lose: its resourceVersion is stale.
    read.spec.holder_identity = "pod-c"
    read.metadata.resource_version = read_version
    with pytest.raises(ApiException) as stale:
        await leases.replace_namespaced_lease(LEASE, ns, read)
    assert (stale.value.status, reason(stale.value)) == (409, "Conflict")
    current = await leases.read_namespaced_lease(LEASE, ns)
    assert current.spec.holder_identity == "pod-b"
    assert current.spec.lease_transitions == 1


async def test_pod_watch_by_label_sees_added_status_and_deleted(
    kube: KubeApiServer, admin: client.ApiClient
) -> None:
    ns = kube.create_namespace()
    pods = client.CoreV1Api(admin)
    listed = await pods.list_namespaced_pod(ns, label_selector="app=sardeenz")
    assert listed.items == []
    events: list[tuple[str, str, str | None, bool]] = []
    stream = watch.Watch()

    async def collect() -> None:
        async for event in stream.stream(
            pods.list_namespaced_pod,
            ns,
            label_selector="app=sardeenz",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=30,
        ):
            pod: client.V1Pod = event["object"]
            ready = any(
                c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
            )
            events.append((event["type"], pod.metadata.name, pod.status.pod_ip, ready))
            if event["type"] == "DELETED":
                return

    watcher = asyncio.create_task(collect())
    try:
        await pods.create_namespaced_pod(ns, pod_body("other-0", "other"))
        await pods.create_namespaced_pod(ns, pod_body("sardeenz-0", "sardeenz"))
        # The test plays the kubelet: the pod gets an IP and turns Ready.
        await pods.patch_namespaced_pod_status(
            "sardeenz-0",
            ns,
            {
                "status": {
                    "phase": "Running",
                    "podIP": "127.0.0.2",
                    "podIPs": [{"ip": "127.0.0.2"}],
                    "conditions": [{"type": "Ready", "status": "True"}],
                }
            },
        )
        await pods.delete_namespaced_pod("other-0", ns, grace_period_seconds=0)
        await pods.delete_namespaced_pod("sardeenz-0", ns, grace_period_seconds=0)
        await within(watcher, 20, "the watch saw sardeenz-0 deleted")
    finally:
        stream.stop()
        watcher.cancel()

    assert {name for _, name, _, _ in events} == {"sardeenz-0"}, events
    assert events[0] == ("ADDED", "sardeenz-0", None, False), events
    assert ("MODIFIED", "sardeenz-0", "127.0.0.2", True) in events, events
    assert events[-1][0] == "DELETED", events


async def test_role_grants_exactly_what_sardeenz_needs(kube: KubeApiServer) -> None:
    ns = kube.create_namespace()
    kube.create_service_account(ns, "sardeenz", SARDEENZ_RULES)
    token = kube.service_account_token(ns, "sardeenz")
    async with api_client(kube, token) as api:
        leases = client.CoordinationV1Api(api)
        pods = client.CoreV1Api(api)
        await leases.create_namespaced_lease(ns, lease_body("pod-a"))
        lease = await leases.read_namespaced_lease(LEASE, ns)
        lease.spec.renew_time = dt.datetime.now(dt.UTC)
        await leases.replace_namespaced_lease(LEASE, ns, lease)
        assert (await pods.list_namespaced_pod(ns)).items == []
        stream = watch.Watch()
        async for _ in stream.stream(pods.list_namespaced_pod, ns, timeout_seconds=1):
            pass  # no pods: the watch is accepted and ends at its timeout

        denied: list[Callable[[], Awaitable[Any]]] = [
            lambda: pods.list_namespaced_secret(ns),  # nothing else in the namespace
            lambda: leases.list_namespaced_lease(ns),  # not a granted verb
            lambda: leases.delete_namespaced_lease(LEASE, ns),
            lambda: pods.read_namespaced_config_map("sardeenz-control-presets", ns),  # list
            lambda: pods.delete_namespaced_config_map("sardeenz-control-presets", ns),
            lambda: pods.list_namespaced_pod("default"),  # the Role is namespaced
        ]
        for call in denied:
            with pytest.raises(ApiException) as forbidden:
                await call()
            assert (forbidden.value.status, reason(forbidden.value)) == (403, "Forbidden")


async def test_missing_role_is_forbidden_with_a_clear_message(kube: KubeApiServer) -> None:
    ns = kube.create_namespace()
    kube.create_service_account(ns, "bare")
    token = kube.service_account_token(ns, "bare")
    async with api_client(kube, token) as api:
        with pytest.raises(ApiException) as forbidden:
            await client.CoordinationV1Api(api).read_namespaced_lease(LEASE, ns)
    assert forbidden.value.status == 403
    message = json.loads(forbidden.value.body or b"{}")["message"]
    assert f"system:serviceaccount:{ns}:bare" in message
    assert 'cannot get resource "leases"' in message


async def test_unknown_token_is_unauthorized(kube: KubeApiServer) -> None:
    async with api_client(kube, "not-a-token") as api:
        with pytest.raises(ApiException) as unauthorized:
            await client.CoreV1Api(api).list_namespaced_pod("default")
    assert unauthorized.value.status == 401


def test_kubectl_reads_the_server(kube: KubeApiServer, tmp_path: Path) -> None:
    """``write_kubeconfig`` + Debian's kubectl: how to look inside a failing test's server."""
    kubectl = os.environ.get(KUBECTL_ENV)
    if not kubectl:
        pytest.skip(f"{KUBECTL_ENV} is not set (make test sets it)")
    ns = kube.create_namespace()
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    done = subprocess.run(
        [kubectl, "--kubeconfig", str(config), "get", "namespace", ns, "-o", "name"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, f"namespace/{ns}"), done.stderr
