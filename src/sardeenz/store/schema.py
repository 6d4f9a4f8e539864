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
