"""LoRA adapters in the simulated engine, loaded and unloaded at run time as vLLM does.

What vLLM does (its ``serving_models.py`` and LoRA worker manager, v0.32), copied in
behaviour, messages and status codes:

* ``POST /v1/load_lora_adapter`` / ``/v1/unload_lora_adapter`` exist only when
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` is ``1``/``true`` (404 otherwise);
* a load without ``--enable-lora`` fails with 500 ``Call to add_lora method failed:
  LoRA is not enabled. Use --enable-lora to enable LoRA.``;
* a folder without ``adapter_config.json`` is a 404 ``Loading lora NAME failed: No
  adapter found for PATH``; a rank above ``--max-lora-rank``, a bias, a folder with no
  weights file or an unreadable config is a 500 carrying vLLM's reason;
* a name that is already loaded (without ``load_inplace``) or that is the base's is a
  400; an unknown name on unload is a 404;
* a success answers 200 with vLLM's plain-text sentence.

``--max-loras`` is what vLLM makes of it: not a cap on registered adapters (vLLM
accepts more) but the size of its cache of loaded adapter weights (``max_cpu_loras``
defaults to it). A request for a registered adapter that was pushed out of that cache
(least recently used first) pays the load time again; ``/sim/state`` counts those
reloads, so a test can see that Sardeenz keeps no more adapters than slots.

A request whose ``model`` is an adapter is answered with ``model`` = the adapter's
name (vLLM's ``model_name(lora_request)``), which is how a client tells it from the base.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from sardeenz.asgi import Receive, Scope, Send
from sardeenz.sim.args import SimConfig
from sardeenz.sim.logwriter import VllmLog
from sardeenz.sim.wire import RequestError, read_json, respond

__all__ = ["LoraAdapters", "runtime_updating_allowed"]

_TEXT: Final = b"text/plain; charset=utf-8"
_WEIGHT_FILES: Final = ("adapter_model.safetensors", "adapter_model.bin", "adapter_model.pt")


def runtime_updating_allowed() -> bool:
    """``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` parsed as vLLM's ``envs`` parses it."""
    value = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0")
    return value.strip().lower() in ("1", "true")


@dataclass(frozen=True, slots=True)
class _Adapter:
    name: str
    path: str
    rank: int
    int_id: int


def _engine_failure(reason: str) -> RequestError:
    """An exception out of the engine core's ``add_lora`` as vLLM reports it."""
    return RequestError(f"Call to add_lora method failed: {reason}", 500, "InternalServerError")


def _read_adapter(name: str, path: str, max_rank: int) -> int:
    """The adapter's rank after vLLM's checks of its folder (blocking: run in a thread)."""
    folder = Path(path).expanduser()
    config_file = folder / "adapter_config.json"
    try:
        raw = config_file.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise RequestError(
            f"Loading lora {name} failed: No adapter found for {path}", 404, "NotFoundError"
        ) from None
    except OSError as exc:
        raise _engine_failure(str(exc)) from None
    try:
        config: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _engine_failure(str(exc)) from None
    if not isinstance(config, dict):
        raise _engine_failure("adapter_config.json is not a JSON object")
    rank = config.get("r", 8)
    pattern = config.get("rank_pattern") or {}
    ranks = [rank, *pattern.values()] if isinstance(pattern, dict) else [rank]
    if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        raise _engine_failure(f"invalid LoRA rank in {config_file}")
    problems: list[str] = []
    if max(ranks) > max_rank:
        problems.append(f"LoRA rank {max(ranks)} is greater than max_lora_rank {max_rank}.")
    if config.get("bias", "none") != "none":
        problems.append("Adapter bias is not supported.")
    if problems:
        raise _engine_failure(" ".join(problems))
    if not any((folder / f).is_file() for f in _WEIGHT_FILES):
        raise _engine_failure(f"{folder.resolve()} doesn't contain tensors")
    return int(rank)


class LoraAdapters:
    """The registered adapters, the weight cache behind them, and the two endpoints."""

    def __init__(self, cfg: SimConfig, log: VllmLog) -> None:
        self.cfg = cfg
        self.log = log
        self.adapters: dict[str, _Adapter] = {}
        self.resident: OrderedDict[str, None] = OrderedDict()
        """Adapters whose weights are loaded, least recently used first (``--max-loras``)."""
        self.loads = 0
        self.reloads = 0
        self.created = int(time.time())
        self._next_id = 0
        self._locks: dict[str, asyncio.Lock] = {}

    # -- requests ----------------------------------------------------------------------

    def model_json(self, name: str) -> bytes | None:
        """``"name"`` for a registered adapter (its replies carry it), else None."""
        return orjson.dumps(name) if name in self.adapters else None

    async def use(self, name: str) -> None:
        """A request for adapter ``name`` starts: reload its weights if they were evicted."""
        if name in self.resident:
            self.resident.move_to_end(name)
            return
        self.reloads += 1
        await asyncio.sleep(self.cfg.lora_load_s)
        self._make_resident(name)

    def _make_resident(self, name: str) -> None:
        self.resident[name] = None
        self.resident.move_to_end(name)
        while len(self.resident) > self.cfg.max_loras:
            self.resident.popitem(last=False)

    def cards(self, permission: dict[str, Any]) -> list[dict[str, Any]]:
        """``/v1/models`` entries of the adapters: ``root`` their path, ``parent`` the base."""
        return [
            {
                "id": a.name,
                "object": "model",
                "created": self.created,
                "owned_by": "vllm",
                "root": a.path,
                "parent": self.cfg.served_name,
                "max_model_len": None,
                "permission": [permission],
            }
            for a in self.adapters.values()
        ]

    def state(self) -> dict[str, Any]:
        return {
            "lora_enabled": self.cfg.enable_lora,
            "max_loras": self.cfg.max_loras,
            "max_lora_rank": self.cfg.max_lora_rank,
            "lora_adapters": {a.name: a.path for a in self.adapters.values()},
            "lora_resident": list(self.resident),
            "lora_loads": self.loads,
            "lora_reloads": self.reloads,
        }

    # -- endpoints -----------------------------------------------------------------------

    async def load(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_json(receive)
        if body is None:
            return
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not isinstance(path, str) or not name or not path:
            raise RequestError(
                "Both 'lora_name' and 'lora_path' must be provided.", 400, "InvalidUserInput"
            )
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:  # vLLM: "Ensure atomicity based on the lora name"
            if name in self.cfg.served_model_names:
                raise RequestError(
                    f"The lora adapter '{name}' conflicts with a served base model.",
                    400,
                    "InvalidUserInput",
                )
            if not body.get("load_inplace", False) and name in self.adapters:
                raise RequestError(
                    f"The lora adapter '{name}' has already been loaded. If you want to load "
                    "the adapter in place, set 'load_inplace' to True.",
                    400,
                    "InvalidUserInput",
                )
            if not self.cfg.enable_lora:
                raise _engine_failure("LoRA is not enabled. Use --enable-lora to enable LoRA.")
            rank = await asyncio.to_thread(_read_adapter, name, path, self.cfg.max_lora_rank)
            await asyncio.sleep(self.cfg.lora_load_s)
            previous = self.adapters.get(name)
            if previous is None:
                self._next_id += 1
            int_id = previous.int_id if previous is not None else self._next_id
            self.adapters[name] = _Adapter(name, path, rank, int_id)
            self._make_resident(name)
            self.loads += 1
            self.log.api(
                "serving_models.py:227",
                f"Loaded new LoRA adapter: name '{name}', path '{path}'",
            )
        message = f"Success: LoRA adapter '{name}' added successfully."
        await respond(send, 200, message.encode(), _TEXT)

    async def unload(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_json(receive)
        if body is None:
            return
        name = body.get("lora_name")
        if not isinstance(name, str) or not name:
            raise RequestError(
                "'lora_name' needs to be provided to unload a LoRA adapter.",
                400,
                "InvalidUserInput",
            )
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self.adapters:
                raise RequestError(
                    f"The lora adapter '{name}' cannot be found.", 404, "NotFoundError"
                )
            del self.adapters[name]
            self.resident.pop(name, None)
            self.log.api("serving_models.py:244", f"Removed LoRA adapter: name '{name}'")
        message = f"Success: LoRA adapter '{name}' removed successfully."
        await respond(send, 200, message.encode(), _TEXT)
