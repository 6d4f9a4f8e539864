"""Longest test files first: how `make test`'s xdist workers share the suite.

``--dist loadfile`` keeps each file on one worker, so a module's shared server,
cluster or vLLM instance starts once; a folder of ``SHARED_FOLDERS`` goes to one worker
as a whole, so the cluster its files share starts once. xdist then hands the files
out in order, and its default order is by number of tests: the real-vLLM module (8
tests, ~5 min) and the image build (6 tests, ~2 min) came last, and the worker that
drew them finished minutes after the others. This scheduler hands out the longest file
still waiting whenever a worker needs work (longest-processing-time first, the
classic rule for this), so the long files start at once, side by side, and the
short ones fill the gaps at the end.

How long a file takes: its time in this machine's previous run (pytest's cache,
``sardeenz/file-seconds``, written at the end of every run), else the committed
table ``tests/durations.json`` (what a fresh clone and CI use: per-file seconds of
one full ``make test`` run on a quiet 2-core machine, its default workers; regenerate it from
a full run as docs/testing.md says), else an estimate from its tier. Only the order
depends on these numbers: a stale or missing entry costs wall time, never a test.

A worker gets its next file when at most one of its tests is pending (xdist
holds a worker's last test back until it knows what comes next), not at two as
xdist does: a file handed out early is committed to a worker that may still be
busy with a long test while another worker sits idle.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController

CACHE_KEY = "sardeenz/file-seconds"
CPU_CACHE_KEY = "sardeenz/file-cpu-seconds"
TABLE = Path(__file__).with_name("durations.json")

SECONDS_PER_TEST = {
    "tests/vllm": 40.0,
    "tests/deploy": 15.0,
    "tests/kube": 10.0,
    "tests/cluster": 10.0,
    "tests/browser": 6.0,
    "tests/e2e": 3.0,
    "tests/security": 1.0,
    "tests/component": 1.5,
    "tests/unit": 0.05,
}
"""A file missing from both tables: its tier's rough cost per test."""


SHARED_FOLDERS = ("tests/cluster/shared/", "tests/browser/", "tests/kube/", "tests/vllm/shared/")
"""Folders handed to one worker as one unit, their files one after another: they share
processes that package-scoped fixtures start once for the folder and stop after its
last file (tests/cluster/shared/conftest.py: one 3-pod cluster; tests/browser/conftest.py:
Playwright, Chromium and a server; tests/kube/conftest.py: kube-apiserver and etcd;
tests/vllm/shared/conftest.py: a server and the real vLLM engine its modules use in turn)."""


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its file, or the shared folder holding that file."""
    path = file_of(nodeid)
    return next((folder for folder in SHARED_FOLDERS if path.startswith(folder)), path)


def known_seconds(config: pytest.Config) -> dict[str, float]:
    """Per-file seconds: the committed table, overridden by this machine's last run."""
    known: dict[str, float] = json.loads(TABLE.read_text())
    cache = getattr(config, "cache", None)
    if cache is not None:
        known.update(cache.get(CACHE_KEY, {}))
    return known


class LongestFileFirst(LoadFileScheduling):  # type: ignore[misc]  # xdist ships no types
    """``loadfile`` with the longest waiting file handed out first (see the module doc)."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self.known = known_seconds(config)

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def cost(self, scope: str, tests: int) -> float:
        if scope in self.known:
            return self.known[scope]
        if scope.endswith("/"):  # a shared folder: the sum of its files
            files = [s for name, s in self.known.items() if name.startswith(scope)]
            if files:
                return sum(files)
        tier = "/".join(Path(scope).parts[:2])
        return tests * SECONDS_PER_TEST.get(tier, 2.0)

    def _assign_work_unit(self, node: WorkerController) -> None:
        # The parent pops the first unit of the queue: put the longest one there.
        longest = max(self.workqueue, key=lambda s: self.cost(s, len(self.workqueue[s])))
        self.workqueue.move_to_end(longest, last=False)
        super()._assign_work_unit(node)

    def _reschedule(self, node: WorkerController) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 1:
            return
        self._assign_work_unit(node)


def cpu_seconds() -> float:
    """This process's CPU plus that of every child it has reaped (servers, engines, browsers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuMeter:
    """On a worker: the CPU spent since the previous report, carried on each report.

    Wall seconds say how long a file kept its worker; CPU seconds say what it cost the
    machine, which is what decides the suite's time once the workers outnumber the cores.
    A file's module-scoped servers are reaped in its last teardown, so their CPU lands
    on that file."""

    def __init__(self) -> None:
        self.last = cpu_seconds()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Any:
        outcome = yield
        now = cpu_seconds()
        outcome.get_result().user_properties.append(("cpu_seconds", now - self.last))
        self.last = now


class FileClock:
    """Adds up each file's wall and CPU seconds; the wall times order the next run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration
        for key, value in report.user_properties:
            if key == "cpu_seconds" and isinstance(value, float):
                self.cpu[file_of(report.nodeid)] += value

    def pytest_sessionfinish(self) -> None:
        cache = getattr(self.config, "cache", None)
        if cache is None or not self.seconds:
            return
        for key, table in ((CACHE_KEY, self.seconds), (CPU_CACHE_KEY, self.cpu)):
            saved: dict[str, Any] = cache.get(key, {})
            saved.update({name: round(s, 1) for name, s in table.items()})
            cache.set(key, saved)


def register(config: pytest.Config) -> None:
    """Called from tests/conftest.py: meter CPU where tests run, add it up on the controller."""
    config.pluginmanager.register(CpuMeter(), "sardeenz-cpu-meter")
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(FileClock(config), "sardeenz-file-clock")


def make_scheduler(config: pytest.Config, log: Producer) -> LongestFileFirst | None:
    if config.getvalue("dist") != "loadfile":
        return None
    return LongestFileFirst(config, log)
