"""The CLI reports the server's refusals in the flags the operator typed (issue 25 item 3).

The server's message is the API's ("force: true skips this check"); the CLI maps each
request field of the command to its flag. The refusals built here are the server's own
(``memory.fit.load_refusal``), so a reworded message still has to come out right.
"""

from __future__ import annotations

import json

from sardeenz.cli.client import Response, error_message
from sardeenz.cli.models import LOAD_FLAGS
from sardeenz.errors import SardeenzError
from sardeenz.memory.fit import load_refusal
from sardeenz.memory.models import FitVerdict


def _response(exc: SardeenzError) -> Response:
    body = {"detail": exc.message, "code": exc.code}
    return Response(status=409, headers={}, content=json.dumps(body).encode())


def test_a_refusal_by_the_estimate_names_the_force_flag() -> None:
    verdict = FitVerdict(
        model_path="big",
        fits=False,
        source="profile",
        reserved_bytes_per_gpu=80 * 2**30,
        reason="needs 80.0 GiB per GPU, GPU0 has 22.0 GiB",
    )
    refusal = load_refusal(verdict)
    assert refusal is not None
    assert "force: true" in refusal.message  # the API's words, for API clients
    shown = error_message(_response(refusal), LOAD_FLAGS)
    assert "--force skips this check and starts the engine anyway" in shown, shown
    assert "force: true" not in shown
    assert shown.endswith("(model_does_not_fit)"), shown


def test_a_plain_word_field_is_a_flag_only_where_an_error_locates_it() -> None:
    body = {
        "detail": "invalid request: engine: Input should be 'vllm' or 'sim'; "
        "extraArgs[0]: no newlines; gpuMemoryLimit: must be positive",
        "code": "validation_error",
    }
    shown = error_message(Response(422, {}, json.dumps(body).encode()), LOAD_FLAGS)
    assert shown == (
        "invalid request: --engine: Input should be 'vllm' or 'sim'; "
        "--arg[0]: no newlines; --gpu-memory-limit: must be positive (validation_error)"
    )
