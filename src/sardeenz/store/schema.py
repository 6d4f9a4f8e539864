"""Table definitions (SQLAlchemy Core), mirrored by the Alembic migrations."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

instances = sa.Table(
    "instances",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("port", sa.Integer, nullable=False),
    sa.Column("process_id", sa.Integer, nullable=True),
    sa.Column("process_create_time", sa.Float, nullable=True),
    sa.Column("record", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

# --- memory profiles (one row per measured or entered profile) ----------------
memory_profiles = sa.Table(
    "memory_profiles",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("profile_name", sa.String(512), nullable=False),
    sa.Column("model_path", sa.String(4096), nullable=False),
    sa.Column("max_tokens", sa.Integer, nullable=False),
    sa.Column("total_gpu_memory_gib", sa.Float, nullable=False),
    sa.Column("weights_memory_gib", sa.Float, nullable=False),
    sa.Column("cuda_graphs_gib", sa.Float, nullable=False),
    sa.Column("overhead_memory_gib", sa.Float, nullable=False),
    sa.Column("kv_cache_available_gib", sa.Float, nullable=False),
    sa.Column("kv_cache_per_request_mib", sa.Float, nullable=True),
    sa.Column("gpu_name", sa.String(256), nullable=True),
    sa.Column("gpu_total_memory_gib", sa.Float, nullable=True),
    sa.Column("comments", sa.Text, nullable=True),
    sa.Column("created_by", sa.String(256), nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
    sa.Index("ix_memory_profiles_lookup", "model_path", "max_tokens", "gpu_name"),
)

# --- benchmarks: run -> scenarios -> metrics (one row per scenario) ------------
benchmark_runs = sa.Table(
    "benchmark_runs",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("name", sa.String(512), nullable=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("mode", sa.String(16), nullable=False),
    sa.Column("kvcached_enabled", sa.Boolean, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("total_requests", sa.Integer, nullable=False),
    sa.Column("successful_requests", sa.Integer, nullable=False),
    sa.Column("failed_requests", sa.Integer, nullable=False),
    sa.Column("duration_seconds", sa.Float, nullable=True),
    sa.Index("ix_benchmark_runs_status", "status"),
    sa.Index("ix_benchmark_runs_created_at", "created_at"),
)

benchmark_scenarios = sa.Table(
    "benchmark_scenarios",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column(
        "run_id",
        sa.String(36),
        sa.ForeignKey("benchmark_runs.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("instance_id", sa.String(64), nullable=False),
    sa.Column("routing_mode", sa.String(16), nullable=False),
    sa.Column("model_path", sa.String(4096), nullable=False),
    sa.Column("model_name", sa.String(512), nullable=False),
    sa.Column("input_tokens", sa.Integer, nullable=False),
    sa.Column("output_tokens", sa.Integer, nullable=False),
    sa.Column("concurrency", sa.Integer, nullable=False),
    sa.Column("warmup_requests", sa.Integer, nullable=False),
    sa.Column("total_requests", sa.Integer, nullable=False),
    sa.Column("sla_threshold_ms", sa.Float, nullable=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("prompt_source", sa.String(16), nullable=True),
    sa.Column("successful_requests", sa.Integer, nullable=False),
    sa.Column("failed_requests", sa.Integer, nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Index("ix_benchmark_scenarios_run_id", "run_id"),
)

METRIC_STATS = ("min", "max", "avg", "p50", "p90", "p95", "p99")
"""The statistics kept for each of ttft, tps and e2e (column ``ttft_p50`` etc.)."""

benchmark_metrics = sa.Table(
    "benchmark_metrics",
    metadata,
    sa.Column(
        "scenario_id",
        sa.String(36),
        sa.ForeignKey("benchmark_scenarios.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    *(
        sa.Column(f"{metric}_{stat}", sa.Float, nullable=True)
        for metric in ("ttft", "tps", "e2e")
        for stat in METRIC_STATS
    ),
    sa.Column("goodput_count", sa.Integer, nullable=False),
    sa.Column("goodput_percent", sa.Float, nullable=False),
    sa.Column("requests_per_second", sa.Float, nullable=False),
    sa.Column("tokens_per_second_total", sa.Float, nullable=False),
)

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False, index=True),
    sa.Column("subject", sa.String(256), nullable=False),
    sa.Column("role", sa.String(32), nullable=True),
    sa.Column("method", sa.String(8), nullable=False),
    sa.Column("path", sa.String(1024), nullable=False),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("remote", sa.String(64), nullable=True),
    # The target and the refusal (0006): what the request acted on, and the error code.
    sa.Column("instance_id", sa.String(64), nullable=True),
    sa.Column("model", sa.String(512), nullable=True),
    sa.Column("run_id", sa.String(64), nullable=True),
    sa.Column("code", sa.String(64), nullable=True),
)

# --- the request log, when retention is on (SARDEENZ_REQUEST_LOG_RETENTION) -----------
request_log = sa.Table(
    "request_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("request_id", sa.String(128), nullable=False),
    sa.Column("at", sa.Float, nullable=False, index=True),
    sa.Column("model", sa.String(200), nullable=False),
    sa.Column("instance_id", sa.String(64), nullable=True),
    sa.Column("pod", sa.String(256), nullable=True, index=True),
    sa.Column("entry_pod", sa.String(256), nullable=True),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("latency", sa.Float, nullable=False),
    sa.Column("ttft", sa.Float, nullable=True),
    sa.Column("stream", sa.Boolean, nullable=False),
    sa.Column("key_id", sa.String(64), nullable=True),
    sa.Column("prompt_tokens", sa.Integer, nullable=True),
    sa.Column("completion_tokens", sa.Integer, nullable=True),
)

# --- on-demand catalog: entries added through the API (YAML ones are not stored) ----
catalog_entries = sa.Table(
    "catalog_entries",
    metadata,
    sa.Column("name", sa.String(512), primary_key=True),
    sa.Column("entry", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

# --- cluster presets: desired states; the leader distributes them to every pod ----------
cluster_presets = sa.Table(
    "cluster_presets",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("models", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("dropped", sa.JSON, nullable=False),
)

# --- the cluster's replicated control state (cluster/replicated.py) -----------
control_documents = sa.Table(
    "control_documents",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("term", sa.Integer, nullable=False),
    sa.Column("revision", sa.Integer, nullable=False),
    sa.Column("body", sa.JSON, nullable=True),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

# --- tenants defined through the API (config-file ones are not stored) ----------
tenants = sa.Table(
    "tenants",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("body", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

# --- tokens used per tenant scope and budget period (tenancy/service.py) --------
tenant_usage = sa.Table(
    "tenant_usage",
    metadata,
    sa.Column("tenant", sa.String(64), primary_key=True),
    sa.Column("scope", sa.String(512), primary_key=True),
    sa.Column("period", sa.String(16), primary_key=True),
    sa.Column("tokens", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

# --- billable usage per tenant, key, model and time bucket (tenancy/usage.py) ---
usage_buckets = sa.Table(
    "usage_buckets",
    metadata,
    sa.Column("step", sa.Integer, primary_key=True),  # 60: a minute; 3600: rolled up
    sa.Column("start", sa.BigInteger, primary_key=True),  # unix seconds
    sa.Column("tenant", sa.String(64), primary_key=True),
    sa.Column("key_id", sa.String(64), primary_key=True),
    sa.Column("model", sa.String(512), primary_key=True),
    sa.Column("reason", sa.String(64), primary_key=True),  # "": admitted; else the limit
    sa.Column("requests", sa.BigInteger, nullable=False),
    sa.Column("failed", sa.BigInteger, nullable=False),
    sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
    sa.Column("completion_tokens", sa.BigInteger, nullable=False),
    sa.Column("estimated", sa.BigInteger, nullable=False),
    sa.Index("ix_usage_buckets_start", "start"),
)
