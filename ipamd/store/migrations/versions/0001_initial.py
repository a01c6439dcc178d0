# SPDX-License-Identifier: Apache-2.0
"""The schema ipamd created before migrations existed (up to commit a672c3e).

Revision ID: 0001
Revises:
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
        "pools",
        sa.Column("name", sa.String, primary_key=True),
        sa.Column("spec", sa.Text, nullable=False),
    )
    op.create_table(
        "reserved_ips",
        sa.Column("name", sa.String, primary_key=True),
        sa.Column("spec", sa.Text, nullable=False),
    )
    op.create_table(
        "allocations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "pool",
            sa.String,
            sa.ForeignKey("pools.name", ondelete="RESTRICT"),
            nullable=False,
        ),
        sa.Column("ip", sa.String, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("network", sa.String, nullable=False),
        sa.Column("container_id", sa.String, nullable=True),
        sa.Column("ifname", sa.String, nullable=False),
        sa.Column("netns", sa.String, nullable=False),
        sa.Column("pod_namespace", sa.String, nullable=False),
        sa.Column("pod_name", sa.String, nullable=False),
        sa.Column("pod_uid", sa.String, nullable=False),
        sa.Column("node", sa.String, nullable=False),
        sa.Column("sticky", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("pool", "ip", name="uq_pool_ip"),
        sa.UniqueConstraint(
            "container_id", "ifname", "version", name="uq_attachment_family"
        ),
    )
