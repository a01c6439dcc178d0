# SPDX-License-Identifier: Apache-2.0
"""64 concurrent clients, 5,000 allocations and releases, SIGKILL mid-run.

Ends with: zero duplicate addresses, zero lost acknowledged allocations, and
zero leaked allocations after a GC that lists the attachments still held.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time

import pytest

from cni.ipam import Attachment, IpamError, IpamRequest
from cni.ipam.grpc_client import IpamdClient
from ipamd.api.v1 import ipam_pb2 as pb
from ipamd.api.v1.version import API_VERSION

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLIENTS = 64
ALLOCATIONS = 5000
KILL_AFTER = ALLOCATIONS // 2


def test_sigkill_mid_run_loses_nothing_acknowledged(start_daemon, pools_yaml) -> None:
    daemon = start_daemon()
    with IpamdClient(str(daemon.socket)) as admin:
        admin.stub.ApplyPools(
            pb.ApplyPoolsRequest(client_version=API_VERSION, manifest=pools_yaml)
        )
    held: dict[str, str] = {}  # cid -> address, acknowledged and not released
    lock = threading.Lock()
    acked = 0
    errors: list[BaseException] = []
    per_client = ALLOCATIONS // CLIENTS + 1

    def retrying(client_box: list[IpamdClient], call):
        # The daemon is down between SIGKILL and restart: retry on "try again"
        # (code 11) with a fresh channel, like a runtime retrying ADD/DEL.
        for _ in range(600):
            try:
                return call(client_box[0])
            except IpamError as err:
                if err.code != 11:
                    raise
                client_box[0].close()
                time.sleep(0.02)
                client_box[0] = IpamdClient(str(daemon_box[0].socket), timeout=5)
        raise AssertionError("ipamd did not come back")

    daemon_box = [daemon]

    def worker(n: int) -> None:
        nonlocal acked
        rng = random.Random(n)
        box = [IpamdClient(str(daemon.socket), timeout=5)]
        mine: list[str] = []
        try:
            for i in range(per_client):
                with lock:
                    if acked >= ALLOCATIONS:
                        break
                cid = f"w{n}-{i}"
                req = IpamRequest(
                    network="stress",
                    container_id=cid,
                    ifname="net1",
                    ipv4_pools=("stress",),
                )
                result = retrying(box, lambda c, r=req: c.allocate(r))
                with lock:
                    held[cid] = result.ips[0].address
                    acked += 1
                mine.append(cid)
                if mine and rng.random() < 0.5:
                    victim = mine.pop(rng.randrange(len(mine)))
                    retrying(box, lambda c, v=victim: c.release("stress", v, "net1"))
                    with lock:
                        del held[victim]
        except BaseException as exc:
            errors.append(exc)
        finally:
            box[0].close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    while True:
        with lock:
            if acked >= KILL_AFTER:
                break
        time.sleep(0.005)
    with lock:
        acked_at_kill = acked
    daemon.kill()
    daemon_box[0] = start_daemon()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]
    assert acked >= ALLOCATIONS
    assert acked_at_kill < ALLOCATIONS  # the kill happened mid-run

    with IpamdClient(str(daemon_box[0].socket)) as admin:
        listed = admin.stub.ListAllocations(
            pb.ListAllocationsRequest(client_version=API_VERSION)
        ).allocations
        addresses = [a.address for a in listed]
        assert len(addresses) == len(set(addresses)), "an address is held twice"
        by_cid = {a.container_id: a.address for a in listed}
        lost = {cid: ip for cid, ip in held.items() if by_cid.get(cid) != ip}
        assert not lost, f"acknowledged allocations lost: {list(lost)[:5]}"
        # Allocations committed but never acknowledged (in flight at SIGKILL)
        # or released-then-lost acks are what GC is for.
        valid = [Attachment(cid, "net1") for cid in held]
        admin.gc("stress", valid)
        after = admin.stub.ListAllocations(
            pb.ListAllocationsRequest(client_version=API_VERSION)
        ).allocations
        assert {a.container_id: a.address for a in after} == held
    daemon_box[0].stop()
    # The database itself agrees (read behind the stopped daemon's back).
    con = sqlite3.connect(daemon_box[0].db)
    try:
        rows = con.execute("SELECT container_id, ip FROM allocations").fetchall()
    finally:
        con.close()
    assert {cid: ip for cid, ip in rows} == {
        c: a.split("/")[0] for c, a in held.items()
    }
