"""cluster/control_kube.py against a real kube-apiserver: the control state's ConfigMaps.

Each test runs KubeControlState objects in this process, each with its own SQLite copy
and its own API client holding a ServiceAccount token of the Role Sardeenz ships
(testkit/kube.py ``SARDEENZ_RULES``); who leads, and in which term, is the test's
to say (a ``Seat``), as the Lease would. What is checked is what the API server holds,
read as admin: a write that lost a race (a real 409) is retried on a fresh read and lands
on top of the other; concurrent writers lose no acknowledged update; a deposed leader is
refused; a corrupt ConfigMap is reported, never applied, and a deleted one is restored; a
pod starting with nothing reads the state from the API server.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sardeenz.cluster.control_kube import KubeControlState
from sardeenz.cluster.membership.kube_api import KubeApi, KubeConfig
from sardeenz.cluster.tenant_sync import ReplicatedTenants, bind_tenants
from sardeenz.config import Settings
from sardeenz.errors import Conflict, PayloadTooLarge, Unavailable
from sardeenz.store.control import ControlRepository
from sardeenz.store.db import Database
from sardeenz.store.tenants import TenantRepository
from sardeenz.tenancy.admission import Admission
from sardeenz.tenancy.service import TenantService
from sardeenz.tenancy.spec import TenantBody
from testkit.kube import SARDEENZ_RULES, KubeApiServer
from testkit.waiting import within

pytestmark = pytest.mark.kube

CATALOG = "sardeenz-control-catalog"
TENANTS = "sardeenz-control-tenants"


@dataclass
class Seat:
    """What the Lease would say to one pod."""

    leads: bool = True
    term: int = 1


@dataclass
class Pod:
    state: KubeControlState
    seat: Seat
    api: KubeApi
    db: Database
    told: list[Any] = field(default_factory=list)
    """Catalog bodies handed to the subscribed feature."""


class Namespace:
    def __init__(self, kube: KubeApiServer, root: Path) -> None:
        self.kube = kube
        self.root = root
        self.name = kube.create_namespace()
        kube.create_service_account(self.name, "sardeenz", list(SARDEENZ_RULES))
        token = kube.service_account_token(self.name, "sardeenz")
        self.sa = kube.write_service_account_dir(root / "sa", self.name, token)
        self.pods: list[Pod] = []
        self.path = f"/api/v1/namespaces/{self.name}/configmaps"

    async def pod(self, name: str, seat: Seat, client: type[KubeApi] = KubeApi) -> Pod:
        config = KubeConfig(self.kube.url, self.sa / "token", self.sa / "ca.crt", self.name)
        api = client(config, 2.0)
        await api.open()
        db = Database(f"sqlite+aiosqlite:///{self.root / name}.db")
        await db.migrate()
        settings = Settings(kube_retry_period_seconds=0.2, kube_request_timeout_seconds=2.0)
        state = KubeControlState(
            name,
            lambda: seat.leads,
            lambda: seat.term,
            lambda: api,
            settings,
            ControlRepository(db),
        )
        pod = Pod(state, seat, api, db)

        async def told(body: Any) -> None:
            pod.told.append(body)

        state.subscribe("catalog", told)
        await state.load()
        state.start()
        self.pods.append(pod)
        return pod

    async def close(self) -> None:
        for pod in self.pods:
            await pod.state.stop()
            await pod.api.close()
            await pod.db.close()

    # ------------------------------------------------------------ as admin
    def get(self, name: str = CATALOG) -> dict[str, Any] | None:
        with self.kube.client() as admin:
            resp = admin.get(f"{self.path}/{name}")
        if resp.status_code == 404:
            return None
        assert resp.status_code == 200, resp.text
        obj: dict[str, Any] = resp.json()
        return obj

    def body(self, name: str = CATALOG) -> Any:
        obj = self.get(name)
        return None if obj is None else json.loads(obj["data"]["body"])

    def edit(self, change: Callable[[dict[str, str]], None], name: str = CATALOG) -> None:
        obj = self.get(name)
        assert obj is not None
        change(obj["data"])
        with self.kube.client() as admin:
            resp = admin.put(f"{self.path}/{name}", json=obj)
        assert resp.status_code == 200, resp.text

    def delete(self, name: str = CATALOG) -> None:
        with self.kube.client() as admin:
            resp = admin.delete(f"{self.path}/{name}")
        assert resp.status_code == 200, resp.text


@pytest.fixture
async def ns(kube: KubeApiServer, tmp_path: Path) -> AsyncIterator[Namespace]:
    space = Namespace(kube, tmp_path)
    try:
        yield space
    finally:
        await space.close()


async def until(check: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"not within {within}s: {what}"
        await asyncio.sleep(0.05)


async def ready(pod: Pod) -> None:
    await until(pod.state.ready, 20, "the leader read the ConfigMaps in its term")


def add(name: str, entry: Any = None) -> Callable[[Any], Awaitable[Any]]:
    async def change(body: Any) -> Any:
        return {**(body or {}), name: entry or {"modelPath": f"/m/{name}"}}

    return change


async def test_a_write_that_loses_a_race_is_retried_on_a_fresh_read(ns: Namespace) -> None:
    leader = await ns.pod("pod-a", Seat())
    await ready(leader)
    await leader.state.update("catalog", add("first"))
    calls = 0

    async def change(body: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:  # another writer lands between our read and our write: a real 409

            def theirs(data: dict[str, str]) -> None:
                data["body"] = json.dumps({**json.loads(data["body"]), "theirs": {}})
                data["revision"] = str(int(data["revision"]) + 1)

            await asyncio.to_thread(ns.edit, theirs)
        return {**(body or {}), "mine": {"modelPath": "/m/mine"}}

    doc = await leader.state.update("catalog", change)
    assert calls == 2  # the second call saw "theirs"
    assert set(ns.body()) == {"first", "theirs", "mine"}
    assert doc.body == ns.body()
    stored = ns.get()
    assert stored is not None
    assert (stored["data"]["term"], stored["data"]["revision"]) == ("1", str(doc.revision))
    assert leader.state.body("catalog") == ns.body()


async def test_two_concurrent_writers_lose_no_acknowledged_update(ns: Namespace) -> None:
    seat = Seat()  # both believe they lead term 1 (the instant of a hand-over)
    a, b = await ns.pod("pod-a", seat), await ns.pod("pod-b", seat)
    await ready(a)
    await ready(b)
    names = [f"{p}{i}" for i in range(12) for p in ("a", "b")]

    async def write(pod: Pod, name: str) -> str:
        try:
            await pod.state.update("catalog", add(name))
        except Conflict as exc:  # bounded retries all lost: clear, and not acknowledged
            return exc.code
        return name

    outcomes = await asyncio.gather(*(write(a if n[0] == "a" else b, n) for n in names))
    assert set(outcomes) - set(names) <= {"control_write_conflict"}
    acked = [n if n in names else None for n in outcomes]
    landed = set(ns.body())
    assert {n for n in acked if n is not None} <= landed  # no acknowledged write lost
    assert landed <= set(names)
    print(f"\n{sum(n is not None for n in acked)} of {len(names)} acknowledged, all stored")
    await until(lambda: set(a.state.body("catalog")) == landed, 10, "pod-a converged")
    await until(lambda: set(b.state.body("catalog")) == landed, 10, "pod-b converged")


async def test_a_deposed_leader_is_refused_after_the_new_one_read(ns: Namespace) -> None:
    old_seat, new_seat = Seat(term=1), Seat(leads=False, term=1)
    old = await ns.pod("pod-a", old_seat)
    await ready(old)
    await old.state.update("catalog", add("before"))
    new = await ns.pod("pod-b", new_seat)
    new_seat.leads, new_seat.term = True, 2  # the Lease changed hands; pod-a has not noticed
    await ready(new)
    stored = ns.get()
    assert stored is not None
    assert stored["data"]["term"] == "2"  # written again in term 2
    with pytest.raises(Unavailable) as refused:
        await old.state.update("catalog", add("deposed"))
    assert refused.value.code == "no_leader"
    await new.state.update("catalog", add("after"))
    assert set(ns.body()) == {"before", "after"}


async def test_a_corrupt_configmap_is_reported_not_applied_and_a_deleted_one_restored(
    ns: Namespace,
) -> None:
    leader = await ns.pod("pod-a", Seat())
    follower = await ns.pod("pod-b", Seat(leads=False))
    await ready(leader)
    await leader.state.update("catalog", add("good"))
    good = {"good": {"modelPath": "/m/good"}}
    await until(lambda: follower.told[-1:] == [good], 10, "the follower applied the copy")
    told = len(follower.told)

    def corrupt(data: dict[str, str]) -> None:
        data["body"] = '{"good": {"modelPath": '  # cut short by a hand edit

    await asyncio.to_thread(ns.edit, corrupt)
    for pod in (leader, follower):
        await until(lambda p=pod: bool(p.state.warnings()), 10, "the corrupt ConfigMap reported")  # type: ignore[misc]
        (text,) = pod.state.warnings()
        assert CATALOG in text
        assert "not JSON" in text
        assert "deleted" in text
        assert pod.state.view()["problems"] == [text]
        assert pod.state.body("catalog") == {"good": {"modelPath": "/m/good"}}  # last good
    assert len(follower.told) == told  # nothing applied
    with pytest.raises(Conflict) as refused:
        await leader.state.update("catalog", add("more"))
    assert refused.value.code == "control_document_corrupt"
    # The operator deletes it: the leader writes its last good copy again.
    await asyncio.to_thread(ns.delete)
    await until(lambda: ns.get() is not None, 10, "the leader restored the ConfigMap")
    assert ns.body() == {"good": {"modelPath": "/m/good"}}
    for pod in (leader, follower):
        await until(lambda p=pod: not p.state.warnings(), 10, "the warning cleared")  # type: ignore[misc]
    await leader.state.update("catalog", add("more"))
    assert set(ns.body()) == {"good", "more"}


async def test_a_pod_starting_with_nothing_reads_the_api_servers_state(ns: Namespace) -> None:
    leader = await ns.pod("pod-a", Seat())
    await ready(leader)
    await leader.state.update("catalog", add("kept"))
    late = await ns.pod("pod-c", Seat(leads=False))
    want = {"kept": {"modelPath": "/m/kept"}}
    # Listed, and handed to the feature (the catalog reloads).
    await until(lambda: late.told[-1:] == [want], 10, "the new pod listed the state")
    assert late.state.body("catalog") == want
    # A change while it runs reaches it through the watch.
    await leader.state.update("catalog", add("later"))
    await until(lambda: set(late.state.body("catalog")) == {"kept", "later"}, 10, "watched")


async def test_a_document_too_large_for_a_configmap_is_refused(ns: Namespace) -> None:
    leader = await ns.pod("pod-a", Seat())
    await ready(leader)
    await leader.state.update("catalog", add("small"))
    with pytest.raises(PayloadTooLarge) as refused:
        await leader.state.update("catalog", add("huge", {"modelPath": "x" * (1024 * 1024)}))
    assert refused.value.code == "control_document_too_large"
    assert set(ns.body()) == {"small"}
    assert set(leader.state.body("catalog")) == {"small"}


class EchoFirst(KubeApi):
    """Answers a ConfigMap write only once this pod's own watch has brought it back: the
    order a loaded machine may give the two (the watch's event first, then the answer)."""

    copy: Callable[[str], Any] = staticmethod(lambda key: None)
    """The pod's copy of a document (set by the test once the state exists)."""

    async def replace_config_map(self, name: str, body: Any) -> dict[str, Any]:
        return await self._echoed(await super().replace_config_map(name, body), name, body)

    async def create_config_map(self, body: Any) -> dict[str, Any]:
        name = body["metadata"]["name"]
        return await self._echoed(await super().create_config_map(body), name, body)

    async def _echoed(self, obj: dict[str, Any], name: str, body: Any) -> dict[str, Any]:
        written = json.loads(body["data"]["body"])
        key = name.removeprefix("sardeenz-control-")
        await until(lambda: self.copy(key) == written, 10, f"the watch brought {name} back")
        return obj


async def test_a_pods_own_write_back_from_the_watch_first_is_not_handed_to_its_features(
    ns: Namespace,
) -> None:
    leader = await ns.pod("pod-a", Seat(), EchoFirst)
    assert isinstance(leader.api, EchoFirst)
    leader.api.copy = leader.state.body
    await ready(leader)
    await leader.state.update("catalog", add("first"))  # a create
    # A feature holds its own lock across its write (the tenant service checks the
    # whole set, then stores it), and its listener takes that lock: handing it its
    # own write from inside the write was a deadlock (a tenant PUT that never answered).
    lock = asyncio.Lock()

    async def feature(body: Any) -> None:
        async with lock:
            leader.told.append(("feature", sorted(body)))

    leader.state.subscribe("catalog", feature)
    async with lock:
        update = leader.state.update("catalog", add("second"))  # an update
        await within(update, 15, "the update, the feature's lock held meanwhile")
    assert set(ns.body()) == {"first", "second"}
    assert leader.state.body("catalog") == ns.body()
    assert leader.told == []  # its own writes: the features made them

    def theirs(data: dict[str, str]) -> None:  # a write from elsewhere is still handed on
        data["body"] = json.dumps({**json.loads(data["body"]), "theirs": {}})
        data["revision"] = str(int(data["revision"]) + 1)

    await asyncio.to_thread(ns.edit, theirs)
    await until(lambda: len(leader.told) == 2, 10, "the other write handed to both features")
    assert ("feature", ["first", "second", "theirs"]) in leader.told


class ConflictFirst(KubeApi):
    """Runs ``before`` ahead of the next ConfigMap update (once): a write made there
    makes that update a real 409."""

    before: Callable[[], Awaitable[None]] | None = None

    async def replace_config_map(self, name: str, body: Any) -> dict[str, Any]:
        before, self.before = self.before, None
        if before is not None:
            await before()
        return await super().replace_config_map(name, body)


async def test_a_tenant_put_that_meets_another_write_takes_it_and_answers(
    ns: Namespace,
) -> None:
    leader = await ns.pod("pod-a", Seat(), ConflictFirst)
    assert isinstance(leader.api, ConflictFirst)
    await ready(leader)
    repo = TenantRepository(leader.db)
    tenants = TenantService(
        Settings(),
        Admission(),
        repo,
        ["k-a", "k-b", "k-c"],
        definitions=ReplicatedTenants(leader.state),
    )
    bind_tenants(leader.state, tenants, repo)
    await tenants.start()
    try:

        def body(key: str) -> TenantBody:
            return TenantBody.model_validate(
                {"api_keys": [key], "limits": {"requests_per_minute": 60}}
            )

        await within(tenants.put("team-a", body("k-a")), 15, "the put of team-a")

        def theirs(data: dict[str, str]) -> None:
            other = {"api_keys": ["k-b"], "limits": {"requests_per_minute": 30}}
            data["body"] = json.dumps({**json.loads(data["body"]), "team-b": other})
            data["revision"] = str(int(data["revision"]) + 1)

        async def another_write() -> None:
            await asyncio.to_thread(ns.edit, theirs, TENANTS)

        leader.api.before = another_write
        # The 409 is retried on a fresh read, which hands team-b to the tenant service
        # from inside its own put: that waited on the put's lock, for ever.
        await within(tenants.put("team-c", body("k-c")), 15, "the put of team-c through a 409")
        assert set(ns.body(TENANTS)) == {"team-a", "team-b", "team-c"}
        assert {t["name"] for t in tenants.all()} == {"team-a", "team-b", "team-c"}
    finally:
        await tenants.stop()
