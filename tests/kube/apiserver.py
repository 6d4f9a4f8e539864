"""The kube tier's API server for pytest: testkit/kube.py's, skipped or failed by rule.

Binaries unset: the tier skips with the reason (pytest run by hand); set to a missing
file: it fails, so ``make test`` cannot skip it by accident.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.kube import KubeApiServer, KubeBinariesMissing, find_binaries, started_apiserver


@contextlib.contextmanager
def running_apiserver(root: Path) -> Iterator[KubeApiServer]:
    """A ready API server (``started_apiserver``), for a fixture."""
    try:
        find_binaries()
    except KubeBinariesMissing as exc:
        pytest.skip(str(exc))
    except FileNotFoundError as exc:
        pytest.fail(str(exc))
    with started_apiserver(root) as server:
        yield server
