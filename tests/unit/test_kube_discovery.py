"""membership/kube_discovery.py's watch loop against a scripted API: list, watch, resume, 410."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from sardeenz.cluster.identity import PeerAddress
from sardeenz.cluster.membership.kube_api import KubeError
from sardeenz.cluster.membership.kube_discovery import PodWatcher

READY = [{"type": "Ready", "status": "True"}]


def pod(name: str, ip: str | None, ready: bool, version: str) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": READY if ready else []}
    if ip:
        status["podIP"] = ip
    return {"metadata": {"name": name, "resourceVersion": version}, "status": status}


@dataclass
class FakeMembers:
    members: dict[str, PeerAddress] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    def set_members(self, members: Mapping[str, PeerAddress]) -> None:
        self.members = dict(members)
        self.log.append("list:" + ",".join(sorted(members)))

    def set_member(self, name: str, address: PeerAddress | None) -> None:
        if address is None:
            self.members.pop(name, None)
        else:
            self.members[name] = address
        self.log.append(f"{name}:{'-' if address is None else address}")


@dataclass
class ScriptedApi:
    lists: list[dict[str, Any]]
    watches: list[list[dict[str, Any] | Exception]]
    watched_from: list[str] = field(default_factory=list)
    forbidden_calls: list[tuple[str, str]] = field(default_factory=list)

    async def list_pods(self) -> dict[str, Any]:
        return self.lists.pop(0)

    async def pod_events(
        self, resource_version: str, seconds: int
    ) -> AsyncGenerator[dict[str, Any], None]:
        self.watched_from.append(resource_version)
        if not self.watches:
            await asyncio.Event().wait()  # the last watch stays open
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item

    def allowed(self, verb: str, resource: str) -> None:
        pass

    def forbidden(self, verb: str, resource: str, exc: BaseException) -> None:
        self.forbidden_calls.append((verb, resource))


async def run_until(watcher: PodWatcher, api: ScriptedApi, done: int) -> None:
    task = asyncio.create_task(watcher.run())
    try:
        for _ in range(200):
            if len(api.watched_from) >= done:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_list_watch_resume_and_relist_on_410() -> None:
    m = FakeMembers()
    api = ScriptedApi(
        lists=[
            {
                "metadata": {"resourceVersion": "10"},
                "items": [pod("a", "10.0.0.2", True, "5"), pod("b", None, False, "6")],
            },
            {"metadata": {"resourceVersion": "30"}, "items": [pod("c", "10.0.0.4", True, "29")]},
        ],
        watches=[
            [
                {"type": "MODIFIED", "object": pod("b", "10.0.0.3", True, "11")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
            ],  # the server ends this watch: resume from 12
            [
                {"type": "DELETED", "object": pod("a", "10.0.0.2", True, "13")},
                {"type": "MODIFIED", "object": pod("b", "10.0.0.3", False, "14")},
                KubeError(410, "too old resource version"),
            ],
        ],
    )
    watcher = PodWatcher(m, cast(Any, api), retry=0.01, port=3000)
    await run_until(watcher, api, done=3)
    assert api.watched_from == ["10", "12", "30"]
    assert m.log == [
        "list:a",  # b has no IP and is not Ready yet
        "b:10.0.0.3:3000",  # no http port in its spec: our own port
        "a:-",  # deleted
        "b:-",  # not Ready any more
        "list:c",  # 410 Gone: listed again
    ]
    assert m.members == {"c": PeerAddress("10.0.0.4", 3000)}


async def test_a_refused_watch_is_an_rbac_problem_and_is_retried() -> None:
    m = FakeMembers()
    api = ScriptedApi(
        lists=[{"metadata": {"resourceVersion": "10"}, "items": []}],
        watches=[[KubeError(403, 'cannot watch resource "pods"')]],
    )
    watcher = PodWatcher(m, cast(Any, api), retry=0.01, port=3000)
    await run_until(watcher, api, done=2)
    assert api.forbidden_calls == [("watch", "pods")]
    assert api.watched_from == ["10", "10"]  # retried from where it was, no new list
