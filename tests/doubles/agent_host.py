# SPDX-License-Identifier: Apache-2.0
"""A railyard-agent serving test plugins (python -m tests.doubles.agent_host).

The plugins exercise the agent itself: ``echo`` (ADD prints prevResult, DEL
fails naming an env variable), ``sleep`` (ADD waits ``sleep`` seconds from the
netconf), ``crash`` (ADD kills its own process), ``whoami`` (ADD fails with
its worker's pid and whether the worker ran the preparation, which only a
spare does, before its request: ``--spares``), ``whoami-ok`` (the same in a
successful result's DNS domain), ``leak`` (``whoami-ok`` keeping a file
descriptor open for good). The server is the production
``cni.agent.server.Agent``; only the table differs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path

from cni.agent.server import Agent, PluginEntry, PluginTable
from cni.errors import INVALID_CONFIG, CniError
from cni.skel import CmdArgs, PluginFuncs
from cni.types import DNS, Result

log = logging.getLogger("tests.agent_host")


def _echo_add(ca: CmdArgs) -> Result | None:
    log.info("echo ADD for %s", ca.container_id)
    return None


def _echo_del(ca: CmdArgs) -> None:
    raise CniError(INVALID_CONFIG, f"PROBE={os.environ.get('PROBE', '')}", ca.ifname)


def _sleep_add(ca: CmdArgs) -> Result | None:
    time.sleep(float(ca.netconf.get("sleep", 1.0)))
    return None


def _crash_add(ca: CmdArgs) -> Result | None:
    os.kill(os.getpid(), signal.SIGKILL)
    return None


#: Whether this worker ran the preparation (a spare, before its request).
PREPARED = False


def _prepare() -> None:
    global PREPARED
    PREPARED = True


def _whoami_add(ca: CmdArgs) -> Result | None:
    raise CniError(INVALID_CONFIG, "whoami", f"pid={os.getpid()} prepared={PREPARED}")


def _whoami_ok_add(ca: CmdArgs) -> Result | None:
    """Succeeds, naming its worker in the result's DNS domain."""
    return Result(dns=DNS(domain=f"pid={os.getpid()} prepared={PREPARED}"))


#: What ``leak`` keeps open: a plugin bug the agent must not carry on with.
LEAKED: list[int] = []


def _leak_add(ca: CmdArgs) -> Result | None:
    LEAKED.append(os.open("/dev/null", os.O_RDONLY))
    return _whoami_ok_add(ca)


def _nothing(ca: CmdArgs) -> None:
    return None


def table() -> PluginTable:
    return {
        "echo": PluginEntry(
            lambda: PluginFuncs(add=_echo_add, del_=_echo_del), "test echo", "echo"
        ),
        "sleep": PluginEntry(
            lambda: PluginFuncs(add=_sleep_add, del_=_nothing), "test sleep", "sleep"
        ),
        "crash": PluginEntry(
            lambda: PluginFuncs(add=_crash_add, del_=_nothing), "test crash", "crash"
        ),
        "whoami": PluginEntry(
            lambda: PluginFuncs(add=_whoami_add, del_=_nothing), "test whoami", "whoami"
        ),
        "whoami-ok": PluginEntry(
            lambda: PluginFuncs(add=_whoami_ok_add, del_=_nothing),
            "test whoami-ok",
            "whoami-ok",
        ),
        "leak": PluginEntry(
            lambda: PluginFuncs(add=_leak_add, del_=_nothing), "test leak", "leak"
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--max-workers", type=int, default=4)
    parser.add_argument("--uid", type=int, action="append", default=None)
    parser.add_argument("--spares", type=int, default=0)
    parser.add_argument("--requests-per-worker", type=int, default=200)
    parser.add_argument("--idle-timeout", type=float, default=30.0)
    args = parser.parse_args()
    # DEBUG: the tests wait for the spare workers' "ready" lines.
    logging.basicConfig(level=logging.DEBUG)
    uids = frozenset(args.uid if args.uid is not None else [os.geteuid()])
    agent = Agent(
        table(),
        args.socket,
        max_workers=args.max_workers,
        allowed_uids=uids,
        spares=args.spares,
        prepare=_prepare,
        requests_per_worker=args.requests_per_worker,
        idle_timeout=args.idle_timeout,
    )
    agent.warm()
    agent.bind()
    agent.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
