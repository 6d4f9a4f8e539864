"""The simulated engine's ASGI application: routing, lifespan and the small endpoints.

A raw ASGI callable rather than Starlette/FastAPI: this server is the upstream in
proxy benchmarks with hundreds of concurrent streams, so each request is one dict
lookup for routing, then a handler of :mod:`~sardeenz.sim.openai`,
:mod:`~sardeenz.sim.sleep` or this module (health, version, load, metrics and
``/sim/state``, the simulated-only view of the engine that tests and the demo read).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable

import orjson
import uvicorn

from sardeenz.asgi import Message, Receive, Scope, Send
from sardeenz.sim import SIM_VERSION
from sardeenz.sim.args import SimConfig
from sardeenz.sim.generation import Scheduler
from sardeenz.sim.logwriter import VllmLog
from sardeenz.sim.lora import LoraAdapters, runtime_updating_allowed
from sardeenz.sim.memory import MemoryPlan
from sardeenz.sim.metrics import CONTENT_TYPE, SimMetrics
from sardeenz.sim.openai import OpenAIHandlers
from sardeenz.sim.sleep import SleepControl
from sardeenz.sim.wire import RequestError, respond, respond_empty

__all__ = ["Handler", "SimEngine"]

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]

_METRICS_CONTENT_TYPE = CONTENT_TYPE.encode()


class SimEngine:
    """The ASGI application and the simulated engine state behind it."""

    def __init__(self, cfg: SimConfig, plan: MemoryPlan, log: VllmLog, dev_mode: bool) -> None:
        self.cfg = cfg
        self.plan = plan
        self.log = log
        self.dev_mode = dev_mode
        self.sleep_enabled = cfg.enable_sleep_mode and dev_mode
        self.metrics = SimMetrics(cfg.served_name)
        self.scheduler = Scheduler(cfg, plan, log, self.metrics)
        self.sleep = SleepControl(cfg, plan, log, self.metrics, self.scheduler)
        self.lora = LoraAdapters(cfg, log)
        self.openai = OpenAIHandlers(cfg, self.scheduler, self.lora)
        self.engine_core_pid: int | None = None
        self._bearer = b"Bearer " + cfg.api_key.encode() if cfg.api_key else None
        self.server: uvicorn.Server | None = None
        self._stats_task: asyncio.Task[None] | None = None
        openai = self.openai
        self.routes: dict[str, dict[str, Handler]] = {
            "/health": {"GET": self._health},
            "/ping": {"GET": self._health, "POST": self._health},
            "/version": {"GET": self._version},
            "/load": {"GET": self._load},
            "/metrics": {"GET": self._metrics},
            "/tokenize": {"POST": openai.tokenize},
            "/v1/models": {"GET": openai.models},
            "/v1/completions": {"POST": openai.completions},
            "/v1/chat/completions": {"POST": openai.chat_completions},
            "/sim/state": {"GET": self._sim_state},
        }
        if runtime_updating_allowed():  # as vLLM: the routes exist only with this variable
            self.routes["/v1/load_lora_adapter"] = {"POST": self.lora.load}
            self.routes["/v1/unload_lora_adapter"] = {"POST": self.lora.unload}
        if self.sleep_enabled:
            self.routes["/sleep"] = {"POST": self.sleep.sleep}
            self.routes["/wake_up"] = {"POST": self.sleep.wake_up}
            self.routes["/is_sleeping"] = {"GET": self.sleep.is_sleeping}

    # -- ASGI entry -----------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            if self.cfg.access_log:
                send = self._logging_send(scope, send)
            methods = self.routes.get(scope["path"])
            if methods is None:
                await respond(send, 404, b'{"detail":"Not Found"}')
                return
            handler = methods.get(scope["method"])
            if (
                self._bearer is not None
                and scope["path"].startswith("/v1")
                and not any(
                    k == b"authorization" and v == self._bearer for k, v in scope["headers"]
                )
            ):
                await respond(send, 401, b'{"error":"Unauthorized"}')  # vLLM's answer
                return
            if handler is None:
                await respond(send, 405, b'{"detail":"Method Not Allowed"}')
                return
            try:
                await handler(scope, receive, send)
            except RequestError as exc:
                await exc.send_to(send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    def _logging_send(self, scope: Scope, send: Send) -> Send:
        log = self.log

        async def logging_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                log.access(scope, message["status"])
            await send(message)

        return logging_send

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                loop = asyncio.get_running_loop()
                self._stats_task = loop.create_task(self.scheduler.stats_loop())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._stats_task is not None:
                    self._stats_task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._stats_task
                self.log.flush_access()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- small endpoints --------------------------------------------------------------

    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.scheduler.dead:
            await respond(send, 503, b"")
        else:
            await respond_empty(send)

    async def _version(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, orjson.dumps({"version": SIM_VERSION}))

    async def _load(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, orjson.dumps({"server_load": self.scheduler.inflight}))

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, self.metrics.render(), _METRICS_CONTENT_TYPE)

    async def _sim_state(self, scope: Scope, receive: Receive, send: Send) -> None:
        cfg, plan, sleep = self.cfg, self.plan, self.sleep
        state = {
            "simulated": True,
            "model": cfg.model,
            "served_model_names": list(cfg.served_model_names),
            "memory_gib": sleep.current_memory_gib(),
            "memory_gib_awake": plan.total_gib,
            "weights_gib": plan.weights_gib,
            "kv_cache_gib": plan.kv_gib,
            "cuda_graph_gib": plan.graphs_gib,
            "kv_cache_tokens": plan.kv_tokens,
            "max_model_len": cfg.max_model_len,
            "sleep_mode_enabled": self.sleep_enabled,
            "sleeping": bool(sleep.sleeping_tags),
            "sleep_level": sleep.sleep_level,
            "sleeping_tags": sorted(sleep.sleeping_tags),
            "wakeups": sleep.wakeups,
            "num_requests_running": self.scheduler.running,
            "num_requests_waiting": self.scheduler.waiting,
            "pid": os.getpid(),
            "engine_core_pid": self.engine_core_pid,
            **self.lora.state(),
        }
        await respond(send, 200, orjson.dumps(state))
