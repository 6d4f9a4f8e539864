"""Rendering deploy/kubernetes overlays and reading the objects they hold.

Rendering needs a kustomize of v4 or later (``kubectl kustomize``: the machine's kubectl
ships v5). Debian's kubernetes-client 1.20 (``$SARDEENZ_KUBECTL``) embeds kustomize v2,
which reads neither ``patches`` nor directories in ``resources``; it is the client used to
*apply* the rendered objects to the 1.20 API server, so client and server versions match.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZE_ROOT = REPO / "deploy" / "kubernetes"
KUBE_MODE_OVERLAYS = ("kubernetes", "openshift")
"""Overlays whose pods run in Kubernetes mode: a Role for the Lease and the pod watch."""
OVERLAYS = (*KUBE_MODE_OVERLAYS, "static-peers")
APP_LABEL = {"app": "sardeenz"}
"""The label every object carries and every selector uses (Kubernetes mode's pod watch
selects its peers by it)."""


class KustomizeMissing(Exception):
    """No kubectl with kustomize v4+ on this machine: the rendering tests skip."""


def kustomize_kubectl() -> str:
    """A kubectl whose built-in kustomize is v4 or later."""
    for candidate in (shutil.which("kubectl"), "/usr/bin/kubectl"):
        if not candidate or not os.access(candidate, os.X_OK):
            continue
        out = subprocess.run(
            [candidate, "version", "--client"], capture_output=True, text=True, check=False
        ).stdout
        found = re.search(r"Kustomize Version: v(\d+)", out)
        if found and int(found.group(1)) >= 4:
            return candidate
    raise KustomizeMissing("no kubectl with kustomize v4+ on PATH to render deploy/kubernetes")


def render(overlay: str | Path, namespace: str | None = None, workdir: Path | None = None) -> str:
    """``kubectl kustomize`` of an overlay; with ``namespace``, through a one-line overlay
    of the overlay that moves it there (as an operator would), written into ``workdir``."""
    path = KUSTOMIZE_ROOT / "overlays" / overlay if isinstance(overlay, str) else overlay
    if namespace is not None:
        assert workdir is not None
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "namespace": namespace,
                    "resources": [os.path.relpath(path, workdir)],
                }
            )
        )
        path = workdir
    proc = subprocess.run(
        [kustomize_kubectl(), "kustomize", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def objects(rendered: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]
