# SPDX-License-Identifier: Apache-2.0
"""ipamd benchmark (not a test): throughput, latency, fill independence, failover.

Runs real ``ipamd serve`` subprocesses on temporary unix sockets with SQLite
files (WAL, ``synchronous=FULL``: every acknowledged allocation is fsync'd)
and, side by side in the same run, on a throwaway PostgreSQL 15 server
(tests/postgres.py; ``synchronous_commit=on``: every acknowledged allocation
is in the server's fsync'd WAL); logging at INFO, one line per allocation, as
in production. It drives them over gRPC from this process with
``cni.ipam.grpc_client.IpamdClient``, the client the plugins use:

1. one client: allocations/s and p50/p99 latency of Allocate;
2. 64 concurrent clients (64 threads, one channel each): the same;
   both phases are repeated (``--repeats``) per store and the best round is
   judged, with the daemon's and the clients' CPU per allocation beside it;
3. a /16 pool pre-filled to 1% and to 99% (contiguous from the first
   address: the worst case for a scanning allocator; rows written to the
   database before the daemons start): Allocate p50 with one client
   alternating between the two daemons, and the in-process cost of the
   allocator alone (``AllocState.allocate``), rounds alternating likewise.

4. PostgreSQL with two replicas and 65,536 allocations in the database: the
   active is SIGKILLed and a client polls the standby; the time from the kill
   to the first allocation it serves (median of ``--failovers``), and the
   state rebuild time the new active logs.

Targets (issues 2 and 13): >= 1,500 alloc/s with 64 clients, p99 <= 100 ms
(<= 10 ms with one client; on SQLite), 99%-fill cost <= 1.5x the 1% cost,
failover <= 2 s. Exit status 1 when a target is missed. PostgreSQL needs
root (its server runs as the ``postgres`` user); without it only SQLite runs.
The machine is shared with other jobs: the printed load average says how
much they weighed on a run.

Usage: ``.venv/bin/python benchmarks/bench_ipamd.py [--quick] [--repeats N]``
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cni.ipam import IpamRequest  # noqa: E402
from cni.ipam.grpc_client import IpamdClient  # noqa: E402
from ipamd.allocator import AllocateRequest, AllocState  # noqa: E402
from ipamd.api.v1 import ipam_pb2 as pb  # noqa: E402
from ipamd.api.v1.version import API_VERSION  # noqa: E402
from ipamd.pools import pool_from_spec, pool_to_spec  # noqa: E402
from ipamd.store import AllocationRow, InsertAllocation, PutPool  # noqa: E402
from ipamd.store.sql import SqlStore  # noqa: E402
from tests.postgres import PostgresServer, unavailable_reason  # noqa: E402

# 65,534 usable addresses; the gateway sits outside `ips` (Spiderpool refuses a
# gateway inside them), on the last address of the subnet.
POOL16 = {
    "subnet": "10.20.0.0/16",
    "ips": ["10.20.0.1-10.20.255.254"],
    "gateway": "10.20.255.255",
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Daemon:
    def __init__(self, workdir: Path, db: str, ready: bool = True) -> None:
        self.socket = workdir / "run" / "ipamd.sock"
        # INFO, as in production: one log line per allocation, to a file.
        self.log_path = workdir.parent / f"{workdir.name}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ipamd",
                "serve",
                "--db",
                db,
                "--listen",
                str(self.socket),
                "--log-level",
                "INFO",
            ],
            cwd=REPO,
            stderr=self.log,
        )
        client = IpamdClient(str(self.socket), timeout=2.0)
        deadline = time.monotonic() + 60
        while True:
            try:
                if ready:
                    client.status()
                else:
                    client.stub.Status(pb.StatusRequest(client_version=API_VERSION))
                break
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("ipamd did not start") from None
                time.sleep(0.05)
        client.close()

    def cpu_seconds(self) -> float:
        """user+system CPU the daemon has used (from /proc/<pid>/stat)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1]
        utime, stime = fields.split()[11:13]
        return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


