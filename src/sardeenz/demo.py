"""The demo of ``sardeenz serve --demo``: a couple of simulated models, loaded at start.

Everything here goes through the same supervisor path as an operator's load;
the models are simulated engines and are named so nobody mistakes them.
"""

from __future__ import annotations

import logging

from sardeenz.domain import EngineKind, LoadRequest
from sardeenz.services import Services

log = logging.getLogger(__name__)

DEMO_MODELS = [
    LoadRequest(
        model_path="demo/llama-3.2-1b-instruct",
        served_model_name="llama-3.2-1b-instruct-sim",
        display_name="Llama 3.2 1B Instruct (simulated)",
        engine=EngineKind.SIM,
        extra_args=["--memory-gib", "3.5", "--ttft-ms", "60", "--itl-ms", "15"],
    ),
    LoadRequest(
        model_path="demo/qwen2.5-0.5b-instruct",
        served_model_name="qwen2.5-0.5b-instruct-sim",
        display_name="Qwen2.5 0.5B Instruct (simulated)",
        engine=EngineKind.SIM,
        extra_args=["--memory-gib", "2", "--ttft-ms", "40", "--itl-ms", "10"],
    ),
]


async def load_demo_models(services: Services) -> None:
    """Load the demo models unless this data dir already has instances (a restart)."""
    if services.supervisor.list_instances():
        return
    for req in DEMO_MODELS:
        inst = await services.supervisor.load(req)
        log.info("demo: loading simulated model %s (%s)", inst.served_model_name, inst.id)
