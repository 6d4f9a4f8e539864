"""The chaos soak's short variant: ~90 s of seeded faults under traffic, every invariant
checked (testkit/soak.py says which). ``SARDEENZ_SOAK_SEED`` replays a run; the seed is
printed either way. benchmarks/soak.py runs the same for as long as asked.

Every run opens with a lossy link, a clock jump and a full disk (``OPENING``), so each
of them is in every short run whatever the seed; the test checks that they ran.
Clock jumps need Debian's libfaketime (``make soak-deps``; the module is skipped
without it, as the browser tests are without chromium).
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

from testkit import netns
from testkit.soak import OPENING
from testkit.soak_faults import clock_unavailable
from testkit.soak_run import run, summary

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not netns.available(), reason="needs root and iproute2 (ip netns)"),
    pytest.mark.skipif(
        clock_unavailable() is not None, reason=f"run `make soak-deps`: {clock_unavailable()}"
    ),
]

DURATION = 90.0


@pytest.mark.timeout(420)
def test_soak_keeps_every_invariant(tmp_path: Path) -> None:
    seed = int(os.environ.get("SARDEENZ_SOAK_SEED") or random.randrange(2**31))
    print(f"\nsoak seed {seed} (replay: SARDEENZ_SOAK_SEED={seed})")
    report = asyncio.run(run(tmp_path, seed, DURATION))
    text = summary(report)
    print(text)
    assert report.traffic.count("ok") > 0, text
    assert report.faults, f"no fault was injected\n{text}"
    ran = {f.kind for f in report.faults}
    assert set(OPENING) <= ran, f"not injected: {sorted(set(OPENING) - ran)}\n{text}"
    assert not report.violations, "\n\n".join(str(v) for v in report.violations) + "\n" + text
