"""The engine's runtime LoRA endpoints, as the adapter loader calls them.

vLLM's ``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` (the simulated
engine has the same), and its ``/v1/models`` listing of the adapters it holds
(cards with a ``parent``). A refusal is raised as :class:`EngineRefused` with the
engine's status and vLLM's own message, which the loader passes on to clients.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Protocol

import httpx

from sardeenz.domain import ModelInstance
from sardeenz.engines.vllm import flag_value
from sardeenz.errors import SardeenzError
from sardeenz.proxy.routing import Endpoint
from sardeenz.tls import client_tls

log = logging.getLogger(__name__)

__all__ = ["EngineCalls", "EngineRefused", "InstanceGone", "InstanceSource"]


class InstanceSource(Protocol):
    """What the loader needs of the supervisor: an instance's flags (slots, API key)."""

    def get(self, instance_id: str) -> ModelInstance: ...


class EngineRefused(Exception):
    """The engine refused (or did not answer): its status and vLLM's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class InstanceGone(Exception):
    """The instance chosen for a load went away during it (its adapters with it)."""


class EngineCalls:
    """One pooled client for the LoRA calls to this pod's engines (closed by ``close``)."""

    def __init__(self, instances: InstanceSource, timeout: float) -> None:
        self._instances = instances
        self._timeout = timeout
        self._http: httpx.AsyncClient | None = None

    async def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    def instance(self, instance_id: str) -> ModelInstance | None:
        try:
            return self._instances.get(instance_id)
        except SardeenzError:
            return None

    async def post(self, ep: Endpoint, path: str, body: dict[str, str]) -> None:
        """POST to the instance's engine; ``EngineRefused`` with its reason unless 200."""
        inst = self.instance(ep.instance_id)
        try:
            resp = await self._client().post(
                f"{ep.base_url}{path}", json=body, headers=_auth(inst), timeout=self._timeout
            )
        except httpx.HTTPError as exc:
            raise EngineRefused(502, f"the engine did not answer {path}: {exc!r}") from None
        if resp.status_code == 200:
            return
        message = resp.text[:1000]
        with contextlib.suppress(ValueError, KeyError, TypeError):
            message = str(resp.json()["error"]["message"])  # vLLM's OpenAI error shape
        raise EngineRefused(resp.status_code, message)

    async def unload(self, ep: Endpoint, adapter: str) -> None:
        """Unload ``adapter``; a refusal (it is gone already) is as good as done."""
        with contextlib.suppress(EngineRefused):
            await self.post(ep, "/v1/unload_lora_adapter", {"lora_name": adapter})

    async def listed(self, ep: Endpoint, inst: ModelInstance) -> list[str]:
        """The adapters the engine holds now (its ``/v1/models`` cards with a parent)."""
        try:
            resp = await self._client().get(
                f"{ep.base_url}/v1/models", headers=_auth(inst), timeout=self._timeout
            )
            cards = resp.json().get("data", []) if resp.status_code == 200 else []
            return [c["id"] for c in cards if isinstance(c, dict) and c.get("parent")]
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("instance %s: cannot list its adapters: %s", ep.instance_id, exc)
            return []

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(trust_env=False, verify=client_tls(False))
        return self._http


def _auth(inst: ModelInstance | None) -> dict[str, str]:
    key = flag_value(list(inst.extra_args), "--api-key") if inst is not None else None
    return {"Authorization": f"Bearer {key}"} if key else {}
