"""Presets (desired states) and which one is applied.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cluster_presets",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("models", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("dropped", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("cluster_presets")
