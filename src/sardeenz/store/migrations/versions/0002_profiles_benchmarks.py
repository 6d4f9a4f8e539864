"""Memory profiles and benchmark runs (runs -> scenarios -> metrics).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03

Portable DDL only (no SQLite-only types or statements), so the same revision
runs on PostgreSQL when ``DATABASE_URL`` points there. Children reference
their parent with ``ON DELETE CASCADE``; the repository also deletes children
explicitly, so nothing depends on SQLite's ``foreign_keys`` pragma.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_STATS = ("min", "max", "avg", "p50", "p90", "p95", "p99")


def upgrade() -> None:
    op.create_table(
        "memory_profiles",
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
    )
    op.create_index(
        "ix_memory_profiles_lookup", "memory_profiles", ["model_path", "max_tokens", "gpu_name"]
    )

    op.create_table(
        "benchmark_runs",
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
    )
    op.create_index("ix_benchmark_runs_status", "benchmark_runs", ["status"])
    op.create_index("ix_benchmark_runs_created_at", "benchmark_runs", ["created_at"])

    op.create_table(
        "benchmark_scenarios",
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
    )
    op.create_index("ix_benchmark_scenarios_run_id", "benchmark_scenarios", ["run_id"])

    op.create_table(
        "benchmark_metrics",
        sa.Column(
            "scenario_id",
            sa.String(36),
            sa.ForeignKey("benchmark_scenarios.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        *(
            sa.Column(f"{metric}_{stat}", sa.Float, nullable=True)
            for metric in ("ttft", "tps", "e2e")
            for stat in _STATS
        ),
        sa.Column("goodput_count", sa.Integer, nullable=False),
        sa.Column("goodput_percent", sa.Float, nullable=False),
        sa.Column("requests_per_second", sa.Float, nullable=False),
        sa.Column("tokens_per_second_total", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("benchmark_metrics")
    op.drop_index("ix_benchmark_scenarios_run_id", table_name="benchmark_scenarios")
    op.drop_table("benchmark_scenarios")
    op.drop_index("ix_benchmark_runs_created_at", table_name="benchmark_runs")
    op.drop_index("ix_benchmark_runs_status", table_name="benchmark_runs")
    op.drop_table("benchmark_runs")
    op.drop_index("ix_memory_profiles_lookup", table_name="memory_profiles")
    op.drop_table("memory_profiles")
