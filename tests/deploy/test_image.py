"""The CPU image of deploy/Containerfile, really built here and really run.

Built FROM the local Debian base images (``make deploy-base``; no registry is reachable),
then run as an operator would: the data dir on a named volume, the port published on
127.0.0.1 only. The run loads a simulated model, sends a chat completion through it, stops
the container, and starts a new one on the same volume to show the registry survived:
the audit trail's record of the load (a clean stop unloads instances, so the instances
themselves are not what persists). Containers and volume are removed at the end; the
image stays, as ``localhost/sardeenz-deploy-cache:cpu``, the layer cache of the next
build (the dependency layers are then reused; the previous build's other layers are
removed, tests/deploy/podman.py), as do the base images.

Build time, cached steps and image size are written to test-output/deploy-image.json.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from testkit.ports import free_port
from testkit.servers import load_active
from tests.deploy.podman import (
    NETWORK,
    REPO,
    ULIMITS,
    ToolsUnavailable,
    base_images,
    build_args,
    build_layers,
    dangling_images,
    drop_superseded_layers,
    podman,
)

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(1200)]

BUILD_TIMEOUT_SECONDS = 900.0
"""97-208 s measured from the base images on two shared cores; npm ci and pip dominate."""
READY_TIMEOUT_SECONDS = 120.0
STOP_TIMEOUT_SECONDS = 30
STATE_EVERY_SECONDS = 2.0


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    build_seconds: float
    size_bytes: int
    cached_steps: int
    """Steps the layer cache answered (0 on a machine's first build)."""
    leftovers: frozenset[str]
    """Untagged images the build added that are not layers of its own steps."""
    stale: frozenset[str]
    """Layers of the previous build that this one did not reuse, still there."""


@pytest.fixture(scope="module")
def image() -> Iterator[BuiltImage]:
    try:
        base, node_base = base_images()
    except ToolsUnavailable as exc:
        pytest.skip(str(exc))
    tag = f"localhost/sardeenz-test:{secrets.token_hex(4)}"
    before = dangling_images()
    start = time.monotonic()
    try:
        build = podman(*build_args(base, node_base, tag), timeout=BUILD_TIMEOUT_SECONDS)
        build_seconds = time.monotonic() - start
        layers = build_layers(build.stdout)
        assert layers, f"no step ids in the build's output:\n{build.stdout[-2000:]}"
        stale = drop_superseded_layers(layers)
        own = {layer[:11] for layer in layers}
        built = BuiltImage(
            tag=tag,
            build_seconds=build_seconds,
            size_bytes=int(podman("image", "inspect", "--format", "{{.Size}}", tag).stdout),
            cached_steps=build.stdout.count("--> Using cache "),
            leftovers=frozenset(d for d in dangling_images() - before if d[:11] not in own),
            stale=stale,
        )
        out = REPO / "test-output"
        out.mkdir(exist_ok=True)
        (out / "deploy-image.json").write_text(
            json.dumps(
                {
                    "image": "cpu",
                    "build_seconds": round(built.build_seconds, 1),
                    "cached_steps": built.cached_steps,
                    "size_bytes": built.size_bytes,
                    "size_mb": round(built.size_bytes / 1e6),
                }
            )
        )
        yield built
    finally:
        # Untags only: the image stays as the next build's cache under CACHE_TAG.
        podman("rmi", tag, check=False)


@dataclass
class Containers:
    """Every container and volume a test made, removed at teardown whatever happened."""

    image: str
    names: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)

    def volume(self) -> str:
        name = f"sardeenz-test-{secrets.token_hex(4)}"
        podman("volume", "create", name)
        self.volumes.append(name)
        return name

    def run(self, *args: str, env: dict[str, str] | None = None) -> tuple[str, int]:
        """A detached container (published on 127.0.0.1 only): (name, host port)."""
        name = f"sardeenz-test-{secrets.token_hex(4)}"
        port = free_port()
        env_args = [a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}")]
        self.names.append(name)
        podman(
            "run", "-d", "--name", name, *ULIMITS, *NETWORK, "-p", f"127.0.0.1:{port}:3000",
            *env_args, *args, self.image,
        )  # fmt: skip
        return name, port

    def logs(self, name: str) -> str:
        proc = podman("logs", name, check=False)
        return (proc.stdout + proc.stderr)[-4000:]

    def close(self) -> None:
        # -v: also the anonymous volume the image's VOLUME gives a container run without -v.
        for name in self.names:
            podman("rm", "-f", "-v", "-t", "0", name, check=False)
        for volume in self.volumes:
            podman("volume", "rm", "-f", volume, check=False)


