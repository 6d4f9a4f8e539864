"""The request log's entry pod: in a cluster, the pod a client sent a request to.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("request_log", sa.Column("entry_pod", sa.String(256), nullable=True))
    op.create_index("ix_request_log_pod", "request_log", ["pod"])


def downgrade() -> None:
    op.drop_index("ix_request_log_pod", table_name="request_log")
    op.drop_column("request_log", "entry_pod")
