"""A real kube-apiserver + etcd for tests and benchmarks, on free loopback ports in a
scratch folder.

Why real: Lease optimistic concurrency, watch semantics, RBAC denials and TokenRequest
answers are what a mock gets wrong. The binaries come from ``make kube-env`` (Debian's
``kubernetes`` source package built once per machine; see scripts/kube-env.sh), found through
``SARDEENZ_KUBE_APISERVER`` and ``SARDEENZ_ETCD``.

There is no kubelet, controller-manager or scheduler: a test plays the kubelet's part by
creating Pod objects and patching their status. The ServiceAccount admission plugin is off
(no token controller would ever satisfy it), so ServiceAccount tokens come from the
TokenRequest API, which the API server signs by itself.

The helpers here are synchronous REST calls with the admin token, so module-scoped fixtures
and the cluster tier (which starts one ``sardeenz serve`` per pod) can use them as well as
async tests and the soak (testkit/soak_kube.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from testkit.ports import free_port_range

APISERVER_ENV = "SARDEENZ_KUBE_APISERVER"
ETCD_ENV = "SARDEENZ_ETCD"
KUBECTL_ENV = "SARDEENZ_KUBECTL"

READY_TIMEOUT_SECONDS = 90.0
"""About 5 s on an idle machine; the bound leaves room for two loaded cores."""
STOP_GRACE_SECONDS = 10.0

SARDEENZ_RULES: tuple[dict[str, Any], ...] = (
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "update"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["list", "watch", "create", "update"],
    },
)
"""The RBAC Role Sardeenz needs in its namespace: leader Lease, pod discovery and the
control state's ConfigMaps, no more."""


class KubeBinariesMissing(Exception):
    """The kube tier's binaries are not configured (pytest was run by hand)."""


def find_binaries() -> tuple[Path, Path]:
    """(kube-apiserver, etcd) from the environment.

    Unset -> :class:`KubeBinariesMissing` (the tier skips: someone ran pytest by hand); set
    to a path that does not exist -> ``FileNotFoundError`` (the tier fails), so ``make test``
    cannot skip it by accident.
    """
    found: list[Path] = []
    for var in (APISERVER_ENV, ETCD_ENV):
        value = os.environ.get(var)
        if not value:
            raise KubeBinariesMissing(
                f"{var} is not set: this tier runs a real kube-apiserver and etcd. Run `make "
                f"test`, or `make kube-env` and export {APISERVER_ENV}=~/.cache/sardeenz/"
                f"kube-1.20.2/bin/kube-apiserver {ETCD_ENV}=~/.cache/sardeenz/kube-1.20.2/bin/etcd"
            )
        path = Path(value)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise FileNotFoundError(f"{var}={value} is not an executable (run `make kube-env`)")
        found.append(path)
    return found[0], found[1]


@contextlib.contextmanager
def started_apiserver(root: Path) -> Iterator[KubeApiServer]:
    """A ready API server from the environment's binaries, stopped (processes killed,
    folder removed) afterwards. :func:`find_binaries` decides what a missing binary is
    (tests/kube/apiserver.py turns that into a skip or a failure; benchmarks exit)."""
    apiserver, etcd = find_binaries()
    server = KubeApiServer(root, apiserver, etcd)
    server.start()
    try:
        yield server
    finally:
        server.stop()


