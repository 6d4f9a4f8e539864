"""The simulated engine: an OpenAI-compatible server that behaves like vLLM from the outside.

Run as ``python -m sardeenz.sim --model NAME --port P`` (or ``sardeenz sim-engine``).
It is a product feature, not a test double: the demo runs on it and most tests drive
it as a real process, so everything the supervisor and the proxy observe matches real
vLLM (see ``reference/vllm.md``):

* the same flags style (argparse; an unknown flag exits 2 with ``unrecognized
  arguments``), the same vLLM-format log lines (``(APIServer pid=N) INFO MM-DD
  HH:MM:SS [file.py:LINE] ...``) including the memory lines the log parser reads,
  and uvicorn's own ``INFO:     Application startup complete.`` on stderr;
* the port is bound at once but only listens when the "model" has loaded, so
  connections are refused while loading, exactly like vLLM;
* a real ``VLLM::EngineCor`` child process that is orphaned by a SIGKILL of the
  server (the supervisor must signal the process group), and terminated on a
  graceful shutdown;
* the same endpoints, JSON shapes, SSE framing, error shapes, Prometheus names and
  sleep/wake API (dev mode only), with configurable load time, time to first token
  and inter-token latency.

Deterministic output, so tests can assert content: token ``i`` of a reply is the word
``tok{i}`` and the text is ``"tok0 tok1 ... tok{n-1}"`` (see :mod:`sardeenz.sim.text`).
Prompt tokens are counted as whitespace-separated words, at least one (the BOS token);
a chat prompt is first rendered as ``"role: content\\n"`` per message plus
``"assistant:"``.

Simulated GPU memory (``--memory-gib M``): see :mod:`sardeenz.sim.memory`. Generation
timing: see :mod:`sardeenz.sim.generation`. Sleep and wake-up: see
:mod:`sardeenz.sim.sleep`.

Everything a user sees says "simulated": the first log line, the version
(``0.0.0+sim``), ``system_fingerprint`` (``sardeenz-sim-<port>``) and ``GET /sim/state``.

The package is split by concern; this file imports nothing so that the controller can
import the light modules (:mod:`sardeenz.sim.text`, :mod:`sardeenz.sim.memory`) without
paying for uvicorn, and so that start-up stays as fast as vLLM's own
port-closed-while-loading contract lets tests go (no prometheus_client either: the
``/metrics`` text is written by :mod:`~sardeenz.sim.metrics`):

* :mod:`~sardeenz.sim.args`: the command line (vLLM-style flags) -> ``SimConfig``;
* :mod:`~sardeenz.sim.server`: the process: bind, load, serve, shut down (``main``);
* :mod:`~sardeenz.sim.loading`: the loading phase and its vLLM log lines and failures;
* :mod:`~sardeenz.sim.enginecore`: the ``VLLM::EngineCore`` child and its watch;
* :mod:`~sardeenz.sim.app`: the ASGI application: routing and the small endpoints;
* :mod:`~sardeenz.sim.openai`: the OpenAI endpoints (models, completions, chat, tokenize);
* :mod:`~sardeenz.sim.generation`: admission, token timing, SSE streaming, stats;
* :mod:`~sardeenz.sim.sleep`: the sleep/wake-up dev endpoints;
* :mod:`~sardeenz.sim.wire`: ASGI request/response helpers and OpenAI error shapes;
* :mod:`~sardeenz.sim.logwriter`: vLLM-format log lines and the buffered access log;
* :mod:`~sardeenz.sim.metrics`: vLLM's Prometheus metrics and their exposition text;
* :mod:`~sardeenz.sim.memory`: the simulated GPU memory plan;
* :mod:`~sardeenz.sim.text`: the deterministic token texts and prompt counting.
"""

from typing import Final

SIM_VERSION: Final = "0.0.0+sim"
"""What ``/version`` and the log lines report: never mistaken for a real vLLM release."""
