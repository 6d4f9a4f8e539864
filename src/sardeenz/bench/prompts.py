"""Prompts of a requested length in tokens, for the model under test.

With the engine's tokenizer (``POST /tokenize`` on the engine's own port,
which vLLM serves), each prompt is calibrated until the engine counts
exactly the requested number of tokens: common English words are nearly
always one token each (with their leading space) in BPE vocabularies, so
the first guess is close and one or two corrections land on the number.
Without a tokenizer endpoint the prompt is simply that many words
(``approximate``); either way the run records which, and the real prompt
lengths come back in each response's ``usage``.

A pool of distinct prompts (random words, seeded, so runs are repeatable) is
cycled through, so consecutive requests do not share a prefix that a prefix
cache could serve.
"""

from __future__ import annotations

import asyncio
import random

import aiohttp

from sardeenz.bench.client import tokenize_count
from sardeenz.store.records import PromptSource

POOL_SIZE = 32
MAX_CALIBRATION_STEPS = 8
_CALIBRATION_PARALLELISM = 8

_WORDS_TEXT = (
    "the of and to in is was for on are with as his they be at one have this from or had by "
    "but some what there we can out other were all your when up use word how said an each she "
    "which do their time if will way about many then them would write like so these her long "
    "make thing see him two has look more day could go come did my sound no most number who "
    "over know water than call first people may down side been now find any new work part "
    "take get place made live where after back little only round man year came show every "
    "good me give our under name very through just form much great think say help low line "
    "before turn cause same mean differ move right boy old too does tell sentence set three "
    "want air well also play small end put home read hand port large spell add even land here "
    "must big high such follow act why ask men change went light kind off need house picture "
    "try us again animal point mother world near build self earth father head stand own page "
    "should country found answer school grow study still learn plant cover food sun four "
    "thought let keep eye never last door between city tree cross since hard start might story "
    "saw far sea draw left late run while press close night real life few stop open seem"
)
WORDS = tuple(_WORDS_TEXT.split())
"""Common English words: one token each (with the leading space) in most BPE vocabularies."""


def random_words(rng: random.Random, count: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(count)]


async def _calibrate(
    session: aiohttp.ClientSession, url: str, model: str, target: int, rng: random.Random
) -> str | None:
    """A text the engine tokenizes to ``target`` tokens (closest found); None: no tokenizer."""
    words = random_words(rng, target)
    k = target
    best: tuple[int, str] | None = None
    for _ in range(MAX_CALIBRATION_STEPS):
        while len(words) < k:
            words.extend(random_words(rng, k - len(words)))
        text = " ".join(words[:k])
        count = await tokenize_count(session, url, model, text)
        if count is None:
            return None
        if best is None or abs(count - target) < best[0]:
            best = (abs(count - target), text)
        if count == target:
            return text
        k = max(1, k + (target - count))
    return best[1] if best is not None else None


async def build_prompts(
    session: aiohttp.ClientSession,
    tokenize_url: str | None,
    model: str,
    input_tokens: int,
    count: int,
    seed: int = 0,
) -> tuple[list[str], PromptSource]:
    """``min(count, POOL_SIZE)`` distinct prompts of ``input_tokens`` tokens, and their source."""
    n = max(1, min(count, POOL_SIZE))
    rngs = [random.Random(seed * 1_000_003 + i) for i in range(n)]
    if tokenize_url is not None:
        first = await _calibrate(session, tokenize_url, model, input_tokens, rngs[0])
        if first is not None:
            gate = asyncio.Semaphore(_CALIBRATION_PARALLELISM)

            async def one(rng: random.Random) -> str | None:
                async with gate:
                    return await _calibrate(session, tokenize_url, model, input_tokens, rng)

            rest = await asyncio.gather(*(one(r) for r in rngs[1:]))
            prompts = [first, *(p for p in rest if p is not None)]
            return prompts, PromptSource.TOKENIZER
    return [" ".join(random_words(r, input_tokens)) for r in rngs], PromptSource.APPROXIMATE