@pytest.fixture
def containers(image: BuiltImage) -> Iterator[Containers]:
    # NETWORK (slirp4netns) adds nothing to the host's links.
    made = Containers(image.tag)
    yield made
    made.close()


def wait_ready(made: Containers, name: str, port: int) -> httpx.Client:
    """A (new) client once ``/api/health/ready`` answers 200; bounded, the logs if never.

    The container's state is asked every ``STATE_EVERY_SECONDS`` only (a ``podman
    inspect`` costs about 0.1 s of CPU), enough to stop waiting on one that exited."""
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    next_state = time.monotonic()
    with httpx.Client(base_url=url, timeout=10.0) as poll:
        while time.monotonic() < deadline:
            if time.monotonic() >= next_state:
                state = podman("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
                if state != "running":
                    raise AssertionError(f"container {name} is {state}:\n{made.logs(name)}")
                next_state = time.monotonic() + STATE_EVERY_SECONDS
            try:
                if poll.get("/api/health/ready").status_code == 200:
                    return httpx.Client(base_url=url, timeout=10.0)
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
    raise AssertionError(f"not ready in {READY_TIMEOUT_SECONDS:.0f} s:\n{made.logs(name)}")


def inspect(tag: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(podman("image", "inspect", tag).stdout)
    return data[0]


def test_image_runs_non_root_with_healthcheck_and_data_volume(image: BuiltImage) -> None:
    data = inspect(image.tag)
    config = data["Config"]
    assert config["User"] == "10001"
    assert config["Entrypoint"] == ["dumb-init", "--single-child", "--", "sardeenz", "serve"]
    assert "/data" in config["Volumes"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["SARDEENZ_HOST"] == "0.0.0.0"
    assert env["SARDEENZ_DATA_DIR"] == "/data"
    assert env["SARDEENZ_DEMO"] == "true"
    # Authentication is never switched off by the image: the operator says so explicitly.
    assert "SARDEENZ_INSECURE" not in env
    # Podman reports it at the top level, Docker under Config.
    healthcheck = " ".join((data.get("Healthcheck") or config["Healthcheck"])["Test"])
    assert "/api/health/live" in healthcheck


def test_public_bind_without_auth_is_refused(containers: Containers) -> None:
    proc = podman(
        "run", "--rm", *ULIMITS, "--network", "none", containers.image, check=False, timeout=120
    )  # fmt: skip
    assert proc.returncode != 0
    assert "refusing to bind 0.0.0.0" in proc.stdout + proc.stderr


def test_serves_a_model_and_keeps_its_registry_on_the_volume(containers: Containers) -> None:
    volume = containers.volume()
    insecure = {"SARDEENZ_INSECURE": "true"}
    first, port = containers.run("-v", f"{volume}:/data", env=insecure)
    with wait_ready(containers, first, port) as api:
        # The dashboard was built in the node stage and shipped inside the wheel.
        index = api.get("/")
        assert index.status_code == 200
        assert "<div" in index.text
        assert podman("healthcheck", "run", first, check=False).returncode == 0

        instance = load_active(api, "deploy-check", "--ttft-ms", "5", "--itl-ms", "1")
        chat = api.post(
            "/v1/chat/completions",
            json={
                "model": "deploy-check",
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 5,
            },
        )
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["content"]
        loads = [
            e
            for e in api.get("/api/audit").json()
            if e["path"] == "/api/v1/models/load" and e["status"] == 202
        ]
        assert len(loads) == 1, loads

    stopped = time.monotonic()
    podman("stop", "-t", str(STOP_TIMEOUT_SECONDS), first, timeout=STOP_TIMEOUT_SECONDS + 30)
    took = time.monotonic() - stopped
    logs = containers.logs(first)
    assert "shutting down" in logs
    assert "Application shutdown complete" in logs
    # How it ended first, as it tells a clean stop from a kill: uvicorn re-raises the
    # SIGTERM it handled once shut down, so Sardeenz (no longer PID 1, which ignores it)
    # ends as "terminated by SIGTERM": 128 + 15, relayed by dumb-init. A SIGKILL at the
    # timeout would be 137.
    code = podman("inspect", "--format", "{{.State.ExitCode}}", first).stdout.strip()
    assert code == "143", logs
    # SIGTERM, not the SIGKILL at the timeout: a clean stop (engines unloaded) well before.
    assert took < STOP_TIMEOUT_SECONDS, f"podman stop took {took:.1f} s"

    second, port = containers.run("-v", f"{volume}:/data", env=insecure)
    with wait_ready(containers, second, port) as api:
        kept = [e for e in api.get("/api/audit").json() if e["id"] == loads[0]["id"]]
        assert kept == loads
        # The stopped instance is not re-adopted: a clean stop unloaded it.
        names = {m["modelPath"] for m in api.get("/api/v1/models").json()}
        assert instance["modelPath"] not in names


@dataclass(frozen=True)
class Running:
    """A ready container of the module (its name and published port)."""

    made: Containers
    name: str
    port: int


@pytest.fixture(scope="module")
def arbitrary_uid(image: BuiltImage) -> Iterator[Running]:
    """One container as OpenShift's restricted SCC runs it: a UID from the project's range,
    group 0, no entry in /etc/passwd, the data dir on a volume. Shared by the module's
    tests that only look inside a running container (a start costs about 1.5 s of CPU)."""
    made = Containers(image.tag)
    try:
        volume = made.volume()
        name, port = made.run(
            "--user", "1000650000:0", "-v", f"{volume}:/data", env={"SARDEENZ_INSECURE": "true"}
        )
        wait_ready(made, name, port).close()
        yield Running(made, name, port)
    finally:
        made.close()


def test_runs_as_an_arbitrary_uid_of_group_0(arbitrary_uid: Running) -> None:
    """What OpenShift's restricted SCC does: a UID from the project's range, group 0, no
    entry in /etc/passwd. The data dir must still be writable (it is group 0, g+rwx)."""
    name, port = arbitrary_uid.name, arbitrary_uid.port
    with wait_ready(arbitrary_uid.made, name, port) as api:
        load_active(api, "arbitrary-uid", "--ttft-ms", "5", "--itl-ms", "1")
    # The CPU image runs the demo, which keeps its data in <data_dir>/demo (docs/operations.md).
    db = "/data/demo/sardeenz.db"
    owner = podman("exec", name, "stat", "-c", "%u:%g", db).stdout.strip()
    assert owner == "1000650000:0"


def test_build_leaves_only_its_own_layers(image: BuiltImage) -> None:
    """With the layer cache on, nothing piles up for someone to prune: the build adds no
    untagged image but its own steps' layers (the next build's cache), and the previous
    build's layers that it did not reuse are gone."""
    assert image.leftovers == frozenset()
    assert image.stale == frozenset()


ORPHAN = """
import os, subprocess, sys
print(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"]).pid)
os._exit(0)
"""

STATE = """
import sys
try:
    print(open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")", 1)[1].split()[0])
except FileNotFoundError:
    print("gone")
"""


def test_pid_1_reaps_orphans(arbitrary_uid: Running) -> None:
    """A process whose parent died is re-parented to PID 1 of the container (an exec'd
    command here; a vLLM worker whose EngineCore crashed in production). Sardeenz waits only
    for its own children, so without an init as PID 1 it would stay a zombie for good."""
    name, port = arbitrary_uid.name, arbitrary_uid.port
    with wait_ready(arbitrary_uid.made, name, port):
        python = "/opt/sardeenz/bin/python"
        init = podman("exec", name, "cat", "/proc/1/cmdline").stdout.split("\0")
        assert init[:-1] == ["dumb-init", "--single-child", "--", "sardeenz", "serve"], init
        orphan = podman("exec", name, python, "-c", ORPHAN).stdout.strip()
        assert orphan.isdigit(), orphan
        # It lives ~1 s, then exits: only a reaper makes its /proc entry go away.
        deadline = time.monotonic() + 30.0
        state = "?"
        while time.monotonic() < deadline:
            state = podman("exec", name, python, "-c", STATE, orphan).stdout.strip()
            if state == "gone":
                break
            time.sleep(0.5)
        assert state == "gone", f"orphan {orphan} is in state {state} (Z: never reaped)"
