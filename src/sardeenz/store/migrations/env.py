"""Alembic environment: runs on the connection Database.migrate() hands over."""

from __future__ import annotations

from alembic import context

from sardeenz.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only the programmatic path is supported
    raise RuntimeError("run migrations through sardeenz.store.db.Database.migrate()")

context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
