"""Billable usage: requests, tokens and refusals per tenant, key, model and time bucket.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_buckets",
        sa.Column("step", sa.Integer, primary_key=True),
        sa.Column("start", sa.BigInteger, primary_key=True),
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.String(64), primary_key=True),
        sa.Column("model", sa.String(512), primary_key=True),
        sa.Column("reason", sa.String(64), primary_key=True),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("failed", sa.BigInteger, nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
        sa.Column("completion_tokens", sa.BigInteger, nullable=False),
        sa.Column("estimated", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_usage_buckets_start", "usage_buckets", ["start"])


def downgrade() -> None:
    op.drop_index("ix_usage_buckets_start", "usage_buckets")
    op.drop_table("usage_buckets")
