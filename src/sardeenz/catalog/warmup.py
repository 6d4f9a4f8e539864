"""The warm-up request after a wake: one short generation before traffic is released.

vLLM's first request after a wake-up is several times slower than the ones after it
(its blog on sleep mode: 4.12 s for the first prompt after a wake, 0.96 s when a
1-token request went first). A catalog entry with ``warmup: true`` pays that on a
1-token request of the controller's instead of on a client's. The supervisor calls
:meth:`WarmUp.after_wake` after the engine reports awake and before the instance is
routed again, so every request held for the model (by the proxy or by load on
demand) waits for the warm-up and none reaches the engine before it.

A warm-up never fails a wake: an error or a timeout
(``SARDEENZ_ONDEMAND_WARMUP_TIMEOUT_SECONDS``) is logged and traffic is released.
"""

from __future__ import annotations

import logging
import time

import httpx

from sardeenz.catalog.metrics import STATS
from sardeenz.catalog.registry import Catalog
from sardeenz.config import Settings
from sardeenz.domain import ModelInstance
from sardeenz.engines.vllm import flag_value
from sardeenz.events import CatalogEvent, EventBus
from sardeenz.tls import client_tls

log = logging.getLogger(__name__)

DEFAULT_PROMPT = "Hello"


class WarmUp:
    """Sends the warm-up request; owns its HTTP client (``close()`` on shutdown)."""

    def __init__(self, settings: Settings, catalog: Catalog, bus: EventBus) -> None:
        self._catalog = catalog
        self._bus = bus
        self._host = settings.engine_host
        self._timeout = settings.ondemand_warmup_timeout_seconds
        self._http: httpx.AsyncClient | None = None

    async def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    async def after_wake(self, inst: ModelInstance) -> None:
        """Warm ``inst`` up if its catalog entry asks for it (the supervisor's hook)."""
        name = inst.served_model_name
        entry = self._catalog.entry(name)
        if entry is None or not entry.warmup:
            return
        body = {"model": name, "prompt": entry.warmup_prompt or DEFAULT_PROMPT, "max_tokens": 1}
        headers: dict[str, str] = {}
        key = flag_value(list(inst.extra_args), "--api-key")
        if key:  # the engine guards /v1 with its own key
            headers["Authorization"] = f"Bearer {key}"
        host = f"[{self._host}]" if ":" in self._host else self._host
        url = f"http://{host}:{inst.port}/v1/completions"
        if self._http is None:
            self._http = httpx.AsyncClient(trust_env=False, verify=client_tls(False))
        t0 = time.perf_counter()
        try:
            resp = await self._http.post(url, json=body, headers=headers, timeout=self._timeout)
            outcome = "ok" if resp.status_code == 200 else f"HTTP {resp.status_code}"
        except httpx.HTTPError as exc:
            outcome = type(exc).__name__
        seconds = time.perf_counter() - t0
        if outcome == "ok":
            log.info(
                "warm-up of %s (instance %s) after its wake took %.3f s", name, inst.id, seconds
            )
        else:
            log.warning(
                "warm-up of %s (instance %s) failed after %.3f s: %s; releasing traffic anyway",
                name,
                inst.id,
                seconds,
                outcome,
            )
        STATS.action(name, "warmup", "wake" if outcome == "ok" else "failed")
        self._bus.publish(
            CatalogEvent(
                instance_id=inst.id,
                model=name,
                action="warmup",
                reason="wake",
                message=f"warm-up request after the wake: {outcome} in {seconds * 1000:.0f} ms",
                details={"seconds": round(seconds, 4), "outcome": outcome},
            )
        )
