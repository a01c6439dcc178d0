# SPDX-License-Identifier: Apache-2.0
"""Alembic environment: runs on the connection ``ipamd.store.migrate`` passes."""

from __future__ import annotations

from alembic import context

from ipamd.store.schema import metadata

connection = context.config.attributes["connection"]
# render_as_batch: SQLite alters a table by copying it (ALTER is limited).
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