CLUSTER_SCOPED = (
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
)
"""What a test could create outside its own namespace (besides the namespace itself)."""


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class KubeApiServer:
    """etcd + kube-apiserver, each in its own session so a stop kills the whole group."""

    root: Path
    apiserver_bin: Path
    etcd_bin: Path
    admin_token: str = field(default_factory=lambda: secrets.token_hex(16))
    port: int = 0
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _tls: ssl.SSLContext | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_path(self) -> Path:
        """The self-signed serving certificate (with its CA), written by the API server."""
        return self.root / "certs" / "apiserver.crt"

    def log_path(self, name: str) -> Path:
        return self.root / f"{name}.log"

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> KubeApiServer:
        base = free_port_range(3)
        etcd_client, etcd_peer, self.port = base, base + 1, base + 2
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "certs").mkdir()
        _write_private(
            self.root / "tokens.csv", f"{self.admin_token},admin,admin,system:masters\n".encode()
        )
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_private(
            self.root / "sa.key",
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            ),
        )
        (self.root / "sa.pub").write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        etcd_url = f"http://127.0.0.1:{etcd_client}"
        peer_url = f"http://127.0.0.1:{etcd_peer}"
        self._spawn(
            "etcd",
            [
                str(self.etcd_bin),
                "--name=test",
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=test={peer_url}",
                # Test data: an fsync per write only makes the tier slower.
                "--unsafe-no-fsync",
            ],
        )
        self._spawn(
            "kube-apiserver",
            [
                str(self.apiserver_bin),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                # 1.20 still has the deprecated plain-HTTP port: off, or parallel servers clash.
                "--insecure-port=0",
                f"--cert-dir={self.root / 'certs'}",
                f"--token-auth-file={self.root / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={self.url}",
                f"--service-account-key-file={self.root / 'sa.pub'}",
                f"--service-account-signing-key-file={self.root / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--disable-admission-plugins=ServiceAccount",
                "--enable-priority-and-fairness=false",
            ],
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        with self.log_path(name).open("wb") as log:
            self._procs[name] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,
            )

    def _wait_ready(self) -> None:
        """Until ``GET /readyz`` answers 200 (RBAC bootstrap roles included), bounded."""
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        last = "no answer yet"
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {proc.returncode} while starting:\n"
                        + _tail(self.log_path(name))
                    )
            if self.ca_path.is_file():
                try:
                    with self.client(timeout=2.0) as api:
                        resp = api.get("/readyz")
                    if resp.status_code == 200:
                        return
                    last = f"{resp.status_code}: {resp.text[-500:]}"
                except (httpx.HTTPError, OSError) as exc:
                    last = repr(exc)
            time.sleep(0.2)
        raise TimeoutError(
            f"kube-apiserver not ready within {READY_TIMEOUT_SECONDS:.0f} s ({last}):\n"
            + _tail(self.log_path("kube-apiserver"))
        )

    def stop(self) -> None:
        """SIGTERM each process group (API server first), SIGKILL what stays, reap all."""
        for name in ("kube-apiserver", "etcd"):
            proc = self._procs.get(name)
            if proc is None:
                continue
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=STOP_GRACE_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    continue
            # The group may hold children the leader did not wait for.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self._procs.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- REST helpers (admin token) ----------------------------------------------------

    def _tls_context(self) -> ssl.SSLContext:
        """The context trusting the serving certificate, built once: the tests open a
        client per request or poll (``client()``), and a context per client cost as much
        CPU as the request."""
        if self._tls is None:
            self._tls = ssl.create_default_context(cafile=self.ca_path)
        return self._tls

    def client(self, token: str | None = None, timeout: float = 10.0) -> httpx.Client:
        """A client of the API server, as admin unless another bearer token is given."""
        return httpx.Client(
            base_url=self.url,
            verify=self._tls_context(),
            headers={"Authorization": f"Bearer {token or self.admin_token}"},
            timeout=timeout,
        )

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.client() as api:
            resp = api.post(path, json=body)
        if resp.status_code not in (200, 201):
            raise RuntimeError(f"POST {path}: {resp.status_code} {resp.text}")
        data: dict[str, Any] = resp.json()
        return data

    def cluster_scoped(self) -> set[str]:
        """Every object of ``CLUSTER_SCOPED`` by kind and name: what modules sharing the
        server must leave as they found it (each works in namespaces of its own)."""
        found: set[str] = set()
        with self.client() as api:
            for path in CLUSTER_SCOPED:
                resp = api.get(path)
                if resp.status_code != 200:
                    raise RuntimeError(f"GET {path}: {resp.status_code} {resp.text}")
                kind = path.rsplit("/", 1)[1]
                found |= {f"{kind}/{o['metadata']['name']}" for o in resp.json()["items"]}
        return found

    def create_namespace(self, name: str | None = None) -> str:
        name = name or f"t-{secrets.token_hex(4)}"
        self._post("/api/v1/namespaces", {"metadata": {"name": name}})
        return name

    def create_service_account(
        self, namespace: str, name: str, rules: Iterable[dict[str, Any]] | None = None
    ) -> None:
        """A ServiceAccount, and when ``rules`` is given a Role of exactly those rules bound
        to it (Role and RoleBinding are named after the account)."""
        self._post(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
        if rules is None:
            return
        rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
        self._post(f"{rbac}/roles", {"metadata": {"name": name}, "rules": list(rules)})
        self._post(
            f"{rbac}/rolebindings",
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            },
        )

    def service_account_token(
        self, namespace: str, name: str, expiration_seconds: int = 3600
    ) -> str:
        """A token for the ServiceAccount from the TokenRequest API (what a kubelet mounts)."""
        data = self._post(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": expiration_seconds},
            },
        )
        token: str = data["status"]["token"]
        return token

    def write_kubeconfig(self, target: Path, token: str | None = None) -> Path:
        """A kubeconfig for ``$SARDEENZ_KUBECTL --kubeconfig FILE`` (debugging a test)."""
        user = {"token": token or self.admin_token}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_path)},
                }
            ],
            "users": [{"name": "test", "user": user}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            "current-context": "test",
        }
        # JSON is valid YAML, and kubectl reads either.
        target.write_text(json.dumps(config, indent=2))
        return target

    def write_service_account_dir(self, target: Path, namespace: str, token: str) -> Path:
        """The files a pod sees under /var/run/secrets/kubernetes.io/serviceaccount/."""
        target.mkdir(parents=True, exist_ok=True)
        (target / "token").write_text(token)
        (target / "namespace").write_text(namespace)
        shutil.copyfile(self.ca_path, target / "ca.crt")
        return target
