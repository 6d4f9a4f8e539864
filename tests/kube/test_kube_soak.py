"""The chaos soak's Kubernetes-mode part, short: ~60 s of seeded faults (SIGKILL and
SIGSTOP of the Lease holder and of a follower, SIGKILL of an engine, the Lease holder
cut from its peers and the API server, one pod cut from the API server only, a 1|2
partition of the peers) under traffic and admin operations on 3 pods, each in its own
network namespace, of the tier's API server, every invariant checked
(testkit/soak_kube.py says which). Every run opens with the three network faults
(``NET_FAULTS``), whatever the seed; the test checks that they ran.
``SARDEENZ_SOAK_SEED`` replays a run; the seed is printed either way. The static
part is tests/soak/test_soak.py; benchmarks/soak.py runs both, side by side, for as
long as asked.

A file of this folder, not a second half of the static soak's test: this folder's API
server is already running (a second one costs ~3 s of CPU), and 8 pods in one test on the
suite's two cores would stretch the failure detectors' timing the invariants hold them to.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

from testkit import netns
from testkit.kube import KubeApiServer
from testkit.soak_kube import NET_FAULTS, run_kube
from testkit.soak_run import summary

pytestmark = [
    pytest.mark.kube,
    pytest.mark.slow,
    pytest.mark.skipif(not netns.available(), reason="needs root and iproute2 (ip netns)"),
]

DURATION = 60.0
CLIENTS = 4


@pytest.mark.timeout(300)
def test_kube_soak_keeps_every_invariant(kube: KubeApiServer, tmp_path: Path) -> None:
    seed = int(os.environ.get("SARDEENZ_SOAK_SEED") or random.randrange(2**31))
    print(f"\nkube soak seed {seed} (replay: SARDEENZ_SOAK_SEED={seed})")
    report = asyncio.run(run_kube(kube, tmp_path, seed, DURATION, CLIENTS))
    text = summary(report)
    print(text)
    assert report.traffic.count("ok") > 0, text
    assert report.faults, f"no fault was injected\n{text}"
    assert report.terms, f"no term was seen\n{text}"
    ran = {f.kind for f in report.faults}
    assert set(NET_FAULTS) <= ran, f"not injected: {sorted(set(NET_FAULTS) - ran)}\n{text}"
    assert not report.violations, "\n\n".join(str(v) for v in report.violations) + "\n" + text
