"""The request log (optional retention) and the audit trail's target and refusal code.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("audit_log", sa.Column("instance_id", sa.String(64), nullable=True))
    op.add_column("audit_log", sa.Column("model", sa.String(512), nullable=True))
    op.add_column("audit_log", sa.Column("run_id", sa.String(64), nullable=True))
    op.add_column("audit_log", sa.Column("code", sa.String(64), nullable=True))
    op.create_table(
        "request_log",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("instance_id", sa.String(64), nullable=True),
        sa.Column("pod", sa.String(256), nullable=True),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("latency", sa.Float, nullable=False),
        sa.Column("ttft", sa.Float, nullable=True),
        sa.Column("stream", sa.Boolean, nullable=False),
        sa.Column("key_id", sa.String(64), nullable=True),
        sa.Column("prompt_tokens", sa.Integer, nullable=True),
        sa.Column("completion_tokens", sa.Integer, nullable=True),
    )
    op.create_index("ix_request_log_at", "request_log", ["at"])


def downgrade() -> None:
    op.drop_index("ix_request_log_at", "request_log")
    op.drop_table("request_log")
    with op.batch_alter_table("audit_log") as batch:
        for column in ("code", "run_id", "model", "instance_id"):
            batch.drop_column(column)
