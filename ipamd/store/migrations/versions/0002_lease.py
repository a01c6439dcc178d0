# SPDX-License-Identifier: Apache-2.0
"""The writer lease of replicated ipamd (one row, free at creation).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    lease = op.create_table(
        "ipamd_lease",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("holder", sa.String, nullable=False),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.bulk_insert(lease, [{"id": 1, "holder": "", "token": 0, "expires_at": 0.0}])
