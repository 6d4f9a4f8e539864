"""The one endpoint choice both relay paths make (proxy/remote.py ``outgoing``), and
which requests a pod records (``entered_here``)."""

from __future__ import annotations

import orjson

from sardeenz.proxy.remote import entered_here, outgoing
from sardeenz.proxy.routing import Endpoint, ExternalTarget

HOP = b"x-sardeenz-hop"
BODY = b'{"model":"m","messages":[]}'
BLOCK = b"authorization: Bearer client\r\ncontent-type: application/json\r\n"
LOCAL = Endpoint("i1", "m", "127.0.0.1", 9000, "http://127.0.0.1:9000")
REMOTE = Endpoint(
    "pod-b/i2", "m", "10.0.0.2", 3000, "http://10.0.0.2:3000", 1, False, pod_id="pod-b"
)
EXTERNAL = Endpoint(
    "ext:m",
    "m",
    "10.0.0.9",
    8000,
    "http://10.0.0.9:8000",
    external=ExternalTarget(b"/api", b"authorization: Bearer server\r\n", "their-m"),
)


def _hook(
    headers: list[tuple[bytes, bytes]], method: bytes, target: bytes, body: bytes, pod: str
) -> bytes | None:
    if any(k == HOP for k, _ in headers):
        return None
    return HOP + b": pod-a\r\nx-sig: " + method + b" " + target + b" for " + pod.encode() + b"\r\n"


def test_a_local_engine_gets_the_request_as_it_is() -> None:
    assert outgoing(LOCAL, _hook, [], b"POST", b"/v1/chat", BLOCK, BODY) == (
        b"/v1/chat",
        BLOCK,
        BODY,
    )


def test_another_pod_gets_the_hop_and_signature_once() -> None:
    target, block, body = (
        outgoing(REMOTE, _hook, [], b"POST", b"/v1/chat", BLOCK, BODY) or (b"",) * 3
    )
    assert (target, body) == (b"/v1/chat", BODY)
    assert block == BLOCK + b"x-sardeenz-hop: pod-a\r\nx-sig: POST /v1/chat for pod-b\r\n"
    # a request that made its hop already, or a node not in a cluster: never sent on
    assert outgoing(REMOTE, _hook, [(HOP, b"pod-c")], b"POST", b"/v1/chat", BLOCK, BODY) is None
    assert outgoing(REMOTE, None, [], b"POST", b"/v1/chat", BLOCK, BODY) is None


def test_an_external_server_gets_its_path_key_and_model_name() -> None:
    sent = outgoing(EXTERNAL, _hook, [], b"POST", b"/v1/chat", BLOCK, BODY)
    assert sent is not None
    target, block, body = sent
    assert target == b"/api/v1/chat"
    assert b"Bearer client" not in block
    assert b"authorization: Bearer server\r\n" in block
    assert orjson.loads(body)["model"] == "their-m"


def test_only_the_entry_pod_records_a_request() -> None:
    assert entered_here(None, [(HOP, b"pod-a")])  # a single node: everything entered here
    assert entered_here(HOP, [(b"content-type", b"x")])
    assert not entered_here(HOP, [(HOP, b"pod-a")])
