"""Tenants defined through the API, and the tokens each tenant scope used per period.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("body", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "tenant_usage",
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("scope", sa.String(512), primary_key=True),
        sa.Column("period", sa.String(16), primary_key=True),
        sa.Column("tokens", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tenant_usage")
    op.drop_table("tenants")
