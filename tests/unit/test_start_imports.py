"""A server start imports what its configuration uses, and a configured feature at start.

Behaviour tests, not timing ones (the CPU is measured by benchmarks/serve_startup.py):
each case runs in a fresh interpreter and reads what it imported. PyJWT (with
cryptography) loads only when admin authentication is configured, and then when the
authenticator is built, so a broken install still stops the start; httpx's own
command-line client, which pulls in pygments, nor uvicorn's watchfiles reloader, ever
loads in a Sardeenz process;
PyYAML only for a start given a configuration file; pynvml only for a server on the
NVIDIA driver (not on simulated GPUs); a sim engine never loads
prometheus_client.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

AUTHENTICATOR_IMPORTS = """
import json, sys
from sardeenz.config import Settings
from sardeenz.security.auth import Authenticator
Authenticator(Settings(**json.loads(sys.argv[1])))
print(json.dumps(sorted(sys.modules)))
"""


def modules_after(code: str, *argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_no_jwt_library_without_admin_auth() -> None:
    modules = modules_after(AUTHENTICATOR_IMPORTS, "{}")
    assert "sardeenz.security.auth" in modules
    assert "jwt" not in modules
    assert "cryptography" not in modules


def test_configured_jwt_auth_imports_it_when_built() -> None:
    modules = modules_after(AUTHENTICATOR_IMPORTS, json.dumps({"jwt_secret": "x" * 32}))
    assert "jwt" in modules


def test_yaml_only_with_a_config_file(tmp_path: Path) -> None:
    code = (
        "import json, sys; from pathlib import Path; from sardeenz.config import load_settings; "
        "load_settings(Path(sys.argv[1]) if sys.argv[1] else None); "
        "print(json.dumps(sorted(sys.modules)))"
    )
    assert "yaml" not in modules_after(code, "")
    config = tmp_path / "sardeenz.yaml"
    config.write_text("log_level: debug\n")
    assert "yaml" in modules_after(code, str(config))


def test_httpx_without_its_command_line_client() -> None:
    code = (
        "import json, sys, sardeenz, httpx; "
        "assert httpx.Client and httpx.AsyncClient; "
        "print(json.dumps(sorted(m for m, v in sys.modules.items() if v is not None)))"
    )
    modules = modules_after(code)
    assert "httpx" in modules
    assert "httpx._main" not in modules
    assert "pygments" not in modules


def test_sim_engine_without_prometheus_client() -> None:
    # The engine writes its /metrics text itself (sardeenz.sim.metrics; byte-equal to
    # prometheus_client's, tests/unit/test_sim_metrics_text.py): the library's import
    # was a seventh of an engine start's CPU.
    code = (
        "import json, sys; from sardeenz.sim.server import SimServer, main; "
        "from sardeenz.sim.metrics import SimMetrics; SimMetrics('m').render(); "
        "print(json.dumps(sorted(m for m, v in sys.modules.items() if v is not None)))"
    )
    modules = modules_after(code)
    assert "sardeenz.sim.app" in modules
    assert "uvicorn" in modules
    assert not [m for m in modules if m.split(".")[0] == "prometheus_client"]


def test_pynvml_only_for_the_nvml_inventory() -> None:
    # The whole server's modules and a simulated-GPU inventory: no NVML library.
    code = (
        "import json, sys, sardeenz.app; from sardeenz.config import Settings; "
        "from sardeenz.gpu.inventory import create_inventory; "
        "inv = create_inventory(Settings(**json.loads(sys.argv[1]))); "
        "print(json.dumps(sorted(m for m, v in sys.modules.items() if v is not None)))"
    )
    modules = modules_after(code, json.dumps({"sim_gpus": "NVIDIA L4:24GiB"}))
    assert "sardeenz.gpu.inventory" in modules
    assert "pynvml" not in modules
    # With no simulated GPUs the driver is asked, through pynvml, when the server opens it.
    nvml = (
        "import asyncio, json, sys; from sardeenz.config import Settings; "
        "from sardeenz.gpu.inventory import create_inventory; "
        "inv = create_inventory(Settings(**json.loads(sys.argv[1]))); asyncio.run(inv.open()); "
        "print(json.dumps(sorted(m for m, v in sys.modules.items() if v is not None)))"
    )
    assert "pynvml" in modules_after(nvml, json.dumps({"sim_gpus": None, "demo": False}))


def test_uvicorn_without_its_file_watching_reloader() -> None:
    code = (
        "import json, sys, sardeenz, uvicorn, uvicorn.supervisors as sup; "
        "assert uvicorn.Config and uvicorn.Server; "
        "assert sup.ChangeReload.__name__ == 'StatReload', sup.ChangeReload; "
        "print(json.dumps(sorted(m for m, v in sys.modules.items() if v is not None)))"
    )
    modules = modules_after(code)
    assert "uvicorn.main" in modules
    assert "watchfiles" not in modules
