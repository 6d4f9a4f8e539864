"""Sardeenz pods against the test's kube-apiserver: the test plays the kubelet.

For each pod: a Pod object labelled ``app=sardeenz`` (its container port ``http``
is the port every process serves on), one real ``sardeenz serve`` on its own
loopback address (or in its own network namespace of a testkit/netns.py fabric, for
partitions) with the env a pod gets (``KUBERNETES_SERVICE_HOST``/``PORT``,
``POD_NAME``, ``POD_IP``, ``NAMESPACE``) and a ServiceAccount directory holding a
TokenRequest token of an account bound to the given Role; once the process
answers its readiness probe, the Pod's status is patched Ready with the
podIP, as a kubelet would. The harness's status helpers come from the static
cluster's (testkit/cluster.py).
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from testkit import netns
from testkit.cluster import SECRET, TIMING, Cluster
from testkit.kube import SARDEENZ_RULES, KubeApiServer
from testkit.ports import free_port
from testkit.servers import ServerProcess

LEASE_TIMING = {
    "SARDEENZ_KUBE_LEASE_DURATION_SECONDS": "3",
    "SARDEENZ_KUBE_RENEW_DEADLINE_SECONDS": "2",
    "SARDEENZ_KUBE_RENEW_INTERVAL_SECONDS": "0.5",
    "SARDEENZ_KUBE_RETRY_PERIOD_SECONDS": "0.3",
    "SARDEENZ_KUBE_REQUEST_TIMEOUT_SECONDS": "2",
}
"""Short, so hand-overs take seconds (the defaults: 15 / 10 / 5 / 2 / 5)."""
LEASE = "sardeenz-leader"


def common_port(hosts: Iterable[str]) -> int:
    """A port free on every one of ``hosts`` (pods of a StatefulSet share one)."""
    hosts = list(hosts)
    for _ in range(100):
        port = free_port()
        ok = True
        for host in hosts:
            with socket.socket() as s:
                try:
                    s.bind((host, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RuntimeError("no port free on all pod addresses")


class KubePods(Cluster):
    """``size`` pods named pod-a, pod-b, ... at 127.0.0.2, .3, ... in a fresh namespace.

    ``fabric``: a testkit/netns.py fabric of ``size`` namespaces whose ``publish`` made
    ``kube`` reachable: pod ``i`` then runs in namespace ``i`` on port 3000, its podIP is
    its data address (where its peers find it), it reaches the API server at the
    ``kubernetes`` Service's address (``netns.SERVICE_IP:443``), and the test reaches it
    on the management network (``ServerProcess.url``).

    ``namespace``: one that already holds the ``sardeenz`` ServiceAccount, Role and
    RoleBinding (the deploy tier's applied manifests); ``rules`` is then not used. The
    pods reach the API through ``SARDEENZ_KUBE_API_URL`` with ``SARDEENZ_CLUSTER_MODE=
    kubernetes`` instead of ``KUBERNETES_SERVICE_HOST``/``PORT`` when ``api_url`` is set.
    """

    def __init__(
        self,
        kube: KubeApiServer,
        root: Path,
        size: int,
        rules: Iterable[dict[str, Any]] = SARDEENZ_RULES,
        first_host: int = 2,
        *,
        namespace: str | None = None,
        api_url: bool = False,
        extra_env: dict[str, str] | None = None,
        fabric: netns.Fabric | None = None,
    ) -> None:
        self.kube = kube
        if namespace is None:
            namespace = kube.create_namespace()
            kube.create_service_account(namespace, "sardeenz", list(rules))
        self.namespace = namespace
        token = kube.service_account_token(self.namespace, "sardeenz")
        sa_dir = kube.write_service_account_dir(root / "serviceaccount", self.namespace, token)
        self.service_account_dir = sa_dir
        self.names = [f"pod-{chr(ord('a') + i)}" for i in range(size)]
        if fabric is None:
            self.hosts = {n: f"127.0.0.{first_host + i}" for i, n in enumerate(self.names)}
            self.port = common_port(self.hosts.values())
        else:
            assert fabric.published == kube.port, "fabric.publish(kube.port) first"
            self.hosts = {n: fabric.data_ip(i) for i, n in enumerate(self.names)}
            self.port = 3000  # each namespace has ports of its own
        self.pods: dict[str, ServerProcess] = {}
        if fabric is not None:
            api = {"KUBERNETES_SERVICE_HOST": netns.SERVICE_IP, "KUBERNETES_SERVICE_PORT": "443"}
        elif api_url:
            api = {"SARDEENZ_CLUSTER_MODE": "kubernetes", "SARDEENZ_KUBE_API_URL": kube.url}
        else:
            api = {
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(kube.port),
            }
        for i, name in enumerate(self.names):
            env = {
                **api,
                "SARDEENZ_KUBE_SERVICE_ACCOUNT_DIR": str(sa_dir),
                "POD_NAME": name,
                "POD_IP": self.hosts[name],
                "NAMESPACE": self.namespace,
                "CLUSTER_SECRET": SECRET,
                **TIMING,
                **LEASE_TIMING,
                **(extra_env or {}),
            }
            if fabric is None:
                self.pods[name] = ServerProcess(
                    root / name, host=self.hosts[name], port=self.port, extra_env=env
                )
                continue
            # Listening on every address of its namespace, as a container does.
            env["SARDEENZ_INSECURE"] = "true"
            srv = ServerProcess(
                root / name, host="0.0.0.0", port=self.port, prefix=fabric.prefix(i), extra_env=env
            )
            srv.url = f"http://{fabric.mgmt_ip(i)}:{self.port}"
            self.pods[name] = srv

    # ------------------------------------------------------------- kubelet
    def create_pod(self, name: str) -> None:
        body = {
            "metadata": {"name": name, "labels": {"app": "sardeenz"}},
            "spec": {
                "containers": [
                    {
                        "name": "sardeenz",
                        "image": "sardeenz",
                        "ports": [{"name": "http", "containerPort": self.port}],
                    }
                ]
            },
        }
        with self.kube.client() as api:
            resp = api.post(f"/api/v1/namespaces/{self.namespace}/pods", json=body)
        assert resp.status_code == 201, resp.text

    def mark_ready(self, name: str, ready: bool = True) -> None:
        ip = self.hosts[name]
        status = {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        with self.kube.client() as api:
            resp = api.patch(
                f"/api/v1/namespaces/{self.namespace}/pods/{name}/status",
                json={"status": status},
                headers={"Content-Type": "application/merge-patch+json"},
            )
        assert resp.status_code == 200, resp.text

    def delete_pod(self, name: str) -> None:
        with self.kube.client() as api:
            resp = api.delete(
                f"/api/v1/namespaces/{self.namespace}/pods/{name}",
                params={"gracePeriodSeconds": "0"},
            )
        assert resp.status_code == 200, resp.text

    def start(self, timeout: float = 60.0) -> KubePods:
        """Create the Pod objects, start every process at once (a start costs seconds of
        CPU on a loaded machine) and mark each Ready once it answers its probe."""
        for name in self.names:
            self.create_pod(name)

        def boot(name: str) -> None:
            self.pods[name].start(timeout)
            self.mark_ready(name)

        with ThreadPoolExecutor(len(self.names)) as pool:
            for done in [pool.submit(boot, name) for name in self.names]:
                done.result()
        return self

    def restart(self, name: str) -> None:
        """The kubelet restarting the container: not Ready, SIGTERM, a new process with
        the same data dir, Ready once it answers its probe."""
        self.mark_ready(name, False)
        self.pods[name].stop()
        self.pods[name].start(timeout=60)
        self.mark_ready(name)

    # ---------------------------------------------------------------- Lease
    def lease(self) -> dict[str, Any] | None:
        with self.kube.client() as api:
            resp = api.get(
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{LEASE}"
            )
        if resp.status_code == 404:
            return None
        assert resp.status_code == 200, resp.text
        spec: dict[str, Any] = resp.json()["spec"]
        return spec

    def wait_holder(self, other_than: str | None, timeout: float) -> tuple[str, float]:
        """Until the Lease names a holder (not ``other_than``): (holder, seconds taken)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            with contextlib.suppress(httpx.HTTPError):
                spec = self.lease()
                holder = (spec or {}).get("holderIdentity")
                if holder and holder != other_than:
                    return holder, time.monotonic() - t0
            time.sleep(0.05)
        raise AssertionError(f"no Lease holder other than {other_than} in {timeout}s")
