"""Operator-facing metrics collected off the inference hot path.

``admin``: request counts and latency of the admin API (``/api/*``), by route template.
``node``: GPU and instance memory, read at scrape time (``/metrics``) from the inventory,
the supervisor and the memory ledger. ``resources``: the seed's ``ResourceMetrics`` JSON
per instance, built from the same sample plus the proxy's per-model counters.

Nothing here runs per ``/v1`` request: the proxy keeps its own lock-free counters
(``proxy/metrics.py``) and these modules only read them.
"""
