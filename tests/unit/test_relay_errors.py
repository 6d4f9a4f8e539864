"""An engine's error body as a /v1 client gets it: OpenAI's shape, status kept."""

from __future__ import annotations

import orjson
import pytest

from sardeenz.proxy.relay import is_error, openai_error_response

CT = (b"content-type", b"application/json")


def _error(body: bytes) -> dict[str, object]:
    doc = orjson.loads(body)
    assert set(doc) == {"error"}
    error: dict[str, object] = doc["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


@pytest.mark.parametrize(
    "body",
    [
        b'{"error": {"message": "bad", "type": "BadRequestError", "param": "n", "code": 400}}',
        b'{"object": "error", "message": "too long", "type": "BadRequestError", "code": 400}',
    ],
)
def test_an_openai_shaped_body_is_kept_byte_for_byte(body: bytes) -> None:
    headers, out = openai_error_response(400, [CT, (b"content-length", b"99")], body)
    assert out == body
    assert headers == [CT, (b"content-length", b"%d" % len(body))]


@pytest.mark.parametrize(
    ("status", "body", "message", "type_", "code"),
    [
        (404, b'{"detail": "Not Found"}', "Not Found", "invalid_request_error", "not_found"),
        (
            405,
            b'{"detail": "Method Not Allowed"}',
            "Method Not Allowed",
            "invalid_request_error",
            "method_not_allowed",
        ),
        (
            422,
            b'{"detail": [{"loc": ["body"], "msg": "x"}]}',
            '[{"loc":["body"],"msg":"x"}]',
            "invalid_request_error",
            "invalid_request",
        ),
        (
            400,
            b'{"message": "too long", "type": "BadRequestError", "param": null, "code": 400}',
            "too long",
            "BadRequestError",
            "400",
        ),
        (500, b"Internal Server Error", "Internal Server Error", "upstream_error", "engine_error"),
        (503, b"", "Service Unavailable", "upstream_error", "engine_error"),
    ],
)
def test_other_bodies_are_translated(
    status: int, body: bytes, message: str, type_: str, code: str
) -> None:
    headers, out = openai_error_response(
        status, [(b"content-type", b"text/plain"), (b"x-request-id", b"r1")], body
    )
    assert _error(out) == {"message": message, "type": type_, "param": None, "code": code}
    assert headers == [
        (b"x-request-id", b"r1"),
        CT,
        (b"content-length", b"%d" % len(out)),
    ]


def test_only_non_stream_errors_are_looked_at() -> None:
    assert is_error(404, None, False)
    assert is_error(400, 100, False)
    assert not is_error(200, None, False)
    assert not is_error(399, 10, False)
    assert not is_error(500, None, True)  # an SSE body is relayed as it comes
    assert not is_error(500, 1 << 30, False)  # nor is a huge one
