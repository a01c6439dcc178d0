# SPDX-License-Identifier: Apache-2.0
"""ipamd settings: one dataclass with the defaults. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_SOCKET = Path("/run/railyard/ipamd.sock")
DEFAULT_DB_URL = "sqlite:////var/lib/railyard/ipamd.db"
SOCKET_ENV = "RAILYARD_IPAMD_SOCKET"
DB_ENV = "RAILYARD_IPAMD_DB"


@dataclass(frozen=True, slots=True)
class Settings:
    db_url: str = DEFAULT_DB_URL
    # "unix:///path", a bare path, or "host:port" (TCP, needs TLS).
    listen: str = f"unix://{DEFAULT_SOCKET}"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    client_ca: Path | None = None  # given: mutual TLS, clients need a cert
    # RPCs in flight before new ones get RESOURCE_EXHAUSTED (a runaway client
    # must not queue unbounded work on the single writer).
    max_concurrent_rpcs: int = 1024
    max_batch: int = 1024  # requests per group commit
    grace: float = 5.0  # seconds for in-flight RPCs at shutdown
    metrics_listen: str = ""  # "host:port" of /metrics; "" = no metrics
    # Replicas: the writer lease lasts this long unless renewed. A standby
    # takes over at most about this long after the active died or hung.
    lease_ttl: float = 1.0
    holder: str = ""  # this replica's name in the lease; "" = host/pid
    # "host:port" of a plain HTTP endpoint for probes: /readyz answers 200
    # on the active replica and 503 on a standby; /livez 200 while serving.
    health_listen: str = ""
    # ReconcileNode: the node a caller on the unix socket is (the host ipamd
    # runs on; see ipamd.node_identity), and how old an allocation no node
    # attachment explains must be before it is released (an ADD in flight
    # allocates after its record is written, so this only has to cover a
    # report's way from the node; a margin for a slow node is added).
    node_name: str = ""
    node_reconcile_grace: float = 120.0
