"""Podman on this machine: how the deploy tier builds and runs deploy/Containerfile.

No container registry can be reached here, so the images are built FROM the local base
images ``make deploy-base`` makes (scripts/deploy-base.sh: a Debian bookworm root filesystem
from mmdebstrap, ``podman import``ed). What podman needs on a machine of this kind, measured:

- ``--runtime runc``: crun refuses the hybrid cgroup hierarchy here.
- ``--ulimit nofile=20000:20000 --ulimit nproc=4096:4096``: the machine's hard limits are
  below podman's defaults, so a container asking for those would not start.
- the host's CA bundle mounted into the build (``-v /etc/ssl/certs:/etc/ssl/certs:ro``):
  pip and npm reach their registries through this machine's TLS setup, whose CA only the
  host's bundle holds. The host's pip config otherwise points at local folders (find-links,
  file:// indexes) that do not exist in a build container; only ``PIP_INDEX_URL`` and the
  npm registry are passed on when set.
- ``--network host`` for the build's RUN steps: the same route to the registries the host
  has, with no bridge/NAT set-up.
- ``--network slirp4netns`` for the test's containers: podman's default bridge adds a veth
  (and the bridge) to the host for each container; slirp4netns keeps the container's
  network in its own namespace, changes nothing on the host, and still publishes
  ``-p 127.0.0.1:PORT``.
- ``--format docker``: the OCI image format has no HEALTHCHECK field.
- ``--layers``: the last build's layers are the next one's cache (the dependencies are
  installed before ``src/`` is copied, so a code change rebuilds only the wheel); the
  layers it supersedes are removed after each build, so nothing piles up.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "deploy" / "Containerfile"

BASE_ENV = "SARDEENZ_DEPLOY_BASE"
NODE_BASE_ENV = "SARDEENZ_DEPLOY_NODE_BASE"

RUNTIME = ("--runtime", "runc")
ULIMITS = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096")
HOST_CA_DIR = "/etc/ssl/certs"
NETWORK = ("--network", "slirp4netns")
"""A test container's network: its own namespace, nothing added to the host's links."""


CACHE_TAG = "localhost/sardeenz-deploy-cache:cpu"
"""The last image the tier built, kept (with its stages' layers) as the next build's cache."""
LAYERS_FILE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "sardeenz"
    / "deploy-image-layers.txt"
)
"""The image ids of every step of the last build, to remove them once superseded."""
_STEP = re.compile(r"^--> (?:Using cache )?([0-9a-f]{11,64})$", re.M)


class ToolsUnavailable(Exception):
    """Podman cannot run containers here (or the tier was not set up): skip, with why."""


def podman(
    *args: str, timeout: float = 120.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``podman --runtime runc ARGS`` (text output); raises with podman's stderr on failure."""
    proc = subprocess.run(
        ["podman", *RUNTIME, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"podman {' '.join(args[:3])} ... exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        )
    return proc


def base_images() -> tuple[str, str]:
    """(BASE, NODE_BASE) for the build, checked to exist.

    Podman missing or unable to run, or the variables unset (pytest run by hand) ->
    :class:`ToolsUnavailable` (skip). Variables set but an image missing -> RuntimeError
    (fail): ``make test`` made them, so a missing one is a real fault.
    """
    if shutil.which("podman") is None:
        raise ToolsUnavailable("podman is not installed (`make deploy-base` installs it)")
    info = subprocess.run(
        ["podman", *RUNTIME, "info", "--format", "{{.Host.OCIRuntime.Name}}"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    if info.returncode != 0:
        raise ToolsUnavailable(f"podman cannot run here: {info.stderr.strip()[-500:]}")
    base, node = os.environ.get(BASE_ENV), os.environ.get(NODE_BASE_ENV)
    if not base or not node:
        raise ToolsUnavailable(
            f"{BASE_ENV}/{NODE_BASE_ENV} are not set: this tier builds deploy/Containerfile "
            "FROM local base images. Run `make test`, or `make deploy-base` and export "
            f"{BASE_ENV}=localhost/sardeenz-deploy-base:bookworm "
            f"{NODE_BASE_ENV}=localhost/sardeenz-deploy-node:bookworm"
        )
    for image in (base, node):
        if podman("image", "exists", image, check=False).returncode != 0:
            raise RuntimeError(f"base image {image} is missing: run `make deploy-base`")
    return base, node


def build_args(base: str, node_base: str, tag: str, target: str = "cpu") -> list[str]:
    """The ``podman build`` arguments of the CPU image on this machine."""
    args = [
        "build",
        "--format",
        "docker",
        # The layer cache: the dependency layers of the last build are reused until
        # pyproject.toml or frontend/'s lock file changes (see build_layers below).
        "--layers",
        "--network",
        "host",
        *ULIMITS,
        "-v",
        f"{HOST_CA_DIR}:{HOST_CA_DIR}:ro",
        "-f",
        str(CONTAINERFILE),
        "--target",
        target,
        "--build-arg",
        f"BASE={base}",
        "--build-arg",
        f"NODE_BASE={node_base}",
        "-t",
        tag,
        "-t",
        CACHE_TAG,
    ]
    if index := os.environ.get("PIP_INDEX_URL"):
        args += ["--build-arg", f"PIP_INDEX_URL={index}"]
    registry = (
        subprocess.run(
            ["npm", "config", "get", "registry"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if shutil.which("npm")
        else ""
    )
    if registry.startswith("http"):
        args += ["--build-arg", f"NPM_REGISTRY={registry}"]
    return [*args, str(REPO)]


def build_layers(build_stdout: str) -> list[str]:
    """The image id of every step of a ``podman build --layers`` (cached or made), in order."""
    return _STEP.findall(build_stdout)


def dangling_images() -> frozenset[str]:
    """Full ids of the untagged images that nothing builds on (the leaves of old builds)."""
    out = podman("images", "-q", "--no-trunc", "--filter", "dangling=true").stdout.split()
    return frozenset(i.removeprefix("sha256:") for i in out)


def drop_superseded_layers(current: list[str]) -> frozenset[str]:
    """Remove the previous build's layers this build did not reuse; record this build's.

    Only images that are dangling are removed: a leaf of an old build, whose removal takes
    its untagged parents that nothing else uses along (podman's rmi). A layer of this
    build, or an image some other run still has tagged, is never touched. Returns the
    superseded layers still there afterwards (none, unless podman refused).
    """
    previous = LAYERS_FILE.read_text().split() if LAYERS_FILE.is_file() else []
    keep = {c[:11] for c in current}
    superseded = {layer[:11] for layer in previous if layer[:11] not in keep}
    for layer in reversed(previous):
        if layer[:11] not in superseded:
            continue
        full = next((d for d in dangling_images() if d.startswith(layer[:11])), None)
        if full:
            podman("rmi", full, check=False)
    LAYERS_FILE.parent.mkdir(parents=True, exist_ok=True)
    LAYERS_FILE.write_text("\n".join(current) + "\n")
    return frozenset(d for d in dangling_images() if d[:11] in superseded)
