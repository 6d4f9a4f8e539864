"""The OpenAI endpoints of the simulated engine: models, completions, chat, tokenize.

Requests are validated as vLLM validates them (model name, ``n``, context length,
``max_tokens``) with vLLM's error messages, and replies have vLLM's JSON shapes and
SSE framing, built from byte templates: these handlers sit on the hot path of the
proxy benchmarks. Timing is :class:`~sardeenz.sim.generation.Scheduler`'s job.
"""

from __future__ import annotations

import time
from typing import Any, Final
from uuid import uuid4

import orjson

from sardeenz.asgi import Receive, Scope, Send
from sardeenz.sim.args import SimConfig
from sardeenz.sim.generation import Gen, Scheduler, clock, usage_json
from sardeenz.sim.lora import LoraAdapters
from sardeenz.sim.text import completion_text, count_prompt_tokens, render_chat_prompt, token_ids
from sardeenz.sim.wire import RequestError, read_json, respond

__all__ = ["OpenAIHandlers"]

_DEFAULT_MAX_TOKENS: Final = 16


class OpenAIHandlers:
    """``/v1/models``, ``/v1/completions``, ``/v1/chat/completions`` and ``/tokenize``."""

    def __init__(self, cfg: SimConfig, scheduler: Scheduler, lora: LoraAdapters) -> None:
        self.cfg = cfg
        self.scheduler = scheduler
        self.lora = lora
        self.model_json = orjson.dumps(cfg.served_name)
        self.fingerprint = f"sardeenz-sim-{cfg.port}"
        self.names = frozenset(cfg.served_model_names)
        self.created = int(time.time())

    async def models(self, scope: Scope, receive: Receive, send: Send) -> None:
        data: list[dict[str, Any]] = [
            {
                "id": name,
                "object": "model",
                "created": self.created,
                "owned_by": "vllm",
                "root": self.cfg.model,
                "parent": None,
                "max_model_len": self.cfg.max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{uuid4().hex}",
                        "object": "model_permission",
                        "created": self.created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
            for name in self.cfg.served_model_names
        ]
        data += self.lora.cards(data[0]["permission"][0])
        await respond(send, 200, orjson.dumps({"object": "list", "data": data}))

    async def tokenize(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_json(receive)
        if body is None:
            return
        self._check_model(body)
        if "messages" in body:
            text = self._chat_text(body)
            tokens = token_ids(text)
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, str):
                tokens = token_ids(prompt)
            else:
                raise RequestError("'prompt' must be a string", param="prompt")
        result = {
            "count": len(tokens),
            "max_model_len": self.cfg.max_model_len,
            "tokens": tokens,
            "token_strs": None,
        }
        await respond(send, 200, orjson.dumps(result))

    # -- request validation -------------------------------------------------------------

    def _check_model(self, body: dict[str, Any]) -> bytes:
        """The ``model`` replies carry: the base's name, or the adapter's asked for;
        404 for anything else."""
        model = body.get("model")
        if model is None or model in self.names:
            return self.model_json
        adapter = self.lora.model_json(model) if isinstance(model, str) else None
        if adapter is None:
            raise RequestError(
                f"The model `{model}` does not exist.", 404, "NotFoundError", "model"
            )
        return adapter

    def _chat_text(self, body: dict[str, Any]) -> str:
        messages = body.get("messages")
        text = render_chat_prompt(messages) if isinstance(messages, list) and messages else None
        if text is None:
            raise RequestError(
                "'messages' must be a non-empty list of {role, content} objects",
                param="messages",
            )
        return text

    def _new_gen(
        self, body: dict[str, Any], rid: str, prompt_tokens: int, max_tokens: object
    ) -> Gen:
        """Validate what vLLM validates before scheduling; may raise a 4xx error."""
        if self.scheduler.dead:
            raise RequestError(
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                500,
                "InternalServerError",
            )
        n = body.get("n", 1)
        if n != 1:
            raise RequestError("The simulated engine supports only n=1", param="n")
        limit = self.cfg.max_model_len
        if prompt_tokens >= limit:
            raise RequestError(
                f"This model's maximum context length is {limit} tokens. However, your "
                f"request has {prompt_tokens} input tokens. Please reduce the length of the "
                "input messages.",
                param="messages",
            )
        if max_tokens is None:
            count, reason = min(_DEFAULT_MAX_TOKENS, limit - prompt_tokens), "stop"
        elif isinstance(max_tokens, int) and not isinstance(max_tokens, bool):
            if max_tokens < 1:
                raise RequestError(
                    f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens"
                )
            if prompt_tokens + max_tokens > limit:
                raise RequestError(
                    f"This model's maximum context length is {limit} tokens. However, you "
                    f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                    f"messages, {max_tokens} in the completion). Please reduce the length of "
                    "the messages or completion.",
                    param="max_tokens",
                )
            count, reason = max_tokens, "length"
        else:
            raise RequestError("max_tokens must be an integer", param="max_tokens")
        return Gen(rid, prompt_tokens, count, reason, clock())

    @staticmethod
    def _stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
        stream = bool(body.get("stream", False))
        options = body.get("stream_options")
        usage = isinstance(options, dict) and bool(options.get("include_usage", False))
        return stream, usage

    # -- completions ----------------------------------------------------------------

    async def completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_json(receive)
        if body is None:
            return
        model_json = self._check_model(body)
        if model_json is not self.model_json:  # an adapter: its weights may need a reload
            await self.lora.use(body["model"])
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_tokens = count_prompt_tokens(prompt)
        elif (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            prompt_tokens = len(prompt)
        else:
            raise RequestError(
                "'prompt' must be a string, a list of token ids, or a list of one of those "
                "(batched prompts are not simulated)",
                param="prompt",
            )
        gen = self._new_gen(body, f"cmpl-{uuid4().hex}-0", prompt_tokens, body.get("max_tokens"))
        stream, include_usage = self._stream_flags(body)
        created = int(time.time())
        head = (
            b'{"id":"'
            + gen.rid[:-2].encode()
            + b'","object":"text_completion","created":'
            + str(created).encode()
            + b',"model":'
            + model_json
        )
        if stream:
            prefix = b"data: " + head + b',"choices":[{"index":0,"text":"'
            suffix = b'","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
            final = (
                b"data: " + head + b',"choices":[{"index":0,"text":"","logprobs":null,'
                b'"finish_reason":"' + gen.finish_reason.encode() + b'","stop_reason":null}]}\n\n'
            )
            await self.scheduler.serve(
                receive,
                send,
                gen,
                self.scheduler.stream(
                    send, gen, b"", prefix, suffix, final, head if include_usage else None
                ),
            )
        else:
            await self.scheduler.serve(receive, send, gen, self._whole(send, gen, head, chat=False))

    async def chat_completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_json(receive)
        if body is None:
            return
        model_json = self._check_model(body)
        if model_json is not self.model_json:  # an adapter: its weights may need a reload
            await self.lora.use(body["model"])
        prompt_tokens = count_prompt_tokens(self._chat_text(body))
        max_tokens = body.get("max_completion_tokens")
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        gen = self._new_gen(body, f"chatcmpl-{uuid4().hex}", prompt_tokens, max_tokens)
        stream, include_usage = self._stream_flags(body)
        created = int(time.time())
        head = (
            b'{"id":"'
            + gen.rid.encode()
            + b'","object":"chat.completion'
            + (b".chunk" if stream else b"")
            + b'","created":'
            + str(created).encode()
            + b',"model":'
            + model_json
        )
        if stream:
            role = (
                b"data: " + head + b',"choices":[{"index":0,"delta":{"role":"assistant",'
                b'"content":""},"logprobs":null,"finish_reason":null}]}\n\n'
            )
            prefix = b"data: " + head + b',"choices":[{"index":0,"delta":{"content":"'
            suffix = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
            final = (
                b"data: " + head + b',"choices":[{"index":0,"delta":{},"logprobs":null,'
                b'"finish_reason":"' + gen.finish_reason.encode() + b'","stop_reason":null}]}\n\n'
            )
            await self.scheduler.serve(
                receive,
                send,
                gen,
                self.scheduler.stream(
                    send, gen, role, prefix, suffix, final, head if include_usage else None
                ),
            )
        else:
            await self.scheduler.serve(receive, send, gen, self._whole(send, gen, head, chat=True))

    async def _whole(self, send: Send, gen: Gen, head: bytes, chat: bool) -> None:
        """Non-streamed reply after ``ttft + itl * (n - 1)`` of (awake) generation."""
        await self.scheduler.generate(gen)
        n = gen.max_tokens
        text = orjson.dumps(completion_text(n))
        fr = gen.finish_reason.encode()
        if chat:
            choice = (
                b'{"index":0,"message":{"role":"assistant","content":'
                + text
                + b',"tool_calls":[]},"logprobs":null,"finish_reason":"'
                + fr
                + b'","stop_reason":null}'
            )
        else:
            choice = (
                b'{"index":0,"text":'
                + text
                + b',"logprobs":null,"finish_reason":"'
                + fr
                + b'","stop_reason":null}'
            )
        body = (
            head
            + b',"choices":['
            + choice
            + b'],"usage":'
            + usage_json(gen)
            + b',"system_fingerprint":"'
            + self.fingerprint.encode()
            + b'"}'
        )
        gen.complete = True
        await respond(send, 200, body)
