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

Faults: ``partition()``/``heal()`` unplug and plug the cable, ``isolate(i)``/
``rejoin(i)`` one pod's data link (``cut(i)`` and ``split()`` do both around a
block), ``degrade(i)``/``restore(i)`` make one pod's data link lossy and slow in
one direction only (what it sends; what it receives is untouched): ``tc netem``
loss and delay where the kernel has netem, else the same loss with nftables
(``numgen random`` at the ingress of the link's outer end, so on the wire) and the
delay of an ``htb`` rate limit (this machine's kernel has no ``sch_netem``;
``degrade`` says which it used).

A service of this namespace listening on loopback only (the kube-apiserver of
testkit/kube.py) can be ``publish``-ed to the pods: at ``host_ip`` (this namespace's
address on the management bridge, forwarded to 127.0.0.1 by an nftables DNAT with
``route_localnet`` on that bridge) and, inside every pod namespace, at
``SERVICE_IP:443`` (another DNAT: kube-proxy's part for the ``kubernetes`` Service,
whose ClusterIP is in the API server's self-signed certificate, so the pods verify
it as they would in a cluster). ``cut_host(i)``/``reach_host(i)`` then drop and let
through what pod ``i`` sends to it, on the wire (a netdev ingress rule on its
management link's outer end; the test still reaches the pod).

``N`` is a random one no other fabric on this machine holds (a lock file per ``N``,
held from ``open()`` to ``close()``: fabrics of tests running side by side, or of a soak
beside the suite, never share the management subnet), names carry it and a random
suffix, and everything is deleted in ``close()`` (deleting a namespace deletes its
interfaces; the bridges and the cable are deleted explicitly); what a killed run left
is swept by the next ``open()`` (testkit/netns_sweep.py). Needs root (``ip netns``).
``running_pods`` starts one static-peers pod per namespace and stops them all.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from testkit.cluster import SECRET
from testkit.netns_sweep import sweep_stale, try_lock
from testkit.servers import HTTP, ServerProcess, kill_engines, start_first_then_rest


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _nft(*args: str) -> None:
    subprocess.run(["nft", *args], check=True, capture_output=True, timeout=10)


def _tc(ns: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *args], capture_output=True, text=True, timeout=10
    )


SERVICE_IP = "10.0.0.1"
"""The ``kubernetes`` Service's ClusterIP for ``--service-cluster-ip-range=10.0.0.0/24``
(testkit/kube.py): the pods' ``KUBERNETES_SERVICE_HOST`` once ``publish``-ed."""


def available() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


def _reserve_net() -> tuple[int, int]:
    """A management subnet number no other fabric on this machine holds, and the open
    lock file that holds it (closing it frees the number)."""
    for net in random.sample(range(10, 250), 240):
        fd = try_lock(net)
        if fd is not None:
            return net, fd
    raise RuntimeError("every fabric subnet 10.78.10-249.0/24 is held by another fabric")


class Fabric:
    def __init__(self, left: int, right: int) -> None:
        self.tag = ""
        self.net = 0
        """``N`` of the fabric's subnets and ``tag`` of its names: set by ``open()``."""
        self._held: int | None = None
        self.size = left + right
        self.left = left
        self.namespaces: list[str] = []
        self._links: list[str] = []
        self._tables: list[tuple[str, str]] = []
        """(family, name) of the nftables tables made in this namespace (``degrade``,
        ``publish``, ``cut_host``)."""
        self.published: int | None = None
        """The port ``publish`` forwards."""

    def data_ip(self, i: int) -> str:
        return f"10.77.{self.net}.{i + 1}"

    def mgmt_ip(self, i: int) -> str:
        return f"10.78.{self.net}.{i + 1}"

    @property
    def host_ip(self) -> str:
        """This (the test's) namespace on the management bridge."""
        return f"10.78.{self.net}.254"

    def prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[i]]

    def open(self) -> Fabric:
        sweep_stale()  # what a killed run left (testkit/netns_sweep.py)
        self.net, self._held = _reserve_net()
        self.tag = t = f"{self.net:02x}{random.randrange(256):02x}"
        try:
            for br in (f"szL{t}", f"szR{t}", f"szM{t}"):
                _ip("link", "add", br, "type", "bridge")
                self._links.append(br)
                _ip("link", "set", br, "up")
            _ip("addr", "add", f"{self.host_ip}/24", "dev", f"szM{t}")
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

    @contextlib.contextmanager
    def cut(self, i: int) -> Iterator[None]:
        """Pod ``i`` isolated for the block, rejoined after it (even if it raises)."""
        self.isolate(i)
        try:
            yield
        finally:
            self.rejoin(i)

    @contextlib.contextmanager
    def split(self) -> Iterator[None]:
        """The cable unplugged for the block (left | right), plugged back after it."""
        self.partition()
        try:
            yield
        finally:
            self.heal()

    def publish(self, port: int) -> None:
        """Make 127.0.0.1:``port`` of this namespace reachable from every pod, at
        ``host_ip:port`` and at ``SERVICE_IP:443`` (see the module doc)."""
        t, bridge = self.tag, f"szM{self.tag}"
        subprocess.run(
            ["sysctl", "-qw", f"net.ipv4.conf.{bridge}.route_localnet=1"],
            check=True, capture_output=True, timeout=10,
        )  # fmt: skip
        table = f"szhost{t}"
        _nft("add", "table", "ip", table)
        self._tables.append(("ip", table))
        _nft("add", "chain", "ip", table, "pre",
             "{ type nat hook prerouting priority -100 ; }")  # fmt: skip
        _nft("add", "rule", "ip", table, "pre", "iifname", bridge, "ip", "daddr", self.host_ip,
             "tcp", "dport", str(port), "dnat", "to", f"127.0.0.1:{port}")  # fmt: skip
        for i, ns in enumerate(self.namespaces):
            # Deleted with the namespace.
            _ip("-n", ns, "route", "add", f"{SERVICE_IP}/32", "dev", f"szm{t}{i}i")
            for args in (
                ["add", "table", "ip", "svc"],
                ["add", "chain", "ip", "svc", "out", "{ type nat hook output priority -100 ; }"],
                ["add", "rule", "ip", "svc", "out", "ip", "daddr", SERVICE_IP, "tcp", "dport",
                 "443", "dnat", "to", f"{self.host_ip}:{port}"],
            ):  # fmt: skip
                subprocess.run(
                    [*self.prefix(i), "nft", *args], check=True, capture_output=True, timeout=10
                )
        self.published = port

    def cut_host(self, i: int) -> None:
        """Drop what pod ``i`` sends to the ``publish``-ed port (its management link
        stays up otherwise: the test still reaches it)."""
        assert self.published is not None, "publish() first"
        outer, table = f"szm{self.tag}{i}", f"szapi{self.tag}{i}"
        _nft("add", "table", "netdev", table)
        self._tables.append(("netdev", table))
        _nft("add", "chain", "netdev", table, "in",
             f"{{ type filter hook ingress device {outer} priority 0 ; }}")  # fmt: skip
        _nft("add", "rule", "netdev", table, "in", "ip", "daddr", self.host_ip,
             "tcp", "dport", str(self.published), "drop")  # fmt: skip

    def reach_host(self, i: int) -> None:
        """Undo ``cut_host(i)`` (not cut: nothing to do)."""
        self._drop_table("netdev", f"szapi{self.tag}{i}")

    def _drop_table(self, family: str, table: str) -> None:
        if (family, table) in self._tables:
            _nft("delete", "table", family, table)
            self._tables.remove((family, table))

    def degrade(self, i: int, loss_pct: int, delay_ms: int) -> str:
        """Drop ``loss_pct`` % of what pod ``i`` sends on its data link and delay the
        rest (its inbound traffic is untouched: an asymmetric fault); what was applied.

        ``tc netem`` where the kernel has it; without ``sch_netem`` the loss is an
        nftables rule (``numgen random``) at the far end of the pod's cable and the
        delay a ``htb`` rate limit of the link (the queue a burst waits in), so the
        fault still exists, only coarser.
        """
        ns, dev = self.namespaces[i], f"szd{self.tag}{i}i"
        done = _tc(
            ns, "tc", "qdisc", "replace", "dev", dev, "root", "netem",
            "loss", f"{loss_pct}%", "delay", f"{delay_ms}ms", f"{delay_ms // 4}ms",
        )  # fmt: skip
        if done.returncode == 0:
            return f"netem loss {loss_pct}% delay {delay_ms}ms on {dev} egress"
        if "unknown" not in done.stderr:
            raise RuntimeError(f"tc netem on {dev}: {done.stderr.strip()}")
        # The loss on the wire: at the ingress of the link's outer end (in this
        # namespace), after the pod's stack has sent the packet, so the sender sees a
        # lost packet (TCP retransmits), not an error from its own firewall.
        outer, table = f"szd{self.tag}{i}", f"szloss{self.tag}{i}"
        self._tables.append(("netdev", table))
        _nft("add", "table", "netdev", table)
        _nft("add", "chain", "netdev", table, "in",
             f"{{ type filter hook ingress device {outer} priority 0 ; }}")  # fmt: skip
        _nft("add", "rule", "netdev", table, "in",
             "numgen", "random", "mod", "100", "<", str(loss_pct), "drop")  # fmt: skip
        for cmd in (
            ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
            ["tc", "class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
             "rate", "512kbit", "burst", "4k"],
        ):  # fmt: skip
            out = _tc(ns, *cmd)
            if out.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd[:3])} on {dev}: {out.stderr.strip()}")
        return f"nft loss {loss_pct}% + htb 512kbit on {dev} egress (no netem in this kernel)"

    def restore(self, i: int) -> None:
        """Undo ``degrade(i)`` (either form; a missing rule or qdisc is not an error)."""
        ns, dev = self.namespaces[i], f"szd{self.tag}{i}i"
        _tc(ns, "tc", "qdisc", "del", "dev", dev, "root")
        self._drop_table("netdev", f"szloss{self.tag}{i}")

    def close(self) -> None:
        for family, table in self._tables:
            with contextlib.suppress(subprocess.SubprocessError):
                _nft("delete", "table", family, table)
        self._tables = []
        for ns in self.namespaces:
            with contextlib.suppress(subprocess.SubprocessError):
                _ip("netns", "del", ns)
        for link in reversed(self._links):
            with contextlib.suppress(subprocess.SubprocessError):
                _ip("link", "del", link)
        self.namespaces, self._links = [], []
        if self._held is not None:
            os.close(self._held)
            self._held = None


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


