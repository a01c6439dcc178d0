# SPDX-License-Identifier: Apache-2.0
"""Two ``ipamd serve`` replicas on one PostgreSQL database.

- the stress run of test_ipamd_stress.py (64 clients, 5,000 allocations and
  releases) with the active replica SIGKILLed mid-run: zero duplicates, zero
  lost acknowledged allocations, zero leaks after GC; the time from the kill
  to the first allocation the new active serves is printed;
- fencing: the active is SIGSTOPped while the standby takes over, then
  SIGCONTed: what it had in flight fails, nothing is written twice;
- a standby is not ready and refuses allocations with UNAVAILABLE.

The stress clients are the plugins' (``cni.ipam.grpc_client`` over
``ipamd.client``) given both replicas' endpoints: they move to the other
replica on UNAVAILABLE within their deadline, as a plugin does.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from typing import Any

import grpc
import pytest
import sqlalchemy as sa

from cni.ipam import Attachment, IpamError, IpamRequest
from cni.ipam.grpc_client import IpamdClient
from ipamd import client as transport
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

CLIENTS = 64
ALLOCATIONS = 5000
KILL_AFTER = ALLOCATIONS // 2


def request(cid: str) -> IpamRequest:
    return IpamRequest(
        network="stress", container_id=cid, ifname="net1", ipv4_pools=("stress",)
    )


def db_rows(url: str) -> dict[str, str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT container_id, ip FROM allocations"
            ).fetchall()
    finally:
        engine.dispose()
    return {cid: ip for cid, ip in rows}


def two_replicas(start_daemon, postgres_url: str, pools_yaml: str) -> list[Any]:
    a = start_daemon(db_url=postgres_url, name="a")
    b = start_daemon(db_url=postgres_url, name="b", ready=False)
    assert (a.status().role, b.status().role) == ("active", "standby")
    with IpamdClient(str(a.socket)) as admin:
        admin.stub.ApplyPools(
            pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=pools_yaml)
        )
    return [a, b]


# A liveness bound for role changes on a shared, loaded CI machine (seen
# failing at 5 s at load 11, and once at 10 s); the takeover times are printed
# here and measured against their 2 s target by benchmarks/bench_ipamd.py.
TAKEOVER_BOUND = 20.0


def wait_role(
    daemon: Any, role: str, timeout: float = TAKEOVER_BOUND, others: Any = ()
) -> None:
    deadline = time.monotonic() + timeout
    while daemon.status().role != role:
        if time.monotonic() >= deadline:
            tails = "".join(
                f"\n--- {d.name}'s log ends:\n"
                + "\n".join(d.log.read_text().splitlines()[-15:])
                for d in (daemon, *others)
            )
            pytest.fail(f"{daemon.name} never became {role} in {timeout:.0f}s{tails}")
        time.sleep(0.02)


def test_a_standby_is_not_ready_and_refuses_allocations(
    start_daemon, postgres_url, pools_yaml
) -> None:
    a, b = two_replicas(start_daemon, postgres_url, pools_yaml)
    st = b.status()
    assert not st.ready
    assert st.lease_holder.endswith(f"/{a.proc.pid}")
    assert "standby" in st.message
    assert "postgresql+psycopg://postgres@" in st.database
    with IpamdClient(str(b.socket), timeout=2) as client:
        with pytest.raises(grpc.RpcError) as err:
            client.stub.Allocate(
                pb.AllocateRequest(
                    client_version=API_VERSION,
                    network="stress",
                    container_id="c",
                    ifname="net1",
                    ipv4_pools=["stress"],
                ),
                timeout=2,
            )
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_sigkill_of_the_active_mid_run_loses_nothing_acknowledged(
    start_daemon, postgres_url, pools_yaml
) -> None:
    a, b = two_replicas(start_daemon, postgres_url, pools_yaml)
    endpoints = [str(a.socket), str(b.socket)]
    held: dict[str, str] = {}  # cid -> address, acknowledged and not released
    lock = threading.Lock()
    acked = 0
    errors: list[BaseException] = []
    per_client = ALLOCATIONS // CLIENTS + 1
    killed_at: list[float] = []
    first_after: list[float] = []

    def worker(n: int) -> None:
        nonlocal acked
        rng = random.Random(n)
        client = IpamdClient(endpoints, timeout=30)
        mine: list[str] = []
        try:
            for i in range(per_client):
                with lock:
                    if acked >= ALLOCATIONS:
                        break
                cid = f"w{n}-{i}"
                sent = time.monotonic()
                result = client.allocate(request(cid))
                done = time.monotonic()
                with lock:
                    held[cid] = result.ips[0].address
                    acked += 1
                    # Sent after the kill: only the new active can have served it.
                    if killed_at and sent > killed_at[0]:
                        first_after.append(done)
                mine.append(cid)
                if mine and rng.random() < 0.5:
                    victim = mine.pop(rng.randrange(len(mine)))
                    client.release("stress", victim, "net1")
                    with lock:
                        del held[victim]
        except BaseException as exc:
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(CLIENTS)]
    started = time.monotonic()
    for t in threads:
        t.start()
    while True:
        with lock:
            if acked >= KILL_AFTER:
                break
        time.sleep(0.005)
    with lock:
        acked_at_kill = acked
        killed_at.append(time.monotonic())
    a.kill()
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - started
    assert not errors, errors[0]
    assert acked >= ALLOCATIONS
    assert acked_at_kill < ALLOCATIONS  # the kill happened mid-run
    assert first_after, "the standby never served an allocation"
    failover = min(first_after) - killed_at[0]
    print(
        f"\n[replicas] {acked} allocations in {elapsed:.1f}s on PostgreSQL; "
        f"SIGKILL of the active -> first allocation by the new active: "
        f"{failover:.2f}s"
    )
    assert b.status().role == "active"

    with IpamdClient(str(b.socket)) as admin:
        listed = admin.stub.ListAllocations(
            pb.ListAllocationsRequest(client_version=API_VERSION)
        ).allocations
        addresses = [x.address for x in listed]
        assert len(addresses) == len(set(addresses)), "an address is held twice"
        by_cid = {x.container_id: x.address for x in listed}
        lost = {cid: ip for cid, ip in held.items() if by_cid.get(cid) != ip}
        assert not lost, f"acknowledged allocations lost: {list(lost)[:5]}"
        admin.gc("stress", [Attachment(cid, "net1") for cid in held])
        after = admin.stub.ListAllocations(
            pb.ListAllocationsRequest(client_version=API_VERSION)
        ).allocations
        assert {x.container_id: x.address for x in after} == held
    # The database itself agrees.
    assert db_rows(postgres_url) == {c: x.split("/")[0] for c, x in held.items()}
    # The 2 s target is benchmarks/bench_ipamd.py's to measure; here, liveness.
    assert failover <= TAKEOVER_BOUND


def test_a_paused_active_cannot_commit_after_the_standby_took_over(
    start_daemon, postgres_url, pools_yaml
) -> None:
    a, b = two_replicas(start_daemon, postgres_url, pools_yaml)
    acked_by: dict[str, str] = {}  # address -> "a:<cid>" / "b:<cid>"
    failed_on_a: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def hammer_a(n: int) -> None:
        # Keeps requests in flight on a until the end; a alone, no failover,
        # and a refusal is reported at once instead of retried.
        only_a = transport.IpamdClient(str(a.socket), 10, retry_window=0.0)
        with IpamdClient(only_a) as client:
            i = 0
            while not stop.is_set():
                cid = f"a{n}-{i}"
                i += 1
                try:
                    result = client.allocate(request(cid))
                except IpamError:
                    with lock:
                        failed_on_a.append(cid)
                    continue
                with lock:
                    address = result.ips[0].address
                    assert address not in acked_by, "an address was acked twice"
                    acked_by[address] = f"a:{cid}"

    # Daemon threads, stopped and joined on every path: a hammer left running
    # after a failure would load the machine for every later test and keep
    # the interpreter from exiting.
    threads = [
        threading.Thread(target=hammer_a, args=(n,), daemon=True) for n in range(8)
    ]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        os.kill(a.proc.pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        with lock:
            acked_before_pause = len(acked_by)
        try:
            wait_role(b, "active", others=[a])
            took_over = time.monotonic() - paused_at
            with IpamdClient(str(b.socket), timeout=5) as client:
                for i in range(50):
                    result = client.allocate(request(f"b-{i}"))
                    with lock:
                        address = result.ips[0].address
                        assert address not in acked_by, "an address was acked twice"
                        acked_by[address] = f"b:b-{i}"
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        # The resumed replica finds itself deposed: it steps down, and every
        # request it had in flight fails instead of committing.
        wait_role(a, "standby", others=[b])
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    print(
        f"\n[fencing] standby active {took_over:.2f}s after SIGSTOP; "
        f"{acked_before_pause} acked by a before, {len(failed_on_a)} requests "
        "failed on the deposed a"
    )
    assert acked_before_pause > 0
    assert failed_on_a, "the paused replica had nothing in flight"
    rows = db_rows(postgres_url)
    # Every acknowledged address is in the database, held by who acked it,
    # and nothing a wrote after the takeover is there.
    assert {f"{ip}/16": cid for cid, ip in rows.items()} == {
        address: who.split(":", 1)[1] for address, who in acked_by.items()
    }
    assert not set(failed_on_a) & set(rows)
    assert "this replica stops serving allocations" in a.log.read_text()


class TcpProxy:
    """A loopback TCP forwarder; ``cut()`` drops every connection and stops
    listening: the database is gone for whoever connects through it."""

    def __init__(self, host: str, port: int) -> None:
        import socket

        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._conns: list[Any] = []
        self._lock = threading.Lock()
        self._cut = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._cut:
                    client.close()
                    return
                server = socket.create_connection(self._target)
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: Any, dst: Any) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass

    def cut(self) -> None:
        import socket

        with self._lock:
            self._cut = True
            try:
                # Wakes the accept() blocked in the other thread (close alone
                # does not on Linux).
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            for conn in self._conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()


def test_the_standby_takes_over_when_the_active_loses_the_database(
    start_daemon, postgres_server, postgres_url, pools_yaml
) -> None:
    proxy = TcpProxy(postgres_server.host, postgres_server.port)
    try:
        via_proxy = postgres_url.replace(f":{postgres_server.port}/", f":{proxy.port}/")
        a = start_daemon(db_url=via_proxy, name="a")
        b = start_daemon(db_url=postgres_url, name="b", ready=False)
        with IpamdClient(str(a.socket)) as admin:
            admin.stub.ApplyPools(
                pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=pools_yaml)
            )
            first = admin.allocate(request("before"))
        proxy.cut()
        cut_at = time.monotonic()
        wait_role(b, "active")
        took_over = time.monotonic() - cut_at
        with IpamdClient(str(b.socket)) as client:
            assert client.allocate(request("before")).ips == first.ips
            client.allocate(request("after"))
        wait_role(a, "standby")
        print(f"\n[db loss] standby active {took_over:.2f}s after the cut")
        with IpamdClient(str(a.socket), timeout=2) as client:
            with pytest.raises(IpamError) as err:
                client.allocate(request("on-a"))
        assert err.value.code == 11
    finally:
        proxy.cut()


def test_the_standby_ends_a_session_left_holding_the_expired_leases_row(
    start_daemon, postgres_url, pools_yaml
) -> None:
    # What a replica paused inside a pipelined batch looks like to the server:
    # a session in a transaction that holds the lease row locked and that no
    # idle timeout ends. Once the lease has expired the standby ends it
    # instead of waiting behind it.
    a, b = two_replicas(start_daemon, postgres_url, pools_yaml)
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as stalled:
            stalled.begin()
            stalled.exec_driver_sql("UPDATE ipamd_lease SET holder = holder")
            a.kill()
            wait_role(b, "active", others=[a])
            with pytest.raises(sa.exc.OperationalError):
                stalled.exec_driver_sql("SELECT 1")
    finally:
        engine.dispose()
    assert "ended 1 database session" in b.log.read_text()
    with IpamdClient(str(b.socket)) as client:
        assert client.allocate(request("after")).ips