def prefill(
    url: str, fraction: float, total: int = 65534, spec: dict[str, object] = POOL16
) -> int:
    """Write the pool and allocations for the first ``fraction`` of it."""
    pool = pool_from_spec("bench16", spec)
    store = SqlStore(url)
    count = int(total * fraction)
    first = int(pool.usable[0][0])
    rows = [
        InsertAllocation(
            AllocationRow(
                pool="bench16",
                ip=str(ipaddress.IPv4Address(first + i)),
                version=4,
                network="bench",
                container_id=f"fill{i}",
                ifname="net1",
                created_at=time.time(),
            )
        )
        for i in range(count)
    ]
    store.apply([PutPool("bench16", pool_to_spec(pool)), *rows])
    store.close()
    return count


def alloc_request(cid: str) -> IpamRequest:
    return IpamRequest(
        network="bench", container_id=cid, ifname="net1", ipv4_pools=("bench16",)
    )


def run_clients(
    socket: Path, clients: int, per_client: int, tag: str
) -> tuple[float, list[float]]:
    """``clients`` threads, each allocating ``per_client`` times; rate, latencies."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    conns = [IpamdClient(str(socket), timeout=30) for _ in range(clients)]
    for c in conns:
        c.status()  # connect before timing
    barrier = threading.Barrier(clients + 1)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        client = conns[n]
        barrier.wait()
        try:
            for i in range(per_client):
                t0 = time.perf_counter()
                client.allocate(alloc_request(f"{tag}-{n}-{i}"))
                latencies[n].append(time.perf_counter() - t0)
        except BaseException as exc:  # reported after the run
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    if errors:
        raise errors[0]
    flat = [x for lat in latencies for x in lat]
    return len(flat) / elapsed, flat


def release_all(socket: Path) -> None:
    """CNI GC with no valid attachment: empties the pool between phases."""
    with IpamdClient(str(socket)) as client:
        client.stub.GarbageCollect(
            pb.GarbageCollectRequest(client_version=API_VERSION, network="bench")
        )


def fill_phases(
    workdir: Path, fractions: list[float], samples: int
) -> list[tuple[float, AllocState]]:
    """Per fill fraction: end-to-end Allocate p50 (ms) and the state after.

    One daemon per fraction, all running; a single client alternates between
    them, so a slow fsync from another job on the machine hits both alike.
    """
    daemons = []
    try:
        for fraction in fractions:
            db = f"sqlite:///{workdir / f'fill{int(fraction * 100)}.db'}"
            prefill(db, fraction)
            daemons.append(Daemon(workdir / f"d{int(fraction * 100)}", db))
        clients = [IpamdClient(str(d.socket), timeout=30) for d in daemons]
        lats: list[list[float]] = [[] for _ in daemons]
        for i in range(samples):
            for n, client in enumerate(clients):
                t0 = time.perf_counter()
                client.allocate(alloc_request(f"fill-{i}"))
                lats[n].append(time.perf_counter() - t0)
        for client in clients:
            client.close()
    finally:
        for d in daemons:
            d.stop()
    out = []
    for fraction, lat in zip(fractions, lats, strict=True):
        store = SqlStore(f"sqlite:///{workdir / f'fill{int(fraction * 100)}.db'}")
        out.append((statistics.median(lat) * 1e3, AllocState(store.load())))
        store.close()
    return out


def allocator_costs(
    states: list[AllocState], samples: int, rounds: int = 15
) -> list[float]:
    """The allocator alone (no gRPC, no fsync): what "finding a free address"
    costs, in us per allocation, for each state. Rounds alternate between the
    states and the best round counts, so other jobs on the machine weigh on
    both alike; each round releases what it took."""
    gc.collect()
    gc.freeze()  # as ipamd's engine does after loading its state
    best = [float("inf")] * len(states)
    for round_ in range(rounds):
        for n, state in enumerate(states):
            reqs = [
                AllocateRequest(
                    network="bench",
                    container_id=f"x{round_}-{i}",
                    ifname="net1",
                    ipv4_pools=("bench16",),
                )
                for i in range(samples)
            ]
            t0 = time.perf_counter()
            for req in reqs:
                state.allocate(req)
            best[n] = min(best[n], (time.perf_counter() - t0) / samples * 1e6)
            for req in reqs:
                state.release("bench", req.container_id, "net1")
    return best


def throughput_runs(
    workdir: Path, db: str, repeats: int, single_n: int, per_client: int
) -> list[dict[str, float]]:
    """``repeats`` rounds of the 1- and 64-client phases on one daemon."""
    prefill(db, 0.0)
    daemon = Daemon(workdir, db)
    runs = []
    try:
        for r in range(repeats):
            cpu0 = daemon.cpu_seconds()
            rate1, lat1 = run_clients(daemon.socket, 1, single_n, f"s{r}")
            cpu1 = daemon.cpu_seconds()
            release_all(daemon.socket)
            cpu2 = daemon.cpu_seconds()
            own0 = time.process_time()
            rate64, lat64 = run_clients(daemon.socket, 64, per_client, f"c{r}")
            own64 = time.process_time() - own0
            cpu3 = daemon.cpu_seconds()
            release_all(daemon.socket)
            runs.append(
                {
                    "rate1": rate1,
                    "p50_1": statistics.median(lat1) * 1e3,
                    "p99_1": pct(lat1, 0.99) * 1e3,
                    "rate64": rate64,
                    "p50_64": statistics.median(lat64) * 1e3,
                    "p99_64": pct(lat64, 0.99) * 1e3,
                    "cpu1": (cpu1 - cpu0) / len(lat1) * 1e6,
                    "cpu64": (cpu3 - cpu2) / len(lat64) * 1e6,
                    "client64": own64 / len(lat64) * 1e6,
                    "n1": len(lat1),
                    "n64": len(lat64),
                    "load": os.getloadavg()[0],
                }
            )
    finally:
        daemon.stop()
    return runs


# 65,536 allocations: a pool larger than a /16, filled completely.
POOL15 = {"subnet": "10.30.0.0/15", "ips": ["10.30.0.1-10.31.255.254"]}
REBUILD_ROWS = 65536


def failover_runs(workdir: Path, url: str, rounds: int) -> list[tuple[float, float]]:
    """Per round: (seconds from SIGKILL of the active to the first allocation
    the standby serves, seconds the new active spent rebuilding its state)."""
    import re
    import signal

    prefill(url, 1.0, total=REBUILD_ROWS, spec=POOL15)
    out = []
    for r in range(rounds):
        active = Daemon(workdir / f"fo{r}a", url)
        standby = Daemon(workdir / f"fo{r}b", url, ready=False)
        try:
            client = IpamdClient(str(standby.socket), timeout=2.0)
            req = IpamRequest(
                network="bench",
                container_id=f"failover-{r}",
                ifname="net1",
                ipv4_pools=("bench16",),
            )
            # Room for this round's allocation: release one prefilled address.
            client_a = IpamdClient(str(active.socket), timeout=5.0)
            client_a.release("bench", f"fill{REBUILD_ROWS - 1 - r}", "net1")
            client_a.close()
            active.proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            active.proc.wait(10)
            while True:
                try:
                    client.allocate(req)
                    break
                except Exception:
                    if time.monotonic() - killed > 30:
                        raise
                    time.sleep(0.005)
            took = time.monotonic() - killed
            client.close()
        finally:
            standby.stop()
            active.log.close()
        rebuilt = re.findall(
            r"state rebuilt in ([0-9.]+)s", standby.log_path.read_text()
        )
        out.append((took, float(rebuilt[-1]) if rebuilt else float("nan")))
        # Leave the database as the next round needs it (the allocation
        # this round made is released, the prefilled address stays freed).
        store = SqlStore(url)
        state = AllocState(store.load())
        store.apply(state.release("bench", f"failover-{r}", "net1")[1])
        store.close()
    return out


def print_runs(label: str, runs: list[dict[str, float]]) -> None:
    print(label)
    for n, run in enumerate(runs, start=1):
        print(
            f"round {n} (load average {run['load']:.1f}):\n"
            f"   1 client : {run['rate1']:6.0f} alloc/s  p50 {run['p50_1']:6.2f} ms"
            f"  p99 {run['p99_1']:6.2f} ms  ({run['n1']:.0f} allocations)\n"
            f"  64 clients: {run['rate64']:6.0f} alloc/s  "
            f"p50 {run['p50_64']:6.2f} ms  p99 {run['p99_64']:6.2f} ms  "
            f"({run['n64']:.0f} allocations)\n"
            f"  daemon CPU per allocation {run['cpu1']:.0f} us (1 client), "
            f"{run['cpu64']:.0f} us (64 clients); the 64 clients' own CPU "
            f"{run['client64']:.0f} us"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="rounds of the 1/64-client phases; the best round is judged "
        "(other jobs on a shared machine only ever make a round slower)",
    )
    parser.add_argument(
        "--failovers", type=int, default=5, help="failover rounds on PostgreSQL"
    )
    parser.add_argument("--sqlite-only", action="store_true")
    opts = parser.parse_args()
    single_n = 500 if opts.quick else 2000
    per_client = 40 if opts.quick else 150
    # 99% of a /16 leaves 656 free: room for the gRPC run and one allocator round.
    samples = 200 if opts.quick else 300
    repeats = 1 if opts.quick else max(1, opts.repeats)
    ok = True
    pg_reason = "--sqlite-only" if opts.sqlite_only else unavailable_reason()
    checks: list[tuple[str, bool]] = []
    with tempfile.TemporaryDirectory(prefix="ra-bench-") as tmp:
        workdir = Path(tmp)
        print(f"cpu count: {os.cpu_count()}, daemon logging at INFO")
        runs = throughput_runs(
            workdir / "sqlite",
            f"sqlite:///{workdir / 'ipamd.db'}",
            repeats,
            single_n,
            per_client,
        )
        print_runs("== SQLite (WAL, synchronous=FULL)", runs)
        best64 = max(runs, key=lambda r: r["rate64"])
        best1 = min(runs, key=lambda r: r["p99_1"])
        if pg_reason is None:
            server = PostgresServer()
            try:
                url = server.url(server.create_database())
                pg_runs = throughput_runs(
                    workdir / "pg", url, repeats, single_n, per_client
                )
                print_runs("== PostgreSQL 15 (synchronous_commit=on)", pg_runs)
                pg64 = max(pg_runs, key=lambda r: r["rate64"])
                checks += [
                    ("PostgreSQL 64-client rate >= 1500/s", pg64["rate64"] >= 1500),
                    ("PostgreSQL 64-client p99 <= 100 ms", pg64["p99_64"] <= 100),
                ]
                if opts.failovers > 0:
                    fo = failover_runs(
                        workdir, server.url(server.create_database()), opts.failovers
                    )
                    times = [t for t, _ in fo]
                    print(
                        f"== failover, PostgreSQL, 2 replicas, {REBUILD_ROWS} "
                        f"allocations (load average {os.getloadavg()[0]:.1f}):\n"
                        "  SIGKILL -> first allocation by the new active: "
                        + ", ".join(f"{t:.2f}" for t in times)
                        + f" s; median {statistics.median(times):.2f} s\n"
                        "  state rebuild on takeover: "
                        + ", ".join(f"{b:.2f}" for _, b in fo)
                        + f" s; median {statistics.median(b for _, b in fo):.2f} s"
                    )
                    checks.append(
                        ("failover median <= 2 s", statistics.median(times) <= 2.0)
                    )
            finally:
                server.stop()
        else:
            print(f"== PostgreSQL skipped: {pg_reason}")
        (low_ms, low_state), (high_ms, high_state) = fill_phases(
            workdir, [0.01, 0.99], samples
        )
        low_us, high_us = allocator_costs([low_state, high_state], samples)
        ratio_e2e = high_ms / low_ms
        ratio_alloc = high_us / low_us
        print(
            f"/16 at  1% fill: Allocate p50 {low_ms:6.2f} ms, "
            f"allocator {low_us:6.1f} us"
        )
        print(
            f"/16 at 99% fill: Allocate p50 {high_ms:6.2f} ms, "
            f"allocator {high_us:6.1f} us"
        )
        print(
            f"99%/1% cost ratio: end-to-end {ratio_e2e:.2f}x, "
            f"allocator {ratio_alloc:.2f}x"
        )
        checks = [
            *checks,
            ("SQLite 64-client rate >= 1500/s", best64["rate64"] >= 1500),
            ("SQLite 64-client p99 <= 100 ms", best64["p99_64"] <= 100),
            ("SQLite 1-client p99 <= 10 ms", best1["p99_1"] <= 10),
            ("99% fill <= 1.5x 1% fill (end-to-end)", ratio_e2e <= 1.5),
            ("99% fill <= 1.5x 1% fill (allocator)", ratio_alloc <= 1.5),
        ]
        for name, passed in checks:
            print(f"{'PASS' if passed else 'FAIL'}  {name}")
            ok = ok and passed
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