def until(what: str, seconds: float, check: Callable[[], Any], every: float = 0.1) -> Any:
    """Poll ``check`` until it returns something truthy (returned), at most ``seconds``;
    else raise naming ``what``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"not reached in {seconds}s: {what}")


class Pods:
    """Pods started in the namespaces of ``fabric`` (``running_pods``), read over the
    management network."""

    def __init__(self, fabric: Fabric, servers: dict[str, ServerProcess]) -> None:
        self.fabric = fabric
        self.servers = servers
        self.names = list(servers)

    def url(self, name: str) -> str:
        return self.servers[name].url

    def index(self, name: str) -> int:
        return self.names.index(name)

    def status(self, name: str) -> dict[str, Any] | None:
        """``/api/cluster/status`` of ``name``; None if it does not answer 200 in 1 s."""
        try:
            resp = HTTP.get(f"{self.url(name)}/api/cluster/status", timeout=1)
        except httpx.HTTPError:
            return None
        return resp.json() if resp.status_code == 200 else None

    def leader(self, among: list[str] | None = None) -> str | None:
        """The leader every pod of ``among`` (default: all) names, if they agree on one."""
        seen = [self.status(n) for n in among or self.names]
        leaders = {s["leader"] if s is not None else None for s in seen}
        return next(iter(leaders)) if len(leaders) == 1 else None

    @contextlib.contextmanager
    def cut(self, name: str) -> Iterator[None]:
        """``name`` isolated from the other pods for the block."""
        with self.fabric.cut(self.index(name)):
            yield


@contextlib.contextmanager
def running_pods(
    root: Path, names: list[str], env: dict[str, str], *, left: int | None = None
) -> Iterator[Pods]:
    """A fabric (``left`` pods on the left switch, default all), one pod per namespace,
    the first started before the others (it leads, as in a one-by-one start); on exit
    every pod and engine is killed and the fabric deleted."""
    fabric = Fabric(len(names) if left is None else left, 0 if left is None else len(names) - left)
    fabric.open()
    try:
        pods = Pods(fabric, pod_servers(fabric, root, names, env))
        try:
            start_first_then_rest(list(pods.servers.values()), 90.0)
            yield pods
        finally:
            for srv in pods.servers.values():
                if srv.proc is not None and srv.proc.poll() is None:
                    with contextlib.suppress(OSError):
                        os.kill(srv.proc.pid, signal.SIGCONT)  # a stopped pod dies too
                srv.stop(signal.SIGKILL)
                kill_engines(srv.data_dir)
    finally:
        fabric.close()


CLONE_NEWNET = 0x40000000


@contextlib.contextmanager
def private_network() -> Iterator[bool]:
    """Run the calling thread in a network namespace of its own, and so every process it
    starts (the browser tier: the servers, their engines, Playwright's driver, Chromium).

    Chromium aborts page loads with ``ERR_NETWORK_CHANGED`` whenever a link or an address
    of its network namespace changes, and the netns tests (partition, on-demand isolation,
    the soaks) add bridges, veths and addresses to the host's namespace all along. In a
    namespace of its own, with only its loopback, the folder sees none of that, so the
    two run side by side instead of waiting for each other. Yields whether it could
    (creating a namespace needs root; where it cannot, no netns test can run either).
    The main thread goes back to the host's namespace at the end, so the worker's next
    files run where they always do.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    host = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            yield False
            return
        try:
            subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=30)
            yield True
        finally:
            if libc.setns(host, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"back to the host's network: {os.strerror(err)}")
    finally:
        os.close(host)
