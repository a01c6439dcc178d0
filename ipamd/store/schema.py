# SPDX-License-Identifier: Apache-2.0
"""The ipamd database schema as SQLAlchemy Core tables (imports sqlalchemy).

The tables describe the newest schema; the migrations under ``migrations/``
create and upgrade real databases to it (never ``metadata.create_all``), so a
database written by an older ipamd is upgraded in place.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

pools_table = sa.Table(
    "pools",
    metadata,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("spec", sa.Text, nullable=False),  # SpiderIPPool spec as JSON
)

reserved_table = sa.Table(
    "reserved_ips",
    metadata,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("spec", sa.Text, nullable=False),
)

allocations_table = sa.Table(
    "allocations",
    metadata,
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

# One row (id 1): which ipamd replica may write. ``token`` grows by one at
# every change of holder and fences commits; ``expires_at`` is seconds since
# the epoch on the database's clock, so replicas' clocks never compare.
lease_table = sa.Table(
    "ipamd_lease",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("holder", sa.String, nullable=False),
    sa.Column("token", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
)
LEASE_ID = 1
