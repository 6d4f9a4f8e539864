"""Instance registry: what the supervisor needs to re-adopt engines after a crash.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "instances",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("port", sa.Integer, nullable=False),
        sa.Column("process_id", sa.Integer, nullable=True),
        sa.Column("process_create_time", sa.Float, nullable=True),
        sa.Column("record", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("instances")
