# SPDX-License-Identifier: Apache-2.0
"""A throwaway PostgreSQL server for tests: Debian's postgresql-15 binaries,
a temporary data directory, run as the unprivileged ``postgres`` user.

It listens on 127.0.0.1 (a free port) and on a unix socket in its own
directory, with ``trust`` authentication (nothing but loopback can reach it).
``stop()`` is immediate shutdown plus removal of the directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

PG_BIN = Path(os.environ.get("RAILYARD_PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_USER = "postgres"


def unavailable_reason() -> str | None:
    """Why no server can be started here, or None."""
    if os.geteuid() != 0:
        return (
            "PostgreSQL tests start a server as the unprivileged 'postgres' user, "
            "which needs root"
        )
    if not (PG_BIN / "initdb").exists():
        return f"PostgreSQL binaries not found in {PG_BIN} (apt install postgresql-15)"
    try:
        pwd.getpwnam(PG_USER)
    except KeyError:
        return f"no '{PG_USER}' user (apt install postgresql-15 creates it)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A throwaway server. ``durable=False`` (the tests' choice) turns off
    fsync: nothing in a test crashes the server itself, and a commit waiting
    seconds on a loaded machine's disk is not what a replica test is about;
    the benchmarks keep PostgreSQL's durable defaults."""

    def __init__(self, durable: bool = True) -> None:
        self.durable = durable
        user = pwd.getpwnam(PG_USER)
        self._uid, self._gid = user.pw_uid, user.pw_gid
        self.dir = Path(tempfile.mkdtemp(prefix="ry-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.port = _free_port()
        self.host = "127.0.0.1"
        os.chown(self.dir, self._uid, self._gid)
        try:
            self._run(
                PG_BIN / "initdb",
                "-D",
                str(self.data),
                "-U",
                PG_USER,
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            )
            self._run(
                PG_BIN / "pg_ctl",
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                "30",
                "-o",
                f"-c listen_addresses={self.host} -p {self.port} -k {self.dir} "
                "-c max_connections=200"
                + ("" if durable else " -c fsync=off -c full_page_writes=off"),
                "start",
            )
        except BaseException:
            self.stop()
            raise

    def _run(self, *argv: object) -> None:
        proc = subprocess.run(
            [str(a) for a in argv],
            user=self._uid,
            group=self._gid,
            extra_groups=[],
            cwd=self.dir,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(
                f"{argv[0]} failed ({proc.returncode}): {proc.stderr}{proc.stdout}{log}"
            )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{PG_USER}@{self.host}:{self.port}/{database}"

    def admin(self, sql: str) -> list[tuple[object, ...]]:
        """Run one statement as superuser in autocommit; rows if any."""
        import psycopg

        with psycopg.connect(
            host=self.host,
            port=self.port,
            user=PG_USER,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            cur = conn.execute(sql)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []

    def create_database(self) -> str:
        name = f"ipamd_{uuid.uuid4().hex[:10]}"
        self.admin(f"CREATE DATABASE {name}")
        return name

    def drop_database(self, name: str) -> None:
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                self._run(
                    PG_BIN / "pg_ctl",
                    "-D",
                    str(self.data),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                )
            except RuntimeError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
