"""What billing costs the proxy per request: admission + settlement with and without the
usage meter, and the meter's drain (off the request's path), in one run.

Run: ``.venv/bin/python benchmarks/tenant_usage.py`` (a few seconds).

In-process, CPU time (``time.process_time``): a tenant with every limit and a model
scope (as in benchmarks/tenancy.py), admitted and settled ``--n`` times with a JSON tail
holding ``usage``, without a meter and with one, interleaved over ``--rounds`` rounds
so the machine's noise falls on both alike; best round of each. The meter's part on
the hot path is one tuple appended to a list (``Ticket.settle``); reading ``usage`` in
the tail and adding to the minute buckets is the drain's, timed apart, per request.
The end-to-end CPU of a tenant's request on a real server is benchmarks/tenancy.py's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tenancy import tenant_body  # benchmarks/tenancy.py: this script's directory is on sys.path

from sardeenz.tenancy.admission import Admission, Ticket
from sardeenz.tenancy.meter import UsageMeter
from sardeenz.tenancy.spec import Tenant, TenantBody

MODEL = "bench-usage"
TENANT = tenant_body(MODEL)  # benchmarks/tenancy.py's tenant, scoped to this model
BODY = orjson.dumps(
    {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
)
TAIL = b'"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}'


def admit_settle(admission: Admission, n: int) -> float:
    """us per admission + settlement."""
    payload = orjson.loads(BODY)
    t0 = time.process_time()
    for _ in range(n):
        ticket = admission.admit("team", MODEL, payload, len(BODY))
        assert isinstance(ticket, Ticket)
        ticket.settle(200, TAIL, b"")
    return (time.process_time() - t0) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tenant = Tenant(name="bench", source="api", **TenantBody.model_validate(TENANT).__dict__)
    plain = Admission()
    meter = UsageMeter()
    metered = Admission(meter=meter)
    for a in (plain, metered):
        a.configure([tenant])
    best_plain = best_metered = best_drain = float("inf")
    for _ in range(args.rounds):
        best_plain = min(best_plain, admit_settle(plain, args.n))
        best_metered = min(best_metered, admit_settle(metered, args.n))
        t0 = time.process_time()
        meter.take()  # the flusher's work for the round's requests
        best_drain = min(best_drain, (time.process_time() - t0) / args.n * 1e6)
    print(f"admit + settle, a tenant with every limit, best of {args.rounds} x {args.n}:")
    print(f"  without the usage meter: {best_plain:.2f} us")
    print(f"  with the usage meter:    {best_metered:.2f} us")
    print(
        f"  meter on the hot path:   {best_metered - best_plain:+.2f} us "
        f"({best_metered / best_plain:.2f}x)"
    )
    print(f"drain (usage read from the tail, minute buckets), off the path: {best_drain:.2f} us")


if __name__ == "__main__":
    main()
