"""Network namespaces for partition tests and the soak: one per pod, two switches, one cable.

Each pod gets its own namespace with two interfaces:

* **data** (``10.77.N.i/24``): on the left or the right bridge; the two
  bridges are joined by one veth pair, the "cable". Pods talk to each other
  only on this network (their advertised addresses and ``CLUSTER_PEERS``), so
  unplugging the cable partitions the cluster into left | right, and
  unplugging one pod's data link (``isolate``) cuts that pod off alone.
* **management** (``10.78.N.i/24``): on a third bridge that also has an
  address in this (the test's) namespace, so the test reaches every pod on
  both sides of a partition. Pods never use it to reach each other.

``N`` is random per fabric, names carry a random suffix, and everything is
deleted in ``close()`` (deleting a namespace deletes its interfaces; the
bridges and the cable are deleted explicitly). Needs root (``ip netns``).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
from pathlib import Path

from testkit.cluster import SECRET
from testkit.servers import ServerProcess


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def available() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


class Fabric:
    def __init__(self, left: int, right: int) -> None:
        self.tag = f"{random.randrange(16**4):04x}"
        self.net = random.randrange(10, 250)
        self.size = left + right
        self.left = left
        self.namespaces: list[str] = []
        self._links: list[str] = []

    def data_ip(self, i: int) -> str:
        return f"10.77.{self.net}.{i + 1}"

    def mgmt_ip(self, i: int) -> str:
        return f"10.78.{self.net}.{i + 1}"

    def prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[i]]

    def open(self) -> Fabric:
        t = self.tag
        try:
            for br in (f"szL{t}", f"szR{t}", f"szM{t}"):
                _ip("link", "add", br, "type", "bridge")
                self._links.append(br)
                _ip("link", "set", br, "up")
            _ip("addr", "add", f"10.78.{self.net}.254/24", "dev", f"szM{t}")
            _ip("link", "add", f"szcL{t}", "type", "veth", "peer", "name", f"szcR{t}")
            self._links.append(f"szcL{t}")
            _ip("link", "set", f"szcL{t}", "master", f"szL{t}", "up")
            _ip("link", "set", f"szcR{t}", "master", f"szR{t}", "up")
            for i in range(self.size):
                ns = f"sz{t}p{i}"
                _ip("netns", "add", ns)
                self.namespaces.append(ns)
                _ip("-n", ns, "link", "set", "lo", "up")
                side = f"szL{t}" if i < self.left else f"szR{t}"
                for kind, bridge, addr in (
                    ("d", side, self.data_ip(i)),
                    ("m", f"szM{t}", self.mgmt_ip(i)),
                ):
                    outer, inner = f"sz{kind}{t}{i}", f"sz{kind}{t}{i}i"
                    _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                    self._links.append(outer)
                    _ip("link", "set", inner, "netns", ns)
                    _ip("link", "set", outer, "master", bridge, "up")
                    _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", inner)
                    _ip("-n", ns, "link", "set", inner, "up")
        except BaseException:
            self.close()
            raise
        return self

    def partition(self) -> None:
        _ip("link", "set", f"szcL{self.tag}", "down")

    def heal(self) -> None:
        _ip("link", "set", f"szcL{self.tag}", "up")

    def isolate(self, i: int) -> None:
        """Cut pod ``i`` off from every other pod (its management link stays up)."""
        _ip("link", "set", f"szd{self.tag}{i}", "down")

    def rejoin(self, i: int) -> None:
        _ip("link", "set", f"szd{self.tag}{i}", "up")

    def close(self) -> None:
        for ns in self.namespaces:
            with contextlib.suppress(subprocess.SubprocessError):
                _ip("netns", "del", ns)
        for link in reversed(self._links):
            with contextlib.suppress(subprocess.SubprocessError):
                _ip("link", "del", link)
        self.namespaces, self._links = [], []


def pod_servers(
    fabric: Fabric, root: Path, names: list[str], env: dict[str, str]
) -> dict[str, ServerProcess]:
    """One static-peers pod per namespace of ``fabric`` (not started): each listens on
    port 3000 of its namespace, finds its peers on the data network and is reached by
    the test on the management network (``ServerProcess.url``)."""
    peers = ",".join(f"{fabric.data_ip(i)}:3000" for i in range(len(names)))
    servers: dict[str, ServerProcess] = {}
    for i, name in enumerate(names):
        srv = ServerProcess(
            root / name,
            host="0.0.0.0",
            port=3000,
            prefix=fabric.prefix(i),
            extra_env={
                "CLUSTER_PEERS": peers,
                "CLUSTER_SECRET": SECRET,
                "POD_NAME": name,
                "SARDEENZ_ADVERTISE_ADDRESS": fabric.data_ip(i),
                "SARDEENZ_INSECURE": "true",
                **env,
            },
        )
        srv.url = f"http://{fabric.mgmt_ip(i)}:3000"
        servers[name] = srv
    return servers
